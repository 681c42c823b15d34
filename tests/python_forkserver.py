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
environment when it is imported. A request whose environment differs from the server's in any
variable torch or the interpreter reads at start-up (``TORCH*``, ``PYTORCH*``, ``CUDA*``,
``PYTHON*`` other than ``PYTHONPATH``/``PYTHONDONTWRITEBYTECODE``, ``OMP_*``, ``MKL_*``), or
that passes interpreter options (``-O``, ``-I``, ``-m`` ...), runs in a real new interpreter.

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
import json, os, runpy, sys, traceback, types
import torch  # noqa: F401 (only torch: what Dynamo sets up on import may depend on stubs a child installs first)
BASE_PATH = [p for p in sys.path[1:]]

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

_lock = threading.Lock()
_server: subprocess.Popen | None = None
_server_env: dict[str, str] | None = None


def enabled() -> bool:
    """Whether children may be forked (``FP4PATCH_TEST_FORKSERVER`` is not ``0``; POSIX only)."""
    return os.environ.get("FP4PATCH_TEST_FORKSERVER", "1") != "0" and hasattr(os, "fork")


def _forkable(args: list[str], env: dict[str, str]) -> bool:
    """A ``-c CODE ...`` or ``SCRIPT.py ...`` command whose start-up variables equal the server's."""
    if not args or (args[0].startswith("-") and args[0] != "-c") or (args[0] == "-c" and len(args) < 2):
        return False
    base = _server_env if _server_env is not None else dict(os.environ)
    for key in set(base) | set(env):
        if key.startswith(STARTUP_PREFIXES) and key not in HONOURED and base.get(key) != env.get(key):
            return False
    return True


def _start() -> subprocess.Popen:
    global _server, _server_env
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir(), env=dict(os.environ)
        )
        _server_env = dict(os.environ)
    return _server


def run_python(
    args: list[str], *, env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, *args], capture_output=True, text=True, ...)``, forked
    from the torch-importing server where the command allows it (see the module docstring).

    ``env``: the child's whole environment (default: this process's); ``cwd``: its working
    directory; ``timeout`` in seconds. Returns a :class:`subprocess.CompletedProcess` with text
    ``stdout``/``stderr``; raises :class:`subprocess.TimeoutExpired` like ``subprocess.run``.
    """
    env = dict(os.environ if env is None else env)
    cwd = str(cwd or os.getcwd())
    if not enabled() or not _forkable(args, env):
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False)
    with _lock, tempfile.TemporaryDirectory(prefix="fp4patch-fork-") as tmp:
        out, err = Path(tmp, "out"), Path(tmp, "err")
        server = _start()
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
