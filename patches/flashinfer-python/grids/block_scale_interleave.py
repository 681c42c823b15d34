"""Case grid of ``flashinfer.block_scale_interleave`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/fp4_quantization.py`` until 0.6.6, ``flashinfer/quantization/fp4_quantization.py`` from
0.6.7) asserts the dtype and calls ``block_scale_interleave_sm100`` of ``get_fp4_quantization_module``, which
allocates a flat ``[num_experts * round_up(rows, 128) * round_up(cols, 4)]`` in Python (uint8 before 0.6.0, the
input's dtype after) and launches the kernel into it; from 0.7.2.post1 a caller's ``out=`` is checked (a
``ValueError``) and written instead (``block_scale_interleave_sm100_out``), and the wrapper returns it.

Cases: rows in {0, 1, 8, 127, 129} of a [rows, 7168 // 16] uint8 input (an activation's or a weight's scales), a
3-D [experts, rows, cols] input, columns not a multiple of 4, bfloat16 where the release accepts it (else the
wrapper's AssertionError, as for float32 on every release), a 1-D input (the wrapper's IndexError); the C++
entry's refusals of a non-contiguous input and of a 4-D one carry its message. With ``out`` (where the release
has it): the right buffer (returned, the caller's own tensor) and buffers of the wrong size, dtype or layout
(the wrapper's ValueError).
"""

FUNCTION = "block_scale_interleave"

#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = sibling("_tensors").tensor  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def _size(rows, cols, experts=1):
    return experts * (rows + 127) // 128 * 128 * ((cols + 3) // 4 * 4)


def cases(params, release):
    """The cases for a release whose wrapper takes ``params`` (``release``: the dtypes it asserts)."""
    out, add = sibling("_tensors").collector()  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid
    for m in (0, 1, 8, 127, 129):
        add(f"M={m} uint8 [M, 448]", [_t(m, 448, dtype="uint8")])
    add("3-D [4, 129, 448] uint8", [_t(4, 129, 448, dtype="uint8")])
    add("3-D [2, 0, 16] uint8", [_t(2, 0, 16, dtype="uint8")])
    add("cols=6 (padded to 8)", [_t(8, 6, dtype="uint8")])
    add("M=129 bfloat16", [_t(129, 448)])  # refused where the release asserts uint8 alone
    add("float32 input", [_t(8, 448, dtype="float32")])
    add("1-D input", [_t(448, dtype="uint8")])
    add("non-contiguous input", [_t(448, 8, dtype="uint8", transposed=True)], kernel="blockScale must be contiguous")
    add("4-D input", [_t(2, 2, 8, 448, dtype="uint8")], kernel="Block Scale should be 2D or 3D tensor.")
    if "out" in params:
        add("out= given, M=129", [_t(129, 448, dtype="uint8")], {"out": _t(_size(129, 448), dtype="uint8")})
        add("out= given, 3-D", [_t(2, 8, 16, dtype="uint8")], {"out": _t(_size(8, 16, 2), dtype="uint8")})
        add("out= of the wrong size", [_t(8, 448, dtype="uint8")], {"out": _t(8 * 448, dtype="uint8")})
        add("out= of the wrong dtype", [_t(8, 448, dtype="uint8")], {"out": _t(_size(8, 448), dtype="bfloat16")})
        add("out= not flat", [_t(8, 448, dtype="uint8")], {"out": _t(128, 448, dtype="uint8")})
    return out
