"""Fingerprints of C++ launcher code a fake mirrors: the allocation a CPU check cannot run.

Some outputs of FlashInfer's wrappers are allocated by the C++ launcher, not by Python: with
``do_finalize=False`` the TRT-LLM-Gen MoE launcher (``flashinfer/data/csrc/trtllm_fused_moe_kernel_launcher.cu``
in every wheel from 0.6.0 to 0.7.4) allocates ``gemm2_output`` and ``expanded_idx_to_permuted_idx`` and returns
them. fp4patch's fakes mirror that allocation, but the CPU check (:mod:`fp4patch.checks.cpu_check`) only sees the
Python wrapper: those outputs come back ``not_visible``. What it can compare is the launcher's code.

A spec's ``mirrors`` may name a C++ definition as ``path.cu:Class.method`` (a method defined in the class
body or out of it as ``Class::method``) or ``path.cu:function`` (a free function; namespaces are looked
through), in any file whose suffix is in :data:`SUFFIXES`. Its piece is the digest of the definition's tokens
— return type, parameters, qualifiers and body — with comments removed and whitespace normalised, so that
clang-format and comment edits keep it; every overload of the name counts, in file order. A name the file does
not define is ``missing``, like a Python piece (:mod:`fp4patch.catalog.fingerprint`).

This is a token scanner, not a C++ parser: it finds a definition by its name followed by a parameter list and a
body at the scope's own brace level; it does not expand macros or templates. That is enough for the launcher's
classes and free functions, which is all fp4patch names.
"""

from __future__ import annotations

import re

#: Files whose pieces are read as C++ (what ``mirrors`` may name besides ``.py``).
SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")

_TOKEN = re.compile(
    r"""
    (?P<string>[uUL]?R"(?P<delim>[^()\\\s]{0,16})\((?:.|\n)*?\)(?P=delim)"   # raw string
      | (?:u8|[uUL])?"(?:\\.|[^"\\\n])*"                                  # string
      | (?:u8|[uUL])?'(?:\\.|[^'\\\n])*')                                 # char
    | (?P<comment>//[^\n]*|/\*(?:.|\n)*?\*/)
    | (?P<directive>(?m:^)[ \t]*\#[^\n]*)
    | (?P<word>[A-Za-z_]\w*)
    | (?P<number>\.?\d(?:[\w.]|[eEpP][+-])*)
    | (?P<op>::|->|<<=|>>=|\.\.\.|[-+*/%&|^!=<>]=|&&|\|\||\+\+|--|<<|.)
    """,
    re.VERBOSE | re.MULTILINE,
)


def is_native(file: str) -> bool:
    """True for a site-packages-relative path read as C++ (its suffix is in :data:`SUFFIXES`)."""
    return file.endswith(SUFFIXES)


def tokens(text: str) -> list[str]:
    """The tokens of C++ ``text``: comments dropped, whitespace gone, string literals kept whole.

    A preprocessor line (``#include``, ``#define``...) is one token, its whitespace normalised (a
    comment at its end is dropped); a backslash continuing a line is whitespace.
    """
    out = []
    for match in _TOKEN.finditer(text.replace("\\\n", " ")):
        if match.lastgroup == "comment":
            continue
        token = match.group(0)
        if match.lastgroup == "directive":
            token = " ".join(re.sub(r"//.*|/\*.*?\*/", " ", token).split())
        if token.isspace():
            continue
        out.append(token)
    return out


def _close(toks: list[str], start: int, opening: str, closing: str) -> int:
    """Index of the token closing the bracket opened at ``toks[start]`` (len(toks) when unbalanced)."""
    depth = 0
    for i in range(start, len(toks)):
        if toks[i] == opening:
            depth += 1
        elif toks[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    return len(toks)


def _scope_items(toks: list[str], start: int, end: int):
    """Yield ``(index, token)`` of the tokens at the scope's own brace level in ``toks[start:end]``:
    bodies of functions and classes are skipped, ``namespace`` and ``extern "C"`` blocks looked into."""
    i = start
    while i < end:
        tok = toks[i]
        if tok == "{":
            back = i - 1
            while back >= start and toks[back] not in (";", "}", "{") and not toks[back].startswith("#"):
                back -= 1
            head = toks[back + 1 : i]
            if head and (head[0] == "namespace" or (head[0] == "extern" and len(head) == 2)):
                i += 1  # look into a namespace / extern "C" block
                continue
            yield i, tok
            i = _close(toks, i, "{", "}") + 1
            continue
        if tok == "}":  # the end of a namespace looked into
            i += 1
            continue
        yield i, tok
        i += 1


def _definition_at(toks: list[str], name_index: int, start: int, end: int) -> tuple[int, int] | None:
    """``(first, last)`` token indices of the function definition whose name stands at ``name_index`` (a
    ``(`` follows it), from its return type through its body's ``}``; None for a declaration or a call."""
    paren_end = _close(toks, name_index + 1, "(", ")")
    i = paren_end + 1
    while i < end and toks[i] not in ("{", ";", "="):
        if toks[i] == "(":  # noexcept(...), a trailing attribute
            i = _close(toks, i, "(", ")")
        i += 1
    if i >= end or toks[i] != "{":
        return None
    body_end = _close(toks, i, "{", "}")
    first = name_index
    while first - 1 >= start and toks[first - 1] not in (";", "}", "{") and not toks[first - 1].startswith("#") and not (toks[first - 1] == ":" and toks[first - 2] in ("public", "private", "protected")):
        first -= 1
    return first, body_end


def _class_body(toks: list[str], name: str) -> tuple[int, int] | None:
    """``(index of its "{", index of its "}")`` of the first definition of class/struct ``name``."""
    for i, tok in enumerate(toks[:-1]):
        if tok in ("class", "struct") and toks[i + 1] == name:
            j = i + 2
            while j < len(toks) and toks[j] not in ("{", ";", "(", ")"):
                j += 1
            if j < len(toks) and toks[j] == "{":
                return j, _close(toks, j, "{", "}")
    return None


def _spans(toks: list[str], qualname: str) -> list[tuple[int, int]]:
    """``(first, last)`` token indices of each definition ``qualname`` names (see :func:`definitions`)."""
    parts = qualname.split(".")
    found: list[tuple[int, int]] = []
    if len(parts) == 1:
        name = parts[0]
        for i, tok in _scope_items(toks, 0, len(toks)):
            if tok == name and i + 1 < len(toks) and toks[i + 1] == "(" and (i == 0 or toks[i - 1] not in ("::", ".", "->")):
                span = _definition_at(toks, i, 0, len(toks))
                if span:
                    found.append(span)
    elif len(parts) == 2:
        cls, name = parts
        body = _class_body(toks, cls)
        if body:
            for i, tok in _scope_items(toks, body[0] + 1, body[1]):
                if tok == name and i + 1 < body[1] and toks[i + 1] == "(" and toks[i - 1] not in ("::", ".", "->"):
                    span = _definition_at(toks, i, body[0] + 1, body[1])
                    if span:
                        found.append(span)
        for i, tok in _scope_items(toks, 0, len(toks)):
            if tok == name and i >= 2 and toks[i - 1] == "::" and toks[i - 2] == cls and i + 1 < len(toks) and toks[i + 1] == "(":
                span = _definition_at(toks, i, 0, len(toks))
                if span:
                    found.append(span)
    return found


def definitions(text: str, qualname: str) -> list[str]:
    """The normalised text (tokens joined by one space) of each definition ``qualname`` names in C++ ``text``:
    ``function`` (free functions at namespace level), or ``Class.method`` (in the class body, then any
    ``Class::method`` out of it); overloads in file order; [] when none."""
    toks = tokens(text)
    return [" ".join(toks[a : b + 1]) for a, b in _spans(toks, qualname)]

_CONTROL = ("if", "for", "while", "switch", "catch")


def _statements(toks: list[str], start: int, end: int, names: frozenset[str]) -> list[str]:
    """The statements of the block ``toks[start:end]`` (a function body without its braces) that name any of
    ``names`` (a token equal to one; ``return`` selects every return statement), each as
    ``"<enclosing conditions> => <statement>"``: the heads of the ``if``/``for``/``while``/``switch`` it stands
    in (an ``else`` as ``else of <condition>``) and its tokens, joined by spaces."""
    out: list[str] = []

    def emit(first: int, last: int, heads: tuple[str, ...]) -> None:
        statement = toks[first : last + 1]
        if names & set(statement):
            out.append(" | ".join(heads) + " => " + " ".join(statement))

    def one(i: int, heads: tuple[str, ...]) -> int:
        """Parse one statement at ``i``; the index after it."""
        if i >= end:
            return end
        tok = toks[i]
        if tok == "{":
            close = min(_close(toks, i, "{", "}"), end)
            block(i + 1, close, heads)
            return close + 1
        if tok == ";":
            return i + 1
        if tok in _CONTROL and i + 1 < end and toks[i + 1] == "(":
            close = _close(toks, i + 1, "(", ")")
            head = " ".join(toks[i : close + 1])
            after = one(close + 1, (*heads, head))
            if tok == "if" and after < end and toks[after] == "else":
                after = one(after + 1, (*heads, "else of " + head))
            return after
        if tok in ("do", "try", "else"):
            after = one(i + 1, (*heads, tok))
            if tok == "do" and after < end and toks[after] == "while":  # do { } while (...);
                close = _close(toks, after + 1, "(", ")")
                emit(after, min(close + 1, end - 1), (*heads, "do"))
                return close + 2
            return after
        j = i
        while j < end and toks[j] != ";":
            if toks[j] in ("(", "{", "["):
                j = _close(toks, j, toks[j], {"(": ")", "{": "}", "[": "]"}[toks[j]])
            j += 1
        emit(i, min(j, end - 1), heads)
        return j + 1

    def block(i: int, stop: int, heads: tuple[str, ...]) -> None:
        while i < stop:
            i = one(i, heads) if toks[i] != "}" else i + 1

    block(start, end, ())
    return out


def selected_statements(text: str, qualname: str, names: tuple[str, ...]) -> list[str] | None:
    """For each definition ``qualname`` names in C++ ``text`` (:func:`definitions`), its statements that name
    any of ``names`` (:func:`_statements`), in order; None when ``text`` defines no such function."""
    toks = tokens(text)
    spans = _spans(toks, qualname)
    if not spans:
        return None
    wanted = frozenset(names)
    out: list[str] = []
    for first, last in spans:
        brace = first
        depth = 0
        while brace < last:  # the body's "{": the first one after the parameter list
            if toks[brace] == "(":
                depth += 1
            elif toks[brace] == ")":
                depth -= 1
            elif toks[brace] == "{" and depth == 0 and toks[brace - 1] != "=":
                break
            brace += 1
        out.extend(_statements(toks, brace + 1, last, wanted))
    return out


def piece_text(text: str, qualname: str) -> str | None:
    """The normalised code a piece ``qualname`` of a C++ file names (what its digest is taken of), or None when
    ``text`` does not define it: ``Class.method`` / ``function`` — every definition (:func:`definitions`), one a
    line; ``Class.method[a,b]`` — only the statements of those definitions that name ``a`` or ``b``, with the
    conditions they stand under (:func:`selected_statements`; ``return`` names every return statement): the
    allocation of an output and what is returned, not the rest of a long launcher method."""
    name, bracket, rest = qualname.partition("[")
    if bracket:
        found = selected_statements(text, name, tuple(n.strip() for n in rest.rstrip("]").split(",") if n.strip()))
    else:
        found = definitions(text, name) or None
    return None if found is None else "\n".join(found)
