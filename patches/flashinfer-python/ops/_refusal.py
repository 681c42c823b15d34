"""Shared helpers of the op sources: fp4patch's refusal of a call whose outputs a fake does not mirror (``_refuse``),
and FlashInfer's own error raised from a fake as the first line of a compile error (``_first_line``; for the
``nvfp4_4over6`` codes of ``_nvfp4_4over6.py``: ``_check_nvfp4_4over6``).

Not an op source: the renderer (``fp4patch/ops/render.py``) copies ``_refuse`` / ``_first_line`` into the rendered block of
an op source that imports it (``from ._refusal import _refuse``), so nothing installed imports this file.

Why ``torch._dynamo.exc.Unsupported``: Dynamo runs a custom op's fake inside ``get_fake_value``, which
wraps every other exception (``NotImplementedError`` as "NotImplementedError/UnsupportedFakeTensorException
when running FX node", any other as "RuntimeError when making fake tensor call") and puts the fake's own
message in the middle of its explanation; an ``Unsupported`` it re-raises as it is. So under
``torch.compile(fullgraph=True)`` the first line the user sees is fp4patch's message, and without
``fullgraph`` it is a graph break: the call runs eagerly, outside the graph, as it would unpatched.
"""


def _refuse(call, why):
    """Raise fp4patch's one-line refusal of ``call`` (e.g. ``"mxfp8_quantize(backend='x')"``) on this release.

    The message starts ``fp4patch:``, names the call's value and the installed FlashInfer release and says
    why (``why``); it is an ``Unsupported`` (``NotImplementedError`` where torch has no Dynamo).
    """
    import sys

    release = getattr(sys.modules.get("flashinfer"), "__version__", "(version unknown)")
    message = (
        f"fp4patch: {call} is not supported under torch.compile on FlashInfer {release} ({why}); "
        "call it outside the compiled region"
    )
    try:
        from torch._dynamo.exc import Unsupported
    except ImportError:  # a torch without Dynamo: nothing wraps the message
        raise NotImplementedError(message) from None
    raise Unsupported(message)


def _first_line(error_class, message):
    """Raise FlashInfer's own error (``error_class(message)``, e.g. a ``ValueError`` the wrapper raises for the same
    arguments) from a fake so that its message is the first line under ``torch.compile(fullgraph=True)``.

    Dynamo wraps any other exception a fake raises ("RuntimeError when making fake tensor call", the message in
    the middle) and re-raises an ``Unsupported`` as it is, so the exception is of a class derived from both
    ``Unsupported`` and ``error_class``, named as ``error_class``: ``except ValueError`` still catches it, the
    fake check compares it as a ``ValueError``, and without ``fullgraph`` it is a graph break, so the call runs
    eagerly and the wrapper raises the real error. Where torch has no Dynamo, ``error_class(message)`` itself.
    """
    try:
        from torch._dynamo.exc import Unsupported
    except ImportError:  # a torch without Dynamo: nothing wraps the message
        raise error_class(message) from None
    raise type(error_class.__name__, (Unsupported, error_class), {"__module__": error_class.__module__})(message)


def _check_nvfp4_4over6(code, function):
    """The fake's side of ``nvfp4_4over6`` (the codes of ``ops/_nvfp4_4over6.py``), each as the compile error's
    first line: -2 (a ``NVFP44Over6Config``, which cannot cross the schema) is fp4patch's refusal (``_refuse``);
    -3 (a value that is neither a config nor ``None``) the TypeError of FlashInfer's ``resolve_nvfp4_4over6``
    (0.7.1 .. 0.7.4, ``flashinfer/quantization/nvfp4_quantization_utils.py``; the value's type does not cross);
    any code but -1 / 0 (the op called directly) a ValueError. A fake calls it where the wrapper resolves the
    argument, after FlashInfer's own checks that an explicit value already fails."""
    if code == -2:
        _refuse(
            f"{function}(nvfp4_4over6=<NVFP44Over6Config>)",
            "a NVFP44Over6Config cannot cross the custom-op schema; omit nvfp4_4over6 or pass None",
        )
    if code == -3:
        _first_line(TypeError, "nvfp4_4over6 must be an NVFP44Over6Config or None (or omitted); got a value of another type.")
    if code not in (-1, 0):
        _first_line(ValueError, f"fp4patch: {function}: nvfp4_4over6 must be -1 (argument omitted) or 0 (None), got {code!r}")
