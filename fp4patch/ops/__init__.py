"""The op-source language: rendering ``patches/<distribution>/ops/<function>.py`` as a custom op.

What it owns: the language of op sources (``docs/op-source.md``), its checks, the rendering of a block that
registers a ``torch.library.custom_op`` and its fake, and the rendered-op cache. What it may import: the codemods of
:mod:`fp4patch.codemods` (the block is appended by their transformer; only ``cache`` imports them) and the base
(``docs/architecture.md``).

One module per construct of ``docs/op-source.md``, each owning its checks, its rendering and its
``EXAMPLES`` (before/after cases that ``tests/test_op_constructs.py`` runs through the renderer). A module
imports only the modules listed before it here (and the standard library; libcst inside functions):

- ``source``: the data (:class:`~fp4patch.ops.source.CustomOpTarget`, ``Rendered``, ``Example``), the error
  ``OpSourceError``, the placeholders' names, the parse caches;
- ``omit``: ``p=OMIT``;
- ``helpers``: helper modules, inlined;
- ``splice``: ``name: SPLICE``, a shared parameter list;
- ``params``: ``**OP_PARAMS`` in signatures and calls, keywords after it, where placeholders may stand;
- ``release``: ``RELEASE`` and the target's release data;
- ``mutates``: ``MUTATES_ARGS`` and the parameters it leaves without a default;
- ``trim``: absent parameters, per-release defaults, ``WRAPPER``;
- ``guard``: a carried target's refusal of a new parameter's other values;
- ``redirect``: the redirect and the block's code it reads;
- ``wrapper_copy``: what Dynamo traces in place of the wrapper and its ``callers``;
- ``register``: ``OP`` and the register function;
- ``strings``: one line a token (string literals that span lines);
- ``check``: :func:`~fp4patch.ops.check.check_op_source`, every check in order;
- ``render``: :func:`~fp4patch.ops.render.render` and ``plain_source``, the public names;
- ``cache``: rendered ops cached on disk.

Importing this package imports none of them: loading specs needs ``check`` only.
"""
