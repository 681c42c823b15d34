"""Stand-ins shared by the GEMM case grids (``mm_fp4.py``, ``bmm_fp8.py``): not a grid (no ``FUNCTION``).

Loaded by path from those grids' ``stubs`` (the probe loads grids by path, so there is no package to
import from); standard library only at module level, like a grid.
"""

import contextlib
import inspect


def gemm_stubs(oracle, recorder, gb, callers):
    """The stand-ins a GEMM wrapper of ``gb`` (``flashinfer.gemm.gemm_base``) needs on CPU (a context manager).

    Every ``get_*_module*`` loader of ``gb`` returns ``recorder`` (the loaders generate JIT sources from
    templates and download cubins before ``build_and_load``, which ``oracle.jit_modules_replaced`` replaces
    too late), every ``_*_runner*`` factory of ``gb`` and every ``<module>.<name>_runner(...)`` the wrapper
    or the functions of ``callers`` call
    returns a recorded launch named after it (so calling the runner is the kernel launch), the
    autotuner picks the first runner with tactic -1, the workspace caches hand out a fresh buffer, the
    CUDA version is 12.9 and cuDNN is not available (``ValueError``). The CuTe DSL availability check
    (``_check_cute_dsl_availability``, 0.6.6+, run by the cute-dsl and b12x requirements even under
    ``backend="auto"``) passes, as on any install of those releases: ``nvidia-cutlass-dsl`` is in their
    Requires-Dist, though not on this machine (without it, ``auto`` raises "CuTe DSL is not available." on
    0.6.15.post1). Shared with the ``bmm_fp8`` grid.
    """
    import re

    import torch

    def no_cudnn(*args, **kwargs):
        raise ValueError("fp4patch fake check: no cuDNN here")

    targets = {}
    for name, value in vars(gb).items():
        if not callable(value) or isinstance(value, type):
            continue
        if name.startswith("get_") and "_module" in name:  # get_gemm_module, get_gemm_sm100_module_cutlass_fp8
            targets[f"{gb.__name__}:{name}"] = lambda *a, **k: recorder
        elif name.startswith("_") and "_runner" in name:  # _cudnn_gemm_fp8_runner, _cute_dsl_fp8_gemm_runner_sm107
            targets[f"{gb.__name__}:{name}"] = (lambda n: lambda *a, **k: getattr(recorder, n))(name)
    factories = {n for fn in callers for n in re.findall(r"\.(\w+_runner)\(", inspect.getsource(inspect.unwrap(fn)))}
    for name in ("_get_cache_buf", "_get_stream_cache_buf"):
        if hasattr(gb, name):
            targets[f"{gb.__name__}:{name}"] = lambda name, size, device, *a, **k: torch.empty(size, dtype=torch.uint8, device=device)
    for name in ("_check_cudnn_fp4_availability", "_check_cudnn_availability"):
        if hasattr(gb, name):
            targets[f"{gb.__name__}:{name}"] = no_cudnn
    if hasattr(gb, "_check_cute_dsl_availability"):
        targets[f"{gb.__name__}:_check_cute_dsl_availability"] = lambda *a, **k: None
    if hasattr(gb, "get_cuda_version"):
        from packaging.version import Version

        targets[f"{gb.__name__}:get_cuda_version"] = lambda *a, **k: Version("12.9")
    targets[f"{gb.__name__}:AutoTuner.choose_one"] = lambda self, name, runners, *a, **k: (runners[0], -1)
    saved = {n: recorder.returns.get(n) for n in factories}
    for n in factories:
        recorder.returns[n] = (lambda n: lambda *a, **k: getattr(recorder, n))(n)
    return _restoring(recorder, saved, oracle.replaced(targets))


@contextlib.contextmanager
def _restoring(recorder, saved, inner):
    try:
        with inner:
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                recorder.returns.pop(name, None)
            else:
                recorder.returns[name] = value
