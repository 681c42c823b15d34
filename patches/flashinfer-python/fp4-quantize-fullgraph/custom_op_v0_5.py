def _fp4patch_register_fp4_quantize_op():
    # fp4patch fp4-quantize-fullgraph, signature of FlashInfer 0.5.0 .. 0.6.7.post3.
    # Our own custom op `fp4patch::fp4_quantize` (never upstream's `flashinfer::fp4_quantize`), so
    # that fp4_quantize traces as one opaque node under torch.compile(fullgraph=True). Only the
    # registration runs at import; the JIT module still loads on the first real call. Without
    # torch.library.custom_op this returns None and fp4_quantize behaves exactly as before.
    from typing import Optional, Tuple

    _library = getattr(torch, "library", None)
    _compiler = getattr(torch, "compiler", None)
    if (
        getattr(_library, "custom_op", None) is None
        or getattr(_compiler, "is_compiling", None) is None
    ):
        return None
    try:  # already registered in this process (module reload, second copy): reuse it
        return torch.ops.fp4patch.fp4_quantize.default
    except (AttributeError, RuntimeError):
        pass

    @_library.custom_op("fp4patch::fp4_quantize", mutates_args=())
    def _fp4patch_fp4_quantize(
        input: torch.Tensor,
        global_scale: Optional[torch.Tensor] = None,
        sf_vec_size: int = 16,
        sf_use_ue8m0: bool = False,
        is_sf_swizzled_layout: bool = True,
        is_sf_8x4_layout: bool = False,
        enable_pdl: Optional[bool] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        # Runs the unpatched eager path (not compiling here), every argument by keyword.
        x_q, sf = fp4_quantize(
            input=input,
            global_scale=global_scale,
            sf_vec_size=sf_vec_size,
            sf_use_ue8m0=sf_use_ue8m0,
            is_sf_swizzled_layout=is_sf_swizzled_layout,
            is_sf_8x4_layout=is_sf_8x4_layout,
            enable_pdl=enable_pdl,
        )
        return x_q, sf

    @_fp4patch_fp4_quantize.register_fake
    def _fp4patch_fp4_quantize_fake(
        input: torch.Tensor,
        global_scale: Optional[torch.Tensor] = None,
        sf_vec_size: int = 16,
        sf_use_ue8m0: bool = False,
        is_sf_swizzled_layout: bool = True,
        is_sf_8x4_layout: bool = False,
        enable_pdl: Optional[bool] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        # Mirrors the Python wrapper: column-major input is quantized transposed and the outputs
        # come back transposed; sf.reshape((-1, K // sf_vec_size)) for every layout (the swizzled padding folds into rows).
        if sf_vec_size != 16 and sf_vec_size != 32:
            raise NotImplementedError("sf_vec_size can only be 16 or 32")
        shape = list(input.shape)
        is_column_major = input.stride(-2) == 1
        if is_column_major:
            shape[-2], shape[-1] = shape[-1], shape[-2]
        k = shape[-1]
        if k % sf_vec_size != 0:
            raise AssertionError(
                "fp4_quantize: K=%s is not a multiple of sf_vec_size=%s" % (k, sf_vec_size)
            )
        m = 1
        for d in shape[:-1]:
            m = m * d
        cols = k // sf_vec_size
        if is_sf_swizzled_layout:
            row = 8 if is_sf_8x4_layout else 128
            padded_rows = (m + row - 1) // row * row
            padded_cols = (cols + 3) // 4 * 4
            if padded_cols % cols == 0:
                sf_shape = [padded_rows * (padded_cols // cols), cols]
            elif (padded_rows * padded_cols) % cols == 0:
                sf_shape = [padded_rows * padded_cols // cols, cols]
            else:
                raise RuntimeError(
                    "shape '[-1, %s]' is invalid for input of size %s"
                    % (cols, padded_rows * padded_cols)
                )
        else:
            sf_shape = [m, cols]
        q_shape = shape[:-1] + [k // 2]
        q_stride = [1] * len(q_shape)
        for i in range(len(q_shape) - 2, -1, -1):
            q_stride[i] = q_stride[i + 1] * q_shape[i + 1]
        sf_stride = [sf_shape[1], 1]
        if is_column_major:
            for dims in (q_shape, q_stride, sf_shape, sf_stride):
                dims[-2], dims[-1] = dims[-1], dims[-2]
        x_q = torch.empty_strided(q_shape, q_stride, dtype=torch.uint8, device=input.device)
        sf = torch.empty_strided(sf_shape, sf_stride, dtype=torch.uint8, device=input.device)
        return x_q, sf

    return torch.ops.fp4patch.fp4_quantize.default


_fp4patch_fp4_quantize_op = _fp4patch_register_fp4_quantize_op()
# The one check an eager fp4_quantize call pays: torch.compiler.is_compiling itself (Dynamo folds it
# to True while tracing), bound once so no attribute lookups run per call; bool() is False.
_fp4patch_is_compiling = torch.compiler.is_compiling if _fp4patch_fp4_quantize_op is not None else bool


def _fp4patch_bypass_api_wrappers(fn):
    # Dynamo cannot trace @flashinfer_api's logging wrapper (FLASHINFER_LOGLEVEL > 0) nor the
    # fi_trace auto-dump wrapper (FLASHINFER_TRACE_DUMP=1). While compiling, call the undecorated
    # fp4_quantize, whose first statements redirect to the custom op; eager calls still go through
    # the wrappers, so logging is unchanged. Without wrappers (the default log level) fn is returned.
    inner = fn
    while getattr(inner, "__wrapped__", None) is not None:
        inner = inner.__wrapped__
    if inner is fn:
        return fn
    import functools

    @functools.wraps(fn)
    def _fp4patch_fp4_quantize_entry(*args, **kwargs):
        if torch.compiler.is_compiling():
            return inner(*args, **kwargs)
        return fn(*args, **kwargs)

    return _fp4patch_fp4_quantize_entry


if _fp4patch_fp4_quantize_op is not None:
    fp4_quantize = _fp4patch_bypass_api_wrappers(fp4_quantize)
