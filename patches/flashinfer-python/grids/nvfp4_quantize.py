"""Case grid of ``flashinfer.nvfp4_quantize`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/quantization/fp4_quantization.py``; patched as its own op from 0.6.11, where
``per_token_activation`` appears) has two paths, each allocating its outputs in Python:

* per token (``per_token_activation=True``): ``backend="cuda"`` (``"auto"`` on 0.7.4) reads the scale on the
  host and calls the kernel entry ``nvfp4_quant_and_per_token_scale_sm100`` of ``get_fp4_quantization_module``,
  which allocates x_q uint8 ``[M, K/2]``, the scale factors (``new_zeros``, rows / columns padded for 128x4 /
  8x4) and the float32 per-token scales ``[M]`` and launches the C++ launcher on them; ``backend="cute-dsl"``
  (where the release data's ``per_token_backends`` lists it, 0.6.13+) calls ``nvfp4_quantize_per_token_cute_dsl``
  (``flashinfer/quantization/kernels/nvfp4_quantize.py``), same layout, its kernel getter stubbed as in
  ``grids/fp4_quantize.py``. Cases: M in {0, 1, 8, 127, 129} x each ``sfLayout`` (K = 64 and 7168; 7168 / 16
  = 448 columns, K = 96: 6 columns padded to 8), a float scale (vLLM's / SGLang's ``1 / (448 * 6)``) and a (1,)
  tensor, fp16 input, ``expanded_idx_to_permuted_idx``, ``enable_pdl``; refused by the wrapper: ``sf_vec_size=32``,
  another backend, ``out_scale`` with the CUDA backend (0.7.1+); the CuTe-DSL driver's asserts (fp8 and float32
  input, a 3-D input, K = 40).
* per tensor: ``backend="cuda"`` calls ``fp4_quantize`` with the flags ``sfLayout`` gives (the kernel entry
  ``fp4_quantize_sm100`` allocates); cases M in {0, 1, 8, 127, 129} x each ``sfLayout``, fp16 / fp8 / 3-D input,
  ``sf_vec_size=32``, and what the wrapper refuses (``expanded_idx_to_permuted_idx``, ``out_scale``, a float
  scale, an unknown backend, ``backend="cake"`` per tensor, 0.7.2+).

Refused by the fake under compile (fp4patch's one-line error): ``do_shuffle=True``, per-tensor ``backend="cute-dsl"``,
``backend="cake"`` per token, ``batch_invariant=True``. A per-token backend the grid does not know is ``unchecked``.
No output is allocated by the C++ launcher (it writes into the tensors the Python entry allocated), so no case
needs ``kernel_outputs``.
"""

import contextlib

FUNCTION = "nvfp4_quantize"
OUTPUTS = ("x_q", "sf", "per_token_scale")
#: 1 / (448 * 6): the inverse base scale vLLM and SGLang pass to the per-token call
PER_TOKEN_SCALE = 1.0 / (448.0 * 6.0)
LAYOUTS = ("layout_128x4", "layout_8x4", "layout_linear")

#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = sibling("_tensors").tensor  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def _layout(name):
    return {"enum": f"SfLayout.{name}"}


def _env():
    # the FLASHINFER_NVFP4_* variables unset, so the caller's environment does not pick a kernel
    return {"FLASHINFER_NVFP4_QUANTIZE_USE_TMA": None, "FLASHINFER_NVFP4_4OVER6": None}


def _per_token_cases(params, release, backend):
    out = []
    gs = _t(1, dtype="float32")

    def add(name, args, kwargs=None, **extra):
        out.append({"name": f"per-token {backend} {name}", "args": args,
                    "kwargs": {"per_token_activation": True, "backend": backend, **(kwargs or {})}, "kernel": None, "env": _env(), **extra})

    # the CUDA path reads a tensor scale with .item() (a fake tensor has no value) and the CuTe-DSL driver makes a
    # CUDA tensor of a float one (not on CPU): each gets the scale it can run with; the layout does not depend on it
    scale = gs if backend == "cute-dsl" else PER_TOKEN_SCALE
    for layout in LAYOUTS:
        for m in (0, 1, 8, 127, 129):
            add(f"M={m} K=64 {layout}", [_t(m, 64), scale], {"sfLayout": _layout(layout)})
        add(f"M=129 K=7168 {layout}", [_t(129, 7168), scale], {"sfLayout": _layout(layout)})
        add(f"M=127 K=96 {layout} fp16", [_t(127, 96, dtype="float16"), scale], {"sfLayout": _layout(layout)})
    add("M=8 K=64 default layout", [_t(8, 64), scale])
    add("M=8 K=64 enable_pdl=False", [_t(8, 64), scale], {"enable_pdl": False, "sfLayout": _layout("layout_linear")})
    add("M=8 K=64 expanded_idx_to_permuted_idx", [_t(8, 64), scale],
        {"expanded_idx_to_permuted_idx": _t(8, dtype="int32"), "sfLayout": _layout("layout_linear")})
    add("M=8 K=64 sf_vec_size=32", [_t(8, 64), scale], {"sf_vec_size": 32})
    if "out_scale" in params:
        add("M=8 K=64 out_scale", [_t(8, 64), scale], {"out_scale": _t(1, dtype="float32")})
    if "nvfp4_4over6" in params:
        add("M=8 K=64 nvfp4_4over6=None", [_t(8, 64), scale], {"nvfp4_4over6": None})
    if backend == "auto" or backend in release.get("per_token_backends", ()):  # else the wrapper's ValueError comes first
        add("M=128 K=64 do_shuffle", [_t(128, 64), scale], {"do_shuffle": True},
            refused="the fake refuses do_shuffle=True under torch.compile")
    if backend == "cute-dsl":
        for dtype in ("float8_e4m3fn", "float32"):
            add(f"M=8 K=64 {dtype}", [_t(8, 64, dtype=dtype), scale])
        add("[2, 8, 64]", [_t(2, 8, 64), scale])
        add("M=8 K=40", [_t(8, 40), scale])
    return out


def _per_tensor_cases(params, backend):
    out = []
    gs = _t(1, dtype="float32")

    def add(name, args, kwargs=None, **extra):
        kw = {} if backend is None else {"backend": backend}
        out.append({"name": f"per-tensor {backend} {name}", "args": args, "kwargs": {**kw, **(kwargs or {})}, "kernel": None, "env": _env(), **extra})

    for layout in LAYOUTS:
        for m in (0, 1, 8, 127, 129):
            add(f"M={m} K=64 {layout}", [_t(m, 64), gs], {"sfLayout": _layout(layout)})
        add(f"M=127 K=96 {layout} fp16", [_t(127, 96, dtype="float16"), gs], {"sfLayout": _layout(layout)})
        add(f"M=8 K=64 {layout} e4m3", [_t(8, 64, dtype="float8_e4m3fn"), gs], {"sfLayout": _layout(layout)})
        add(f"[2, 8, 7168] {layout}", [_t(2, 8, 7168), gs], {"sfLayout": _layout(layout)})
    add("M=8 K=64 defaults", [_t(8, 64), gs])
    add("M=8 K=64 sf_vec_size=32", [_t(8, 64), gs], {"sf_vec_size": 32})
    add("M=8 K=64 sf_vec_size=8", [_t(8, 64), gs], {"sf_vec_size": 8})
    add("M=8 K=64 float scale", [_t(8, 64), 0.5])
    add("M=8 K=64 expanded_idx_to_permuted_idx", [_t(8, 64), gs], {"expanded_idx_to_permuted_idx": _t(8, dtype="int32")})
    if "out_scale" in params:
        add("M=8 K=64 out_scale", [_t(8, 64), gs], {"out_scale": _t(1, dtype="float32")})
    add("M=128 K=64 do_shuffle", [_t(128, 64), gs], {"do_shuffle": True}, refused="the fake refuses do_shuffle=True under torch.compile")
    return out


def cases(params, release):
    """The cases for a release whose wrapper takes ``params`` (0.6.11+: ``per_token_activation``); the per-token
    backends are those this grid knows plus every one ``release["per_token_backends"]`` lists."""
    if "per_token_activation" not in params:
        return []
    auto = "batch_invariant" in params  # 0.7.4: "auto" is the default backend (= "cuda")
    out = []
    for backend in ("auto",) if auto else ():
        out += _per_token_cases(params, release, backend)
        out += _per_tensor_cases(params, backend)
    out += _per_tensor_cases(params, None)
    for backend in dict.fromkeys(["cuda", "cute-dsl", *release.get("per_token_backends", ())]):
        if backend in ("cuda", "cute-dsl"):
            out += _per_token_cases(params, release, backend)
        elif backend == "cake":
            out.append({"name": "per-token cake", "args": [_t(8, 64), PER_TOKEN_SCALE],
                        "kwargs": {"per_token_activation": True, "backend": "cake"}, "refused": "the fake refuses backend='cake' under torch.compile"})
        else:
            out.append({"name": f"per-token {backend}", "args": [_t(8, 64), PER_TOKEN_SCALE], "kwargs": {"per_token_activation": True, "backend": backend},
                        "unchecked": f"backend {backend!r} is new to this grid"})
    out += _per_tensor_cases(params, "cuda")
    out.append({"name": "per-tensor cute-dsl", "args": [_t(8, 64), _t(1, dtype="float32")], "kwargs": {"backend": "cute-dsl"},
                "refused": "the fake refuses the per-tensor CuTe-DSL path under torch.compile"})
    out.append({"name": "per-tensor cute-dsl sf_vec_size=32", "args": [_t(8, 64), _t(1, dtype="float32")],
                "kwargs": {"backend": "cute-dsl", "sf_vec_size": 32}, "kernel": None, "env": _env()})
    if "cake" in release.get("backends", ()):
        out.append({"name": "per-tensor cake", "args": [_t(8, 64), _t(1, dtype="float32")], "kwargs": {"backend": "cake"}, "kernel": None, "env": _env()})
    for per_token in (False, True):
        out.append({"name": f"backend=bogus per_token={per_token}", "args": [_t(8, 64), _t(1, dtype="float32")],
                    "kwargs": {"backend": "bogus", "per_token_activation": per_token}, "kernel": None, "env": _env()})
    if "batch_invariant" in params:
        out.append({"name": "batch_invariant=True", "args": [_t(8, 64), _t(1, dtype="float32")], "kwargs": {"batch_invariant": True},
                    "refused": "the fake refuses batch_invariant under torch.compile", "env": _env()})
        out.append({"name": "batch_invariant=True backend=cuda", "args": [_t(8, 64), _t(1, dtype="float32")],
                    "kwargs": {"batch_invariant": True, "backend": "cuda"}, "kernel": None, "env": _env()})
    return out


@contextlib.contextmanager
def stubs(oracle, recorder, flashinfer):
    """The CuTe-DSL drivers' kernels as ``recorder`` launches: ``grids/fp4_quantize.py``'s stubs, whose getters
    return ``(kernel, 1)``; the per-token driver's ``_get_compiled_kernel_nvfp4_per_token`` returns the kernel
    itself (``kernel_fn = ...; kernel_fn(...)``)."""
    with sibling("fp4_quantize").stubs(oracle, recorder, flashinfer):  # noqa: F821
        recorder.returns["_get_compiled_kernel_nvfp4_per_token"] = lambda *args, **kwargs: recorder.cute_dsl_kernel
        yield
