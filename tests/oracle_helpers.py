"""What the tests' child interpreters need beside the product's kernel oracle (``fp4patch/probes/oracle.py``).

These import fp4patch (the renderer, the spec loader), which the product's probes must not: the oracle
and ``fp4patch/probes/fake_check_probe.py`` run where only torch and FlashInfer are installed. Imported by
child scripts that put the repository root on ``sys.path`` (``from tests.oracle_helpers import ...``).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any


def load_op_source(path: str, module_globals: dict, release: dict | None = None, op: Any = None, wrapper: Any = None) -> Any:
    """Execute an fp4patch op source (``patches/<distribution>/ops/<function>.py``) as the renderer places it.

    The source runs in a copy of ``module_globals`` (the namespace of the module defining the wrapper, so
    names such as ``_UNSET`` or ``SfLayout`` resolve as they do after ``fp4patch apply``), with ``RELEASE``
    updated by ``release`` and the placeholders ``OP`` / ``WRAPPER`` bound to ``op`` / ``wrapper``. Returns
    the namespace as an object (``.entry``, ``.op``, ``.fake``, ``.RELEASE``, ``.MUTATES_ARGS``, and ``.globals``,
    the functions' global namespace: set ``.globals["OP"] = src.fake`` to run ``entry`` into the fake). A
    parameter that a release lacks is simply not passed: the source's default then stands for it, as the
    renderer binds it.
    """
    from fp4patch.ops.render import plain_source, read_helpers

    with open(path, encoding="utf-8") as f:
        text = f.read()
    # The placeholders OP_PARAMS / OMIT expanded and the shared helpers inlined, as the renderer does.
    code = compile(plain_source(text, read_helpers(text, Path(path).parent)), path, "exec")
    ns = dict(module_globals)
    exec(code, ns)  # noqa: S102 - an op source of this repository, as the renderer places it
    ns["RELEASE"] = {**ns.get("RELEASE", {}), **(release or {})}
    ns["OP"] = op
    ns["WRAPPER"] = wrapper
    return types.SimpleNamespace(globals=ns, **{k: ns[k] for k in ("entry", "op", "fake", "RELEASE", "MUTATES_ARGS")})


def rendered_entry(block: str, op_name: str, module: types.ModuleType, function: str) -> Any:
    """Execute the op block fp4patch renders for a release (what ``apply`` appends) in ``module``'s
    namespace, which registers the custom op ``op_name``; returns ``_fp4patch_<function>_entry`` (it calls
    the op, whose fake runs under ``FakeTensorMode``). The wrapper's own code is left as it is."""
    exec(compile(block, f"<{op_name}>", "exec", dont_inherit=True), vars(module))  # noqa: S102 - fp4patch's own op block
    vars(module)[f"_fp4patch_{function}_ready"]()  # the op is registered on first need, not when the block runs
    entry = vars(module)[f"_fp4patch_{function}_entry"]
    assert entry, f"the op block did not register {op_name}"
    return entry
