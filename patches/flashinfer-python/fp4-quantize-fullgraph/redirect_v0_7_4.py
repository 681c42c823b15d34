if _fp4patch_is_compiling():
    # Only "omitted" and None cross the custom-op schema (as -1 / 0); a config object cannot.
    if nvfp4_4over6 is _UNSET:
        _fp4patch_nvfp4_4over6 = -1
    elif nvfp4_4over6 is None:
        _fp4patch_nvfp4_4over6 = 0
    else:
        raise TypeError(
            "fp4patch: fp4_quantize(nvfp4_4over6=<config>) cannot be traced by torch.compile: "
            "a NVFP44Over6Config cannot cross the fp4patch::fp4_quantize custom-op schema; "
            "omit nvfp4_4over6 or pass None, or call fp4_quantize outside the compiled region"
        )
    return _fp4patch_fp4_quantize_op(
        input=input,
        global_scale=global_scale,
        sf_vec_size=sf_vec_size,
        sf_use_ue8m0=sf_use_ue8m0,
        is_sf_swizzled_layout=is_sf_swizzled_layout,
        is_sf_8x4_layout=is_sf_8x4_layout,
        is_global_scale_inversed=is_global_scale_inversed,
        enable_pdl=enable_pdl,
        backend=backend,
        nvfp4_4over6=_fp4patch_nvfp4_4over6,
        batch_invariant=batch_invariant,
    )
