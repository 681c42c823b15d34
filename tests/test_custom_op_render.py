"""The op-source renderer's placeholders (``fp4patch/ops/``: ``params``, ``omit``, ``helpers``), as before/after pairs.

``def entry(**OP_PARAMS):`` / ``def fake(**OP_PARAMS):`` take op's parameter list; ``OP(**OP_PARAMS, ...)`` /
``WRAPPER(**OP_PARAMS, ...)`` pass every parameter of op present in the release by keyword (an explicit keyword
replaces its ``p=p`` in place, ``p=OMIT`` leaves it out); ``from ._helpers import _f`` inlines ``_f`` (and the
helper module's functions it calls, and the imports they use) into the rendered block. Errors name what is wrong.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from fp4patch.ops.render import CustomOpTarget, OpSourceError, check_op_source, plain_source, read_helpers, render


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def target(source: str, params: tuple[str, ...], helpers: dict[str, str] | None = None, **kwargs) -> CustomOpTarget:
    return CustomOpTarget(function="wrap", source=src(source), source_label="ops/wrap.py", params=params, helpers=helpers or {}, **kwargs)


def function_text(block: str, name: str) -> str:
    """The rendered ``def name`` (decorators left out), dedented, up to the next statement at its level."""
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(f"def {name}("))
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) <= indent
         and not lines[i].lstrip().startswith(")")),
        len(lines),
    )
    return textwrap.dedent("\n".join(lines[start:end]).rstrip("\n")) + "\n"


SOURCE = """
    import torch

    RELEASE = {}


    def entry(**OP_PARAMS):
        return OP(**OP_PARAMS, mode=int(mode))


    def op(x: torch.Tensor, mode: int = 0, scale: float = 1.0, extra: bool = False) -> torch.Tensor:
        return WRAPPER(
            **OP_PARAMS,
            extra=OMIT,
        )


    def fake(**OP_PARAMS):
        return torch.empty_like(x)
"""


@pytest.mark.parametrize(
    ("name", "params", "after"),
    [
        pytest.param(
            "entry",
            ("x", "mode", "scale", "extra"),
            """
            def entry(x, mode=0, scale=1.0, extra=False):
                return OP(x=x, mode=int(mode), scale=scale, extra=extra)
            """,
            id="entry-signature-and-override-in-place",
        ),
        pytest.param(
            "op",
            ("x", "mode", "scale", "extra"),
            """
            def op(x: torch.Tensor, mode: int = 0, scale: float = 1.0, extra: bool = False) -> torch.Tensor:
                _fp4patch_outer = _fp4patch_wrap_thread.inside_op  # the wrapper called below runs its own code
                _fp4patch_wrap_thread.inside_op = True
                try:
                    return wrap(
                        x=x,
                        mode=mode,
                        scale=scale,
                    )
                finally:
                    _fp4patch_wrap_thread.inside_op = _fp4patch_outer
            """,
            id="multi-line-call-omit",
        ),
        pytest.param(
            "fake",
            ("x", "mode", "scale", "extra"),
            """
            def fake(x, mode=0, scale=1.0, extra=False):
                return torch.empty_like(x)
            """,
            id="fake-signature",
        ),
        pytest.param(
            "entry",
            ("x", "mode"),
            """
            def entry(x, mode=0):
                scale = 1.0  # not a parameter of this release
                extra = False  # not a parameter of this release
                return OP(x=x, mode=int(mode))
            """,
            id="absent-params-trimmed-after-expansion",
        ),
        pytest.param(
            "op",
            ("x", "scale"),
            """
            def op(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
                mode = 0  # not a parameter of this release
                extra = False  # not a parameter of this release
                _fp4patch_outer = _fp4patch_wrap_thread.inside_op  # the wrapper called below runs its own code
                _fp4patch_wrap_thread.inside_op = True
                try:
                    return wrap(
                        x=x,
                        scale=scale,
                    )
                finally:
                    _fp4patch_wrap_thread.inside_op = _fp4patch_outer
            """,
            id="absent-params-trimmed-multi-line",
        ),
    ],
)
def test_op_params_expand_as_explicit_code(name: str, params: tuple[str, ...], after: str) -> None:
    block = render(target(SOURCE, params)).block
    assert function_text(block, name) == src(after)


def test_expansion_renders_what_the_explicit_source_renders() -> None:
    """Same meaning, same text: the placeholders leave no trace in the block or the op's name."""
    explicit = """
        import torch

        RELEASE = {}


        def entry(x, mode=0, scale=1.0, extra=False):
            return OP(x=x, mode=int(mode), scale=scale, extra=extra)


        def op(x: torch.Tensor, mode: int = 0, scale: float = 1.0, extra: bool = False) -> torch.Tensor:
            return WRAPPER(
                x=x,
                mode=mode,
                scale=scale,
            )


        def fake(x, mode=0, scale=1.0, extra=False):
            return torch.empty_like(x)
    """
    for params in (("x", "mode", "scale", "extra"), ("x",)):
        assert render(target(SOURCE, params)) == render(target(explicit, params))


def test_a_comment_stays_with_its_explicit_argument() -> None:
    source = """
        def entry(**OP_PARAMS):
            return OP(
                **OP_PARAMS,
                b=f(b),  # converted
            )


        def op(a: int, b: int = 0, c: int = 0) -> int:
            return WRAPPER(**OP_PARAMS)


        def fake(**OP_PARAMS):
            return 0
    """
    assert function_text(render(target(source, ("a", "b", "c"))).block, "entry") == src(
        """
        def entry(a, b=0, c=0):
            return OP(
                a=a,
                b=f(b),  # converted
                c=c,
            )
        """
    )


HELPERS = {
    "_shared": src(
        '''
        """Shared helpers."""
        import enum
        import os


        def _as_int(value):
            return int(value.value if isinstance(value, enum.Enum) else value)


        def _int_or_none(value):
            return None if value is None else _as_int(value)


        def _unused():
            return os.sep
        '''
    )
}

HELPER_SOURCE = """
    import torch

    from ._shared import _int_or_none


    def entry(**OP_PARAMS):
        return OP(**OP_PARAMS, mode=_int_or_none(mode))


    def op(x: torch.Tensor, mode: int = 0) -> torch.Tensor:
        return WRAPPER(**OP_PARAMS)


    def fake(**OP_PARAMS):
        return torch.empty_like(x)
"""


def test_shared_helpers_are_inlined_with_the_helpers_they_call_and_their_imports() -> None:
    block = render(target(HELPER_SOURCE, ("x", "mode"), HELPERS)).block
    assert "from ._shared" not in block and "import fp4patch" not in block
    assert re.search(r"^import enum$", block, re.MULTILINE) and not re.search(r"^import os$", block, re.MULTILINE)
    assert function_text(block, "_as_int") == "def _as_int(value):\n    return int(value.value if isinstance(value, enum.Enum) else value)\n"
    assert function_text(block, "_int_or_none") == "def _int_or_none(value):\n    return None if value is None else _as_int(value)\n"
    assert "_unused" not in block
    assert block.index("def _as_int(") < block.index("def _int_or_none(") < block.index("def entry(")


def test_inlined_helpers_run_in_the_rendered_block() -> None:
    """The block registers nothing here (no torch): run the source as tests do, through plain_source."""
    import enum

    class Mode(enum.Enum):
        FAST = 3

    namespace: dict = {"torch": None}
    code = plain_source(src(HELPER_SOURCE), HELPERS)
    exec(compile(code, "<op source>", "exec"), namespace)  # noqa: S102 - a source written in this test
    namespace["OP"] = lambda **kwargs: kwargs
    assert namespace["entry"](x="t", mode=Mode.FAST) == {"x": "t", "mode": 3}


def test_read_helpers_names_a_missing_helper_file(tmp_path: Path) -> None:
    with pytest.raises(OpSourceError, match=r"cannot read the helper module .*_shared\.py"):
        read_helpers(src(HELPER_SOURCE), tmp_path)
    (tmp_path / "_shared.py").write_text(HELPERS["_shared"])
    assert read_helpers(src(HELPER_SOURCE), tmp_path) == HELPERS


@pytest.mark.parametrize(
    ("source", "helpers", "message"),
    [
        pytest.param(HELPER_SOURCE, {}, r"no helper module _shared\.py was read", id="helper-module-missing"),
        pytest.param(
            HELPER_SOURCE.replace("_int_or_none", "_nope"), HELPERS, r"_shared\.py .* defines no top-level function _nope", id="helper-name-missing"
        ),
        pytest.param(
            HELPER_SOURCE, {"_shared": "X = 1\n"}, r"_shared\.py:1: a helper module holds only absolute imports and private functions",
            id="helper-module-with-data",
        ),
        pytest.param(
            HELPER_SOURCE.replace("def entry(**OP_PARAMS):", "def _int_or_none(v):\n        return v\n\n\n    def entry(**OP_PARAMS):"),
            HELPERS, r"_int_or_none is defined in the op source and in _shared\.py", id="helper-clash",
        ),
        pytest.param(HELPER_SOURCE.replace("from ._shared", "from .._shared"), HELPERS, r"one dot", id="helper-import-form"),
        pytest.param(SOURCE.replace("def fake(**OP_PARAMS):", "def fake(x, mode=1, scale=1.0, extra=False):"), {},
                     r"fake\(\) and op\(\) must take the same parameters .* same defaults", id="fake-default-differs"),
        pytest.param(SOURCE.replace("def entry(**OP_PARAMS):", "def entry(x, **OP_PARAMS):"), {},
                     r"entry\(\*\*OP_PARAMS\) stands alone", id="op-params-with-others"),
        pytest.param(SOURCE.replace("mode=int(mode)", "modes=int(mode)"), {},
                     r"OP\(\*\*OP_PARAMS, modes=\.\.\.\): 'modes' is not a parameter of op\(\)", id="unknown-keyword"),
        pytest.param(SOURCE.replace("return OP(**OP_PARAMS", "return g(**OP_PARAMS"), {},
                     r"\*\*OP_PARAMS stands only in a call to OP or WRAPPER, not g\(\)", id="spread-elsewhere"),
        pytest.param(SOURCE.replace("return torch.empty_like(x)", "return OMIT"), {}, r"OMIT stands only in", id="stray-omit"),
        pytest.param(SOURCE.replace("return OP(**OP_PARAMS, mode=int(mode))", "return OP(x, **OP_PARAMS)"), {},
                     r"takes no positional argument", id="positional-with-spread"),
    ],
)
def test_errors_say_what_is_wrong(source: str, helpers: dict, message: str) -> None:
    with pytest.raises(OpSourceError, match=message):
        check_op_source(target(source, ("x",) if "mode" not in source else ("x", "mode"), helpers))


def test_explicit_signatures_equal_to_ops_are_still_accepted() -> None:
    explicit = SOURCE.replace("def entry(**OP_PARAMS):", "def entry(x, mode=0, scale=1.0, extra=False):")
    check_op_source(target(explicit, ("x", "mode")))


# --------------------------------------------------------------------------- #
# SPLICE: a parameter list several op sources share, declared once in a helper module
# --------------------------------------------------------------------------- #
SPLICE_HELPERS = {
    "_params": src(
        '''
        """Shared parameter lists."""
        from typing import Optional

        import torch


        def _shared_params(
            scale: Optional[torch.Tensor],
            mode: int = 0,  # an enum, as int
            extra: bool = False,
        ):
            """Signature only."""


        def _as_int(value):
            return int(value)
        '''
    )
}

SPLICE_SOURCE = """
    from typing import Optional

    import torch

    from ._params import _as_int, _shared_params


    def entry(**OP_PARAMS):
        return OP(**OP_PARAMS, mode=_as_int(mode))


    def op(
        x: torch.Tensor,
        _shared_params: SPLICE,  # scale, mode, extra
        tail: int = 1,
    ) -> torch.Tensor:
        return WRAPPER(**OP_PARAMS)


    def fake(**OP_PARAMS):
        return torch.empty_like(x)
"""

SPLICE_EXPLICIT = """
    from typing import Optional

    import torch

    from ._params import _as_int


    def entry(**OP_PARAMS):
        return OP(**OP_PARAMS, mode=_as_int(mode))


    def op(
        x: torch.Tensor,
        scale: Optional[torch.Tensor],
        mode: int = 0,  # an enum, as int
        extra: bool = False,
        tail: int = 1,
    ) -> torch.Tensor:
        return WRAPPER(**OP_PARAMS)


    def fake(**OP_PARAMS):
        return torch.empty_like(x)
"""


@pytest.mark.parametrize("params", [("x", "scale", "mode", "extra", "tail"), ("x", "scale", "tail"), ("x", "scale", "mode")])
def test_splice_renders_what_the_explicit_signature_renders(params: tuple[str, ...]) -> None:
    """Same parameters, same block and op name, for every release (a spliced parameter absent in one is trimmed)."""
    assert render(target(SPLICE_SOURCE, params, SPLICE_HELPERS)) == render(target(SPLICE_EXPLICIT, params, SPLICE_HELPERS))


def test_spliced_parameters_stand_in_place_with_their_layout_and_the_helper_is_not_inlined() -> None:
    """The written-out form is SPLICE_EXPLICIT (test above); here: the helper's own comment kept, the
    SPLICE parameter's dropped, and the call expanded over the spliced parameters."""
    block = render(target(SPLICE_SOURCE, ("x", "scale", "mode", "extra", "tail"), SPLICE_HELPERS)).block
    op_text = function_text(block, "op")
    assert "x: torch.Tensor,\n    scale: Optional[torch.Tensor],\n    mode: int = 0,  # an enum, as int\n" in op_text, op_text
    assert "return wrap(x=x, scale=scale, mode=mode, extra=extra, tail=tail)" in op_text, op_text
    assert function_text(block, "entry").startswith("def entry(\n    x,\n    scale,\n    mode=0,")
    assert "_shared_params" not in block and "SPLICE" not in block and "scale, mode, extra" not in block
    assert "def _as_int(" in block


def test_a_one_line_signature_takes_the_spliced_parameters_on_its_line() -> None:
    source = SPLICE_SOURCE.replace(
        "def op(\n        x: torch.Tensor,\n        _shared_params: SPLICE,  # scale, mode, extra\n        tail: int = 1,\n    )",
        "def op(x: torch.Tensor, _shared_params: SPLICE, tail: int = 1)",
    )
    block = render(target(source, ("x", "scale", "mode", "extra", "tail"), SPLICE_HELPERS)).block
    assert "def op(x: torch.Tensor, scale: Optional[torch.Tensor], mode: int = 0, extra: bool = False, tail: int = 1) -> torch.Tensor:" in block


def test_spliced_source_runs_through_plain_source() -> None:
    namespace: dict = {"torch": None, "Optional": None}
    exec(compile(plain_source(src(SPLICE_SOURCE), SPLICE_HELPERS), "<op source>", "exec"), namespace)  # noqa: S102 - a source written in this test
    namespace["OP"] = lambda **kwargs: kwargs
    assert namespace["entry"](x="t", scale=None, mode=True) == {"x": "t", "scale": None, "mode": 1, "extra": False, "tail": 1}


def _splice_helpers(signature: str, body: str = '"""Signature only."""') -> dict[str, str]:
    return {"_params": f"from typing import Optional\n\nimport torch\n\n\ndef _shared_params({signature}):\n    {body}\n\n\ndef _as_int(value):\n    return int(value)\n"}


@pytest.mark.parametrize(
    ("source", "helpers", "message"),
    [
        pytest.param(SPLICE_SOURCE.replace("_shared_params: SPLICE,", "_shared_params: SPLICE = 0,"), SPLICE_HELPERS,
                     r"'_shared_params: SPLICE' takes no default", id="marker-default"),
        pytest.param(SPLICE_SOURCE.replace("import _as_int, _shared_params", "import _as_int"), SPLICE_HELPERS,
                     r"op\(\) splices _shared_params: import it from its helper module", id="marker-not-imported"),
        pytest.param(SPLICE_SOURCE, _splice_helpers("scale: int", "return scale"),
                     r"_params\.py:6: _shared_params is spliced into op\(\), so it is a signature only", id="helper-has-a-body"),
        pytest.param(SPLICE_SOURCE, _splice_helpers("scale: int, *rest"), r"so it is a signature only", id="helper-takes-varargs"),
        pytest.param(SPLICE_SOURCE, _splice_helpers("scale: int, tail: int = 0"),
                     r"parameter 'tail' of _shared_params is op\(\)'s own too", id="spliced-name-clash"),
        pytest.param(SPLICE_SOURCE, _splice_helpers("scale"), r"parameter 'scale' of _shared_params has no annotation", id="spliced-without-annotation"),
        pytest.param(SPLICE_SOURCE.replace("from typing import Optional\n", ""), SPLICE_HELPERS,
                     r"parameter 'scale' of _shared_params uses Optional, which the op source does not import", id="annotation-not-imported"),
        pytest.param(SPLICE_SOURCE, _splice_helpers('scale: "Optional[t.Tensor]"'),
                     r"parameter 'scale' of _shared_params uses t, which the op source does not import", id="string-annotation-not-imported"),
        pytest.param(SPLICE_SOURCE, _splice_helpers('scale: "Optional["'),
                     r"_params\.py:6: string annotation 'Optional\[' is not a Python expression", id="string-annotation-broken"),
        pytest.param(SPLICE_SOURCE.replace("tail: int = 1,", "tail: int,"), SPLICE_HELPERS,
                     r"once spliced, op\(\)'s parameter 'tail' has no default but follows one that has", id="default-order"),
        pytest.param(SPLICE_SOURCE.replace("return torch.empty_like(x)", "return SPLICE"), SPLICE_HELPERS,
                     r"SPLICE stands only as the annotation of a parameter of op\(\)", id="stray-splice"),
        pytest.param(SPLICE_SOURCE.replace("return torch.empty_like(x)", "return _shared_params()"), SPLICE_HELPERS,
                     r"_shared_params is a parameter list spliced into op\(\), not a function to use", id="spliced-helper-called"),
        pytest.param(SPLICE_SOURCE.replace("x: torch.Tensor,\n        _shared_params: SPLICE,", "x: torch.Tensor,\n        _shared_params: SPLICE,\n        /,"),
                     SPLICE_HELPERS, r"a SPLICE parameter stands among op\(\)'s plain or keyword-only parameters", id="positional-only"),
        pytest.param(SPLICE_SOURCE.replace("return OP(**OP_PARAMS, mode=_as_int(mode))", "return OP(**OP_PARAMS)"), _splice_helpers(""),
                     r"_params\.py:6: _shared_params declares no parameters", id="helper-without-parameters"),
        pytest.param(SPLICE_SOURCE.replace("return OP(**OP_PARAMS, mode=_as_int(mode))", "return OP(**OP_PARAMS)").replace("import _as_int, ", "import _uses_the_list, "),
                     {"_params": _splice_helpers("scale: Optional[torch.Tensor] = None")["_params"]
                      + "\n\ndef _uses_the_list():\n    return _shared_params.__code__.co_varnames\n"},
                     r"_params\.py:14: _uses_the_list uses _shared_params, which op\(\) splices", id="inlined-helper-uses-the-spliced-one"),
    ],
)
def test_splice_errors_say_what_is_wrong(source: str, helpers: dict, message: str) -> None:
    with pytest.raises(OpSourceError, match=message):
        check_op_source(target(source, ("x",), helpers))


_WRITTEN = "        scale: Optional[torch.Tensor],\n        mode: int = 0,  # an enum, as int\n        extra: bool = False,\n"
_MARKER_LAST = ("        _shared_params: SPLICE,  # scale, mode, extra\n        tail: int = 1,\n", "        _shared_params: SPLICE\n")


@pytest.mark.parametrize(
    ("signature", "written", "marker"),
    [
        pytest.param("\n    scale: Optional[torch.Tensor],\n    mode: int = 0,\n    extra: bool = False\n",
                     "        scale: Optional[torch.Tensor],\n        mode: int = 0,\n        extra: bool = False,\n", None,
                     id="helper-without-trailing-comma"),
        pytest.param("\n    scale: Optional[torch.Tensor],\n    mode: int = 0,\n    extra: bool = False  # the last\n",
                     "        scale: Optional[torch.Tensor],\n        mode: int = 0,\n        extra: bool = False,  # the last\n", None,
                     id="helper-without-trailing-comma-with-a-comment"),
        pytest.param("  # shared\n    # the scale\n    scale: Optional[torch.Tensor],\n    mode: int = 0,\n    extra: bool = False,\n    # the end\n",
                     "        # shared\n        # the scale\n        scale: Optional[torch.Tensor],\n        mode: int = 0,\n"
                     "        extra: bool = False,\n        # the end\n", None,
                     id="comment-lines-in-the-helper-signature"),
        pytest.param("\n    scale: Optional[torch.Tensor],\n    mode: int = 0,  # an enum, as int\n    extra: bool = False,\n",
                     "        scale: Optional[torch.Tensor],\n        mode: int = 0,  # an enum, as int\n        extra: bool = False\n", _MARKER_LAST,
                     id="marker-last-without-trailing-comma"),
    ],
)
def test_splice_layouts_render_what_the_written_out_list_renders(signature: str, written: str, marker: tuple | None) -> None:
    """The helper's parameters land in op() as if typed there: its comment lines and a last parameter without a
    trailing comma (in the helper or as op's last) keep one parameter a line, so the op name is the written-out one."""
    source, explicit = SPLICE_SOURCE, SPLICE_EXPLICIT.replace(_WRITTEN, written)
    if marker is not None:
        source = source.replace(*marker)
        explicit = explicit.replace("        tail: int = 1,\n", "")
    params = ("x", "scale", "mode", "extra", "tail") if marker is None else ("x", "scale", "mode", "extra")
    helpers = _splice_helpers(signature)
    assert render(target(source, params, helpers)) == render(target(explicit, params, helpers))
    assert plain_source(src(source), helpers) == plain_source(src(explicit), helpers)
