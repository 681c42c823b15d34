"""The ``fp4patch`` console script: answer from the recorded verdict where nothing is to be done, else run the CLI.

``fp4patch verify`` right after ``fp4patch apply`` is what CI jobs and Docker builds run most.
When its arguments are only ``--python``, ``--site-packages``, ``--spec``, ``--specs-dir``,
``--skip``, ``--strict``, ``--json``, ``--format``, ``--applicable`` and ``--quiet``, and :func:`fp4patch.engine.verdict.lookup`
finds a verdict whose every input is unchanged, the recorded reports are printed through
:mod:`fp4patch.cli.render` (the same code the full command uses) without importing typer, pydantic,
libcst or the spec loader. In every other case — other options, a miss, any error — nothing
has been printed and :func:`fp4patch.cli.application.run` handles the command line from the start.

The same verdict answers the commands that would do nothing on such an environment:

- ``apply`` (the options of ``verify`` but ``--format`` and ``--applicable``, and ``--allow-modified``): every
  selected spec is satisfied, no journal, no input changed since the verdict, so it writes nothing: it says so as
  the full command does (an apply that has nothing to write, also on a read-only site-packages);
- ``diff`` (the same options and ``--stat``): nothing to change;
- ``status`` (``--python``, ``--site-packages``, ``--specs-dir``, ``--json``, ``--quiet``): from the status view a
  plain ``apply`` records beside its verdict (every known spec's report, the record's spec ids), on a release
  the catalog lists.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

from .render import output_conflict

#: Options taking a value, and flags, that the fast path understands (``--opt VALUE`` or ``--opt=VALUE``).
VALUE_OPTIONS = {"--python", "--site-packages", "--spec", "--specs-dir", "--format", "--skip"}
FLAGS = {"--json", "--applicable", "--quiet", "-q", "--strict"}


@dataclass
class VerifyArguments:
    """A ``verify`` command line the fast path can answer (see :func:`parse_verify`)."""

    python: str | None = None
    site_packages: str | None = None
    spec: list[str] = field(default_factory=list)
    specs_dir: str | None = None
    output: str = "table"
    applicable: bool = False
    quiet: bool = False
    strict: bool = False
    skip: list[str] = field(default_factory=list)


#: The options each command's fast path takes besides those of ``verify`` it shares (``--format`` and ``--applicable``
#: are verify's): values, flags; a command line with anything else goes to the full CLI.
OTHER_COMMANDS = {
    "apply": ({"--python", "--site-packages", "--spec", "--specs-dir", "--skip"}, {"--json", "--quiet", "-q", "--strict", "--allow-modified"}),
    "diff": ({"--python", "--site-packages", "--spec", "--specs-dir", "--skip"}, {"--json", "--quiet", "-q", "--strict", "--stat"}),
    "status": ({"--python", "--site-packages", "--specs-dir"}, {"--json", "--quiet", "-q"}),
}


@dataclass
class CommandArguments:
    """An ``apply``, ``diff`` or ``status`` command line the fast path can answer (see :func:`parse_command`)."""

    command: str
    python: str | None = None
    site_packages: str | None = None
    spec: list[str] = field(default_factory=list)
    specs_dir: str | None = None
    skip: list[str] = field(default_factory=list)
    as_json: bool = False
    quiet: bool = False
    strict: bool = False
    stat: bool = False



def _option_value(rest: list[str], i: int, eq: str, value: str) -> tuple[str | None, int]:
    """The value of the option just read from ``rest`` (``--name=value`` when ``eq``, else the next word, at ``i``) and
    the index after it; ``(None, i)`` when it has none or it looks like an option (the full CLI reports it)."""
    if not eq:
        if i >= len(rest):
            return None, i
        value, i = rest[i], i + 1
    return (None if not value or value.startswith("-") else value), i

def parse_command(argv: list[str]) -> CommandArguments | None:
    """``argv`` (without the program name) as :class:`CommandArguments` for ``apply``, ``diff`` or ``status`` with
    only the options of :data:`OTHER_COMMANDS`, each well-formed; None otherwise (the full CLI parses it, and reports
    a usage error where there is one)."""
    if not argv or argv[0] not in OTHER_COMMANDS:
        return None
    values, flags = OTHER_COMMANDS[argv[0]]
    args = CommandArguments(argv[0])
    rest = argv[1:]
    i = 0
    while i < len(rest):
        token = rest[i]
        name, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        i += 1
        if name in flags and not eq:
            attribute = {"--json": "as_json", "-q": "quiet", "--allow-modified": None}.get(name, name[2:])
            if attribute:
                setattr(args, attribute, True)
            continue
        if name not in values:
            return None
        value, i = _option_value(rest, i, eq, value)
        if value is None:
            return None
        if name in ("--spec", "--skip"):
            getattr(args, name[2:]).append(value)
        else:
            setattr(args, name[2:].replace("-", "_"), value)
    if (args.python and args.site_packages) or output_conflict(args.as_json, None, args.quiet):
        return None  # usage errors: the full CLI reports them
    return args


def command_recorded(args: CommandArguments) -> int | None:
    """Answer ``apply``/``diff``/``status`` from the recorded verdict (module docstring) and return exit code 0, or
    return None (a miss; nothing printed)."""
    from ..errors import EXIT_OK, Fp4PatchError
    from ..target.environment import from_python, resolve, start_probe

    try:
        started = start_probe(args.python) if args.python else None
    except OSError:
        return None
    import importlib.metadata  # noqa: F401

    from ..engine.verdict import Request, lookup

    try:
        env = from_python(args.python, started) if started else resolve(None, args.site_packages)
    except Fp4PatchError:
        return None
    request = Request.of(args.spec, args.specs_dir, args.strict, args.skip)
    try:
        found = lookup(env, request)
    except OSError:
        return None
    if found is None:
        return None
    from . import render

    if args.command == "status":
        view = found.status
        if not view or not view.get("listed") or args.skip:
            return None  # an apply with --spec/--skip/--strict recorded no status view; an unlisted release has notes
        render.status_output(found.header, view["recorded"], None, None, view["reports"], [], args.as_json, args.quiet)
        return EXIT_OK
    if args.command == "diff":
        if args.as_json:
            print(json.dumps({**found.header, "files": []}, indent=2))
        elif not args.quiet:
            line = render.nothing_to_change(found.header, found.reports)
            if args.stat:
                print(line, flush=True)
            else:
                sys.stderr.write(line + "\n")
        return EXIT_OK
    if args.skip:
        return None  # the full command lists what --skip left out
    required = {r["id"] for r in found.reports} if args.strict else set(args.spec)
    if not args.quiet or args.as_json:
        render.apply_output(found.header, [r["id"] for r in found.reports], found.reports, required, [], "", args.as_json)
    return EXIT_OK


def parse_verify(argv: list[str]) -> VerifyArguments | None:
    """``argv`` (without the program name) as :class:`VerifyArguments`, or None when it is anything
    but ``verify`` with the options the fast path knows, each well-formed (the full CLI then
    parses it, and reports a usage error where there is one)."""
    if not argv or argv[0] != "verify":
        return None
    args = VerifyArguments()
    as_json, output_format = False, None
    rest = argv[1:]
    i = 0
    while i < len(rest):
        token = rest[i]
        name, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        i += 1
        if name in FLAGS and not eq:
            if name == "--json":
                as_json = True
            elif name == "--applicable":
                args.applicable = True
            elif name == "--strict":
                args.strict = True
            else:
                args.quiet = True
            continue
        if name not in VALUE_OPTIONS:
            return None
        value, i = _option_value(rest, i, eq, value)
        if value is None:
            return None
        if name == "--spec":
            args.spec.append(value)
        elif name == "--skip":
            args.skip.append(value)
        elif name == "--format":
            output_format = value  # the last one wins, as in click
        else:
            setattr(args, name[2:].replace("-", "_"), value)
    if (args.python and args.site_packages) or output_conflict(as_json, output_format, args.quiet):
        return None  # usage errors: the full CLI reports them
    args.output = "json" if as_json or output_format == "json" else output_format or "table"
    return args


def verify_recorded(args: VerifyArguments) -> int | None:
    """Print the recorded verdict for ``args`` and return exit code 0, or return None (a miss;
    nothing printed)."""
    from ..errors import EXIT_OK, Fp4PatchError
    from ..target.environment import from_python, resolve, start_probe

    try:
        started = start_probe(args.python) if args.python else None
    except OSError:
        return None  # the full CLI reports it
    # imported while the target interpreter starts (on two cores, mostly in parallel with it)
    import importlib.metadata  # noqa: F401

    from ..engine.verdict import Request, lookup
    from ..states import SATISFIED, UNSUPPORTED

    try:
        env = from_python(args.python, started) if started else resolve(None, args.site_packages)
    except Fp4PatchError:
        return None
    from ..target.torch_support import installed_torch, supported

    torch_version = installed_torch(env)
    if torch_version is not None and not supported(torch_version):
        return None  # the full CLI refuses a torch below the supported range in one line
    request = Request.of(args.spec, args.specs_dir, args.strict, args.skip)
    try:
        found = lookup(env, request)
    except OSError:  # a state this user may not read: the full command says so in one line
        return None
    if found is None:
        return None
    from . import render

    ok_states = set(SATISFIED) | ({"applicable"} if args.applicable else set()) | (set() if request.required else {UNSUPPORTED})
    render.verify_output(found.header, found.reports, True, ok_states, args.output, quiet=args.quiet, left_out=render.skipped_lines(args.skip))
    return EXIT_OK


def main() -> None:
    """Console-script entry point (``fp4patch``, ``python -m fp4patch``); exit codes as documented
    (130 for Ctrl-C, 143 for SIGTERM, with one line saying what state the files are in: :mod:`fp4patch.interrupts`)."""
    import gc

    # One command per process, and its big objects live to the end: the libcst trees of the files it reads (about 2
    # million nodes on 0.7.4, none in a reference cycle: refcounting frees them) are walked by every full collection
    # of the cyclic collector, which took about 1 CPU-second of a 4.3 s first `apply` (5 full collections). Off, an
    # apply leaves about 2,700 objects in cycles, freed at exit.
    gc.disable()
    from ..interrupts import INTERRUPTS, on_terminate

    on_terminate()
    try:
        _main()
    except BrokenPipeError:  # `fp4patch verify --json | head -1`: the reader left; say nothing more
        # what the Python docs advise (library/signal, "Note on SIGPIPE"): point stdout at devnull so the
        # flush at exit raises no second error, and exit 1 as a write error does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    except INTERRUPTS as interrupt:  # before the CLI took over (imports): nothing was written
        from ..interrupts import exit_code, message, settle

        settle()

        sys.stderr.write(f"fp4patch: {message('', interrupt)}\n")
        sys.exit(exit_code(interrupt))


def _main() -> None:
    if not any(key.startswith("_FP4PATCH_COMPLETE") for key in os.environ):
        args = parse_verify(sys.argv[1:])
        if args is not None:
            code = verify_recorded(args)
            if code is not None:
                sys.stdout.flush()
                sys.exit(code)
        other = parse_command(sys.argv[1:])
        if other is not None:
            code = command_recorded(other)
            if code is not None:
                sys.stdout.flush()
                sys.exit(code)
    from .application import run

    run()
