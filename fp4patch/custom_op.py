"""The op-source renderer's old import path, kept for imports of ``fp4patch.custom_op``.

The renderer is the package :mod:`fp4patch.ops`, one module per construct of ``docs/op-source.md``;
:mod:`fp4patch.ops.render` holds :func:`render` and :func:`plain_source` and re-exports the public names.
New code imports from there.
"""

from __future__ import annotations

from .ops.guard import _carried_guard
from .ops.render import (
    FUNCTIONS,
    LOAD_HINT,
    OMIT_PLACEHOLDER,
    OP_PLACEHOLDER,
    PARAMS_PLACEHOLDER,
    SPLICE_PLACEHOLDER,
    TORCH_FLOOR,
    WRAPPER_PLACEHOLDER,
    CustomOpTarget,
    OpSourceError,
    Rendered,
    check_op_source,
    helper_imports,
    plain_source,
    read_helpers,
    release_data,
    render,
    source_defaults,
)

__all__ = [
    "FUNCTIONS",
    "LOAD_HINT",
    "OMIT_PLACEHOLDER",
    "OP_PLACEHOLDER",
    "PARAMS_PLACEHOLDER",
    "SPLICE_PLACEHOLDER",
    "TORCH_FLOOR",
    "WRAPPER_PLACEHOLDER",
    "CustomOpTarget",
    "OpSourceError",
    "Rendered",
    "_carried_guard",
    "check_op_source",
    "helper_imports",
    "plain_source",
    "read_helpers",
    "release_data",
    "render",
    "source_defaults",
]
