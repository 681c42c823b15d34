"""Fresh interpreters for the tests' child scripts, forked from one that has already imported torch.

Most checks of this suite run a script in a fresh interpreter that imports torch and FlashInfer
from an unpacked release (``python -c SCRIPT PARAMS``). Importing ``torch`` costs about 3
CPU-seconds each time, and the suite starts a few hundred such interpreters.

:func:`run_python` runs ``[sys.executable, *args]`` as :func:`subprocess.run` would, but, where
it can, in a process forked from a server interpreter (one per pytest worker, started on first
use) that imported torch and nothing else — not ``torch._dynamo``, which captures functions such
as ``torch.cuda.get_device_capability`` when it is imported (``device_interface``), after the
children have stubbed them; nothing of FlashInfer or fp4patch: the child gets its own ``cwd``,
environment, ``sys.argv``, ``sys.path`` (``PYTHONPATH`` entries first, as at start-up), stdout
and stderr, so a script cannot tell the difference — except for what torch reads from the
environment when it is imported. A request whose environment differs from this process's in any
variable torch or the interpreter reads at start-up (``TORCH*``, ``PYTORCH*``, ``CUDA*``,
``PYTHON*`` other than ``PYTHONPATH``/``PYTHONDONTWRITEBYTECODE``, ``OMP_*``, ``MKL_*``), or
that passes interpreter options (``-O``, ``-I``, ``-X`` ...), runs in a real new interpreter.
Servers start with this process's environment; when a test changes one of those variables in
``os.environ`` for good, the next request starts a server that has it.

The tests' ``python -m fp4patch`` runs (about 550 per suite, :func:`conftest.run_cli`) come from
a second server that imported what the CLI imports (typer, rich, libcst, packaging, fp4patch —
about 0.9 CPU-seconds a run) and neither torch nor FlashInfer, which the CLI never imports.
Tests that look at what the CLI imports, or at its start-up, run a real interpreter.

``FP4PATCH_TEST_FORKSERVER=0`` turns the server off (every child a new interpreter, as before).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

#: variables read when torch or the interpreter starts: a child that changes one needs a new interpreter
STARTUP_PREFIXES = ("TORCH", "PYTORCH", "CUDA", "PYTHON", "OMP_", "MKL_", "KMP_", "LD_", "NVIDIA_")
#: start-up variables the forked child can honour itself
HONOURED = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")

# The server: imports torch once, then forks a child per request read from stdin (one JSON line),
# answering with the child's pid, then its exit status. Runs as `python -c SERVER`.
SERVER = r'''
import importlib, json, os, runpy, sys, traceback, types
for name in json.loads(sys.argv[1]):  # the preload: modules every child would import first
    importlib.import_module(name)
# sys.path after the server's own PYTHONPATH entries (which follow sys.path[0]): a child puts its own
# PYTHONPATH there instead, as a fresh interpreter started with the child's environment would
_OWN = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
BASE_PATH = sys.path[1 + len(_OWN):] if [os.path.abspath(p) for p in sys.path[1:1 + len(_OWN)]] == [os.path.abspath(p) for p in _OWN] else sys.path[1:]

def child(req):
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.dont_write_bytecode = bool(req["env"].get("PYTHONDONTWRITEBYTECODE"))
    extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    argv = req["argv"]
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        first = ""
    elif argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's path in argv[0]
        first = os.getcwd()  # as `python -m`: the working directory first on sys.path
    else:
        sys.argv = list(argv)
        first = os.path.dirname(os.path.realpath(argv[0]))
    sys.path[:] = [first, *[os.path.abspath(p) for p in extra], *BASE_PATH]
    fd_in = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd_in, 0)
    sys.stdin = open(os.devnull)
    for fd, path in ((1, req["out"]), (2, req["err"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    code = 0
    try:
        if argv[0] == "-c":
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = __builtins__
            sys.modules["__main__"] = main
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        elif argv[0] == "-m":
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        import atexit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)

for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(req)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    print(json.dumps({"rc": rc}), flush=True)
'''

#: what the child scripts' server imports: torch only (what Dynamo sets up on import may depend on
#: device stubs a child installs first, e.g. device_interface keeps torch.cuda's functions)
TORCH = ("torch",)
#: what ``python -m fp4patch`` imports, for the tests' CLI runs (neither torch nor FlashInfer: the
#: CLI imports neither, see test_workflows.py); fp4patch reads no environment at import
CLI = ("typer", "rich.console", "rich.table", "rich.markdown", "libcst", "packaging.specifiers", "filelock", "fp4patch.cli.application", "fp4patch.engine.coordinator", "fp4patch.catalog.spec", "fp4patch.ops.render", "fp4patch.codemods")

_lock = threading.Lock()
#: one server per preload and start-up environment (a test may change os.environ for good, e.g.
#: by importing a library that sets a variable: the next request then gets a server that has it)
_servers: dict[tuple, subprocess.Popen] = {}


def enabled() -> bool:
    """Whether children may be forked (``FP4PATCH_TEST_FORKSERVER`` is not ``0``; POSIX only)."""
    return os.environ.get("FP4PATCH_TEST_FORKSERVER", "1") != "0" and hasattr(os, "fork")


def _startup(env) -> tuple[tuple[str, str], ...]:
    """The variables of ``env`` read when torch or the interpreter starts (and that a fork cannot honour)."""
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(STARTUP_PREFIXES) and k not in HONOURED))


def _forkable(args: list[str], env: dict[str, str]) -> bool:
    """A ``-c CODE ...``, ``-m MODULE ...`` or ``SCRIPT.py ...`` command whose start-up variables
    equal this process's (which its server is started with)."""
    if not args or (args[0].startswith("-") and args[0] not in ("-c", "-m")) or (args[0] in ("-c", "-m") and len(args) < 2):
        return False
    return _startup(env) == _startup(os.environ)


def _start(preload: tuple[str, ...]) -> subprocess.Popen:
    key = (preload, _startup(os.environ))
    server = _servers.get(key)
    if server is None or server.poll() is not None:
        server = _servers[key] = subprocess.Popen(
            [sys.executable, "-c", SERVER, json.dumps(list(preload))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=tempfile.gettempdir(),
            env=dict(os.environ),
        )
    return server


def run_python(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    timeout: float | None = None,
    preload: tuple[str, ...] = TORCH,
) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, *args], capture_output=True, text=True, ...)``, forked
    from the torch-importing server where the command allows it (see the module docstring).

    ``env``: the child's whole environment (default: this process's); ``cwd``: its working
    directory; ``timeout`` in seconds; ``preload``: the modules the server imports (one server per
    preload and pytest worker: :data:`TORCH` for child scripts, :data:`CLI` for ``-m fp4patch``). Returns a :class:`subprocess.CompletedProcess` with text
    ``stdout``/``stderr``; raises :class:`subprocess.TimeoutExpired` like ``subprocess.run``.
    """
    env = dict(os.environ if env is None else env)
    cwd = str(cwd or os.getcwd())
    if not enabled() or not _forkable(args, env):
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False)
    with _lock, tempfile.TemporaryDirectory(prefix="fp4patch-fork-") as tmp:
        out, err = Path(tmp, "out"), Path(tmp, "err")
        server = _start(preload)
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(json.dumps({"argv": args, "env": env, "cwd": cwd, "out": str(out), "err": str(err)}) + "\n")
        server.stdin.flush()
        pid = json.loads(server.stdout.readline())["pid"]
        killed = []

        def kill() -> None:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill) if timeout else None
        if timer:
            timer.start()
        try:
            line = server.stdout.readline()
        finally:
            if timer:
                timer.cancel()
        if not line:
            raise RuntimeError(f"the fork server died running {args[:1]} (FP4PATCH_TEST_FORKSERVER=0 runs without it)")
        rc = json.loads(line)["rc"]
        stdout = out.read_text(errors="replace") if out.exists() else ""
        stderr = err.read_text(errors="replace") if err.exists() else ""
        if killed:
            raise subprocess.TimeoutExpired([sys.executable, *args], timeout, stdout, stderr)
        return subprocess.CompletedProcess([sys.executable, *args], rc, stdout, stderr)


def child_json(site: Path, script: str | Path, params: dict, *, mark: str, timeout: float = 900, env: dict[str, str] | None = None) -> dict | list:
    """Run ``script`` (code, or the path of a ``.py`` file) with ``json.dumps(params)`` as its
    argument, in a fresh interpreter that imports FlashInfer from ``site`` (cwd and PYTHONPATH;
    ``FLASHINFER_*``, ``CUDA_*`` and ``TORCH_LOGS`` of this process left out, ``env`` added).
    Returns the JSON of the last stdout line starting with ``mark``; fails the test (with the
    child's output) when the child exits non-zero or prints no such line."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_", "CUDA_", "TORCH_LOGS"))}
    full.update(env or {})
    full["PYTHONPATH"] = str(site)
    command = [str(script)] if isinstance(script, Path) else ["-c", script]
    done = run_python([*command, json.dumps(params)], env=full, cwd=site, timeout=timeout)
    lines = [line[len(mark) :] for line in done.stdout.splitlines() if line.startswith(mark)]
    assert done.returncode == 0 and lines, f"child exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads(lines[-1])
