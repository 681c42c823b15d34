"""Shared helpers of the op sources whose wrapper takes ``nvfp4_4over6`` (FlashInfer 0.7.1+).

Not an op source: the renderer (``fp4patch/custom_op.py``) copies the functions an op source imports from
here (``from ._nvfp4_4over6 import _nvfp4_4over6_code``) into its rendered block, so nothing installed
imports this file. ``nvfp4_4over6`` crosses the custom-op schema as an int: -1 = argument omitted
(``_UNSET``, FlashInfer's sentinel, a global of the wrapper's module from 0.7.1), 0 = ``None``; a
``NVFP44Over6Config`` cannot cross it and is refused under compile.
"""


def _nvfp4_4over6_code(value, function):
    """``entry``'s side: the int that crosses the schema; TypeError for a ``NVFP44Over6Config``."""
    # An int is a code already: where a release lacks the parameter, the renderer binds it to op()'s
    # default (-1), and _UNSET (absent from those modules) is never looked up.
    if isinstance(value, int):
        return value
    if value is None:
        return 0
    if value is _UNSET:  # noqa: F821 - the sentinel of FlashInfer 0.7.1+ (a global of the wrapper's module)
        return -1
    raise TypeError(
        f"fp4patch: {function}(nvfp4_4over6=<config>) cannot be traced by torch.compile: a NVFP44Over6Config "
        f"cannot cross the custom-op schema; omit nvfp4_4over6 or pass None, or call {function} outside the compiled region"
    )


def _nvfp4_4over6_argument(code):
    """``op``'s side: what the wrapper is called with for a code (-1 → omitted, ``_UNSET``; 0 → ``None``)."""
    return _UNSET if code == -1 else None  # noqa: F821
