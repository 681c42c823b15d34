"""``python -m tests.faults ARGS``: ``python -m fp4patch ARGS`` with the crash tests' faults injected from outside.

``FP4PATCH_FAULT=<step>:<n>[:sigint|:sigterm]`` kills this process (SIGKILL, or sends SIGINT / SIGTERM) the n-th time
it completes ``step``; ``FP4PATCH_PAUSE=<step>:<seconds>`` sleeps after every such step (a slow disk, for the
concurrent importers). The steps are the engine's, each the end of one function this module wraps before the CLI
runs: ``plan`` (apply planned, nothing written: before the preflight), ``journal``, ``backup``, ``file``,
``bytecode``, ``manifest``, ``done`` (:mod:`fp4patch.engine.journal`'s steps) and ``tmp`` (a temporary file
written, not yet renamed over its target: before ``os.replace``). fp4patch itself reads neither variable.
"""

from __future__ import annotations

import functools
import os
import signal
import time

SIGNALS = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "": signal.SIGKILL}
_counts: dict[str, int] = {}


def reached(step: str) -> None:
    """Pause or fault at ``step`` as the environment asks (module docstring)."""
    pause_step, _, seconds = os.environ.get("FP4PATCH_PAUSE", "").partition(":")
    if pause_step == step:
        time.sleep(float(seconds or 0))
    name, _, rest = os.environ.get("FP4PATCH_FAULT", "").partition(":")
    if name != step:
        return
    count, _, how = rest.partition(":")
    _counts[step] = _counts.get(step, 0) + 1
    if _counts[step] == int(count or 1):
        os.kill(os.getpid(), SIGNALS[how])


def _after(step: str, function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        result = function(*args, **kwargs)
        reached(step)
        return result

    return wrapper


def _before(step: str, function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        reached(step)
        return function(*args, **kwargs)

    return wrapper


def install() -> None:
    """Wrap the engine's step functions (and ``os.replace`` of fp4patch's temporary files) to call :func:`reached`."""
    from fp4patch.engine import coordinator, journal
    from fp4patch.engine.files import TEMP_SUFFIX
    from fp4patch.engine.manifest import ManifestStore

    coordinator.check_apply = _before("plan", coordinator.check_apply)
    ManifestStore.write_journal = _after("journal", ManifestStore.write_journal)
    for step, name in (("backup", "keep_backup"), ("file", "write_file"), ("bytecode", "refresh_file"), ("manifest", "record"), ("done", "finish")):
        setattr(journal, name, _after(step, getattr(journal, name)))
    replace = os.replace

    def replace_reaching_tmp(src, dst, *args, **kwargs):
        if str(src).endswith(TEMP_SUFFIX):
            reached("tmp")
        return replace(src, dst, *args, **kwargs)

    os.replace = replace_reaching_tmp


if __name__ == "__main__":
    install()
    from fp4patch.cli.entry import main

    main()
