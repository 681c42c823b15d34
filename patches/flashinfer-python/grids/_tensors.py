"""How a case grid writes its values (see docs/spec-format.md, "Case grids"): shared by every grid.

A grid reaches it as ``sibling("_tensors")`` (:func:`fp4patch.probes.oracle.load_grid` gives every grid
``sibling``). Standard library only: grids run where fp4patch is not installed.
"""


def tensor(*shape, dtype="bfloat16", transposed=False, device="cuda"):
    """A fake CUDA tensor of ``shape`` (ints, or names a grid resolves), dtype by torch name;
    ``transposed``: a column-major view of the last two dims (``{"T": True}``); ``device="cpu"``: a fake
    CPU tensor instead (``{"device": "cpu"}``, for a wrapper's host path)."""
    t = {"t": list(shape), "dtype": dtype}
    if transposed:
        t["T"] = True
    if device != "cuda":
        t["device"] = device
    return t


def collector():
    """``(cases, add)``: an empty case list and ``add(name, args, kwargs=None, kernel=None)``, which appends
    one case to it (``kernel``: the C++ kernel's message for a call only the kernel refuses)."""
    cases = []

    def add(name, args, kwargs=None, kernel=None):
        cases.append({"name": name, "args": args, "kwargs": kwargs or {}, "kernel": kernel})

    return cases, add
