"""Stand-ins shared by the GEMM case grids (``mm_fp4.py``, ``bmm_fp8.py``): not a grid (no ``FUNCTION``).

Loaded by path from those grids' ``stubs`` (the probe loads grids by path, so there is no package to
import from); standard library only at module level, like a grid.
"""

import contextlib
import functools
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
    return _restoring(recorder, saved, _cute_dsl_installed(callers, oracle.replaced(targets)))


def _cute_dsl_installed(callers, inner):
    """Before 0.6.6 (no ``_check_cute_dsl_availability``) a cute-dsl requirement checks CuTe DSL itself
    (``from flashinfer.cute_dsl.utils import is_cute_dsl_available``, a module that imports ``cutlass``) and
    raises ``RuntimeError("CuTe DSL is not available.")`` without it, which ``backend="auto"``'s
    ``suitable_auto_backends`` does not skip (it skips a ``ValueError``): 0.6.5's ``mm_fp4(backend="auto")``
    raises on a machine without ``nvidia-cutlass-dsl``, a Requires-Dist of that release. As on any install of
    it, each requirement of the callers' ``@backend_requirement`` that says so passes (its other checks run
    first and still refuse). The requirements are in the decorator's closure (``backend_checks``), read at call
    time, so the dict is changed in place and restored after ``inner``."""
    changed = []
    for checks in {id(d): d for fn in callers for d in _closure_dicts(fn, depth=3)}.values():
        for backend, check in list(checks.items()):
            if "CuTe DSL is not available" in _source(check):
                changed.append((checks, backend, check))
                checks[backend] = _installed(check)
    return _restoring_checks(changed, inner)


def _closure_dicts(fn, depth):
    """The dicts in the closure cells of ``fn`` and of the functions its cells hold (``depth`` levels): the
    decorator's ``backend_checks`` is referenced by its nested helpers, not always by the wrapper itself."""
    found = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, dict):
            found.append(value)
        elif depth > 1 and callable(value) and hasattr(value, "__closure__"):
            found.extend(_closure_dicts(value, depth - 1))
    return found


def _source(fn):
    import inspect

    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def _installed(check):
    """``check``, passing where it would say CuTe DSL is missing; its attributes kept (``@supported_compute_capability``
    gives a requirement ``is_compute_capability_supported``, which the decorator reads)."""

    @functools.wraps(check)
    def passes_with_cute_dsl(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except RuntimeError as exc:
            if str(exc) != "CuTe DSL is not available.":
                raise
            return True

    return passes_with_cute_dsl


@contextlib.contextmanager
def _restoring_checks(changed, inner):
    try:
        with inner:
            yield
    finally:
        for checks, backend, check in changed:
            checks[backend] = check


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
