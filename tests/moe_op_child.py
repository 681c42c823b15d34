"""Child script of tests/test_op_moe.py: run in a fresh interpreter with PYTHONPATH=<flashinfer site>.

Usage: python moe_op_child.py '{"version": V, "functions": {name: {block, op_name, cases, symbolic_cases}}}'; prints one line ``FP4PATCH-CHILD-RESULT <json>``.

For one FlashInfer release and one MoE function it compares, on CPU:

* the real public wrapper run eagerly under ``FakeTensorMode`` on fake CUDA tensors, with the device
  queries stubbed and only the JIT-built kernel module replaced (a stub whose kernel entry points
  allocate nothing in Python and return, for the C++-allocated outputs of the trtllm kernel, tensors of
  the launcher's shapes), against
* the op block fp4patch renders for the release (``entry`` calling the registered custom op, whose
  fake runs under ``FakeTensorMode``: what Dynamo sees), over a case grid;

then runs the fake under a ``ShapeEnv`` with backed and unbacked token counts, and checks that
invalid calls are rejected by the wrapper and the fake with the same error class and message.

The op block is the one ``fp4patch apply`` appends to ``flashinfer/fused_moe/core.py`` (rendered by
the parent test from the spec target), run in the imported module's namespace; the wrapper's own
code is not touched, so the eager wrapper call is the unpatched one.
"""

from __future__ import annotations

import collections
import importlib
import inspect
import json
import sys
import traceback

import torch
from packaging.version import Version
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

MARK = "FP4PATCH-CHILD-RESULT "
P = json.loads(sys.argv[1])
VERSION = Version(P["version"])

torch.cuda.get_device_capability = lambda device=None: (10, 0)
torch.cuda.current_device = lambda: 0
if P.get("mode") != "trace":  # Dynamo saves the CUDA RNG state when CUDA says it is available
    torch.cuda.is_available = lambda: True
_Props = collections.namedtuple("_Props", "major minor name multi_processor_count total_memory")
torch.cuda.get_device_properties = lambda device=None: _Props(10, 0, "fp4patch-test-sm100", 148, 1 << 37)


class _DeviceCtx:
    def __init__(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


torch.cuda.device = _DeviceCtx

import flashinfer  # noqa: F401

mod = importlib.import_module("flashinfer.fused_moe.core")
utils = importlib.import_module("flashinfer.utils")
for m in (mod, utils):
    if hasattr(m, "get_compute_capability"):
        m.get_compute_capability = lambda device=None: (10, 0)
    if hasattr(m, "device_support_pdl"):
        m.device_support_pdl = lambda device=None: True
try:  # the enums moved to flashinfer/tllm_enums.py (0.6.8+); fused_moe/core.py imports only some of them
    _enums = importlib.import_module("flashinfer.tllm_enums")
except ImportError:
    _enums = mod


def _enum(name):
    return getattr(mod, name, None) or getattr(_enums, name)


if hasattr(mod, "_enabled_trtllm_da_config"):
    mod._enabled_trtllm_da_config = lambda *a, **k: None

RESULT = {"kernel_calls": 0}
CASE = {}


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
    """The trtllm MoE kernel module: returns the C++-allocated outputs (trtllm_fused_moe_kernel_launcher.cu)."""

    def trtllm_fp4_block_scale_moe(self, *args):
        RESULT["kernel_calls"] += 1
        c = CASE
        dev = "cuda"
        rows = c["m"] * c["top_k"] + c["experts"] * 8  # a padded permuted row count (tile 8); the fake leaves it unbacked
        gemm2 = torch.empty(rows, c["hidden"], dtype=torch.bfloat16, device=dev)
        expanded = torch.empty(c["m"] * c["top_k"], dtype=torch.int32, device=dev)
        if VERSION < Version("0.6.5"):
            return [] if c["do_finalize"] else [gemm2, expanded]
        # from 0.6.5: Array<Optional<Tensor>>; borrowed slots (output, expert weights) come back None
        gemm1 = torch.empty(rows, c["intermediate"], dtype=torch.bfloat16, device=dev)
        if c["do_finalize"]:
            return [None, expanded, gemm1] if c.get("lora") else []
        return [gemm2, None, expanded] + ([gemm1] if c.get("lora") else [])


class _CutlassRunner(_Anything):
    """What the CUTLASS module's ``init`` returns (flashinfer_cutlass_fused_moe_binding.cu): run_moe writes into output."""

    def run_moe(self, *args):
        RESULT["kernel_calls"] += 1

    run_moe_min_latency = run_moe


def _cutlass_init(*args, **kwargs):
    return _CutlassRunner()


_Kernel.init = staticmethod(_cutlass_init)


class _Spec:
    def __init__(self, *a, **k):
        pass

    def build_and_load(self):
        return _Kernel()

    def get_library_path(self):
        return "/nonexistent"

    def get_library_paths(self):
        return []


if P.get("stub_kernel", True):  # off: the unpatched trace must meet FlashInfer's real JIT loaders
    for name in dir(mod):
        if name.startswith("gen_") and name.endswith("_module"):
            setattr(mod, name, _Spec)
    mod.setup_cubin_loader = lambda *a, **k: None
_from_dlpack = torch.from_dlpack
torch.from_dlpack = lambda t: t if isinstance(t, torch.Tensor) else _from_dlpack(t)

FUNCTION = WRAPPER = RELEASE_PARAMS = ENTRY = ARGS = SPEC = None  # set per function at the end


def load_rendered(function, block):
    """Run the op block fp4patch renders for this release (what ``apply`` appends) in the module."""
    namespace = vars(mod)
    exec(compile(block, f"<fp4patch block for {function}>", "exec"), namespace)  # noqa: S102 - the rendered patch itself
    assert namespace[f"_fp4patch_{function}_ready"](), "the op block did not register its custom op"  # on first need
    return namespace[f"_fp4patch_{function}_entry"]


def meta(t, dynamic_rows=False):
    shape = [d if isinstance(d, int) else "sym:" + str(d) for d in t.shape]
    stride = [d if isinstance(d, int) else "sym:" + str(d) for d in t.stride()]
    return [shape, stride, str(t.dtype)]


def _t(shape, dtype):
    if dtype == "fp8":
        return torch.empty(shape, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    return torch.empty(shape, dtype=dtype, device="cuda")


def trtllm_args(c, m=None):
    m = c["m"] if m is None else m
    E, H, I, K = c["experts"], c["hidden"], c["intermediate"], c["top_k"]
    act = c["act"]
    if act == "nvfp4":
        hs, hs_scale = _t((m, H // 2), torch.uint8), _t((m, H // 16), "fp8")
    elif act == "bf16":
        hs, hs_scale = _t((m, H), torch.bfloat16), None
    else:  # mxfp8
        hs, hs_scale = _t((m, H), "fp8"), _t((m, H // 32), torch.uint8)
    wsv = 16 if act == "nvfp4" else 32
    kw = {
        "routing_bias": None,
        "hidden_states": hs,
        "hidden_states_scale": hs_scale,
        "gemm1_weights": _t((E, 2 * I, H // 2), torch.uint8),
        "gemm1_weights_scale": _t((E, 2 * I, H // wsv), "fp8"),
        "gemm1_bias": None,
        "gemm1_alpha": None,
        "gemm1_beta": None,
        "gemm1_clamp_limit": None,
        "gemm2_weights": _t((E, H, I // 2), torch.uint8),
        "gemm2_weights_scale": _t((E, H, I // wsv), "fp8"),
        "gemm2_bias": None,
        "output1_scale_scalar": _t((E,), torch.float32),
        "output1_scale_gate_scalar": _t((E,), torch.float32),
        "output2_scale_scalar": _t((E,), torch.float32),
        "num_experts": E,
        "top_k": K,
        "n_group": None,
        "topk_group": None,
        "intermediate_size": I,
        "local_expert_offset": 0,
        "local_num_experts": E,
        "routed_scaling_factor": None,
        "routing_method_type": _enum("RoutingMethodType").Renormalize,
        "do_finalize": c["do_finalize"],
    }
    if FUNCTION == "trtllm_fp4_block_scale_moe":
        kw["routing_logits"] = _t((m, E), getattr(torch, c["logits_dtype"]))
    elif c.get("tuple_ids"):
        kw["topk_ids"] = (_t((m, K), torch.int32), _t((m, K), torch.bfloat16))
    else:
        kw["topk_ids"] = _t((m, K), torch.int32)
    if c.get("output") == "given":
        kw["output"] = _t((m, H), torch.bfloat16)
    elif c.get("output") == "narrow":
        kw["output"] = _t((m, H // 2), torch.bfloat16)
    elif c.get("output") == "bad_rows":
        kw["output"] = _t((m + 1, H), torch.bfloat16)
    elif c.get("output") == "bad_dtype":
        kw["output"] = _t((m, H), torch.float16)
    if c.get("lora"):
        kw["gemm1_lora_delta"] = _t((m, K, 2 * I), torch.bfloat16)
    if c.get("tune") is not None:
        kw["tune_max_num_tokens"] = c["tune"]
    if c.get("valid_hidden_size") is not None:
        kw["valid_hidden_size"] = c["valid_hidden_size"]
    return kw


def cutlass_args(c, m=None):
    m = c["m"] if m is None else m
    E, H, I, K = c["experts"], c["hidden"], c["intermediate"], c["top_k"]
    # NVFP4 as the engines pass it (vLLM / SGLang modelopt): bf16 or packed-FP4 input, packed weights
    w_dtype = torch.int64 if VERSION >= Version("0.7.0") else torch.uint8
    per = 8 if w_dtype == torch.int64 else 1
    if c["act"] == "nvfp4":
        x, x_sf = _t((m, H // 2), torch.uint8), _t((m * H // 16,), torch.uint8)
    else:
        x, x_sf = _t((m, H), torch.bfloat16), None
    kw = {
        "input": x,
        "token_selected_experts": _t((m, K), torch.int32),
        "token_final_scales": _t((m, K), torch.float32),
        "fc1_expert_weights": _t((E, 2 * I, H // 2 // per), w_dtype),
        "fc2_expert_weights": _t((E, H, I // 2 // per), w_dtype),
        "output_dtype": getattr(torch, c["out_dtype"]),
        "quant_scales": [_t((1,), torch.float32), _t((E, 2 * I, H // 16 // 4), torch.int32), _t((E,), torch.float32),
                      _t((1,), torch.float32), _t((E, H, I // 16 // 4), torch.int32), _t((E,), torch.float32)],
        "input_sf": x_sf,
        "activation_type": _enum("ActivationType").Swiglu,
    }
    if c.get("output") == "given":
        kw["output"] = _t((m, H), getattr(torch, c["out_dtype"]))
    elif c.get("output") == "bad_rows":
        kw["output"] = _t((m + 1, H), getattr(torch, c["out_dtype"]))
    elif c.get("output") == "bad_dtype":
        kw["output"] = _t((m, H), torch.float32)
    if c.get("min_latency"):
        kw["min_latency_mode"] = True
    if c.get("tune") is not None:
        kw["tune_max_num_tokens"] = c["tune"]
    return kw




def _alias(t, kw):
    """The name of the argument ``t`` is (the caller's own tensor), or None for a new tensor."""
    for name, v in kw.items():
        for i, x in enumerate(v if isinstance(v, (tuple, list)) else (v,)):
            if x is t:
                return name if not isinstance(v, (tuple, list)) else f"{name}[{i}]"
    return None


def _error(e):
    return [type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else ""]


def run_grid():
    out = []
    for c in SPEC["cases"]:
        CASE.clear()
        CASE.update(c)
        rec = {"case": c}
        # a ShapeEnv, so that the fake can give the routing-dependent row count as a new unbacked size
        with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()):
            kw = ARGS(c)
            calls_before = RESULT["kernel_calls"]
            try:
                real = WRAPPER(**kw)
                rec["real"] = [meta(t) for t in real]
                rec["real_alias"] = [_alias(t, kw) for t in real]
            except Exception as e:  # noqa: BLE001
                rec["real_error"] = _error(e)
                rec["real_tb"] = traceback.format_exc()[-1500:]
            rec["kernel_reached"] = RESULT["kernel_calls"] > calls_before
            try:
                fake = ENTRY(**kw)
                rec["fake"] = [meta(t) for t in fake]
                rec["fake_alias"] = [_alias(t, kw) for t in fake]
            except Exception as e:  # noqa: BLE001
                rec["fake_error"] = _error(e)
                rec["fake_tb"] = traceback.format_exc()[-1500:]
        out.append(rec)
    return out


def run_symbolic():
    """The fake (through entry) with the token count backed-symbolic and unbacked, under a ShapeEnv."""
    out = []
    for c in SPEC["symbolic_cases"]:
        CASE.clear()
        CASE.update(c)
        for kind in ("backed", "unbacked"):
            rec = {"case": c, "kind": kind}
            env = ShapeEnv()
            try:
                with FakeTensorMode(allow_non_fake_inputs=True, shape_env=env):
                    if kind == "unbacked":
                        m = env.create_unbacked_symint()
                        torch._check(m >= 1)
                    else:
                        from torch._dynamo.source import ConstantSource

                        m = env.create_symintnode(
                            env.create_symbol(8, source=ConstantSource("M")), hint=8, source=ConstantSource("M")
                        )
                    kw = ARGS(c, m=m)
                    res = ENTRY(**kw)
                    rec["fake"] = [meta(t) for t in res]
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


def _where(e):
    """The last FlashInfer frame Dynamo names in its error (``file:line``), or None."""
    hits = [ln.strip() for ln in str(e).splitlines() if "flashinfer" in ln and "File " in ln]
    return hits[-1] if hits else None


def run_trace(c, m2):
    """Compile f(kw, tune) -> wrapper(**kw, tune_max_num_tokens=tune) with M dynamic, call at M and m2."""
    from fp4patch.trace_probe import _custom_op_nodes

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
        with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()):
            calls = []
            for m in (c["m"], m2):
                CASE.clear()
                CASE.update(c, m=m)
                kw = ARGS(c, m=m)
                for name, t in kw.items():
                    for x in t if isinstance(t, tuple) else (t,):
                        if name in TOKEN_DIM and isinstance(x, torch.Tensor):
                            torch._dynamo.mark_dynamic(x, 0)
                out = compiled(kw, 1 << max(m - 1, 0).bit_length())
                calls.append([meta(t) for t in out])
        rec["outputs"] = calls
    except Exception as e:  # noqa: BLE001
        rec["error"] = _error(e)
        rec["where"] = _where(e)
        rec["tb"] = traceback.format_exc()[-3000:]
    rec["graphs"] = len(graphs)
    rec["ops"] = [n for gm in graphs for n in _custom_op_nodes(gm)]
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
    CASE.clear()
    CASE.update(c)
    before = RESULT["kernel_calls"]
    try:
        with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()):
            out = WRAPPER(**ARGS(c))
        return {"outputs": [meta(t) for t in out], "kernel": RESULT["kernel_calls"] - before, "entry_calls": len(entry_calls)}
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


if P.get("mode") == "trace":
    for FUNCTION, SPEC in P["functions"].items():
        WRAPPER = getattr(mod, FUNCTION)
        ARGS = cutlass_args if FUNCTION == "cutlass_fused_moe" else trtllm_args
        OP_NAME = SPEC.get("op_name")
        res = {"trace": [run_trace(c, SPEC["m2"]) for c in SPEC["cases"]]}
        if P.get("stub_kernel", True):
            res["eager"] = [run_eager(c) for c in SPEC["cases"]]
        if OP_NAME:
            res["forwarding"] = run_forwarding()
        RESULT[FUNCTION] = res
    print(MARK + json.dumps(RESULT))
    sys.exit(0)

for FUNCTION, SPEC in P["functions"].items():
    WRAPPER = getattr(mod, FUNCTION)
    RELEASE_PARAMS = list(inspect.signature(inspect.unwrap(WRAPPER)).parameters)
    ENTRY = load_rendered(FUNCTION, SPEC["block"])
    OP = getattr(torch.ops.fp4patch, SPEC["op_name"].split("::")[1]).default
    ARGS = cutlass_args if FUNCTION == "cutlass_fused_moe" else trtllm_args
    RESULT[FUNCTION] = {
        "release_params": RELEASE_PARAMS,
        "schema_params": [a.name for a in OP._schema.arguments],
        "schema_mutated": [a.name for a in OP._schema.arguments if a.alias_info is not None and a.alias_info.is_write],
        "entry_params": list(inspect.signature(ENTRY).parameters),
        "grid": run_grid(),
        "symbolic": run_symbolic(),
    }
print(MARK + json.dumps(RESULT))
