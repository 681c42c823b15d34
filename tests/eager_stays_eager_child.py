"""Child script of tests/test_eager_stays_eager.py: run in a fresh interpreter with PYTHONPATH=<flashinfer site>.

Usage: ``python eager_stays_eager_child.py '{"module": M, "scenarios": [NAME, ...], "remove": [ATTR, ...]}'``;
prints one line ``FP4PATCH-EAGER <json>``: per scenario ``{"ok", "error", "kernels", ...}``, where ``kernels``
counts the calls of FlashInfer's kernel entry (``fp4_quantize_sm100`` of the JIT module, replaced by a CPU
stand-in that Dynamo cannot trace, as it cannot trace the real JIT loader) made during the scenario.

``remove``: dotted torch attributes (``torch.compiler.substitute_in_graph``; ``torch.__version__=2.6.0`` sets one) deleted before FlashInfer is
imported, as on a torch release without them.

Every scenario calls the patched ``fp4_quantize`` of module M (``flashinfer.fp4_quantization`` for 0.6.x,
``flashinfer.quantization.fp4_quantization`` from 0.6.7) on CPU tensors:

* ``eager``: three plain calls;
* ``flag_set``: three calls while ``torch.compiler._is_compiling_flag`` is set (torch 2.13 sets it for a
  whole compile, process-wide: what a call meets while another thread compiles);
* ``thread``: 50 calls in this thread while another thread's ``torch.compile`` holds the flag (its
  backend waits for them);
* ``compiled``: ``torch.compile(fullgraph=True)`` of a function calling it, and of ``fp4_quantize``
  itself, under a backend that records the graphs; each compiled function then runs twice;
* ``freezing``: Inductor with ``freezing=True`` on a module whose forward quantizes its weight (which
  freezing constant-folds: the op's eager body runs while Inductor compiles) and its input;
* ``export_strict`` / ``export_nonstrict``: ``torch.export.export`` of that module, then its
  ``module()`` run twice;
* ``saved``: strict and non-strict ``torch.export`` of that module saved as ``.pt2`` files under ``P["save"]``;
* ``aoti``: AOTInductor (``aoti_compile_and_package``) of the exported module, loaded and run twice;
* ``engine_op``: an engine's own custom op whose eager body calls ``fp4_quantize`` (SGLang and vLLM wrap
  FlashInfer in such ops): compiled with ``fullgraph=True`` and run twice, called while the flag is set,
  and folded by Inductor freezing;
* ``backend_runs_graph``: a backend that runs the graph on the real example inputs, eagerly and through
  ``make_fx``, while it compiles;
* ``subclass``: a wrapper tensor subclass whose ``__torch_dispatch__`` calls ``fp4_quantize``, compiled
  (AOTAutograd traces it on fake tensors);
* ``upstream_op``: FlashInfer's own ``flashinfer::fp4_quantize`` (0.6.12+), whose body calls ``fp4_quantize``:
  eagerly, with the flag set, and folded by Inductor freezing (``calls`` 0 where the release has none);
* ``clone``: ``types.FunctionType(inspect.unwrap(fp4_quantize).__code__, namespace)`` with a copy of the
  module's globals in which ``get_fp4_quantization_module`` is the engine's own (counted in
  ``swapped``): called eagerly (also with the flag set), compiled with ``fullgraph=True``, and exported
  non-strict.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import tempfile
import threading
import traceback
import types

import child_support as support  # tests/child_support.py (this script's folder is first on sys.path): emit

MARK = "FP4PATCH-EAGER "
P = json.loads(sys.argv[1])

import torch

for dotted in P.get("remove", []):  # "torch.__version__=2.6.0" replaces instead
    dotted, _, value = dotted.partition("=")
    owner_name, _, attr = dotted.rpartition(".")
    owner = importlib.import_module(owner_name) if owner_name != "torch._C" else torch._C
    if value:
        setattr(owner, attr, value)
    else:
        delattr(owner, attr)

import flashinfer

mod = importlib.import_module(P["module"])
kernels = [0]
swapped = [0]
dynamo_imported_by_flashinfer = "torch._dynamo" in sys.modules


def _round_up(a, b):
    return (a + b - 1) // b * b


class Kernel:
    """Stands for the JIT module: real-shaped outputs; Dynamo cannot trace it (as it cannot the real one)."""

    counter = kernels

    @torch.compiler.disable
    def fp4_quantize_sm100(self, input, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout, is_sf_8x4_layout, *rest, **kw):
        self.counter[0] += 1
        m, k = input.shape
        cols = k // sf_vec_size
        n = _round_up(m, 8 if is_sf_8x4_layout else 128) * _round_up(cols, 4) if is_sf_swizzled_layout else m * cols
        return torch.ones(m, k // 2, dtype=torch.uint8), torch.ones(n, dtype=torch.uint8)


class Swapped(Kernel):
    counter = swapped


mod.get_fp4_quantization_module = lambda backend="100": Kernel()
mod.get_compute_capability = lambda device: (10, 0)
mod.device_support_pdl = lambda device: False
if hasattr(mod, "_check_block_scale_quantization_support"):
    mod._check_block_scale_quantization_support = lambda *a, **k: None

x = torch.randn(8, 64, dtype=torch.bfloat16)
gs = torch.ones(1, dtype=torch.float32)


def q(t, scale=gs):
    return flashinfer.fp4_quantize(t, scale, sf_vec_size=16)


def ops_of(gm):
    return sorted(str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "fp4patch" in str(n.target))


def recorder(graphs):
    def record(gm, example_inputs):
        graphs.append(ops_of(gm))
        return gm.forward

    return record


def error_line(exc):
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def flag_set():
    """torch.compiler._is_compiling_flag held as a torch 2.13 compile holds it."""
    context = getattr(torch.compiler, "_compile_session_context", None)
    if context is not None:
        return context()
    import contextlib

    @contextlib.contextmanager
    def hold():
        old = torch.compiler._is_compiling_flag
        torch.compiler._is_compiling_flag = True
        try:
            yield
        finally:
            torch.compiler._is_compiling_flag = old

    return hold()


@torch.library.custom_op("fp4patch_test_engine::quant", mutates_args=())
def engine_quant(t: torch.Tensor) -> torch.Tensor:
    """An engine's op whose body calls FlashInfer eagerly (sglang::trtllm_fp4_block_scale_moe does)."""
    xq, sf = q(t)
    return (xq.to(torch.float32).sum() + sf.to(torch.float32).sum()).reshape(1)


@engine_quant.register_fake
def _(t):
    return t.new_empty(1, dtype=torch.float32)


class Block(torch.nn.Module):
    """Quantizes a weight (constant: freezing folds it) and the input, and calls the engine op on both."""

    def __init__(self, engine=False):
        super().__init__()
        self.engine = engine
        self.weight = torch.nn.Parameter(torch.randn(16, 64, dtype=torch.bfloat16), requires_grad=False)
        self.register_buffer("scale", torch.ones(1, dtype=torch.float32))

    def forward(self, t):
        wq, wsf = q(self.weight, self.scale)
        xq, xsf = q(t, self.scale)
        out = wq.sum() + wsf.sum() + xq.sum() + xsf.sum()
        if self.engine:
            out = out + torch.ops.fp4patch_test_engine.quant(self.weight) + torch.ops.fp4patch_test_engine.quant(t)
        return out


def clone_of_fp4_quantize():
    """What an engine does to swap FlashInfer's kernel module: the same code under a copy of its globals."""
    inner = inspect.unwrap(mod.fp4_quantize)
    namespace = dict(inner.__globals__)
    namespace["get_fp4_quantization_module"] = lambda backend="100": Swapped()
    clone = types.FunctionType(inner.__code__, namespace, inner.__name__, inner.__defaults__, inner.__closure__)
    clone.__kwdefaults__ = inner.__kwdefaults__
    return clone


def s_eager(r):
    for _ in range(3):
        q(x)
    r["calls"] = 3


def s_flag_set(r):
    with flag_set():
        r["flag"] = torch.compiler._is_compiling_flag
        for _ in range(3):
            q(x)
    r["calls"] = 3


def s_thread(r):
    started, done, failures = threading.Event(), threading.Event(), []

    def backend(gm, example_inputs):
        started.set()
        done.wait(120)
        return gm.forward

    def compile_elsewhere():
        try:
            torch.compile(lambda t: t * 2, backend=backend, fullgraph=True)(x)
        except Exception as exc:  # noqa: BLE001 - reported
            failures.append(error_line(exc))

    thread = threading.Thread(target=compile_elsewhere)
    thread.start()
    started.wait(120)
    try:
        r["flag"] = torch.compiler._is_compiling_flag
        for _ in range(50):
            q(x)
    finally:
        done.set()
        thread.join()
    r["calls"], r["other_thread"] = 50, failures


def s_compiled(r):
    graphs = []
    f = torch.compile(lambda t: q(t), fullgraph=True, backend=recorder(graphs))
    f(x), f(x)
    direct = torch.compile(flashinfer.fp4_quantize, fullgraph=True, backend=recorder(graphs))
    direct(x, gs), direct(x, gs)
    r["graphs"], r["calls"] = graphs, 4


def s_freezing(r):
    import torch._inductor.config as inductor_config

    with inductor_config.patch(freezing=True), torch.no_grad():
        f = torch.compile(Block(engine=True).eval(), fullgraph=True)
        for _ in range(3):
            f(x)
    # folded once while compiling: the weight's fp4_quantize and its engine op; per call: the input's two
    r["calls"] = 2 + 3 * 2


def s_export_strict(r, strict=True):
    ep = torch.export.export(Block(), (x,), strict=strict)
    r["while_exporting"] = kernels[0] - r.pop("_start")
    module = ep.module()
    module(x), module(x)
    r["ops"], r["calls"] = ops_of(ep.graph_module), r["while_exporting"] + 4


def s_export_nonstrict(r):
    s_export_strict(r, strict=False)


def s_saved(r):
    """Strict and non-strict torch.export of the block, saved under P["save"] (export_strict.pt2, export_nonstrict.pt2)
    for another interpreter to load; the custom metadata of their fp4patch op nodes."""
    for strict in (True, False):
        ep = torch.export.export(Block(), (x,), strict=strict)
        torch.export.save(ep, os.path.join(P["save"], f"export_{'strict' if strict else 'nonstrict'}.pt2"))
        r["strict" if strict else "nonstrict"] = [n.meta.get("custom") for n in ep.graph.nodes if "fp4patch" in str(n.target)]
    r["calls"] = 0


def s_aoti(r):
    ep = torch.export.export(Block(engine=True).eval(), (x,), strict=False)
    with tempfile.TemporaryDirectory() as folder:
        path = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(folder, "block.pt2"))
        r["while_compiling"] = kernels[0] - r.pop("_start")
        runner = torch._inductor.aoti_load_package(path)
        runner(x), runner(x)
    r["ops"], r["calls"] = ops_of(ep.graph_module), r["while_compiling"] + 2 * 4


def s_engine_op(r):
    graphs = []
    f = torch.compile(lambda t: torch.ops.fp4patch_test_engine.quant(t) * 2, fullgraph=True, backend=recorder(graphs))
    f(x), f(x)
    with flag_set():
        torch.ops.fp4patch_test_engine.quant(x)
    r["graphs"], r["calls"] = graphs, 3


def s_clone(r):
    clone = clone_of_fp4_quantize()
    clone(x, gs)
    with flag_set():
        clone(x, gs)
    r["eager_swapped"], r["eager_kernels"] = swapped[0], kernels[0] - r["_start"]
    try:
        torch.compile(lambda t: clone(t, gs), fullgraph=True, backend="eager")(x)
        r["compiled_error"] = None
    except Exception as exc:  # noqa: BLE001 - the expected outcome: it fails as the unpatched code fails
        r["compiled_error"] = error_line(exc).split("\n")[0]
    before = swapped[0]

    class Cloned(torch.nn.Module):
        def forward(self, t):
            return clone(t, gs)[0]

    ep = torch.export.export(Cloned(), (x,), strict=False)
    r["exported_ops"], r["exported_swapped"] = ops_of(ep.graph_module), swapped[0] - before
    r["calls"] = 0  # of the module's own kernel: the clone runs the engine's


def s_backend_runs_graph(r):
    """A backend that runs the graph it is given on the real example inputs while it compiles, eagerly and
    through make_fx (pytorch#184614 names both as code that sees the flag): the op's body runs there."""
    from torch.fx.experimental.proxy_tensor import make_fx

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(ops_of(gm))
        gm(*example_inputs)
        traced = make_fx(gm)(*example_inputs)
        graphs.append(ops_of(traced))
        return gm.forward

    f = torch.compile(lambda t: q(t), fullgraph=True, backend=backend)
    f(x), f(x)
    r["graphs"], r["calls"] = graphs, 4


class Quantizing(torch.Tensor):
    """A wrapper tensor subclass whose __torch_dispatch__ calls FlashInfer on its inner tensor (as a
    quantized-weight subclass does): AOTAutograd runs it on fake tensors while it compiles."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)

    def __init__(self, inner):
        self.inner = inner

    def __repr__(self):
        return f"Quantizing({self.inner.shape})"

    def __tensor_flatten__(self):
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner_tensors, meta, outer_size, outer_stride):
        return Quantizing(inner_tensors["inner"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        args = [a.inner if isinstance(a, Quantizing) else a for a in args]
        if func is torch.ops.aten.add.Tensor:
            xq, _sf = q(args[0], args[0].new_ones(1, dtype=torch.float32))
            return func(*args, **(kwargs or {})) + xq.to(args[0].dtype).sum()
        return func(*args, **(kwargs or {}))


def s_subclass(r):
    graphs = []
    from torch._dynamo.backends.common import aot_autograd

    def record(gm, example_inputs):
        graphs.append(ops_of(gm))
        return gm.forward

    f = torch.compile(lambda t: t + 1, fullgraph=True, backend=aot_autograd(fw_compiler=record))
    t = Quantizing(x.clone())
    f(t), f(t)
    r["graphs"], r["calls"] = graphs, 2


def s_upstream_op(r):
    """FlashInfer's own op flashinfer::fp4_quantize (0.6.12+), whose body calls the patched fp4_quantize: a
    custom op calling a custom op. Called eagerly, with the flag set, compiled, and folded by freezing."""
    import torch._inductor.config as inductor_config

    try:
        upstream = torch.ops.flashinfer.fp4_quantize
    except (AttributeError, RuntimeError):
        r["calls"], r["absent"] = 0, True
        return
    upstream(x, gs)
    with flag_set():
        upstream(x, gs)

    class Folded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(16, 64, dtype=torch.bfloat16), requires_grad=False)
            self.register_buffer("scale", torch.ones(1, dtype=torch.float32))

        def forward(self, t):
            return upstream(self.weight, self.scale)[0].sum() + upstream(t, self.scale)[0].sum()

    with inductor_config.patch(freezing=True), torch.no_grad():
        f = torch.compile(Folded().eval(), fullgraph=True)
        f(x), f(x)
    r["calls"] = 2 + 1 + 2  # eager, flagged; the weight's folded once, the input's per call


SCENARIOS = {name[2:]: fn for name, fn in globals().items() if name.startswith("s_")}
results = {"dynamo_imported_by_flashinfer": dynamo_imported_by_flashinfer}
for name in P["scenarios"]:
    import torch._dynamo

    torch._dynamo.reset()
    start = kernels[0]
    result = {"_start": start}
    try:
        SCENARIOS[name](result)
        result["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - RecursionError included: reported per scenario
        result.update(ok=False, error=error_line(exc), recursion="RecursionError" in traceback.format_exc(), tb=traceback.format_exc()[-1500:])
    result.pop("_start", None)
    result["kernels"] = kernels[0] - start
    results[name] = result
support.emit(MARK, results)
