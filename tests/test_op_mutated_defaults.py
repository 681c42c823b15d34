"""Every rendered op (the source of its schema) declares its mutated parameters, and every parameter before them,
without a default, and its entry passes each of them to the op.

torch before 2.13 hands a custom op's ``ADInplaceOrView`` kernel (``torch/_library/custom_ops.py``) its
arguments with the trailing ones equal to their default left out, then reads each mutated one by position:
the MoE ops (``output=None``, ``routing_replay_out=None``, ``workspace_buffer=None``) failed under
``fullgraph=True`` on torch 2.10 and 2.11 with ``IndexError: tuple index out of range`` inside "RuntimeError
when making fake tensor call". A parameter without a default is never left out, nor any before it
(docs/op-source.md, ``MUTATES_ARGS``). Checked on the rendered code of every ``custom-op`` target of the built-in
specs, and on a registered op: its schema has no default for a mutated argument. The torch matrix
(``make test-torch``) compiles the ops on the real older releases.
"""

from __future__ import annotations

import ast
import importlib.util

import pytest

from fp4patch.catalog.spec import load_specs

from .conftest import SPECS_DIR


def _targets() -> list:
    return [pytest.param(rendered, id=f"{spec.id} {target.versions}")
            for spec in load_specs(SPECS_DIR) for target in spec.targets for rendered in target.custom_ops]


def _register(block: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(block).body if isinstance(n, ast.FunctionDef) and n.name.startswith("_fp4patch_register_"))


def _mutated(register: ast.FunctionDef) -> tuple[str, ...]:
    """``MUTATES_ARGS`` of the rendered block, evaluated with its ``RELEASE`` (both stand in the register function)."""
    namespace: dict = {}
    for node in register.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in ("RELEASE", "MUTATES_ARGS"):
            exec(compile(ast.Module([node], []), "<block>", "exec"), namespace)  # noqa: S102
    return tuple(namespace["MUTATES_ARGS"])


@pytest.mark.parametrize("rendered", _targets())
def test_mutated_parameters_and_those_before_them_have_no_default(rendered) -> None:
    register = _register(rendered.block)
    functions = {n.name: n for n in register.body if isinstance(n, ast.FunctionDef)}
    mutated = _mutated(register)
    args = functions["op"].args
    positional = [a.arg for a in args.args]
    assert set(mutated) <= set(positional), f"op(): mutated parameters {mutated} not all positional"
    if mutated:
        last = max(positional.index(m) for m in mutated)
        with_default = positional[len(positional) - len(args.defaults):]
        assert not set(positional[: last + 1]) & set(with_default), f"op(): a default at or before {positional[last]!r}"
    # entry hands every op parameter to the op, by keyword: none left to a default the schema no longer has
    calls = [c for c in ast.walk(functions["entry"]) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "OP"]
    op_params = [a.arg for a in functions["op"].args.args]
    for call in calls:
        passed = {k.arg for k in call.keywords}
        assert set(op_params[: max([op_params.index(m) for m in mutated], default=-1) + 1]) <= passed, sorted(set(op_params) - passed)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_the_registered_schema_has_no_default_for_a_mutated_argument() -> None:
    """The trtllm FP4 MoE op of 0.7.4 (``output``, ``routing_replay_out``, ``workspace_buffer`` mutated), registered
    in this process from its rendered block: no default in its schema up to its last mutated argument."""
    import types

    import torch

    spec = next(s for s in load_specs(SPECS_DIR) if s.id == "trtllm-fp4-block-scale-moe-fullgraph")
    (target,) = [t for t in spec.targets_for("0.7.4") if not t.status]
    (rendered,) = target.custom_ops
    module = types.ModuleType("fp4patch_test_mutated_schema")
    namespace = vars(module)
    namespace["torch"] = torch
    register = _register(rendered.block)
    tree = ast.parse(rendered.block)  # the block's imports and its register function (not the redirect machinery)
    source = "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) or n is register or (
        isinstance(n, ast.FunctionDef) and n.name == register.name))
    namespace["trtllm_fp4_block_scale_moe"] = lambda **kwargs: None  # the wrapper the op's eager body would call
    namespace["_fp4patch_trtllm_fp4_block_scale_moe_thread"] = types.SimpleNamespace(inside_op=False)
    exec(compile(source, "<block>", "exec"), namespace)  # noqa: S102
    assert namespace[register.name]() is not None
    schema = getattr(torch.ops.fp4patch, rendered.op_name.split("::")[1]).default._schema
    arguments = list(schema.arguments)
    mutated = [i for i, a in enumerate(arguments) if a.alias_info is not None and a.alias_info.is_write]
    assert [arguments[i].name for i in mutated] == ["output", "routing_replay_out", "workspace_buffer"]
    assert all(a.default_value is None for a in arguments[: max(mutated) + 1]), [a.name for a in arguments if a.default_value is not None]
