"""Case grid of ``flashinfer.fp4_quantize`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

Two paths, each allocating its outputs in Python before the kernel launch:

* the CUDA kernel (``backend="cuda"``, ``"auto"``, and every call of a release without ``backend``):
  ``fp4_quantize`` (``flashinfer/fp4_quantization.py`` until 0.6.6, ``flashinfer/quantization/
  fp4_quantization.py`` from 0.6.7) transposes a column-major input, and the kernel entry
  ``fp4_quantize_sm100`` of ``get_fp4_quantization_module`` allocates uint8 ``[..., K // 2]`` and the 1-D
  scale factors, which the wrapper reshapes (``(-1, K // sf_vec_size)`` before 0.6.8, ``(-1,
  round_up(K // sf_vec_size, 4))`` from 0.6.8) and transposes back. Cases: M in {0, 1, 127, 128, 129}, K in
  {64, 96, 7168} (K = 96: ``K // 16`` = 6 columns, padded to 8), NVFP4 and MXFP4, 128x4 / 8x4 / linear
  scales, row- and column-major and 3-D input, fp16 / bf16 / fp8 input, with and without a global scale, an
  ``sf_vec_size`` the wrapper refuses; where the release has them, ``is_global_scale_inversed``,
  ``nvfp4_4over6=None`` and ``batch_invariant`` (refused by the fake under torch.compile; with another
  backend, the wrapper's ``ValueError``).
* the CuTe-DSL drivers (``backend="cute-dsl"``, where the release data's ``backends`` lists it, 0.6.8+:
  ``_fp4_quantize_cute_dsl`` and ``nvfp4_quantize_cute_dsl`` / ``mxfp4_quantize_cute_dsl`` in
  ``flashinfer/quantization/kernels/``): recipe (NVFP4, MXFP4 and the two it refuses) x layout x input kind
  (2-D, column-major, 3-D) x M in {0, 1, 8, 127, 129} x K in {64, 192, 7168}, four dtypes, K not a multiple
  of ``sf_vec_size`` or of 64, no or a 4-element global scale, the TMA kernel's sizes (floor(log2 M) +
  floor(log2 K) >= 25), each under the ``FLASHINFER_NVFP4_QUANTIZE_USE_TMA`` / ``FLASHINFER_NVFP4_4OVER6``
  environment that picks the NVFP4 kernel and on an SM100 and an SM107 device (its own TMA crossover and
  128x4 tile kernel, 0.7.1+).

Every case sets both ``FLASHINFER_NVFP4_*`` variables (unset unless the case names them), so the caller's
environment does not choose the kernel. A backend this grid does not know is ``unchecked``.

:func:`stubs` makes the CuTe-DSL drivers run on CPU: ``cutlass`` / ``cuda`` (nvidia-cutlass-dsl,
cuda-python) as permissive stub packages where they are not installed, so the kernel modules import;
every ``_get_compiled_kernel*`` getter of those modules a recorder call returning a no-op launch, so
nothing compiles; ``flashinfer.cute_dsl.is_cute_dsl_available`` True. Where the wrapper's module has no
``_fp4_quantize_cute_dsl`` (before 0.6.8) nothing is stubbed.
"""

import contextlib

FUNCTION = "fp4_quantize"
#: the wrapper's outputs, in order (named in the fake check's messages)
OUTPUTS = ("x_q", "sf")
#: the environment that picks the NVFP4 CuTe-DSL kernel (read per call by FlashInfer and by the fake)
VARIABLES = ("FLASHINFER_NVFP4_QUANTIZE_USE_TMA", "FLASHINFER_NVFP4_4OVER6")
CUDA_BACKENDS = ("auto", "cuda")
#: the CuTe-DSL kernel modules, relative to the wrapper's package (flashinfer/quantization/kernels/)
CUTE_DSL_MODULES = ("kernels.nvfp4_quantize", "kernels.mxfp4_quantize")


#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = sibling("_tensors").tensor  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def _env(**values):
    """Both ``FLASHINFER_NVFP4_*`` variables: those given set, the other unset."""
    env = {name: None for name in VARIABLES}
    env.update({"FLASHINFER_NVFP4_" + name: value for name, value in values.items()})
    return env


LAYOUTS = {"128x4": {}, "8x4": {"is_sf_8x4_layout": True}, "linear": {"is_sf_swizzled_layout": False}}
RECIPES = {"nvfp4": {"sf_vec_size": 16}, "mxfp4": {"sf_vec_size": 32, "sf_use_ue8m0": True}}


def _cuda_cases(params, backend):
    """The CUDA kernel path, with ``backend`` passed (``None``: a release without the parameter)."""
    out = []
    label = "" if backend is None else f"{backend} "
    base = {} if backend is None else {"backend": backend}
    gs = _t(1, dtype="float32")

    def add(name, args, kwargs=None):
        out.append({"name": label + name, "args": args, "kwargs": {**base, **(kwargs or {})}, "kernel": None, "env": _env()})

    for m in (0, 1, 127, 128, 129):
        for k in (64, 7168):
            add(f"M={m} K={k} defaults", [_t(m, k), gs])
    for layout, kw in LAYOUTS.items():
        for recipe, rkw in RECIPES.items():
            scale = [gs] if recipe == "nvfp4" else []
            add(f"M=129 K=64 {recipe} {layout}", [_t(129, 64), *scale], {**rkw, **kw})
            add(f"M=127 K=96 {recipe} {layout}", [_t(127, 96), *scale], {**rkw, **kw})
            add(f"M=128 K=7168 {recipe} {layout} column-major", [_t(7168, 128, transposed=True)], {**rkw, **kw})
            add(f"M=256 K=64 {recipe} {layout} column-major", [_t(64, 256, transposed=True), *scale], {**rkw, **kw})
        add(f"[2, 8, 7168] fp16 nvfp4 {layout}", [_t(2, 8, 7168, dtype="float16"), gs], kw)
        add(f"M=8 K=64 e4m3 nvfp4 {layout}", [_t(8, 64, dtype="float8_e4m3fn"), gs], kw)
    add("M=8 K=64 no global scale", [_t(8, 64)])
    add("sf_vec_size=8", [_t(8, 64), gs], {"sf_vec_size": 8})
    add("M=8 K=64 enable_pdl=False", [_t(8, 64), gs], {"enable_pdl": False})
    if "is_global_scale_inversed" in params:
        add("M=8 K=64 is_global_scale_inversed", [_t(8, 64), gs], {"is_global_scale_inversed": True})
    if "nvfp4_4over6" in params:
        add("M=8 K=64 nvfp4_4over6=None", [_t(8, 64), gs], {"nvfp4_4over6": None})
    if "batch_invariant" in params and backend not in (None, "auto"):
        add("M=8 K=64 batch_invariant", [_t(8, 64), gs], {"batch_invariant": True})  # the wrapper's ValueError
    return out


def _cute_dsl_shapes():
    """The CuTe-DSL grid before environment and device: (name, input, kwargs, global scale, M)."""
    gs = _t(1, dtype="float32")
    scales = {"one": gs, "none": None, "per-expert": _t(4, dtype="float32")}
    recipes = [(16, False), (32, True), (16, True), (32, False)]
    layouts = [(True, False), (True, True), (False, False), (False, True)]  # (is_sf_swizzled_layout, is_sf_8x4_layout)

    def one(m, k, kind, dtype, sf_vec_size, ue8m0, swizzled, l8x4, scale="one"):
        if kind == "column-major":
            x = _t(k, m, dtype=dtype, transposed=True)
        elif kind == "3d":  # [2, M, K]: the drivers flatten the leading dimensions to 2 * M rows
            x = _t(2, m, k, dtype=dtype)
        else:
            x = _t(m, k, dtype=dtype)
        kwargs = {"sf_vec_size": sf_vec_size, "sf_use_ue8m0": ue8m0, "is_sf_swizzled_layout": swizzled, "is_sf_8x4_layout": l8x4}
        name = f"sf_vec={sf_vec_size} ue8m0={ue8m0} swizzled={swizzled} 8x4={l8x4} {kind} M={m} K={k} {dtype} gs={scale}"
        nvfp4 = sf_vec_size == 16 and not ue8m0
        return {"name": name, "input": x, "kwargs": kwargs, "scale": scales[scale], "m": m, "kind": kind, "nvfp4": nvfp4}

    found = []
    for sf_vec_size, ue8m0 in recipes:
        valid = (sf_vec_size == 16) != ue8m0  # the other two are refused before any size is read
        for swizzled, l8x4 in layouts:
            for kind in ("2d", "column-major", "3d"):
                for m in (0, 1, 8, 127, 129) if valid else (8,):
                    for k in (64, 192, 7168) if valid else (64,):
                        found.append(one(m, k, kind, "bfloat16", sf_vec_size, ue8m0, swizzled, l8x4))
        for dtype in ("float16", "float8_e4m3fn", "float32"):
            for swizzled, l8x4 in layouts[:3]:
                found.append(one(129, 64, "2d", dtype, sf_vec_size, ue8m0, swizzled, l8x4))
        for k in (40, 48):  # K not a multiple of sf_vec_size; K / 16 not a multiple of 4
            found.append(one(8, k, "2d", "bfloat16", sf_vec_size, ue8m0, True, False))
        for scale in ("none", "per-expert"):  # the NVFP4 driver wants one element
            for m in (0, 8):
                found.append(one(m, 64, "2d", "bfloat16", sf_vec_size, ue8m0, True, False, scale))
    # the NVFP4 TMA kernel: floor(log2 M) + floor(log2 K) >= 25 from M = 4096 at K = 8192 (M % 16 != 0 shows 16-row padding)
    for m, k in ((4095, 8192), (4097, 8192), (1025, 1 << 15), (1023, 1 << 16), (4097, 8704), (4097, 8200)):
        for dtype in ("bfloat16", "float8_e4m3fn"):
            for swizzled, l8x4 in layouts[:3]:
                for kind in ("2d", "3d"):
                    found.append(one(m, k, kind, dtype, 16, False, swizzled, l8x4))
    return found


ENVIRONMENTS = [
    ("", _env()),
    ("TMA=1", _env(QUANTIZE_USE_TMA="1")),
    ("TMA=0", _env(QUANTIZE_USE_TMA="0")),
    ("4OVER6=1", _env(**{"4OVER6": "1"})),
    ("4OVER6=1 TMA=1", _env(**{"4OVER6": "1", "QUANTIZE_USE_TMA": "1"})),
]
#: SM100 (every release) and SM107 (0.7.1+: its own TMA crossover and 128x4 tile kernel)
DEVICES = [("", None), ("sm107", [10, 7])]


def _cute_dsl_cases():
    out = []
    shapes = _cute_dsl_shapes()
    for device_label, device in DEVICES:
        for env_label, env in ENVIRONMENTS:
            for s in shapes:
                if env_label and not (s["nvfp4"] and s["m"] in (0, 129, 4097)):
                    continue  # the environment only reaches the NVFP4 driver
                if device is not None and not (s["m"] >= 129 and s["kind"] != "column-major"):
                    continue  # the SM107 paths need sizes
                name = " ".join(p for p in ("cute-dsl", s["name"], env_label, device_label) if p)
                case = {"name": name, "args": [s["input"], s["scale"]], "kwargs": {**s["kwargs"], "backend": "cute-dsl"}, "kernel": None,
                        "env": env}
                if device is not None:
                    case["device"] = device
                out.append(case)
    return out


def cases(params, release):
    """The cases for a release whose wrapper takes ``params``. Where ``backend`` is a parameter, every
    backend this grid knows and every one ``release["backends"]`` lists: the release data is what the
    check checks, so it never narrows the grid (a backend the wrapper refuses must be refused by the
    fake with the same message; one it takes must have the wrapper's layout)."""
    if "backend" not in params:
        return _cuda_cases(params, None)
    out = []
    for backend in dict.fromkeys([*CUDA_BACKENDS, "cute-dsl", *release.get("backends", ())]):
        if backend in CUDA_BACKENDS:
            out += _cuda_cases(params, backend)
        elif backend == "cute-dsl":
            out += _cute_dsl_cases()
        else:
            out.append({"name": f"backend={backend}", "args": [_t(8, 64), _t(1, dtype="float32")], "kwargs": {"backend": backend},
                        "unchecked": f"backend {backend!r} is new to this grid"})
    out.append({"name": "backend=bogus", "args": [_t(8, 64), _t(1, dtype="float32")], "kwargs": {"backend": "bogus"}, "kernel": None,
                "env": _env()})
    if "batch_invariant" in params:
        out.append({"name": "batch_invariant=True", "args": [_t(8, 64), _t(1, dtype="float32")], "kwargs": {"batch_invariant": True},
                    "refused": "the fake refuses batch_invariant under torch.compile", "env": _env()})
    return out


@contextlib.contextmanager
def stubs(oracle, recorder, flashinfer):
    """The CuTe-DSL drivers' kernels as ``recorder`` launches (see the module docstring)."""
    import importlib
    import inspect
    import sys

    module = sys.modules[inspect.unwrap(flashinfer.fp4_quantize).__module__]
    if not hasattr(module, "_fp4_quantize_cute_dsl"):
        yield
        return
    package = module.__name__.rsplit(".", 1)[0]
    with oracle.stub_packages(("cutlass", "cuda")):
        getters = {}
        for name in CUTE_DSL_MODULES:
            kernels = importlib.import_module(f"{package}.{name}")  # ImportError: the drivers moved, the grid needs updating
            for attr in vars(kernels):
                if attr.startswith("_get_compiled_kernel"):
                    getters[f"{kernels.__name__}:{attr}"] = getattr(recorder, attr)
                    recorder.returns[attr] = lambda *args, **kwargs: (recorder.cute_dsl_kernel, 1)
        if not getters:
            raise AttributeError(f"{package}.kernels: no _get_compiled_kernel* getter to replace; the grid needs updating")
        with oracle.replaced({"flashinfer.cute_dsl:is_cute_dsl_available": lambda: True, **getters}):
            yield
