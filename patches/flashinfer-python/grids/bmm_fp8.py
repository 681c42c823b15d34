"""Case grid of ``flashinfer.bmm_fp8`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/gemm.py`` 0.5.0 - 0.5.2, ``flashinfer/gemm/gemm_base.py`` from 0.5.3) checks its
arguments (inline before 0.5.3, release data ``inline_checks``; from 0.5.3 through ``@backend_requirement``:
capability, ``_check_bmm_fp8_problem_size``, ``_cutlass_bmm_fp8_requirement``), allocates ``out`` in Python
(``torch.empty((A.shape[0], A.shape[1], B.shape[2]), dtype=dtype)``, contiguous) unless the caller passed
one, and hands it to ``fp8_gemm_sm100``, which builds the runners and launches the chosen one through the
autotuner; it returns ``out``. The op's ``entry`` allocates the same ``out`` and the fake repeats the checks.

Cases (A ``[2, M, 64]`` e4m3, B ``[2, 64, 80]`` a transposed view, 0-d scales): M in {0, 1, 8, 127, 129} x
backend in {cublas, cutlass, auto, the default} x bf16 / fp16 x ``out=`` absent or given; e5m2 operands
(accepted by cublas and auto, refused by cutlass), a batch of one, an ``out`` of another dtype than
``dtype`` (the wrapper writes into it as given), an fp32 ``dtype`` (refused), an unknown backend, cutlass
(refused) and cublas (accepted) on an SM90 device; where the release has it, ``batch_invariant=False``.
Where the release data says ``inline_checks`` (0.5.0 - 0.5.2), cutlass on SM90 is ``unchecked``: there
``fp8_gemm_sm100`` refuses it in Python ("No valid runner found for current device sm90") and the fake
lets it through (the eager op body refuses it when it runs).

:func:`stubs`: ``_gemm.py`` beside this file (the GEMM grids' shared stand-ins: runner factories, the
autotuner, workspace caches, CUDA-version and cuDNN probes), for ``bmm_fp8`` and ``fp8_gemm_sm100``.
"""

import contextlib
import functools

FUNCTION = "bmm_fp8"
#: the wrapper's output (named in the fake check's messages)
OUTPUTS = ("out",)
BATCH, K, N = 2, 64, 80
BACKENDS = ("cublas", "cutlass", "auto", None)  # None: the parameter left at its default ("cublas")


#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = functools.partial(sibling("_tensors").tensor, dtype="float8_e4m3fn")  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def _call(m, backend=None, dtype="bfloat16", out=False, out_dtype=None, a_dtype="float8_e4m3fn", b_dtype="float8_e4m3fn", batch=BATCH,
          **extra):
    """(args, kwargs) of one call; ``out``: pass an ``out=`` of ``out_dtype`` (default ``dtype``)."""
    args = [_t(batch, m, K, dtype=a_dtype), _t(batch, N, K, dtype=b_dtype, transposed=True), _t(dtype="float32"), _t(dtype="float32"),
            {"dtype": dtype}]
    kwargs = dict(extra)
    if out:
        kwargs["out"] = _t(batch, m, N, dtype=out_dtype or dtype)
    if backend is not None:
        kwargs["backend"] = backend
    return args, kwargs


def cases(params, release):
    """The cases for a release whose wrapper takes ``params`` (``release["inline_checks"]`` changes only the
    fake's messages, which every case compares)."""
    out = []

    def add(name, m, device=None, **kw):
        args, kwargs = _call(m, **kw)
        case = {"name": name, "args": args, "kwargs": kwargs}
        if device:
            case["device"] = device
        out.append(case)

    for m in (1, 8, 127, 129):
        for backend in BACKENDS:
            for dtype in ("bfloat16", "float16"):
                for given in (False, True):
                    add(f"M={m} backend={backend or 'default'} {dtype} out={given}", m, backend=backend, dtype=dtype, out=given)
    for backend in BACKENDS:
        add(f"M=0 backend={backend or 'default'}", 0, backend=backend)
    add("e5m2 A cublas", 8, backend="cublas", a_dtype="float8_e5m2")
    add("e5m2 B auto", 8, backend="auto", b_dtype="float8_e5m2")
    add("batch of one, out", 8, backend="auto", batch=1, out=True)
    add("fp16 out for bf16", 8, backend="cublas", out=True, out_dtype="float16")
    # refusals: the wrapper's class and message, from the fake at trace time
    add("fp32 dtype cublas", 8, backend="cublas", dtype="float32")
    add("fp32 dtype auto", 8, backend="auto", dtype="float32")
    add("e5m2 A cutlass", 8, backend="cutlass", a_dtype="float8_e5m2")
    add("bogus backend", 8, backend="no-such-backend")
    add("cutlass on SM90", 8, backend="cutlass", device=[9, 0])
    if release.get("inline_checks"):
        out[-1]["unchecked"] = ("the wrapper checks inline (release data inline_checks): fp8_gemm_sm100 refuses a backend without a "
                                "runner for the device ('No valid runner found for current device sm90'), which the fake does not mirror")
    add("cublas on SM90", 8, backend="cublas", device=[9, 0])
    if "batch_invariant" in params:
        add("batch_invariant=False", 8, backend="cublas", batch_invariant=False)
    return out


@contextlib.contextmanager
def stubs(oracle, recorder, flashinfer):
    """The GEMM grids' shared stand-ins (``_gemm.py``) for ``bmm_fp8`` and ``fp8_gemm_sm100``."""
    import inspect
    import sys

    gb = sys.modules[inspect.unwrap(flashinfer.bmm_fp8).__module__]
    with sibling("_gemm").gemm_stubs(  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid
        oracle, recorder, gb, [flashinfer.bmm_fp8, *[getattr(gb, n) for n in ("fp8_gemm_sm100",) if hasattr(gb, n)]]):
        yield
