"""Errors that end a command with a one-line message and a documented exit code.

Exit codes (also in the README):

====  ===========================================================================
0     success: every selected spec is applied (or applicable, ``--applicable``)
1     a check failed: a spec is drifted or not applied, a trace case failed, a target
      file that is not valid Python, an interrupted apply/revert found by ``verify``
2     usage or environment error: bad arguments, malformed spec, missing distribution,
      an interpreter that does not run, an editable or zipped install
3     file system refusal: read-only files, a file changed since apply or different
      from RECORD, backups of another installed version, the lock held too long, a
      failed write; nothing was changed
====  ===========================================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_FILESYSTEM = 3


class Fp4PatchError(Exception):
    """Base class: ``str(error)`` is the one-line message, ``exit_code`` the process status."""

    exit_code = EXIT_USAGE


class UsageError(Fp4PatchError):
    """Bad command-line input (unknown spec id, conflicting specs, bad option)."""


class SpecError(Fp4PatchError):
    """A spec file is malformed; the message starts with ``path:line:``."""


class EnvironmentProblem(Fp4PatchError):
    """The target environment cannot be used: no interpreter, no distribution, bad layout."""


class DriftError(Fp4PatchError):
    """Upstream code no longer has what a spec needs; nothing was written."""

    exit_code = EXIT_CHECK_FAILED


class FileSystemError(Fp4PatchError):
    """A file could not be read, written or restored safely; nothing was changed."""

    exit_code = EXIT_FILESYSTEM
