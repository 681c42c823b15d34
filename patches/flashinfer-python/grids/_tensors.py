"""How a case grid writes its values (see docs/spec-format.md, "Case grids"): shared by every grid.

A grid reaches it as ``sibling("_tensors")`` (:func:`fp4patch.oracle.load_grid` gives every grid
``sibling``). Standard library only: grids run where fp4patch is not installed.
"""


def tensor(*shape, dtype="bfloat16", transposed=False):
    """A fake CUDA tensor of ``shape`` (ints, or names a grid resolves), dtype by torch name;
    ``transposed``: a column-major view of the last two dims (``{"T": True}``)."""
    t = {"t": list(shape), "dtype": dtype}
    if transposed:
        t["T"] = True
    return t
