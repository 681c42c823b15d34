"""The five operation kinds, pyupgrade-style: exact before/after source pairs.

For every pair: ``check`` says ``applicable`` on ``before`` and ``applied`` on ``after``, the
result compiles, and applying again changes nothing. Everything outside the edited nodes must
stay byte-identical, so the modules are parsed from bytes (``cst.parse_module(bytes)``) and
compared as ``module.bytes``: CRLF line endings, a BOM and a coding cookie included.
"""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp4patch.codemods import (
    AddDecorator,
    AppendToModule,
    InsertAtFunctionStart,
    Operation,
    OpState,
    ReplaceFunctionBody,
    RewriteCallArguments,
)


def src(text: str) -> bytes:
    """Dedented source as bytes (the first newline after the opening quotes dropped)."""
    return textwrap.dedent(text).lstrip("\n").encode("utf-8")


def state(op: Operation, source: bytes):
    return op.check(cst.parse_module(source))


def apply_bytes(op: Operation, source: bytes) -> bytes:
    return op.apply(cst.parse_module(source)).bytes


def assert_pair(op: Operation, before: bytes, after: bytes) -> None:
    """The whole contract of one before/after pair."""
    assert state(op, before).state is OpState.APPLICABLE, state(op, before)
    result = apply_bytes(op, before)
    assert result == after, f"\n--- got ---\n{result!r}\n--- expected ---\n{after!r}"
    assert state(op, result).state is OpState.APPLIED, state(op, result)
    assert apply_bytes(op, result) == result, "applying twice changed the module"
    compile(result, "<patched>", "exec", dont_inherit=True)


# --------------------------------------------------------------------------- add-decorator
DECORATOR_PAIRS = [
    pytest.param(
        AddDecorator(function="f", decorator="torch.compiler.disable", position="outermost"),
        src(
            """
            import torch

            # a comment above the def
            def f(x):
                return x
            """
        ),
        src(
            """
            import torch

            # a comment above the def
            @torch.compiler.disable
            def f(x):
                return x
            """
        ),
        id="outermost-no-decorators-comment-above",
    ),
    pytest.param(
        AddDecorator(function="f", decorator="torch.compiler.disable", position="outermost"),
        src(
            """
            import torch


            # a comment above the decorators
            @flashinfer_api  # why it is here
            @functools.cache
            def f(x):
                return x
            """
        ),
        src(
            """
            import torch


            # a comment above the decorators
            @torch.compiler.disable
            @flashinfer_api  # why it is here
            @functools.cache
            def f(x):
                return x
            """
        ),
        id="outermost-existing-decorators",
    ),
    pytest.param(
        AddDecorator(function="f", decorator="torch.compiler.disable", position="innermost"),
        src(
            """
            # a comment above the decorators
            @flashinfer_api
            # a comment between decorators
            @functools.cache
            def f(x):
                return x
            """
        ),
        src(
            """
            # a comment above the decorators
            @flashinfer_api
            # a comment between decorators
            @functools.cache
            @torch.compiler.disable
            def f(x):
                return x
            """
        ),
        id="innermost-existing-decorators",
    ),
    pytest.param(
        AddDecorator(function="f", decorator="functools.lru_cache(maxsize=None)", position="innermost"),
        src(
            """
            # a comment above the def

            def f(x):
                return x
            """
        ),
        src(
            """
            # a comment above the def

            @functools.lru_cache(maxsize=None)
            def f(x):
                return x
            """
        ),
        id="innermost-no-decorators-call-expression",
    ),
    pytest.param(
        AddDecorator(function="f", decorator="torch.compiler.disable", position="outermost"),
        src(
            """
            @flashinfer_api
            async def f(x):
                return x
            """
        ),
        src(
            """
            @torch.compiler.disable
            @flashinfer_api
            async def f(x):
                return x
            """
        ),
        id="outermost-async-def",
    ),
]


@pytest.mark.parametrize(("op", "before", "after"), DECORATOR_PAIRS)
def test_add_decorator(op, before, after) -> None:
    assert_pair(op, before, after)


@pytest.mark.parametrize(
    "existing",
    ["@torch.compiler.disable", "@torch.compiler.disable  # already", "@(torch.compiler.disable)", "@torch.compiler .disable"],
)
def test_add_decorator_recognises_an_equal_decorator_anywhere(existing: str) -> None:
    """Structural comparison: formatting or position of the same decorator does not matter."""
    op = AddDecorator(function="f", decorator="torch.compiler.disable", position="outermost")
    source = f"@flashinfer_api\n{existing}\ndef f():\n    pass\n".encode()
    assert state(op, source).state is OpState.APPLIED
    assert apply_bytes(op, source) == source


def test_add_decorator_a_call_is_not_the_bare_decorator() -> None:
    op = AddDecorator(function="f", decorator="torch.compiler.disable", position="outermost")
    source = b"@torch.compiler.disable(recursive=False)\ndef f():\n    pass\n"
    assert state(op, source).state is OpState.APPLICABLE
    assert apply_bytes(op, source).startswith(b"@torch.compiler.disable\n@torch.compiler.disable(recursive=False)\n")


# --------------------------------------------------------------------------- insert-at-function-start
EARLY_RETURN = "if torch.version.cuda is not None:\n    return Version(torch.version.cuda)\n"

INSERT_PAIRS = [
    pytest.param(
        InsertAtFunctionStart(function="get_cuda_version", code=EARLY_RETURN, anchor_calls=("subprocess.check_output",)),
        src(
            """
            import subprocess


            @functools.cache
            def get_cuda_version() -> Version:
                # Try to query nvcc
                txt = subprocess.check_output(["nvcc", "--version"], text=True)

                return Version(txt)
            """
        ),
        src(
            """
            import subprocess


            @functools.cache
            def get_cuda_version() -> Version:
                if torch.version.cuda is not None:
                    return Version(torch.version.cuda)
                # Try to query nvcc
                txt = subprocess.check_output(["nvcc", "--version"], text=True)

                return Version(txt)
            """
        ),
        id="no-docstring",
    ),
    pytest.param(
        InsertAtFunctionStart(function="f", code="x = 1\n"),
        src(
            '''
            def f(a):
                """Doc.

                More doc.
                """
                # comment
                return a
            '''
        ),
        src(
            '''
            def f(a):
                """Doc.

                More doc.
                """
                x = 1
                # comment
                return a
            '''
        ),
        id="after-docstring",
    ),
    pytest.param(
        InsertAtFunctionStart(function="f", code="x = 1\n"),
        b"def f(): return 1\n\n\ng = 2\n",
        b"def f():\n    x = 1\n    return 1\n\n\ng = 2\n",
        id="one-line-def",
    ),
    pytest.param(
        InsertAtFunctionStart(function="f", code="x = 1\n"),
        b"def f(): return 1  # keep me\n",
        b"def f():\n    x = 1\n    return 1  # keep me\n",
        id="one-line-def-trailing-comment",
    ),
    pytest.param(
        InsertAtFunctionStart(function="f", code="x = 1\n"),
        b"def f():\n\tif a:\n\t\treturn 1\n",
        b"def f():\n\tx = 1\n\tif a:\n\t\treturn 1\n",
        id="tab-indentation",
    ),
    pytest.param(
        InsertAtFunctionStart(function="f", code="    if flag:\n        return 0\n"),
        src(
            """
            async def f(flag):
                return await g()
            """
        ),
        src(
            """
            async def f(flag):
                if flag:
                    return 0
                return await g()
            """
        ),
        id="indented-code-async-def",
    ),
]


@pytest.mark.parametrize(("op", "before", "after"), INSERT_PAIRS)
def test_insert_at_function_start(op, before, after) -> None:
    assert_pair(op, before, after)


def test_insert_is_applied_only_right_after_the_docstring() -> None:
    """The same statements further down do not count as applied: they must stand first."""
    op = InsertAtFunctionStart(function="f", code="x = 1\n")
    source = b'def f():\n    """d"""\n    y = 0\n    x = 1\n'
    assert state(op, source).state is OpState.APPLICABLE
    assert apply_bytes(op, source) == b'def f():\n    """d"""\n    x = 1\n    y = 0\n    x = 1\n'


def test_insert_applied_is_structural_not_textual() -> None:
    op = InsertAtFunctionStart(function="f", code=EARLY_RETURN)
    reformatted = b"def f():\n    if (torch.version.cuda  is not None) :  # note\n        return Version( torch.version.cuda )\n    return 0\n"
    assert state(op, reformatted).state is OpState.APPLIED
    assert apply_bytes(op, reformatted) == reformatted


# --------------------------------------------------------------------------- replace-function-body
REPLACE_PAIRS = [
    pytest.param(
        ReplaceFunctionBody(function="f", code="return torch.ops.flashinfer.fp4(x)\n"),
        src(
            '''
            import torch  # noqa


            # above
            @deco
            def f(x):  # header comment
                """Keep me.

                Really.
                """
                # old comment
                y = x + 1
                return y


            def g():
                return 'single quoted'
            '''
        ),
        src(
            '''
            import torch  # noqa


            # above
            @deco
            def f(x):  # header comment
                """Keep me.

                Really.
                """
                return torch.ops.flashinfer.fp4(x)


            def g():
                return 'single quoted'
            '''
        ),
        id="keeps-docstring",
    ),
    pytest.param(
        ReplaceFunctionBody(function="f", code="return 2\n"),
        b"def f(): return 1\nx = 'a'\n",
        b"def f():\n    return 2\nx = 'a'\n",
        id="one-line-def",
    ),
    pytest.param(
        ReplaceFunctionBody(function="f", code='"""New doc."""\nreturn 2\n'),
        b'def f():\n    """Old doc."""\n    return 1\n',
        b'def f():\n    """New doc."""\n    return 2\n',
        id="code-brings-its-own-docstring",
    ),
]


@pytest.mark.parametrize(("op", "before", "after"), REPLACE_PAIRS)
def test_replace_function_body(op, before, after) -> None:
    assert_pair(op, before, after)


# --------------------------------------------------------------------------- append-to-module
APPEND_PAIRS = [
    pytest.param(
        AppendToModule(code="def _fake(x):\n    return x\n", position="end"),
        src(
            """
            import os


            def f():
                return "double"
            """
        ),
        src(
            """
            import os


            def f():
                return "double"


            def _fake(x):
                return x
            """
        ),
        id="end",
    ),
    pytest.param(
        AppendToModule(code="_LOCK = None\n", position="after-imports"),
        src(
            '''
            """Module doc."""

            from __future__ import annotations

            import os  # why
            from typing import (
                Any,
            )
            LIMIT = 3


            def f():
                pass
            '''
        ),
        src(
            '''
            """Module doc."""

            from __future__ import annotations

            import os  # why
            from typing import (
                Any,
            )

            _LOCK = None

            LIMIT = 3


            def f():
                pass
            '''
        ),
        id="after-imports",
    ),
    pytest.param(
        AppendToModule(code="X = 1\n", position="after-imports"),
        b'"""Module doc."""\n\n\ndef f():\n    pass\n',
        b'"""Module doc."""\n\nX = 1\n\n\ndef f():\n    pass\n',
        id="after-imports-without-imports-keeps-the-docstring-first",
    ),
]


@pytest.mark.parametrize(("op", "before", "after"), APPEND_PAIRS)
def test_append_to_module(op, before, after) -> None:
    assert_pair(op, before, after)


def test_append_after_imports_keeps_module_docstring() -> None:
    """Whatever the exact layout: the module docstring must stay the docstring."""
    op = AppendToModule(code="X = 1\n", position="after-imports")
    for before in (b'"""Doc."""\nimport os\n', b'"""Doc."""\nimport os\n\ndef f():\n    pass\n'):
        result = apply_bytes(op, before)
        assert ast.get_docstring(ast.parse(result)) == "Doc."


# --------------------------------------------------------------------------- rewrite-call-arguments
REWRITE_PAIRS = [
    pytest.param(
        RewriteCallArguments(function="g", call="subprocess.check_output", from_="cmd, True", to="cmd, text=True"),
        src(
            """
            import subprocess as sp


            def g(cmd):
                return sp.check_output(cmd, True)  # keep
            """
        ),
        src(
            """
            import subprocess as sp


            def g(cmd):
                return sp.check_output(cmd, text=True)  # keep
            """
        ),
        id="import-alias",
    ),
    pytest.param(
        RewriteCallArguments(
            function="_fp4_quantize_custom_op",
            call="module.fp4_quantize",
            from_="input, global_scale, sf_vec_size, enable_pdl",
            to="input, global_scale, sf_vec_size, enable_pdl=enable_pdl",
        ),
        src(
            """
            def _fp4_quantize_custom_op(input, global_scale, sf_vec_size, enable_pdl):
                out = module.fp4_quantize(
                    input,  # the tensor
                    global_scale,
                    sf_vec_size,
                    enable_pdl,
                )
                return out
            """
        ),
        src(
            """
            def _fp4_quantize_custom_op(input, global_scale, sf_vec_size, enable_pdl):
                out = module.fp4_quantize(
                    input,  # the tensor
                    global_scale,
                    sf_vec_size,
                    enable_pdl=enable_pdl,
                )
                return out
            """
        ),
        id="multi-line-trailing-comma",
    ),
    pytest.param(
        RewriteCallArguments(function="g", call="subprocess.check_output", from_="cmd, True", to="cmd, text=True"),
        src(
            """
            from subprocess import check_output as co


            def g(cmd):
                return co(
                    cmd,
                    True)
            """
        ),
        src(
            """
            from subprocess import check_output as co


            def g(cmd):
                return co(
                    cmd,
                    text=True)
            """
        ),
        id="from-import-alias-multi-line",
    ),
    pytest.param(
        RewriteCallArguments(function="C.g", call="run", from_="a, b", to="a, b=b"),
        src(
            """
            def g():
                return run(a, b)


            class C:
                def g(self):
                    return run(a, b)
            """
        ),
        src(
            """
            def g():
                return run(a, b)


            class C:
                def g(self):
                    return run(a, b=b)
            """
        ),
        id="scoped-to-method",
    ),
    pytest.param(
        RewriteCallArguments(function="", call="run", from_="a, b", to="a, b=b"),
        b"x = run(a, b)\ny = run(a, c)\n",
        b"x = run(a, b=b)\ny = run(a, c)\n",
        id="module-scope",
    ),
]


@pytest.mark.parametrize(("op", "before", "after"), REWRITE_PAIRS)
def test_rewrite_call_arguments(op, before, after) -> None:
    assert_pair(op, before, after)


# --------------------------------------------------------------------------- drift
DRIFT_CASES = [
    pytest.param(AddDecorator(function="g", decorator="d"), b"def f():\n    pass\n", "function 'g' not found", id="decorator-function-missing"),
    pytest.param(InsertAtFunctionStart(function="g", code="x = 1\n"), b"def f():\n    pass\n", "function 'g' not found", id="insert-function-missing"),
    pytest.param(ReplaceFunctionBody(function="g", code="x = 1\n"), b"def f():\n    pass\n", "function 'g' not found", id="replace-function-missing"),
    pytest.param(
        RewriteCallArguments(function="g", call="run", from_="a", to="b=a"), b"def f():\n    run(a)\n", "function 'g' not found", id="rewrite-function-missing"
    ),
    pytest.param(
        AddDecorator(function="fp4_quantize", decorator="d", anchor_params=("input", "sf_vec_size")),
        b"def fp4_quantize(input, global_scale=None):\n    pass\n",
        "parameter 'sf_vec_size' missing from fp4_quantize()",
        id="anchor-param-missing",
    ),
    pytest.param(
        InsertAtFunctionStart(function="get_cuda_version", code="x = 1\n", anchor_calls=("subprocess.check_output",)),
        b"import subprocess as sp\n\ndef get_cuda_version():\n    return sp.run(['nvcc'])\n",
        "call to subprocess.check_output missing from get_cuda_version()",
        id="anchor-call-missing-import-alias",
    ),
    pytest.param(
        InsertAtFunctionStart(function="get_cuda_version", code="x = 1\n", anchor_calls=("subprocess.check_output",)),
        b"import subprocess\n\ndef get_cuda_version():\n    return check_output(['nvcc'])\n",
        "call to subprocess.check_output missing from get_cuda_version()",
        id="anchor-call-unqualified-name-is-not-the-anchor",
    ),
    pytest.param(
        ReplaceFunctionBody(function="f", code="return 1\n", anchor_calls=("subprocess.check_output",)),
        b"import subprocess\n\ndef f():\n    return 0\n\ndef g():\n    return subprocess.check_output(['x'])\n",
        "call to subprocess.check_output missing from f()",
        id="anchor-call-in-another-function",
    ),
    pytest.param(
        RewriteCallArguments(function="g", call="subprocess.check_output", from_="cmd, True", to="cmd, text=True"),
        b"import subprocess as sp\n\ndef g(cmd):\n    return sp.run(cmd, True)\n",
        "call subprocess.check_output(cmd, True) in g() not found",
        id="rewrite-call-missing",
    ),
    pytest.param(
        RewriteCallArguments(function="g", call="subprocess.check_output", from_="cmd, True", to="cmd, text=True"),
        b"import subprocess as sp\n\ndef g(cmd):\n    return sp.check_output(cmd, False)\n",
        "call subprocess.check_output(cmd, True) in g() not found",
        id="rewrite-arguments-changed",
    ),
]


@pytest.mark.parametrize(("op", "source", "detail"), DRIFT_CASES)
def test_drifted_names_the_missing_anchor(op, source, detail) -> None:
    check = state(op, source)
    assert check.state is OpState.DRIFTED
    assert check.detail == detail




@pytest.mark.parametrize(
    ("op", "source"),
    [
        pytest.param(*case.values[:2], id=case.id)
        for case in DRIFT_CASES
    ],
)
def test_apply_on_a_drifted_module_changes_nothing(op, source) -> None:
    """An operation must never edit a module whose anchor is gone (that is what anchors are for)."""
    assert apply_bytes(op, source) == source


def test_anchor_call_through_import_alias_is_applicable() -> None:
    op = InsertAtFunctionStart(function="get_cuda_version", code="x = 1\n", anchor_calls=("subprocess.check_output",))
    for source in (
        b"import subprocess as sp\n\ndef get_cuda_version():\n    return sp.check_output(['nvcc'])\n",
        b"from subprocess import check_output\n\ndef get_cuda_version():\n    return check_output(['nvcc'])\n",
        b"from subprocess import check_output as co\n\ndef get_cuda_version():\n    return co(['nvcc'])\n",
        b"import subprocess\n\ndef get_cuda_version():\n    try:\n        return subprocess.check_output(['nvcc'])\n    except OSError:\n        pass\n",
    ):
        assert state(op, source).state is OpState.APPLICABLE, source


# --------------------------------------------------------------------------- methods vs functions
CLASS_AND_FUNCTION = src(
    """
    def run(x):
        return x


    class Runner:
        def run(self, x):
            return x * 2

        class Inner:
            def run(self):
                return 3


    def outer():
        def run():
            return 4
        return run
    """
)


@pytest.mark.parametrize(
    ("path", "edited_line"),
    [
        ("run", b"def run(x):\n    y = 0\n    return x\n"),
        ("Runner.run", b"    def run(self, x):\n        y = 0\n        return x * 2\n"),
        ("Runner.Inner.run", b"        def run(self):\n            y = 0\n            return 3\n"),
    ],
)
def test_dotted_path_picks_exactly_one_definition(path: str, edited_line: bytes) -> None:
    op = InsertAtFunctionStart(function=path, code="y = 0\n")
    result = apply_bytes(op, CLASS_AND_FUNCTION)
    assert edited_line in result
    lines = result.splitlines(keepends=True)
    inserted = [line for line in lines if line.strip() == b"y = 0"]
    assert len(inserted) == 1
    lines.remove(inserted[0])
    assert b"".join(lines) == CLASS_AND_FUNCTION


def test_nested_functions_are_out_of_reach() -> None:
    op = InsertAtFunctionStart(function="outer.run", code="y = 0\n")
    assert state(op, CLASS_AND_FUNCTION).state is OpState.DRIFTED


def test_method_only_does_not_match_a_top_level_path() -> None:
    source = b"class C:\n    def fp4_quantize(self):\n        pass\n"
    op = AddDecorator(function="fp4_quantize", decorator="torch.compiler.disable")
    check = state(op, source)
    assert check.state is OpState.DRIFTED and check.detail == "function 'fp4_quantize' not found"
    assert state(AddDecorator(function="C.fp4_quantize", decorator="d"), source).state is OpState.APPLICABLE


def test_definitions_under_if_at_module_level_are_all_edited() -> None:
    source = src(
        """
        if HAS_CUDA:
            def f():
                return 1
        else:
            def f():
                return 2
        """
    )
    op = AddDecorator(function="f", decorator="d")
    result = apply_bytes(op, source)
    assert result.count(b"@d\n") == 2
    assert state(op, result).state is OpState.APPLIED


# --------------------------------------------------------------------------- bytes outside the edit
CRLF_MODULE = (
    b"# -*- coding: utf-8 -*-\r\n"
    b"import subprocess\r\n"
    b"\r\n"
    b"\r\n"
    b"# comment above\r\n"
    b"@functools.cache\r\n"
    b"def f(a, b):\r\n"
    b"    '''Doc.'''\r\n"
    b"    return subprocess.check_output(a, b)  # trailing\r\n"
    b"\r\n"
    b"\r\n"
    b"S = 'single' \"double\"\r\n"
)


@pytest.mark.parametrize(
    ("op", "after"),
    [
        pytest.param(
            AddDecorator(function="f", decorator="torch.compiler.disable", position="outermost"),
            CRLF_MODULE.replace(b"@functools.cache\r\n", b"@torch.compiler.disable\r\n@functools.cache\r\n"),
            id="add-decorator",
        ),
        pytest.param(
            InsertAtFunctionStart(function="f", code="if a:\n    return b\n"),
            CRLF_MODULE.replace(b"    '''Doc.'''\r\n", b"    '''Doc.'''\r\n    if a:\r\n        return b\r\n"),
            id="insert-at-function-start",
        ),
        pytest.param(
            ReplaceFunctionBody(function="f", code="return a\n"),
            CRLF_MODULE.replace(b"    return subprocess.check_output(a, b)  # trailing\r\n", b"    return a\r\n"),
            id="replace-function-body",
        ),
        pytest.param(
            AppendToModule(code="X = 1\n", position="end"),
            CRLF_MODULE + b"\r\n\r\nX = 1\r\n",
            id="append-end",
        ),
        pytest.param(
            AppendToModule(code="X = 1\n", position="after-imports"),
            CRLF_MODULE.replace(b"import subprocess\r\n", b"import subprocess\r\n\r\nX = 1\r\n"),
            id="append-after-imports",
        ),
        pytest.param(
            RewriteCallArguments(function="f", call="subprocess.check_output", from_="a, b", to="a, text=b"),
            CRLF_MODULE.replace(b"check_output(a, b)", b"check_output(a, text=b)"),
            id="rewrite-call-arguments",
        ),
    ],
)
def test_crlf_and_coding_cookie_kept(op, after) -> None:
    assert_pair(op, CRLF_MODULE, after)


def test_bom_kept() -> None:
    before = "\ufeff# coding: utf-8\ndef f():\n    return 'é'\n".encode("utf-8")
    op = InsertAtFunctionStart(function="f", code="x = 'ü'\n")
    assert_pair(op, before, "\ufeff# coding: utf-8\ndef f():\n    x = 'ü'\n    return 'é'\n".encode("utf-8"))


def test_latin1_coding_cookie_encodes_new_code_in_the_file_encoding() -> None:
    before = "# -*- coding: latin-1 -*-\nS = 'é'\n\ndef f():\n    return S\n".encode("latin-1")
    op = InsertAtFunctionStart(function="f", code="x = 'ü'\n")
    after = "# -*- coding: latin-1 -*-\nS = 'é'\n\ndef f():\n    x = 'ü'\n    return S\n".encode("latin-1")
    assert_pair(op, before, after)


# Property: around one target function, arbitrary comments, blank lines, quoting styles and
# unrelated definitions survive byte for byte; only the operation's own lines appear.
_NOISE = st.sampled_from(
    [
        "# a comment\n",
        "\n",
        "x = 'single'\n",
        'y = "double"\n',
        "z = '''triple\n  kept   as is'''\n",
        "w = (1,\n     2)  # odd indent\n",
        "def other():  # unrelated\n    return  'spaced'\n",
        "class K:\n\n    pass\n",
        "import os as _os\n",
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_NOISE, max_size=6), st.lists(_NOISE, max_size=6), st.sampled_from(["\n", "\r\n"]))
def test_only_the_operation_lines_change(head: list[str], tail: list[str], newline: str) -> None:
    target = "@keep\ndef target(a):\n    '''doc'''\n    return a\n"
    before = ("".join(head) + target + "".join(tail)).replace("\n", newline).encode()
    cases = [
        (AddDecorator(function="target", decorator="new_deco", position="innermost"), "@keep\n", "@keep\n@new_deco\n"),
        (AddDecorator(function="target", decorator="new_deco", position="outermost"), "@keep\n", "@new_deco\n@keep\n"),
        (InsertAtFunctionStart(function="target", code="b = 1\n"), "'''doc'''\n", "'''doc'''\n    b = 1\n"),
        (ReplaceFunctionBody(function="target", code="return 0\n"), "    return a\n", "    return 0\n"),
    ]
    for op, old, new in cases:
        expected = before.replace((old.replace("\n", newline)).encode(), new.replace("\n", newline).encode(), 1)
        assert_pair(op, before, expected)
