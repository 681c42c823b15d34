"""The fp4_quantize op of every release target, rendered from its one op source, under symbolic sizes.

Each ``fp4-quantize-fullgraph`` target's op block is executed here as it lands in site-packages (a
stand-in for the wrapper is all it needs), and its fake runs on fake CUDA tensors (``FakeTensorMode``)
whose sizes are backed (``dynamic=True``, ``mark_dynamic``) or unbacked (``mark_unbacked``, as vLLM's
unbacked mode, and a ``ShapeEnv`` unbacked symbol constrained with ``torch._check``). The earlier
fake branched on ``K % sf_vec_size`` and raised ``GuardOnDataDependentSymNode: ... Ne(Mod(u0, 16), 0)``
for ``fp4_quantize(torch.empty(64, u).t())``.
"""

from __future__ import annotations

import importlib.util

import pytest

from fp4patch.catalog.spec import load_specs

from .conftest import SPECS_DIR

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

SPEC = next(s for s in load_specs(SPECS_DIR) if s.id == "fp4-quantize-fullgraph")
TARGETS = [t for t in SPEC.targets if not t.status]


def _entry_and_op(target):
    """Execute ``target``'s op block with a stand-in wrapper; (entry, OpOverload)."""
    import torch

    (rendered,) = target.custom_ops
    # stand-ins for the module's functions the block names: the wrapper and its callers (the spec's `callers`)
    stand_in = {name: (lambda **kwargs: None) for name in ("fp4_quantize", "nvfp4_quantize", "mxfp4_quantize")}
    namespace = {"torch": torch, "_UNSET": object(), **stand_in}
    (op_block,) = [op.code for op in target.operations if op.kind == "append-to-module"]
    exec(compile(op_block, f"<{rendered.op_name}>", "exec", dont_inherit=True), namespace)
    assert namespace["_fp4patch_fp4_quantize_ready"](), "the op block could not register its op"  # registered on first need
    entry = namespace["_fp4patch_fp4_quantize_entry"]
    return entry, getattr(torch.ops.fp4patch, rendered.op_name.split("::")[1]).default


@pytest.mark.parametrize("target", TARGETS, ids=[str(t.versions) for t in TARGETS])
def test_fake_takes_an_unbacked_k_of_a_column_major_input(target) -> None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    _, op = _entry_and_op(target)
    shape_env = ShapeEnv()
    with FakeTensorMode(shape_env=shape_env):
        u = shape_env.create_unbacked_symint()
        torch._check(u >= 16)
        x = torch.empty(64, u, dtype=torch.bfloat16, device="cuda").t()
        x_q, sf = op(x)
        # column-major input comes back transposed: x_q is a [K/2, M] view of [M, K/2] storage
        assert str(x_q.shape[0]) == str(u // 2)
        assert x_q.stride(-2) == 1 and x_q.dtype == torch.uint8 and sf.dtype == torch.uint8


@pytest.mark.parametrize("target", TARGETS, ids=[str(t.versions) for t in TARGETS])
def test_fake_takes_an_unbacked_m(target) -> None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    _, op = _entry_and_op(target)
    shape_env = ShapeEnv()
    with FakeTensorMode(shape_env=shape_env):
        u = shape_env.create_unbacked_symint()
        x = torch.empty(u, 7168, dtype=torch.bfloat16, device="cuda")
        for layout in ({}, {"is_sf_8x4_layout": True}, {"is_sf_swizzled_layout": False}):
            x_q, sf = op(x, **layout)
            assert x_q.shape[1] == 3584 and sf.dtype == torch.uint8


@pytest.mark.parametrize("mode", ["dynamic", "mark_dynamic", "mark_unbacked"])
def test_compiled_call_with_symbolic_m_is_one_graph_with_one_op_node(mode: str) -> None:
    import torch

    target = TARGETS[-1]
    entry, op = _entry_and_op(target)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return lambda *args: (torch.zeros(()),)

    def f(x):
        q, sf = entry(input=x, global_scale=None, sf_vec_size=16, sf_use_ue8m0=False, is_sf_swizzled_layout=True,
                      is_sf_8x4_layout=False, is_global_scale_inversed=False, enable_pdl=None, backend="auto",
                      nvfp4_4over6=None, batch_invariant=False)
        return q.float().sum() + sf.float().sum()

    torch._dynamo.reset()
    x = torch.empty(129, 7168, dtype=torch.bfloat16)  # a real (CPU) input: Dynamo fakes it, the backend runs nothing
    if mode == "mark_dynamic":
        torch._dynamo.mark_dynamic(x, 0)
    elif mode == "mark_unbacked":
        torch._dynamo.decorators.mark_unbacked(x, 0)
    torch.compile(f, fullgraph=True, backend=record, dynamic=True if mode == "dynamic" else None)(x)
    assert len(graphs) == 1
    calls = [n for n in graphs[0].graph.nodes if n.op == "call_function" and str(n.target).startswith("fp4patch.")]
    assert [str(n.target) for n in calls] == [str(op)]
    placeholder = next(n for n in graphs[0].graph.nodes if n.op == "placeholder" and isinstance(n.meta["example_value"], torch.Tensor))
    assert not isinstance(placeholder.meta["example_value"].shape[0], int), "M must stay symbolic"


def test_a_caller_missing_from_the_module_does_not_break_its_import() -> None:
    """The spec's ``callers`` (nvfp4_quantize, mxfp4_quantize) are bypassed only where the module
    defines them: a release without one must still import (a NameError there breaks eager use too)."""
    import torch

    target = TARGETS[-1]
    (op_block,) = [op.code for op in target.operations if op.kind == "append-to-module"]
    assert "_fp4patch_fp4_quantize_callers = ('nvfp4_quantize', 'mxfp4_quantize')" in op_block
    (redirect,) = [op.code for op in target.operations if op.kind == "insert-at-function-start"]
    namespace = {"torch": torch, "_UNSET": object()}
    # a wrapper holding the redirect, so that what importing torch._dynamo runs goes on to look the callers up
    exec("def fp4_quantize(**kwargs):\n" + "".join("    " + line for line in redirect.splitlines(True)), namespace)  # noqa: S102
    exec(compile(op_block, "<block without callers>", "exec", dont_inherit=True), namespace)  # noqa: S102
    import torch._dynamo  # noqa: F401 - the block's callback has run (now, or when this imported torch._dynamo)

    namespace["_fp4patch_fp4_quantize_on_dynamo"]()
    assert namespace["_fp4patch_fp4_quantize_ready"]()
    assert "nvfp4_quantize" not in namespace and "mxfp4_quantize" not in namespace
