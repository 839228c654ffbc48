"""What every command shares: the typer app, consoles, options, error handling, JSON output.

Every command takes ``--json``. Bad input prints a message naming file, key and value and exits
with code 2 (no traceback).
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from codesign.errors import InputError, ModelError
from codesign.jsonio import dumps

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Provably optimal hardware/schedule co-design for distributed LLM inference.",
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


def _options(
    ctx: typer.Context,
    calibration: Annotated[Path | None, typer.Option(
        "--calibration", help="calibration TOML to use instead of the shipped one (`codesign calibrate --out` writes one)")] = None,
) -> None:
    """Provably optimal hardware/schedule co-design for distributed LLM inference."""
    import os

    from codesign.model.hardware import CALIBRATION_ENV, calibration_path

    if calibration is not None:
        before = os.environ.get(CALIBRATION_ENV)
        os.environ[CALIBRATION_ENV] = str(calibration.resolve())

        def restore() -> None:  # in-process callers (tests, notebooks) get their environment back
            if before is None:
                os.environ.pop(CALIBRATION_ENV, None)
            else:
                os.environ[CALIBRATION_ENV] = before

        ctx.call_on_close(restore)
        calibration_path()  # a missing file is bad input now, with the message every command gives

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
BudgetOpt = Annotated[
    list[str] | None,
    typer.Option("--budget", help="'EXPR <= VALUE' or '>=' over metrics (repeatable; see `codesign metrics`)"),
]
DesignOpt = Annotated[Path | None, typer.Option("--design", help="JSON/TOML design file")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="decision=value (repeatable)")]


#: exit codes: 2 bad input; 3 a verification failure (a bug: the model and a solver disagree)
EXIT_INPUT = 2
EXIT_VERIFY = 3


def handles_errors(fn):
    """Turn InputError into a clear message and exit code 2, ModelError into exit code 3."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_INPUT) from None
        except ModelError as exc:
            err.print(f"[bold red]verification failed (a bug, please report):[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_VERIFY) from None

    return wrapper


app.callback()(handles_errors(_options))


def _emit_json(data: Any) -> None:
    sys.stdout.write(dumps(data) + "\n")


def fmt(x: Any) -> str:
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        if x == 0:
            return "0"
        a = abs(x)
        if a >= 1e6 or a < 1e-3:
            return f"{x:.4g}"
        return f"{x:,.4f}".rstrip("0").rstrip(".")
    return str(x)
