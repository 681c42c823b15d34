"""Child script of tests/test_op_moe.py: run in a fresh interpreter with PYTHONPATH=<flashinfer site>.

Usage: python moe_op_child.py '{"version": V, "probe": ..., "moe": ..., "functions": {name: {...}}}'; prints one
line ``FP4PATCH-CHILD-RESULT <json>``.

Default mode, for one FlashInfer release and the three MoE functions:

* the oracle: the product's case grid (``patches/flashinfer-python/grids/<function>.py``, the request the
  parent built from the spec target) run by ``fp4patch/probes/fake_check_probe.py``'s ``run_function``: the real
  public wrapper eagerly under ``FakeTensorMode`` on fake CUDA tensors, with only the kernel side replaced
  (the grid's ``stubs``, ``grids/_moe.py``), against the op block fp4patch renders for the release
  (``entry`` calling the registered custom op, whose fake runs). On top of the product's stubs this test
  gives the TRT-LLM-Gen kernel a model of what its C++ launcher returns (:func:`launcher_outputs`, from
  ``csrc/trtllm_fused_moe_kernel_launcher.cu``), so that the unfinalized calls, which the product reports
  as not visible on CPU, are compared here with the fake as far as a model allows (the row count is the
  model's; the fake leaves it unbacked);
* the fake under a ``ShapeEnv`` with backed and unbacked token counts.

Mode "trace": the installed (patched or not) public function under ``torch.compile(fullgraph=True)``, the
patched eager call, and the op body's forwarding by name.

Mode "dynamic": the installed patched public function under ``torch.compile(fullgraph=True)`` with the token
dimension of every token-indexed input marked dynamic (``mark_dynamic``; also under ``backed_size_oblivious``,
vLLM's mode, where M=1 shares the graph) or unbacked (``mark_unbacked``), called over several token counts
(:func:`run_dynamic`). The inputs are meta tensors, not fake ones, so that Dynamo makes its own ShapeEnv as
it does for real inputs (an input that is already fake keeps its own, and Dynamo specialises a
``mark_unbacked`` dimension of it), and ``torch._dynamo.config.capture_dynamic_output_shape_ops`` is as the
case says.

The calls are built by the grids' own builders (``grids/_moe.py``: ``trtllm_kwargs``, ``cutlass_kwargs``,
with a symbolic M where needed) and the probe's ``build``. The op block is the one ``fp4patch apply``
appends to ``flashinfer/fused_moe/core.py`` (rendered by the parent test from the spec target), run in
the imported module's namespace; the wrapper's own code is not touched, so the eager call is the
unpatched one.
"""

from __future__ import annotations

import collections
import functools
import importlib
import importlib.util
import inspect
import json
import sys
import traceback

import child_support as support  # tests/child_support.py (this script's folder is first on sys.path)
import torch
from packaging.version import Version
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

MARK = "FP4PATCH-CHILD-RESULT "
P = json.loads(sys.argv[1])
VERSION = Version(P["version"])
TRACE = P.get("mode") in ("trace", "dynamic")  # both run the installed public functions with the trace stand-ins


probe = support.load_by_path(P["probe"], "_fp4patch_fake_check_probe")
ko = probe.load_by_path(P["oracle"], "_fp4patch_oracle")
moe = support.load_by_path(P["moe"], "_fp4patch_grid_moe_helpers")
CASE = {}  # the keyword arguments of the wrapper call under way (read by the launcher model)
RESULT = {"kernel_calls": 0}


def launcher_outputs(*args, **kwargs):
    """The test's model of what the TRT-LLM-Gen FP4 MoE launcher returns (``FP4BlockScaleLauncher``,
    ``csrc/trtllm_fused_moe_kernel_launcher.cu`` of 0.6.0 and 0.7.4) for the call in ``CASE``: unfinalized,
    ``gemm2_output [R, hidden]`` bf16 with R a padded permuted row count (tile 8 here; the fake leaves it
    unbacked) and ``expanded_idx_to_permuted_idx [M * top_k]`` int32; from 0.6.5 an
    ``Array<Optional<Tensor>>`` whose borrowed slots (output, expert weights) are None."""
    RESULT["kernel_calls"] += 1
    hs = CASE["hidden_states"]
    m, top_k, experts = hs.shape[0], CASE["top_k"], CASE["num_experts"]
    hidden = hs.shape[-1] * (2 if hs.dtype == torch.uint8 else 1)
    do_finalize, lora = CASE.get("do_finalize", True), CASE.get("gemm1_lora_delta") is not None
    rows = m * top_k + experts * 8
    gemm2 = torch.empty(rows, hidden, dtype=torch.bfloat16, device="cuda")
    expanded = torch.empty(m * top_k, dtype=torch.int32, device="cuda")
    if VERSION < Version("0.6.5"):
        return [] if do_finalize else [gemm2, expanded]
    gemm1 = torch.empty(rows, CASE["intermediate_size"], dtype=torch.bfloat16, device="cuda")
    if do_finalize:
        return [None, expanded, gemm1] if lora else []
    return [gemm2, None, expanded] + ([gemm1] if lora else [])


def fp8_launcher_outputs(*args, **kwargs):
    """The test's model of what the TRT-LLM-Gen FP8 MoE launchers return (``Fp8BlockScaleLauncher`` /
    ``Fp8PerTensorLauncher``, ``csrc/trtllm_fused_moe_kernel_launcher.cu`` of 0.6.0 and 0.7.4) for the call in
    ``CASE``: before 0.6.5 (no ``do_finalize``) the finalized ``[M, hidden]`` bf16 output the launcher allocates;
    from 0.6.5, finalized, nothing the wrapper reads (it returns its own ``output``); unfinalized
    ``[gemm2_output [R, hidden] bf16 (tile 8 here; the fake leaves R unbacked), expert_weights [M, top_k +
    shared] bf16, expanded_idx_to_permuted_idx [M * (top_k + shared)] int32]``."""
    RESULT["kernel_calls"] += 1
    hs = CASE["hidden_states"]
    m, hidden, experts = hs.shape[0], hs.shape[-1], CASE["num_experts"]
    top_k = CASE["top_k"] + (CASE.get("num_fused_shared_experts") or 0)
    if "do_finalize" not in inspect.signature(inspect.unwrap(WRAPPER)).parameters:
        return torch.empty(m, hidden, dtype=torch.bfloat16, device="cuda")
    if CASE.get("do_finalize", True):
        return []
    rows = m * top_k + experts * 8
    return [torch.empty(rows, hidden, dtype=torch.bfloat16, device="cuda"), torch.empty(m, top_k, dtype=torch.bfloat16, device="cuda"),
            torch.empty(m * top_k, dtype=torch.int32, device="cuda")]


def outputs(result):
    """The wrapper's (or entry's) outputs as a list: the FP8 wrappers return one tensor when finalized."""
    return [result] if isinstance(result, torch.Tensor) else list(result)


def call_kwargs(function, c, m=None, module=None):
    """The wrapper's keyword arguments for a test case ``c`` (``act``, ``do_finalize``, ``logits_dtype``,
    ``output``, ``out_dtype``, ``tuple_ids``, ``tune``) with ``m`` tokens (an int or a SymInt; default
    ``c["m"]``), built by the grids' builders and the probe's ``build``."""
    m = c["m"] if m is None else m
    if function == "cutlass_fused_moe":
        kw = moe.cutlass_kwargs(m, act=c["act"], out_dtype=c["out_dtype"], output=c.get("output"))
    elif function.startswith("trtllm_fp8_"):  # the release's own parameters only (grids/_moe.py)
        params = inspect.signature(inspect.unwrap(getattr(mod, function))).parameters
        kw = moe.trtllm_fp8_kwargs(params, m, function == "trtllm_fp8_block_scale_moe", act=c["act"], logits=c["logits_dtype"],
                                   do_finalize=c.get("do_finalize", True), output=c.get("output"))
        if c.get("llama4"):  # vLLM's per-tensor Llama 4 call: top-1 routing, the router weight applied on the input
            kw.update(top_k=1, routing_method_type={"enum": "RoutingMethodType.Llama4"}, use_routing_scales_on_input=True, topk_group=0)
    else:
        kw = moe.trtllm_kwargs(m, act=c["act"], do_finalize=c["do_finalize"], output=c.get("output"))
        if function == "trtllm_fp4_block_scale_moe":
            kw["routing_logits"] = moe.t(m, moe.E, dtype=c["logits_dtype"])
        elif c.get("tuple_ids"):
            kw["topk_ids"] = {"tuple": [moe.t(m, moe.TOP_K, dtype="int32"), moe.t(m, moe.TOP_K)]}
        else:
            kw["topk_ids"] = moe.t(m, moe.TOP_K, dtype="int32")
    if c.get("tune") is not None:
        kw["tune_max_num_tokens"] = c["tune"]
    return {k: probe.build(v, module or mod, ko, torch) for k, v in kw.items()}


# --------------------------------------------------------------------------- #
# The trace mode's stand-ins, as the compile checks were written against (their walls included):
# device queries answered globally, torch.cuda.device a no-op context, and, patched, every JIT module
# generator of fused_moe/core.py loading a module whose kernels are the launcher model / a CUTLASS runner
# --------------------------------------------------------------------------- #
class _DeviceCtx:
    def __init__(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class _Anything:
    """Stands for a JIT module object, runner or function: every attribute and call is accepted."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args, **kwargs):
        return _Anything()

    def __iter__(self):
        return iter(())


class _Kernel(_Anything):
    """The JIT-built MoE module of the trace mode: the trtllm launcher model, the CUTLASS runner."""

    trtllm_fp4_block_scale_moe = staticmethod(launcher_outputs)
    trtllm_fp8_block_scale_moe = staticmethod(fp8_launcher_outputs)
    trtllm_fp8_per_tensor_scale_moe = staticmethod(fp8_launcher_outputs)

    @staticmethod
    def init(*args, **kwargs):
        return _CutlassRunner()


class _CutlassRunner(_Anything):
    """What the CUTLASS module's ``init`` returns (flashinfer_cutlass_fused_moe_binding.cu): run_moe writes into output."""

    def run_moe(self, *args):
        RESULT["kernel_calls"] += 1

    run_moe_min_latency = run_moe


class _TraceSpec:
    def __init__(self, *a, **k):
        pass

    def build_and_load(self):
        return _Kernel()

    def get_library_path(self):
        return "/nonexistent"

    def get_library_paths(self):
        return []


if TRACE:
    torch.cuda.get_device_capability = lambda device=None: (10, 0)
    torch.cuda.current_device = lambda: 0  # not is_available: Dynamo saves the CUDA RNG state when CUDA says it is
    _Props = collections.namedtuple("_Props", "major minor name multi_processor_count total_memory")
    torch.cuda.get_device_properties = lambda device=None: _Props(10, 0, "fp4patch-test-sm100", 148, 1 << 37)
    torch.cuda.device = _DeviceCtx
    import flashinfer

    mod = importlib.import_module("flashinfer.fused_moe.core")
    for m in (mod, importlib.import_module("flashinfer.utils")):
        if hasattr(m, "get_compute_capability"):
            m.get_compute_capability = lambda device=None: (10, 0)
        if hasattr(m, "device_support_pdl"):
            m.device_support_pdl = lambda device=None: True
    if hasattr(mod, "_enabled_trtllm_da_config"):
        mod._enabled_trtllm_da_config = lambda *a, **k: None
    if P.get("stub_kernel", True):  # off: the unpatched trace must meet FlashInfer's real JIT loaders
        for name in dir(mod):
            if name.startswith("gen_") and name.endswith("_module"):
                setattr(mod, name, _TraceSpec)
        mod.setup_cubin_loader = lambda *a, **k: None
    _from_dlpack = torch.from_dlpack
    torch.from_dlpack = lambda t: t if isinstance(t, torch.Tensor) else _from_dlpack(t)
else:
    with ko.device_stubs():  # FlashInfer reads the architectures at import
        import flashinfer

    mod = importlib.import_module("flashinfer.fused_moe.core")
try:  # the enums moved to flashinfer/tllm_enums.py (0.6.8+); fused_moe/core.py imports only some of them
    _enums = importlib.import_module("flashinfer.tllm_enums")
except ImportError:
    _enums = mod


def _enum(name):
    return getattr(mod, name, None) or getattr(_enums, name)


FUNCTION = WRAPPER = SPEC = OP_NAME = None  # set per function at the end


def load_rendered(function, block):
    """Run the op block fp4patch renders for this release (what ``apply`` appends) in the module."""
    namespace = vars(mod)
    exec(compile(block, f"<fp4patch block for {function}>", "exec"), namespace)  # noqa: S102 - the rendered patch itself
    assert namespace[f"_fp4patch_{function}_ready"](), "the op block did not register its custom op"  # on first need
    return namespace[f"_fp4patch_{function}_entry"]


def _error(e):
    return [type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else ""]


def run_grid(function, request, entry):
    """The product grid through the probe, the wrapper spied on so the launcher model sees each call."""
    real = getattr(flashinfer, function)

    @functools.wraps(real)
    def spied(*args, **kwargs):
        CASE.clear()
        CASE.update(inspect.signature(real).bind(*args, **kwargs).arguments)
        return real(*args, **kwargs)

    setattr(flashinfer, function, spied)
    try:
        summary, records = probe.run_function(ko, flashinfer, torch, RECORDER, request, fake=entry)
    finally:
        setattr(flashinfer, function, real)
    return {"error": summary["error"], "records": records}


def run_symbolic(function, cases, entry):
    """The fake (through entry) with the token count backed-symbolic and unbacked, under a ShapeEnv."""
    out = []
    for c in cases:
        for kind in ("backed", "unbacked"):
            rec = {"case": c, "kind": kind}
            env = ShapeEnv()
            try:
                with ko.device_stubs(), FakeTensorMode(allow_non_fake_inputs=True, shape_env=env):
                    if kind == "unbacked":
                        m = env.create_unbacked_symint()
                        torch._check(m >= 1)
                    else:
                        from torch._dynamo.source import ConstantSource

                        m = env.create_symintnode(env.create_symbol(8, source=ConstantSource("M")), hint=8, source=ConstantSource("M"))
                    res = entry(**call_kwargs(function, c, m=m))
                    rec["fake"] = [support.layout(t) for t in outputs(res)]
                    rec["guards"] = [str(g.expr) for g in env.guards]
            except Exception as e:  # noqa: BLE001
                rec["error"] = _error(e)
                rec["tb"] = traceback.format_exc()[-2000:]
            out.append(rec)
    return out


# --------------------------------------------------------------------------- #
# mode "trace": the installed (patched or not) public function under torch.compile
# --------------------------------------------------------------------------- #
TOKEN_DIM = {"hidden_states", "hidden_states_scale", "routing_logits", "topk_ids", "output", "input", "input_sf",
             "token_selected_experts", "token_final_scales", "gemm1_lora_delta"}


def _token_dim(name, x):
    """The token dimension of input ``name`` (tensor ``x``): 0, but the FP8 block scales ``[H/128, M]`` (DeepSeek
    FP8) carry it last (a non-negative index: Dynamo's markers take no negative one)."""
    return x.dim() - 1 if FUNCTION == "trtllm_fp8_block_scale_moe" and name == "hidden_states_scale" else 0


def _where(e):
    """The last FlashInfer frame Dynamo names in its error (``file:line``), or None."""
    hits = [ln.strip() for ln in str(e).splitlines() if "flashinfer" in ln and "File " in ln]
    return hits[-1] if hits else None


def run_trace(c, m2):
    """Compile f(kw, tune) -> wrapper(**kw, tune_max_num_tokens=tune) with M dynamic, call at M and m2."""
    from fp4patch.probes.trace_probe import _custom_op_nodes

    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(kw, tune):
        return WRAPPER(**kw, tune_max_num_tokens=tune)

    rec = {"case": c}
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    try:
        # a ShapeEnv: the compiled graph then runs on these fake inputs, and the op's fake may need
        # a new unbacked size (the unfinalized trtllm GEMM2 rows)
        # unfinalized: the GEMM2 row count is an unbacked size, which needs capture_dynamic_output_shape_ops
        capture = not c.get("do_finalize", True)
        with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()), torch._dynamo.config.patch(capture_dynamic_output_shape_ops=capture):
            calls = []
            for m in (c["m"], m2):
                kw = call_kwargs(FUNCTION, c, m=m)
                for name, t in kw.items():
                    for x in t if isinstance(t, tuple) else (t,):
                        if name in TOKEN_DIM and isinstance(x, torch.Tensor):
                            torch._dynamo.mark_dynamic(x, _token_dim(name, x))
                out = compiled(kw, 1 << max(m - 1, 0).bit_length())
                calls.append([support.layout(t) for t in outputs(out)])
        rec["outputs"] = calls
    except Exception as e:  # noqa: BLE001
        rec["error"] = _error(e)
        rec["where"] = _where(e)
        rec["tb"] = traceback.format_exc()[-3000:]
    rec["graphs"] = len(graphs)
    rec["ops"] = [n for gm in graphs for n in _custom_op_nodes(gm)]
    return rec


def run_dynamic(c, kind, token_counts, capture):
    """Compile ``f(kw) -> WRAPPER(**kw)`` once (``fullgraph=True``, a graph-recording backend that runs the
    graph under FakeTensorMode) and call it at each of ``token_counts``, the token dimension of every
    input in ``TOKEN_DIM`` marked per ``kind`` ("backed": ``mark_dynamic``; "oblivious": the same under
    ``backed_size_oblivious``; "unbacked": ``mark_unbacked``; "aot": ``mark_dynamic``, the graph then through
    AOTAutograd, which functionalizes the op's mutations as Inductor does) on each call; ``capture``: the value of
    ``capture_dynamic_output_shape_ops``. Returns the graphs and frames compiled, the traced outputs'
    metadata (symbolic), each call's outputs, or the error (class and first line)."""
    import contextlib

    from fp4patch.probes import trace_probe

    # the outputs' shapes for these sizes come from the op's fake (the kernel never runs); "aot": Dynamo's graph
    # through AOTAutograd (functionalization), as Inductor takes it
    compiles = support.Compiles(torch)

    def f(kw):
        return WRAPPER(**kw)

    rec = {"case": c, "kind": kind, "token_counts": token_counts, "capture": capture}
    compiled = torch.compile(f, fullgraph=True, backend=compiles.aot if kind == "aot" else compiles.fake)
    cuda_tensor = ko.cuda_tensor
    ko.cuda_tensor = lambda shape, dtype, stride=None: torch.empty_strided(
        shape, stride if stride is not None else torch.empty(shape, device="meta").stride(), dtype=dtype, device="meta")
    oblivious = torch.fx.experimental._config.patch(backed_size_oblivious=True) if kind == "oblivious" else contextlib.nullcontext()
    try:
        with oblivious, torch._dynamo.config.patch(capture_dynamic_output_shape_ops=capture):
            calls = []
            for m in token_counts:
                kw = call_kwargs(FUNCTION, dict(c, tune=None), m=m)
                if c.get("tune") == "pow2":  # an engine's tuning bucket, an int argument that changes with M
                    kw["tune_max_num_tokens"] = 1 << max(m - 1, 0).bit_length()
                for name, t in kw.items():
                    for x in t if isinstance(t, tuple) else (t,):
                        if name in TOKEN_DIM and isinstance(x, torch.Tensor):
                            if kind == "unbacked":
                                torch._dynamo.decorators.mark_unbacked(x, _token_dim(name, x))
                            else:
                                torch._dynamo.mark_dynamic(x, _token_dim(name, x))
                calls.append([support.layout(t) for t in outputs(compiled(kw))])
        rec["outputs"] = calls
    except Exception as e:  # noqa: BLE001
        rec["error"] = _error(e)
        rec["tb"] = traceback.format_exc()[-3000:]
    finally:
        ko.cuda_tensor = cuda_tensor
    rec["graphs"] = len(compiles.graphs)
    rec["frames"] = compiles.frames()
    rec["ops"] = compiles.ops(trace_probe)
    if compiles.graphs:  # the traced graph: its tensor inputs and what the op node returns (symbolic sizes)
        nodes = list(compiles.graphs[0].graph.nodes)
        rec["inputs"] = {name: support.layout(t) for name, t in compiles.inputs()}
        rec["op_outputs"] = [support.layout(t) for n in nodes if n.op == "call_function" and str(n.target).startswith("fp4patch.")
                             for t in torch.utils._pytree.tree_leaves(n.meta["example_value"]) if isinstance(t, torch.Tensor)]
    return rec


def run_eager(c):
    """The eager public call: its outputs, whether it reached the kernel, how often the op entry ran."""
    name = f"_fp4patch_{FUNCTION}_entry"
    entry_calls = []
    if hasattr(mod, f"_fp4patch_{FUNCTION}_ready"):  # the op is registered on first need: register it, then record
        getattr(mod, f"_fp4patch_{FUNCTION}_ready")()
    real_entry = getattr(mod, name, None)
    if real_entry is not None:
        def recording_entry(**kwargs):
            entry_calls.append(sorted(kwargs))
            return real_entry(**kwargs)

        setattr(mod, name, recording_entry)
    before = RESULT["kernel_calls"]
    try:
        with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()):
            kw = call_kwargs(FUNCTION, c)
            CASE.clear()
            CASE.update(kw)
            out = WRAPPER(**kw)
        return {"outputs": [support.layout(t) for t in outputs(out)], "kernel": RESULT["kernel_calls"] - before, "entry_calls": len(entry_calls)}
    finally:
        if real_entry is not None:
            setattr(mod, name, real_entry)


def _value_for(name, annotation, default):
    """A non-default value of a parameter of the op, as it crosses the schema, and what the wrapper should get."""
    a = str(annotation)
    if name == "topk_ids":
        t = torch.full((3, 2), 7, dtype=torch.int32)
        return [t], t
    if name == "nvfp4_4over6":
        return 0, None
    if name == "hidden_states_scale_layout":
        return 1, _enum("SfLayout")(1)
    if name == "fp8_quantization_type":
        return 2, _enum("Fp8QuantizationType")(2)
    if name == "activation_type" and SPEC.get("activation_enum"):  # 0.6.3's FP8 per-tensor op reads .value
        return 4, _enum("ActivationType")(4)
    if name in ("activation_type", "gated_act_type"):
        value = 4 if default != 4 else 2
        return value, (_enum("ActivationType")(value) if FUNCTION == "cutlass_fused_moe" else value)
    if name == "output_dtype":
        return torch.float16, torch.float16
    if name == "quant_scales":
        t = torch.full((5,), 3.0)
        return [t], [t]
    if name == "profile_ids":
        return [1, 2], [1, 2]
    if "Tensor" in a:
        t = torch.full((len(name),), float(len(name)))
        return t, t
    if "bool" in a:
        v = not default if isinstance(default, bool) else True
        return v, v
    if "float" in a:
        return 0.25, 0.25
    if "str" in a:
        return "other-backend", "other-backend"
    if "int" in a:
        v = (default or 0) + 5 if isinstance(default, int) else 5
        return v, v
    raise AssertionError(f"no test value for {name}: {a}")


def _show(v):
    if isinstance(v, torch.Tensor):
        return f"<tensor {tuple(v.shape)} {v.dtype} {v.flatten()[0].item() if v.numel() else ''}>"
    if isinstance(v, (list, tuple)):
        return [_show(x) for x in v]
    return repr(v)


def run_forwarding():
    """Call the registered op directly (eager) once per parameter with that one parameter non-default;
    the wrapper the op body calls is replaced by a recorder: every value must arrive under its own name."""
    op = getattr(torch.ops.fp4patch, OP_NAME.split("::")[1]).default
    schema = {a.name: a for a in op._schema.arguments}
    getattr(mod, f"_fp4patch_{FUNCTION}_ready")()
    sig = inspect.signature(inspect.unwrap(getattr(mod, f"_fp4patch_{FUNCTION}_entry")))
    seen = []

    def recorder(**kwargs):
        seen.append(kwargs)
        if FUNCTION.startswith("trtllm_fp8_") and kwargs.get("do_finalize", True):  # finalized, the FP8 wrappers return one tensor
            return torch.zeros(1)
        return [torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.zeros(1)]

    base = {}
    for name, a in schema.items():
        if not a.has_default_value():
            base[name] = _value_for(name, a.type, None)[0]
    results = {}
    saved = getattr(mod, FUNCTION)
    setattr(mod, FUNCTION, recorder)
    try:
        for name, a in schema.items():
            sent, expected = _value_for(name, a.type, a.default_value if a.has_default_value() else None)
            args = dict(base, **{name: sent})
            seen.clear()
            op(**args)
            got = seen[-1] if seen else {}
            results[name] = {"expected": _show(expected), "got": _show(got[name]) if name in got else "<not passed>"}
    finally:
        setattr(mod, FUNCTION, saved)
    return {"results": results, "entry_params": list(sig.parameters)}


if P.get("mode") == "dynamic":
    for FUNCTION, SPEC in P["functions"].items():
        WRAPPER = getattr(mod, FUNCTION)
        RESULT[FUNCTION] = [run_dynamic(r["case"], r["kind"], r["token_counts"], r["capture"]) for r in SPEC["runs"]]
    support.emit(MARK, RESULT)
    sys.exit(0)

if TRACE:
    for FUNCTION, SPEC in P["functions"].items():
        WRAPPER = getattr(mod, FUNCTION)
        OP_NAME = SPEC.get("op_name")
        res = {"trace": [run_trace(c, SPEC["m2"]) for c in SPEC["cases"]]}
        if P.get("stub_kernel", True):
            res["eager"] = [run_eager(c) for c in SPEC["cases"]]
        if OP_NAME:
            res["forwarding"] = run_forwarding()
        RESULT[FUNCTION] = res
    support.emit(MARK, RESULT)
    sys.exit(0)

# one recorder for all: the get_*_module loaders are functools.cache'd; the trtllm kernel returns the model's outputs
RECORDER = ko.KernelRecorder(returns={"trtllm_fp4_block_scale_moe": launcher_outputs, "trtllm_fp8_block_scale_moe": fp8_launcher_outputs,
                                      "trtllm_fp8_per_tensor_scale_moe": fp8_launcher_outputs})
with ko.device_stubs(), ko.jit_modules_replaced(RECORDER):
    for FUNCTION, SPEC in P["functions"].items():
        WRAPPER = getattr(mod, FUNCTION)
        entry = load_rendered(FUNCTION, SPEC["block"])
        op = getattr(torch.ops.fp4patch, SPEC["op_name"].split("::")[1]).default
        RESULT[FUNCTION] = {
            "release_params": list(inspect.signature(inspect.unwrap(WRAPPER)).parameters),
            "schema_params": [a.name for a in op._schema.arguments],
            "schema_mutated": [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write],
            "entry_params": list(inspect.signature(entry).parameters),
            "grid": run_grid(FUNCTION, SPEC["request"], entry),
            "symbolic": run_symbolic(FUNCTION, SPEC["symbolic_cases"], entry),
        }
support.emit(MARK, RESULT)
