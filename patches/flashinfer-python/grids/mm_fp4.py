"""Case grid of ``flashinfer.mm_fp4`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/gemm/gemm_base.py``, 0.6.0 - 0.7.4) is decorated by ``@backend_requirement``,
whose capability check, common check (``_check_mm_fp4_problem_size``) and per-backend checks
(``_trtllm_gemm_fp4_requirement``, ``_cutlass_gemm_fp4_requirement``, ...) run first; then it allocates
``out`` in Python (``torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype)``, contiguous) unless the caller
passed one, builds the backend's runner and launches it through the autotuner; it returns ``out``. The
op's ``entry`` allocates the same ``out`` and the fake repeats the checks on the arguments alone.

Cases (A ``[M, K/2]`` packed FP4, B ``[K/2, N]`` a transposed view, 128x4 scales, K = N = 256): M in {0, 1,
8, 127, 129} x backend in {cutlass, trtllm, auto, the default} x ``out=`` absent or given; 8x4 scales, mixed
and uint8 scale dtypes, fp16 output, ``alpha`` absent / 0-d / one element, a ``float4_e2m1fn_x2`` operand,
a transposed ``out``; the refusals with the wrapper's messages (8x4 with cutlass, trtllm's fp16 output and
MXFP4, the block sizes, an fp32 output, alpha's dtype and size, the scale and operand dtypes, an unknown
backend, cutlass on an SM90 device); where the release has them ``enable_pdl=False`` and, where its data
names per-token backends (``per_token_alpha_backends``, 0.7.1+), an alpha of one scale per row, accepted by
``auto`` and refused by cutlass with the release's message (``per_token_alpha_only``); a non-contiguous
``out`` with cutlass is refused where ``cutlass_contiguous_out`` (0.6.16+).

Backends the fake does not mirror (``cudnn``, ``cute-dsl``, ``cutedsl_low_latency``, ``b12x``, ``cake``:
their refusals depend on installed libraries and surface when the op runs) are not called, except cuDNN,
which :func:`stubs` makes unavailable (see there), as on a machine without it.

:func:`stubs`: the autotuner picks the first runner with the default tactic (``AutoTuner.choose_one``; the
runner's own Python then launches into the recorder), the workspace cache returns a fresh buffer
(``_get_cache_buf`` 0.6.x, ``_get_stream_cache_buf`` 0.7.x: the stream-keyed cache needs a CUDA stream), the
CUDA-version probe says 12.9 (``get_cuda_version``, an nvcc subprocess), and the cuDNN probes
(``_check_cudnn_fp4_availability`` / ``_check_cudnn_availability``) raise ``ValueError("... no cuDNN
here")``, which ``backend="auto"`` skips as the wrapper's heuristic does for an unavailable backend.
"""

import contextlib
import functools

FUNCTION = "mm_fp4"
#: the wrapper's output (named in the fake check's messages)
OUTPUTS = ("out",)
K = N = 256
BACKENDS = ("cutlass", "trtllm", "auto", None)  # None: the parameter left at its default ("auto")


#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = functools.partial(sibling("_tensors").tensor, dtype="uint8")  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def _pad(x, y):
    return (x + y - 1) // y * y


def _call(m, backend=None, out=None, a_dtype="uint8", sf_dtypes=("float8_e4m3fn", "float8_e4m3fn"), alpha="0d",
          alpha_dtype="float32", out_dtype="bfloat16", block_size=16, use_8x4=False, use_nvfp4=True, **extra):
    """(args, kwargs) of one call: ``out`` None / "contiguous" / "transposed"; ``alpha`` "none", "0d", "1",
    "m" (one per row) or "3"."""
    rows = 8 if use_8x4 else 128
    a = _t(m, K // 2, dtype=a_dtype)
    b = _t(N, K // 2, dtype=a_dtype, transposed=True)
    a_sf = _t(_pad(m, rows), _pad(K // block_size, 4), dtype=sf_dtypes[0])
    b_sf = _t(_pad(N, 128), _pad(K // block_size, 4), dtype=sf_dtypes[1], transposed=True)
    alphas = {"none": None, "0d": _t(dtype=alpha_dtype), "1": _t(1, dtype=alpha_dtype), "m": _t(m, dtype=alpha_dtype),
              "3": _t(3, dtype=alpha_dtype)}
    kwargs = {"alpha": alphas[alpha], "out_dtype": {"dtype": out_dtype}, "block_size": block_size, "use_8x4_sf_layout": use_8x4,
              "use_nvfp4": use_nvfp4, **extra}
    if out == "contiguous":
        kwargs["out"] = _t(m, N, dtype=out_dtype)
    elif out == "transposed":
        kwargs["out"] = _t(N, m, dtype=out_dtype, transposed=True)
    if backend is not None:
        kwargs["backend"] = backend
    return [a, b, a_sf, b_sf], kwargs


def cases(params, release):
    """The cases for a release whose wrapper takes ``params``; ``release``: ``per_token_alpha_backends``,
    ``per_token_alpha_only`` and ``cutlass_contiguous_out`` (the op source's RELEASE, ops/mm_fp4.py)."""
    out = []

    def add(name, m, device=None, **kw):
        args, kwargs = _call(m, **kw)
        case = {"name": name, "args": args, "kwargs": kwargs}
        if device:
            case["device"] = device
        out.append(case)

    for m in (0, 1, 8, 127, 129):
        for backend in BACKENDS:
            for given in (None, "contiguous"):
                add(f"M={m} backend={backend or 'default'} out={given or 'none'}", m, backend=backend, out=given)
    add("8x4 trtllm", 8, backend="trtllm", use_8x4=True)
    add("8x4 trtllm M=129 out", 129, backend="trtllm", use_8x4=True, out="contiguous")
    add("uint8 / e4m3 scales", 8, backend="cutlass", sf_dtypes=("uint8", "float8_e4m3fn"))
    add("uint8 scales fp16 out", 8, backend="cutlass", sf_dtypes=("uint8", "uint8"), out_dtype="float16")
    add("auto alpha of 1", 8, backend="auto", alpha="1")
    add("cutlass alpha=None", 8, backend="cutlass", alpha="none")
    add("cutlass float4_e2m1fn_x2 operands", 8, backend="cutlass", a_dtype="float4_e2m1fn_x2")
    add("trtllm transposed out", 8, backend="trtllm", out="transposed")
    # refusals: the wrapper's class and message, from the fake at trace time
    add("cutlass 8x4", 8, backend="cutlass", use_8x4=True)
    add("trtllm fp16 out", 8, backend="trtllm", out_dtype="float16")
    add("trtllm mxfp4", 8, backend="trtllm", use_nvfp4=False, block_size=32)
    add("cutlass mxfp4", 8, backend="cutlass", use_nvfp4=False, block_size=32)
    add("nvfp4 block_size=32", 8, backend="cutlass", block_size=32)
    add("auto fp32 out", 8, backend="auto", out_dtype="float32")
    add("fp16 alpha", 8, backend="cutlass", alpha_dtype="float16")
    add("alpha of 3", 8, backend="cutlass", alpha="3")
    add("cutlass alpha per row", 8, backend="cutlass", alpha="m")
    add("fp32 a scale", 8, backend="cutlass", sf_dtypes=("float32", "uint8"))
    add("int8 operands", 8, backend="cutlass", a_dtype="int8")
    add("bogus backend", 8, backend="no-such-backend")
    add("cutlass on SM90", 8, backend="cutlass", device=[9, 0])
    if not release.get("cutlass_contiguous_out"):
        add("cutlass transposed out", 8, backend="cutlass", out="transposed")
    else:
        add("cutlass transposed out (refused)", 8, backend="cutlass", out="transposed")
    if "enable_pdl" in params:
        add("cutlass enable_pdl=False", 8, backend="cutlass", enable_pdl=False)
    # per-token alpha (taken by some backends from 0.7.1, release data per_token_alpha_backends): tried on
    # every release, since that data is what the check checks (a release that starts to take it must not
    # keep a fake that refuses it)
    add("auto alpha per row M=1", 1, backend="auto", alpha="m")
    add("cutlass alpha per row M=129", 129, backend="cutlass", alpha="m")
    add("trtllm alpha per row", 8, backend="trtllm", alpha="m")
    return out


@contextlib.contextmanager
def stubs(oracle, recorder, flashinfer):
    """The runner factories, autotuner, workspace caches, CUDA-version and cuDNN probes (module docstring)."""
    import inspect
    import sys

    gb = sys.modules[inspect.unwrap(flashinfer.mm_fp4).__module__]
    with _gemm().gemm_stubs(oracle, recorder, gb, [flashinfer.mm_fp4]):
        yield


def _gemm():
    """``_gemm.py`` beside this file (``fp4patch.probes.oracle.load_grid`` gives ``sibling``)."""
    return sibling("_gemm")  # noqa: F821
