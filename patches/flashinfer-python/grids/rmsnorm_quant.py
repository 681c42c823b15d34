"""Case grid of ``flashinfer.rmsnorm_quant`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/norm/__init__.py``, public from 0.6.7) normalizes ``scale``
(``_normalize_scale_tensor``: a float becomes a float32 (1,) tensor, a 0-d tensor a view of shape (1,),
anything else a ``ValueError``) and launches the CUDA JIT kernel (``get_norm_module().rmsnorm_quant``) or,
where the CuTe DSL is installed, ``rmsnorm_quant_cute``; it writes into the caller's ``out`` and returns
None. Nothing is allocated in Python, so the cases compare the return (None, both sides) and the refusals.

Cases: M in {0, 1, 8, 127, 129} (bf16 input, e4m3 ``out``), an e5m2 ``out`` and fp16 input, ``eps`` given,
``enable_pdl`` True / False, a 0-d ``scale``, a float ``scale`` (the deprecated form; ``entry`` makes the
tensor), and a ``scale`` of shape (2,) and (1, 1) (refused by ``_normalize_scale_tensor``).
"""

FUNCTION = "rmsnorm_quant"
HIDDEN = 256

#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = sibling("_tensors").tensor  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def _args(m, dtype="bfloat16", out_dtype="float8_e4m3fn", scale=None):
    """``(out, input, weight, scale)`` for ``m`` tokens."""
    return [_t(m, HIDDEN, dtype=out_dtype), _t(m, HIDDEN, dtype=dtype), _t(HIDDEN, dtype=dtype), _t(1, dtype="float32") if scale is None else scale]


def cases(params, release):
    """The cases for a release whose wrapper takes ``params`` (one signature in every release that has it)."""
    out, add = sibling("_tensors").collector()  # noqa: F821
    for m in (0, 1, 8, 127, 129):
        add(f"M={m} bf16 -> e4m3", _args(m))
    add("M=8 fp16 -> e5m2", _args(8, dtype="float16", out_dtype="float8_e5m2"))
    add("eps=1e-5", _args(8), {"eps": 1e-5})
    add("enable_pdl=True", _args(8), {"enable_pdl": True})
    add("enable_pdl=False", _args(8), {"enable_pdl": False})
    add("0-d scale", _args(8, scale=_t(dtype="float32")))
    add("float scale", _args(8, scale=0.5))
    add("scale of shape (2,)", _args(8, scale=_t(2, dtype="float32")))
    add("scale of shape (1, 1)", _args(8, scale=_t(1, 1, dtype="float32")))
    return out
