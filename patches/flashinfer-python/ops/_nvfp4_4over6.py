"""Shared helpers of the op sources whose wrapper takes ``nvfp4_4over6`` (FlashInfer 0.7.1+).

Not an op source: the renderer (``fp4patch/ops/render.py``) copies the functions an op source imports from
here (``from ._nvfp4_4over6 import _nvfp4_4over6_code``) into its rendered block, so nothing installed
imports this file. ``nvfp4_4over6`` crosses the custom-op schema as an int: -1 = argument omitted
(``_UNSET``, FlashInfer's sentinel, a global of the wrapper's module from 0.7.1), 0 = ``None``; a
``NVFP44Over6Config`` (-2) cannot cross it, and any other value (-3) is the wrapper's TypeError: the fakes
refuse both (``_refusal._check_nvfp4_4over6``), so the reason is the first line of the compile error.
"""


def _nvfp4_4over6_code(value, function):
    """``entry``'s side: the int that crosses the schema (-1 omitted, 0 ``None``); what cannot cross is sent as a
    code the fake refuses (``_refusal._check_nvfp4_4over6``): -2 a ``NVFP44Over6Config``, -3 any other value (the
    wrapper's TypeError). Raising here would put the reason inside Dynamo's "Observed exception"."""
    # -1 as an int: where a release lacks the parameter, the renderer binds it to op()'s default (-1), and _UNSET
    # (absent from those modules) is never looked up. Any other int is the caller's, which the wrapper refuses.
    if isinstance(value, int) and not isinstance(value, bool) and value == -1:
        return -1
    if value is None:
        return 0
    if value is _UNSET:  # noqa: F821 - the sentinel of FlashInfer 0.7.1+ (a global of the wrapper's module)
        return -1
    if isinstance(value, (str, bytes, int, float, list, tuple, dict)):  # (Dynamo cannot iterate a builtin's __mro__)
        return -3
    # the class or a subclass (the wrapper's module need not import it: the name is compared)
    if any(c.__name__ == "NVFP44Over6Config" for c in type(value).__mro__):
        return -2
    return -3


def _nvfp4_4over6_argument(code):
    """``op``'s side: what the wrapper is called with for a code (-1 → omitted, ``_UNSET``; 0 → ``None``); a
    ValueError for any other code (the op called directly: ``entry`` sends no other, the fake refuses -2 / -3)."""
    if code not in (-1, 0):
        raise ValueError(f"fp4patch: nvfp4_4over6 must be -1 (argument omitted) or 0 (None), got {code!r}")
    return _UNSET if code == -1 else None  # noqa: F821
