"""One line a token: string literals that span lines, rewritten (how the block keeps a file's newlines).

Owns the last rewrite of the rendered code (:func:`_one_line_strings`): each string literal that spans lines
(a docstring of the op source, of a helper) becomes parenthesized one-line literals, implicitly concatenated
(the same value, the same AST), so that every line break of the block is one that libcst writes with the
target file's own newline and a CRLF file stays CRLF on every line after ``apply``. A backslash continuation
and an f-string that spans lines are refused: neither can be rewritten so.

May import: the standard library and :mod:`fp4patch.ops.source`.
"""

from __future__ import annotations

import ast

from .source import CustomOpTarget, Example, OpSourceError


def _one_line_strings(code: str, target: CustomOpTarget) -> str:
    """``code`` with no line break inside a token: each string literal that spans lines is written as
    parenthesized one-line literals (one a source line, implicitly concatenated: the same value and
    the same AST). Every line break of the rendered block is then one that libcst writes with the
    target file's own newline, so a CRLF file stays CRLF on every line after apply.

    Raises:
        OpSourceError: a backslash continues a line, or an f-string spans lines (the message quotes
            its start and names ``target.source_label``): write it on one line in the op source.
    """
    import io
    import tokenize

    starts = [0]
    for line in code.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(position: tuple[int, int]) -> int:
        return starts[position[0] - 1] + position[1]

    out, done, previous = [], 0, 0
    fstring_parts = {getattr(tokenize, name) for name in ("FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, name)}
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        begin, end = offset(token.start), offset(token.end)
        if "\\" in code[previous:begin]:
            raise OpSourceError(
                f"{target.source_label}: a backslash continues the line of {code[max(0, previous - 40):previous].strip()!r}; "
                "fp4patch writes code with the target file's newlines: put it in parentheses instead"
            )
        previous = end
        if "\n" not in token.string or token.type in (tokenize.NEWLINE, tokenize.NL):
            continue
        prefix = token.string[: len(token.string) - len(token.string.lstrip("rRbBuUfF"))].lower()
        if token.type != tokenize.STRING or "f" in prefix or token.type in fstring_parts:
            raise OpSourceError(
                f"{target.source_label}: an f-string spans lines ({token.string.splitlines()[0][:40]!r}...); "
                "fp4patch writes code with the target file's newlines: write it on one line"
            )
        value = ast.literal_eval(token.string)
        newline = b"\n" if isinstance(value, bytes) else "\n"
        pieces = [piece + newline for piece in value.split(newline)]
        pieces[-1] = pieces[-1][:-1]
        pieces = [piece for piece in pieces if piece]
        line = code[starts[token.start[0] - 1] : starts[token.start[0]]]
        indent = line[: len(line) - len(line.lstrip())]
        literal = "".join(f"\n{indent}    {piece!r}" for piece in pieces)
        out.append(code[done:begin] + (f"({literal}\n{indent})" if len(pieces) > 1 else repr(value)))
        done = end
    converted = "".join(out) + code[done:]
    if converted != code and ast.dump(ast.parse(converted)) != ast.dump(ast.parse(code)):
        raise AssertionError(f"{target.source_label}: rewriting string literals changed the code")  # a bug of this function
    return converted


_WRITTEN = '''\
import torch


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, alignment: int = 32) -> torch.Tensor:
    """The eager body.

    Calls the wrapper.
    """
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
'''

EXAMPLES = [
    Example(
        name="a docstring that spans lines becomes one-line literals in parentheses",
        written=_WRITTEN,
        target={"params": ("input", "alignment")},
        rendered=('''\
    def op(input: torch.Tensor, alignment: int = 32) -> torch.Tensor:
        (
            'The eager body.\\n'
            '\\n'
            '    Calls the wrapper.\\n'
            '    '
        )
''',),
    ),
    Example(
        name="a backslash continuation",
        written=_WRITTEN.replace("    return WRAPPER(**OP_PARAMS)\n", "    x = 1 + \\\n        2\n    return WRAPPER(**OP_PARAMS)\n"),
        target={"params": ("input", "alignment")},
        refused="ops/quantize.py: a backslash continues the line of '= True\\n        try:\\n            x = 1 +'; fp4patch writes code with the target file's "
        "newlines: put it in parentheses instead",
    ),
]
