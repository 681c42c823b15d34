"""Shared helpers of the GEMM op sources whose custom op writes into ``out`` (``bmm_fp8``, ``mm_fp4``).

Not an op source: the renderer (``fp4patch/ops/render.py``) copies the functions an op source imports from
here into its rendered block, so nothing installed imports this file.
"""


def _require_out(out, function):
    """ValueError when the op is called without ``out`` (``entry`` always allocates it)."""
    if out is None:
        raise ValueError(f"fp4patch: the {function} custom op needs out= (the compiled call allocates it); call flashinfer.{function}")


def _check_backend_supported(wrapper, function, backend, device):
    """BackendSupportedError, as the wrapper raises it, for a backend the device does not support."""
    # flashinfer/utils.py @backend_requirement (0.5.3+), asked of the wrapper's own is_backend_supported.
    from flashinfer.utils import BackendSupportedError, get_compute_capability

    major, minor = get_compute_capability(device)
    capability = major * 10 + minor
    if not wrapper.is_backend_supported(backend, capability):
        extra = f" with capability {capability}" if capability else ""
        raise BackendSupportedError(f"{function} does not support backend '{backend}'{extra}")


def _copy_into_out(result, out):
    """The eager body's end: ``out`` holds the wrapper's result (the wrapper returns ``out`` itself, or a fresh tensor)."""
    if result is not None and result is not out:
        out.copy_(result)
