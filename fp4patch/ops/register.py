"""``OP`` and the register function: the op source's code, registered as a custom op (``docs/op-source.md``, OP).

Owns ``_fp4patch_register_<function>()``, the function of the block that holds the op source's code: the op
source's statements sorted into imports (moved above it), ``entry``/``op``/``fake``, private helpers and data,
``RELEASE`` merged (:func:`_sorted_statements`); then, in order, a guard for a torch without
``torch.library.custom_op``, the data (``MUTATES_ARGS = ()`` when the source has none), the helpers, ``entry``,
the reuse of an op already registered in this process, ``op`` as ``torch.library.custom_op`` (its eager body
marked ``inside_op``, so that the wrapper it calls runs its own code: :func:`_marked_eager_body`), ``fake`` as
its fake, and ``OP = torch.ops.fp4patch.<name>.default`` (:func:`_register_function`). The op's name stands as
:data:`~fp4patch.ops.source._NAME_SENTINEL` until :mod:`fp4patch.ops.render` knows the fingerprint.

May import: the standard library, libcst (inside functions), :mod:`fp4patch.ops.source` and
:mod:`fp4patch.ops.release` (the merged ``RELEASE`` statement).
"""

from __future__ import annotations

from .release import _release_statement
from .source import _NAME_SENTINEL, EXAMPLE_SOURCE, FUNCTIONS, CustomOpTarget, Example, _assigns, _code, _is_docstring


def _sorted_statements(module, target: CustomOpTarget) -> tuple[list, dict, list, list]:
    """The statements of ``module`` (the resolved op source, libcst) as ``(imports, functions, helpers, data)``:
    its imports, each once (a shared helper's import the source has too); ``entry``/``op``/``fake`` by name;
    the private helpers; the data, ``RELEASE`` replaced by the target's merged dict. The docstring is left out."""
    import libcst as cst

    imports: list[cst.BaseStatement] = []
    functions: dict[str, cst.FunctionDef] = {}
    helpers: list[cst.BaseStatement] = []
    data: list[cst.BaseStatement] = []
    for index, statement in enumerate(module.body):
        if index == 0 and _is_docstring(statement):
            continue
        if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], (cst.Import, cst.ImportFrom)):
            if _code(statement) not in {_code(s) for s in imports}:  # a shared helper's import the source has too
                imports.append(statement)
        elif isinstance(statement, cst.FunctionDef) and statement.name.value in FUNCTIONS:
            functions[statement.name.value] = statement
        elif isinstance(statement, cst.FunctionDef):
            helpers.append(statement)
        else:
            data.append(_release_statement(statement, target) if _assigns(statement, "RELEASE") else statement)
    return imports, functions, helpers, data


def _marked_eager_body(op_def, function: str):
    """``op_def`` (libcst) with its statements after the docstring run inside ``try``/``finally`` with
    ``_fp4patch_<function>_thread.inside_op`` set: while the op's eager body runs, the wrapper it calls
    runs its own code, whatever compile holds ``torch.compiler._is_compiling_flag``
    (:func:`fp4patch.ops.redirect._tail_state`)."""
    import libcst as cst

    statements = list(op_def.body.body)
    start = 1 if statements and _is_docstring(statements[0]) else 0
    if start == len(statements):
        return op_def
    state = f"_fp4patch_{function}_thread"
    marked = cst.parse_statement(
        "try:\n"
        "    pass\n"
        "finally:\n"
        f"    {state}.inside_op = _fp4patch_outer\n"
    )
    marked = marked.with_changes(body=marked.body.with_changes(body=statements[start:]))
    enter = [
        cst.parse_statement(f"_fp4patch_outer = {state}.inside_op  # the wrapper called below runs its own code\n"),
        cst.parse_statement(f"{state}.inside_op = True\n"),
    ]
    return op_def.with_changes(body=op_def.body.with_changes(body=[*statements[:start], *enter, marked]))


def _decorator(expression: str):
    import libcst as cst

    return cst.Decorator(decorator=cst.parse_expression(expression))


def _register_function(target: CustomOpTarget, data: list, helpers: list, edited: dict):
    """``def _fp4patch_register_<function>():`` (libcst), with the block's four header comment lines.

    Args:
        target: the target (its ``function`` and provenance).
        data: the op source's data statements (:func:`_sorted_statements`); ``MUTATES_ARGS = ()`` is added
            to it when it has none.
        helpers: the private helper functions (the op source's and the inlined ones).
        edited: ``entry``, ``op`` and ``fake`` as rendered for the release, by name.
    """
    import libcst as cst

    body: list[cst.BaseStatement] = []
    op_def = edited["op"].with_changes(
        decorators=[_decorator(f'torch.library.custom_op("fp4patch::{_NAME_SENTINEL}", mutates_args=MUTATES_ARGS)')]
    )
    fake_def = edited["fake"].with_changes(decorators=[_decorator("op.register_fake")])
    has_mutates = any(_assigns(s, "MUTATES_ARGS") for s in data)
    if not has_mutates:
        data.append(cst.parse_statement("MUTATES_ARGS = ()\n"))
    body.append(
        cst.parse_statement(
            'if getattr(getattr(torch, "library", None), "custom_op", None) is None or getattr(\n'
            '    getattr(torch, "compiler", None), "is_compiling", None\n'
            ") is None:\n"
            "    return None  # no torch.library.custom_op: the wrapper stays as it was\n"
        )
    )
    body.extend(data)
    body.extend(helpers)
    body.append(edited["entry"])
    body.append(
        cst.parse_statement(
            "try:  # already registered in this process (a module reload, a second copy): reuse it\n"
            f"    OP = torch.ops.fp4patch.{_NAME_SENTINEL}.default\n"
            "    return entry\n"
            "except (AttributeError, RuntimeError):\n"
            "    pass\n"
        )
    )
    body.extend([op_def, fake_def])
    body.append(cst.parse_statement(f"OP = torch.ops.fp4patch.{_NAME_SENTINEL}.default\n"))
    body.append(cst.parse_statement("return entry\n"))
    fn = target.function
    return cst.FunctionDef(
        name=cst.Name(f"_fp4patch_register_{fn}"),
        params=cst.Parameters(),
        body=cst.IndentedBlock(body=body),
        leading_lines=[
            cst.EmptyLine(comment=cst.Comment(f"# fp4patch {target.spec_id}: {fn} traces as the custom op fp4patch::{_NAME_SENTINEL}")),
            cst.EmptyLine(comment=cst.Comment(f"# under torch.compile; rendered from {target.source_label} for FlashInfer {target.versions}.")),
            cst.EmptyLine(comment=cst.Comment("# Registered when a compile or an export first needs it; eager calls run the original code")),
            cst.EmptyLine(comment=cst.Comment("# after one attribute read.")),
        ],
    )


_WRITTEN = EXAMPLE_SOURCE

EXAMPLES = [
    Example(
        name="op registered as the custom op, fake as its fake, OP bound after registration",
        written=_WRITTEN,
        target={"params": ("input", "alignment", "mode")},
        rendered=('''\
    @torch.library.custom_op("fp4patch::quantize_ba452e4a", mutates_args=MUTATES_ARGS)
    def op(input: torch.Tensor, alignment: int = 32, mode: int = 0) -> torch.Tensor:
        _fp4patch_outer = _fp4patch_quantize_thread.inside_op  # the wrapper called below runs its own code
        _fp4patch_quantize_thread.inside_op = True
        try:
            return quantize(input=input, alignment=alignment, mode=mode)
        finally:
            _fp4patch_quantize_thread.inside_op = _fp4patch_outer


    @op.register_fake
    def fake(input, alignment=32, mode=0):
        return input.new_empty(input.shape)
    OP = torch.ops.fp4patch.quantize_ba452e4a.default
    return entry
''',),
    ),
    Example(
        name="the register function: torch guard, data, private helpers, entry, then the reuse of a registered op",
        written=_WRITTEN.replace("def entry(**OP_PARAMS):\n    return OP(**OP_PARAMS)\n",
                                 "def _as_int(value):\n    return int(value)\n\n\ndef entry(**OP_PARAMS):\n    return OP(**OP_PARAMS, mode=_as_int(mode))\n"),
        target={"params": ("input", "alignment", "mode")},
        rendered=('''\
def _fp4patch_register_quantize():
    if getattr(getattr(torch, "library", None), "custom_op", None) is None or getattr(
        getattr(torch, "compiler", None), "is_compiling", None
    ) is None:
        return None  # no torch.library.custom_op: the wrapper stays as it was
    MUTATES_ARGS = ()


    def _as_int(value):
        return int(value)


    def entry(input, alignment=32, mode=0):
        return OP(input=input, alignment=alignment, mode=_as_int(mode))
    try:  # already registered in this process (a module reload, a second copy): reuse it
        OP = torch.ops.fp4patch.quantize_aacb98b8.default
        return entry
    except (AttributeError, RuntimeError):
        pass
''',),
    ),
    Example(
        name="an op body that is only a docstring is not marked",
        written=_WRITTEN.replace('    return WRAPPER(**OP_PARAMS)\n', '    """Never run."""\n'),
        target={"params": ("input", "alignment", "mode")},
        rendered=('''\
    def op(input: torch.Tensor, alignment: int = 32, mode: int = 0) -> torch.Tensor:
        """Never run."""


    @op.register_fake
''',),
    ),
]
