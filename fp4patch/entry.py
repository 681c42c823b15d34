"""The ``fp4patch`` console script: answer a plain ``verify`` from the recorded verdict, else run the CLI.

``fp4patch verify`` right after ``fp4patch apply`` is what CI jobs and Docker builds run most.
When its arguments are only ``--python``, ``--site-packages``, ``--spec``, ``--specs-dir``,
``--skip``, ``--strict``, ``--json``, ``--format``, ``--applicable`` and ``--quiet``, and :func:`fp4patch.verdict.lookup`
finds a verdict whose every input is unchanged, the recorded reports are printed through
:mod:`fp4patch.render` (the same code the full command uses) without importing typer, pydantic,
libcst or the spec loader. In every other case — other options, a miss, any error — nothing
has been printed and :func:`fp4patch.cli.run` handles the command line from the start.
"""

from __future__ import annotations

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
        if not eq:
            if i >= len(rest):
                return None
            value = rest[i]
            i += 1
        if not value or value.startswith("-"):
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
    from .environment import from_python, resolve, start_probe
    from .errors import EXIT_OK, Fp4PatchError

    try:
        started = start_probe(args.python) if args.python else None
    except OSError:
        return None  # the full CLI reports it
    # imported while the target interpreter starts (on two cores, mostly in parallel with it)
    import importlib.metadata  # noqa: F401

    from .states import SATISFIED, UNSUPPORTED
    from .verdict import Request, lookup

    try:
        env = from_python(args.python, started) if started else resolve(None, args.site_packages)
    except Fp4PatchError:
        return None
    request = Request.of(args.spec, args.specs_dir, args.strict, args.skip)
    found = lookup(env, request)
    if found is None:
        return None
    from . import render

    ok_states = set(SATISFIED) | ({"applicable"} if args.applicable else set()) | (set() if request.required else {UNSUPPORTED})
    render.verify_output(found.header, found.reports, True, ok_states, args.output, quiet=args.quiet, left_out=render.skipped_lines(args.skip))
    return EXIT_OK


def main() -> None:
    """Console-script entry point (``fp4patch``, ``python -m fp4patch``); exit codes as documented
    (130 for Ctrl-C, with one line saying what state the files are in: :mod:`fp4patch.interrupts`)."""
    try:
        _main()
    except BrokenPipeError:  # `fp4patch verify --json | head -1`: the reader left; say nothing more
        # what the Python docs advise (library/signal, "Note on SIGPIPE"): point stdout at devnull so the
        # flush at exit raises no second error, and exit 1 as a write error does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    except KeyboardInterrupt:  # before the CLI took over (imports): nothing was written
        from .interrupts import EXIT_INTERRUPTED, message, settle

        settle()

        sys.stderr.write(f"fp4patch: {message()}\n")
        sys.exit(EXIT_INTERRUPTED)


def _main() -> None:
    if not any(key.startswith("_FP4PATCH_COMPLETE") for key in os.environ):
        args = parse_verify(sys.argv[1:])
        if args is not None:
            code = verify_recorded(args)
            if code is not None:
                sys.stdout.flush()
                sys.exit(code)
    from .cli import run

    run()
