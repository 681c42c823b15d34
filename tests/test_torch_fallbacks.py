"""Every torch API the written code uses is either required (without it the wrapper behaves as unpatched) or
has a fallback: each is removed here, and what it guards still holds.

fp4patch supports torch 2.7 and newer (``fp4patch.target.torch_support``). The rendered block checks, when the module
is imported, the version and the APIs every torch of that range has; a torch failing that check leaves the
wrapper as it was, eagerly and under compile: never a half-working compile path. What else it uses it reads
with ``getattr`` or in a ``try`` (``fp4patch/ops/``'s block code: ``redirect.py``, ``wrapper_copy.py`` and the op sources), with another path
where it is missing. "Since" is the first torch whose documentation has the API, where it is public; the
private ones are read as if they could go:

=========================================================  =====  ==================================================
torch API                                                  since  without it
=========================================================  =====  ==================================================
``torch.__version__`` 2.7 or newer                         -      as unpatched (required)
``torch.library.custom_op``                                2.4    as unpatched (required)
``torch.compiler.substitute_in_graph``                     2.5    as unpatched (required)
``torch.compiler.is_dynamo_compiling``                     2.3    as unpatched (required)
``torch.compiler._is_compiling_flag``                      -      ``is_compiling()`` per eager call
``torch._C._get_dispatch_mode``, ``_TorchDispatchModeKey``  -      a real call made while the flag is set goes through
                                                                  the op, whose eager body runs the kernel once
``torch._dynamo.assume_constant_result``                   -      the op is registered when torch._dynamo is imported,
                                                                  not again at the first trace
``symbolic_shapes.guard_or_false`` / ``guard_or_true``     2.8    ``bool(condition)`` in fp4_quantize's cute-dsl fake
                                                                  (a guard; an unbacked size raises)
``symbolic_shapes.sym_or``                                 2.8    not used: mm_fp4's fake writes ``a | b``, what it does
``torch.float4_e2m1fn_x2``                                 -      ``torch.uint8`` in mm_fp4's fake dtype check
``torch._dynamo.exc.Unsupported``                          -      ``NotImplementedError`` with the same message in the
                                                                  fakes' refusals (``ops/_refusal.py``)
=========================================================  =====  ==================================================

The block checks run in this process, on the 0.7.4 ``fp4_quantize`` target rendered under a name of its own
per case (``fp4_quantize_<case>``: its own op), around a stand-in wrapper that holds the real redirect and
calls a kernel stand-in Dynamo cannot trace (as it cannot trace FlashInfer's JIT loader). The attribute is
removed (or ``torch.__version__`` replaced) while the block is executed (what it reads at import) and, for
the fakes, while they run. Each case is compiled called from a compiled function and handed to
``torch.compile`` directly. These checks need torch 2.13 (they hold the flag as 2.13 does); the torch
matrix (``make test-torch``) runs the real older releases.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib.util
import sys
import textwrap
import types

import pytest

from fp4patch.ops.render import plain_source, read_helpers, render
from fp4patch.catalog.spec import load_specs

from .conftest import SPECS_DIR

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]


def _target(spec_id: str, version: str):
    spec = next(s for s in load_specs(SPECS_DIR) if s.id == spec_id)
    (target,) = [t for t in spec.targets_for(version) if not t.status]
    (kwargs,) = [kw for kind, kw in target.operation_specs if kind == "custom-op"]
    return kwargs["target"]


@contextlib.contextmanager
def removed(*dotted: str):
    """The torch attributes ``dotted`` deleted, put back on exit; ``"torch.__version__=2.6.0"`` replaces the version."""
    import importlib

    import torch

    saved = []
    try:
        for name in dotted:
            name, _, value = name.partition("=")
            owner_name, _, attr = name.rpartition(".")
            owner = torch._C if owner_name == "torch._C" else importlib.import_module(owner_name)
            saved.append((owner, attr, getattr(owner, attr)))
            if value:
                setattr(owner, attr, value)
            else:
                delattr(owner, attr)
        yield
    finally:
        for owner, attr, value in reversed(saved):
            setattr(owner, attr, value)


class Wrapped:
    """A stand-in ``fp4_quantize_<case>`` with the real redirect, executed with the rendered block."""

    def __init__(self, case: str, remove: tuple[str, ...]):
        import torch
        import torch._dynamo  # imported first: the block's callback runs while it is executed

        target = dataclasses.replace(_target("fp4-quantize-fullgraph", "0.7.4"), function=f"fp4_quantize_{case}", callers=())
        rendered = render(target)
        self.fn_name, self.op = target.function, rendered.op_name.replace("::", ".") + ".default"
        register = next(n for n in ast.parse(rendered.block).body if isinstance(n, ast.FunctionDef) and n.name.startswith("_fp4patch_register_"))
        entry = next(n for n in register.body if isinstance(n, ast.FunctionDef) and n.name == "entry")
        wrapper = f"def {self.fn_name}({ast.unparse(entry.args)}):\n" + textwrap.indent(rendered.redirect, "    ") + "    return _kernel(input)\n"
        self.kernels: list[bool] = []  # per kernel call: whether it ran inside the op's eager body
        module = types.ModuleType(f"fp4patch_test_fallback_{case}")  # a module of its own, as a FlashInfer file is
        sys.modules[module.__name__] = module
        self.ns: dict = vars(module)
        self.ns.update(torch=torch, _UNSET=object())

        @torch.compiler.disable
        def kernel(t):
            self.kernels.append(self.ns[f"_fp4patch_{self.fn_name}_thread"].inside_op)
            return torch.zeros(t.shape[0], t.shape[1] // 2, dtype=torch.uint8), torch.zeros(128, 4, dtype=torch.uint8)

        self.ns["_kernel"] = kernel
        with removed(*remove):
            exec(compile(wrapper, f"<{self.fn_name}>", "exec"), self.ns)  # noqa: S102
            exec(compile(rendered.block, f"<{rendered.op_name}>", "exec"), self.ns)  # noqa: S102
        self.fn = self.ns[self.fn_name]

    def clone(self):
        namespace = dict(self.ns)
        return types.FunctionType(self.fn.__code__, namespace, self.fn.__name__, self.fn.__defaults__)


def _graph_ops(fn, *args):
    """fp4patch op nodes of the one graph ``torch.compile(fullgraph=True)`` of ``fn`` makes, or the error."""
    import torch

    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(fn, fullgraph=True, backend=record)(*args)
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    (gm,) = graphs
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "fp4patch" in str(n.target)]


def _exported_ops(fn, x):
    import torch

    class M(torch.nn.Module):
        def forward(self, t):
            return fn(t)[0]

    ep = torch.export.export(M(), (x,), strict=False)
    return [str(n.target) for n in ep.graph_module.graph.nodes if n.op == "call_function" and "fp4patch" in str(n.target)]


#: removed attributes -> (op under compile, real call with the flag set goes through the op)
CASES = {
    "none": ((), True, False),
    "old_torch": (("torch.__version__=2.6.0",), False, False),
    "custom_op": (("torch.library.custom_op",), False, False),
    "substitute_in_graph": (("torch.compiler.substitute_in_graph",), False, False),
    "is_dynamo_compiling": (("torch.compiler.is_dynamo_compiling",), False, False),
    "is_compiling_flag": (("torch.compiler._is_compiling_flag",), True, False),
    "get_dispatch_mode": (("torch._C._get_dispatch_mode",), True, True),
    "dispatch_mode_key": (("torch._C._TorchDispatchModeKey",), True, True),
    "assume_constant_result": (("torch._dynamo.assume_constant_result",), True, False),
}


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None and not hasattr(__import__("torch").compiler, "_compile_session_context"),
                    reason="holds torch.compiler._is_compiling_flag as torch 2.13 does; older torch runs in make test-torch")
@pytest.mark.parametrize("case", list(CASES))
def test_block_without_a_torch_api(case: str) -> None:
    import torch

    remove, traced, real_through_op = CASES[case]
    w = Wrapped(case, remove)
    x, gs = torch.randn(8, 64, dtype=torch.bfloat16), torch.ones(1)

    w.fn(x, gs)
    assert w.kernels == [False], "an eager call runs the original code, once"
    w.kernels.clear()
    with torch.compiler._compile_session_context():  # as torch 2.13 holds it during another compile
        w.fn(x, gs)
        w.fn(x, gs)
    assert w.kernels == [real_through_op] * 2, "a real call while the flag is set runs the kernel once (no recursion)"

    w.kernels.clear()
    ops = _graph_ops(lambda t: w.fn(t, gs), x)
    direct = _graph_ops(w.fn, x, gs)
    exported = _exported_ops(lambda t: w.fn(t, gs), x)
    if traced:
        assert ops == [w.op] and direct == [w.op] and exported == [w.op], (ops, direct, exported)
        assert w.kernels == [True, True], "tracing never runs the kernel; each compiled call runs it once, in the op"
    else:  # as unpatched: Dynamo meets the kernel it cannot trace, nested and handed directly
        for outcome in (ops, direct):
            assert isinstance(outcome, str) and "Unsupported" in outcome and "torch.compiler.disable" in outcome, outcome
        assert exported == [], exported
        assert w.ns[f"_fp4patch_{w.fn_name}_entry"] is None, "nothing registered on a torch it does not support"

    cloned = w.clone()
    clone_ops = _graph_ops(lambda t: cloned(t, gs), x)
    # exactly where the unpatched clone stops: the kernel Dynamo cannot trace
    assert isinstance(clone_ops, str) and clone_ops.startswith("Unsupported") and "torch.compiler.disable" in clone_ops, clone_ops


# --------------------------------------------------------------------------- #
# The fakes' size helpers without torch >= 2.8's symbolic_shapes helpers
# --------------------------------------------------------------------------- #
def _op_source_namespace(name: str, release: dict) -> dict:
    import torch

    path = SPECS_DIR / "flashinfer-python" / "ops" / f"{name}.py"
    source = path.read_text(encoding="utf-8")
    namespace = {"OP": None, "WRAPPER": None}
    exec(compile(plain_source(source, read_helpers(source, path.parent)), str(path), "exec"), namespace)  # noqa: S102
    namespace["RELEASE"] = {**namespace["RELEASE"], **release}
    assert namespace["torch"] is torch
    return namespace


GUARD_OR = ("torch.fx.experimental.symbolic_shapes.guard_or_false", "torch.fx.experimental.symbolic_shapes.guard_or_true")


@pytest.mark.parametrize("missing", [(), GUARD_OR], ids=["all", "no-guard_or"])
def test_fp4_quantize_size_conditions_without_guard_or(missing: tuple[str, ...]) -> None:
    """The cute-dsl fake's ``_known`` / ``_assert`` settle a backed size either way (torch < 2.8: a guard)."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    ns = _op_source_namespace("fp4_quantize", {})
    env = ShapeEnv()
    k = env.create_symintnode(env.create_symbol(64, source=ConstantSource("k")), hint=64)
    with removed(*missing):
        assert ns["_known"](True, False) is True
        assert ns["_known"](k % 16 == 0, False) is True
        ns["_assert"](k % 16 == 0, "K (64) must be divisible by 16")
        with pytest.raises(AssertionError, match="must be divisible by 48"):
            ns["_assert"](k % 48 == 0, "K (64) must be divisible by 48")


MM_FP4_074 = {"per_token_alpha_backends": ["auto", "cute-dsl", "cake"], "per_token_alpha_only": "the 'cute-dsl' and 'cake' backends",
              "cutlass_contiguous_out": True}


@pytest.mark.parametrize(
    "missing", [(), ("torch.fx.experimental.symbolic_shapes.sym_or",), ("torch.float4_e2m1fn_x2",)], ids=["all", "no-sym_or", "no-float4_e2m1fn_x2"]
)
@pytest.mark.parametrize("backend", ["cutlass", "auto"])
def test_mm_fp4_fake_with_per_token_alpha_on_older_torch(missing: tuple[str, ...], backend: str) -> None:
    """0.7.4's mm_fp4 fake checks a per-token alpha (one scale per row of ``a``) without casting the symbolic
    condition to bool. It imported ``symbolic_shapes.sym_or`` (torch >= 2.8) for that, so ``mm_fp4[cutlass]``
    and ``mm_fp4[auto]`` failed under compile with an ImportError on older torch; it writes ``|`` now."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    ns = _op_source_namespace("mm_fp4", MM_FP4_074)
    ns["_check_backend_supported"] = lambda *args: None  # the wrapper's own capability check (needs CUDA)

    def call(m, alpha_rows):
        a = torch.empty(m, 128, dtype=torch.uint8)
        sf = torch.empty(8, dtype=torch.float8_e4m3fn)
        return ns["fake"](a=a, b=torch.empty(128, 256, dtype=torch.uint8), a_descale=sf, b_descale=sf,
                          alpha=torch.empty(alpha_rows, dtype=torch.float32), out_dtype=torch.bfloat16,
                          out=torch.empty(m, 256, dtype=torch.bfloat16), block_size=16, use_8x4_sf_layout=False,
                          backend=backend, use_nvfp4=True, enable_pdl=True, batch_invariant=False)

    with removed(*missing), FakeTensorMode(shape_env=ShapeEnv()) as mode:
        m = mode.shape_env.create_unbacked_symint()
        torch._check(m >= 2)
        assert call(m, m if backend == "auto" else 1) is None  # an unbacked M: no guard, no ImportError
        assert call(4, 1) is None
        if backend == "cutlass":  # per-token alpha: auto, cute-dsl and cake only (the wrapper's refusal)
            with pytest.raises(ValueError, match="per-token alpha is only implemented by the 'cute-dsl' and 'cake' backends"):
                call(4, 4)
        else:
            assert call(4, 4) is None
        with pytest.raises(ValueError, match="alpha must be a scalar, or one scale per row"):
            call(4, 3)


@pytest.mark.parametrize("missing", [(), ("torch._dynamo.exc.Unsupported",)], ids=["all", "no-Unsupported"])
def test_a_refusal_without_dynamo_s_unsupported(missing: tuple[str, ...]) -> None:
    """``_refuse`` raises Dynamo's ``Unsupported`` (re-raised as it is, so its message is the first line
    torch.compile prints); a torch without it gets a ``NotImplementedError`` with the same one line."""
    import torch
    import torch._dynamo.exc

    ns = _op_source_namespace("mxfp8_quantize", {})
    x = torch.empty(8, 64, dtype=torch.bfloat16, device="meta")
    with removed(*missing):
        expected = torch._dynamo.exc.Unsupported if not missing else NotImplementedError
        with pytest.raises(expected) as caught:
            ns["fake"](x, batch_invariant=True)
    assert type(caught.value) is expected
    (line,) = str(caught.value).splitlines()
    assert line.startswith("fp4patch: mxfp8_quantize(batch_invariant=True) is not supported under torch.compile on FlashInfer "), line


def test_a_block_executed_after_torch_dynamo_is_imported_registers_without_a_warning() -> None:
    """An engine that imports ``torch._dynamo`` before FlashInfer (vLLM, SGLang) runs the block's callback while
    the block is executed: it must find every piece it calls (the op is registered there and then, no
    ``RuntimeWarning``; a callback placed before the pieces it reads warned ``NameError`` and left the
    registration to the first trace)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        w = Wrapped("dynamo_first", ())
    assert w.ns[f"_fp4patch_{w.fn_name}_entry"], "the op is registered when the block runs"
