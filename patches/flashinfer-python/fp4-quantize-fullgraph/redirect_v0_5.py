if _fp4patch_is_compiling():
    return _fp4patch_fp4_quantize_op(
        input=input,
        global_scale=global_scale,
        sf_vec_size=sf_vec_size,
        sf_use_ue8m0=sf_use_ue8m0,
        is_sf_swizzled_layout=is_sf_swizzled_layout,
        is_sf_8x4_layout=is_sf_8x4_layout,
        enable_pdl=enable_pdl,
    )
