"""What every command shares: the typer app, the consoles, the global options, error handling, JSON
output and progress on stderr.

Every command takes ``--json``. Bad input prints a message naming file, key and value and exits
with code 2 (no traceback); a failed check (the model and a solver disagree, or an edited
record) exits 3; Ctrl-C exits 130 after printing what was found. The global options
(``--calibration``, ``--quiet``) may come before or after the command's name.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core
from rich.console import Console
from rich.markup import escape

from codesign import __version__
from codesign.errors import InputError, ModelError
from codesign.jsonio import dumps
from codesign.model.calibration import CalibrationSet, load_calibration

#: exit codes: 1 no design (infeasible, nothing found, a re-check failed to reproduce); 2 bad input;
#: 3 a check failed (a solver and the model disagree, an edited record); 130 Ctrl-C
EXIT_NONE, EXIT_INPUT, EXIT_CHECK, EXIT_INTERRUPT = 1, 2, 3, 130

#: options of the whole program, accepted anywhere on the command line: name -> takes a value
GLOBAL_OPTIONS = {"--calibration": True, "--quiet": False, "-q": False}


class _Group(typer.core.TyperGroup):
    """The command group: global options after the command's name are read as if given before it,
    and commands are listed in the order they were defined."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        front: list[str] = []
        rest: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            name = a.split("=", 1)[0]
            if a == "--":
                rest += args[i:]
                break
            if name in GLOBAL_OPTIONS:
                front.append(a)
                if GLOBAL_OPTIONS[name] and "=" not in a and i + 1 < len(args):
                    front.append(args[i + 1])
                    i += 1
            else:
                rest.append(a)
            i += 1
        return super().parse_args(ctx, front + rest)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    help="Provably optimal hardware/schedule co-design for distributed LLM inference.",
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


@dataclass
class Session:
    """The global options of one command line (``ctx.obj``)."""

    calibration: CalibrationSet | None = None
    quiet: bool = False


def _version(value: bool) -> None:
    if value:
        out.print(f"codesign {__version__}")
        raise typer.Exit()


#: ``--calibration FILE``, a global option (accepted before or after the command's name)
CalibrationOpt = Annotated[Path | None, typer.Option(
    "--calibration", help="calibration TOML to use instead of the shipped one (`codesign calibrate --out` writes one)")]


def _options(
    ctx: typer.Context,
    calibration: CalibrationOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress on stderr")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    """Provably optimal hardware/schedule co-design for distributed LLM inference."""
    # the calibration is read now: a missing or invalid file is bad input before any command runs
    ctx.obj = Session(calibration=None if calibration is None else load_calibration(calibration), quiet=quiet)


def session(ctx: typer.Context) -> Session:
    """The global options of the command line being run (``ctx.obj`` of the root context; the
    defaults for a command run outside the app, as tests may)."""
    root = ctx.find_root()
    return root.obj if isinstance(root.obj, Session) else Session()


JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
BudgetOpt = Annotated[
    list[str] | None,
    typer.Option("--budget", help="'EXPR <= VALUE' or '>=' over metrics (repeatable; see `codesign metrics`)"),
]
DesignOpt = Annotated[Path | None, typer.Option("--design", help="JSON/TOML design file")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="decision=value (repeatable)")]
NameArg = Annotated[str, typer.Argument(help="a named instance (`codesign instances`) or a path to a .toml file")]
SolverOpt = Annotated[str, typer.Option("--solver", help="auto (HiGHS for grids, CP-SAT for mappings and "
                                                          "placements) | highs | cpsat | brute | pyomo:<name>")]
TimeLimitOpt = Annotated[float | None, typer.Option("--time-limit", help="seconds; the best design and its bound are kept")]


def handles_errors(fn):
    """InputError: a clear message and exit 2; ModelError: exit 3; Ctrl-C outside a solve: 130."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_INPUT) from None
        except ModelError as exc:
            err.print(f"[bold red]check failed (a bug, please report):[/] {escape(str(exc))}", highlight=False,
                      soft_wrap=True)
            raise typer.Exit(EXIT_CHECK) from None
        except KeyboardInterrupt:
            err.print("[yellow]interrupted (Ctrl-C)[/]: nothing was written")
            raise typer.Exit(EXIT_INTERRUPT) from None
        except OSError as exc:
            if exc.filename is None:  # not about a path the user gave: a bug
                raise
            # a path the command line names cannot be used (too long, a loop, no permission, a file
            # where a folder should be, a full disk): the user's to fix, never a traceback
            what = exc.strerror or errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            err.print(f"[bold red]error:[/] {escape(str(exc.filename))}: {escape(what)}", highlight=False,
                      soft_wrap=True)
            raise typer.Exit(EXIT_INPUT) from None

    return wrapper


def output_file(path: Path, *, option: str, suffixes: tuple[str, ...]) -> Path:
    """``path`` checked as a file a command will write: not a directory, one of ``suffixes``, in a
    folder that is a folder (InputError naming the option otherwise)."""
    expected = f"a file name ending in {' or '.join(suffixes)}"
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError("a directory, not a file to write", key=option, value=str(path), expected=expected)
    if path.suffix.lower() not in suffixes:
        raise InputError(f"the file name's suffix {path.suffix or '(none)'!r} is not one this option writes",
                         key=option, value=str(path), expected=expected)
    for parent in path.parents:
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            continue  # created on write
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot use the folder: {getattr(exc, 'strerror', None) or exc}", key=option,
                             value=str(path)) from None
        if not stat.S_ISDIR(st.st_mode):
            raise InputError(f"{parent} is a file, not a folder", key=option, value=str(path),
                             expected="a path whose folders are folders")
        break
    return path


app.callback()(handles_errors(_options))


def emit_json(data: Any) -> None:
    sys.stdout.write(dumps(data) + "\n")


def fmt(x: Any) -> str:
    """A number for people: thousands separators, four decimals, scientific notation when large or
    small; anything else as text."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1e6 or a < 1e-3:
        return f"{x:.4g}"
    return f"{x:,.4f}".rstrip("0").rstrip(".")


#: seconds between two progress lines when stderr is not a terminal
PROGRESS_EVERY_S = 5.0


class Progress:
    """Progress of a long command on stderr (never stdout): a live line on a terminal, else a line
    every :data:`PROGRESS_EVERY_S` seconds (logs, CI); nothing with ``--quiet``."""

    def __init__(self, what: str, *, quiet: bool):
        self.what = what
        self.quiet = quiet
        self.live = None if quiet or not err.is_terminal else err.status(f"{what} ...")
        self.last = time.monotonic()  # the first line after PROGRESS_EVERY_S: short commands stay quiet

    def __enter__(self) -> Progress:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def text(self, message: str) -> None:
        if self.quiet:
            return
        line = f"{self.what}: {message}"
        if self.live is not None:
            self.live.update(line)
            return
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            err.print(line, highlight=False, soft_wrap=True)

    def solve(self, incumbent: float | None, bound: float | None, gap: float | None, elapsed: float) -> None:
        """A solver's progress callback (the user's metric)."""
        g = "-" if gap is None else f"{100 * gap:.3g}%"
        self.text(f"incumbent {'-' if incumbent is None else fmt(incumbent)}  bound "
                  f"{'-' if bound is None else fmt(bound)}  gap {g}  {elapsed:.1f}s")
