"""``sweep``: every point of a SPEC's product solved and proved, on dask.distributed, into one
results table."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from codesign.cli.common import (
    EXIT_CHECK,
    EXIT_INTERRUPT,
    EXIT_NONE,
    JsonOpt,
    Progress,
    app,
    emit_json,
    err,
    handles_errors,
    out,
    session,
)
from codesign.errors import InputError
from codesign.sweep.spec import load_sweep

if TYPE_CHECKING:
    from codesign.sweep.executor import Executor
    from codesign.sweep.run import Summary, Tally


def default_out(spec: Path) -> Path:
    """Where a sweep writes without ``--out``: ``<SPEC's stem>-sweep/`` beside the SPEC."""
    return spec.parent / f"{spec.stem}-sweep"


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def progress_line(t: Tally) -> str:
    """``37/200 done, 1 failed, 2 running (2 workers), 3.1 points/s, ETA 52 s``."""
    rate = t.finished / t.elapsed if t.elapsed > 0 else 0.0
    before = f" ({t.skipped} finished before)" if t.skipped else ""
    return (f"{t.done}/{t.total} done{before}, {t.failed} failed, {t.running} running ({t.workers} "
            f"worker{'s' if t.workers != 1 else ''}), {rate:.2g} points/s, ETA {_duration(t.eta)}")


def _where(ex: Executor) -> str:
    threads = "the solver's own threads" if ex.solver_threads is None else \
        f"{ex.solver_threads} solver thread{'s' if ex.solver_threads != 1 else ''} each"
    if ex.mode == "process":
        return f"in this process, one point after another ({threads}; --workers 0: no dask)"
    board = ex.dashboard or "-"
    if ex.mode == "local" and importlib.util.find_spec("bokeh") is None:
        board += " (its pages need bokeh: pip install 'bokeh>=3.1')"
    if ex.mode == "local":
        return f"local dask cluster {ex.address}: {ex.workers} workers, {threads}; dashboard {board}"
    return f"dask scheduler {ex.address}: {ex.worker_count()} workers now, {threads}; dashboard {board}"


def print_summary(s: Summary) -> None:
    state = "[yellow]interrupted[/]: " if s.interrupted else ""
    out.print(f"{state}{s.points} points: {s.solved} solved now, {s.skipped} finished before, {s.failed} failed, "
              f"{s.invalid} invalid ({_duration(s.wall_s)})", highlight=False)
    if s.statuses:
        out.print("statuses: " + ", ".join(f"{k} {v}" for k, v in s.statuses.items()), highlight=False)
    for f in s.failures[:5]:
        first = str(f["error"]).splitlines()[0]
        out.print(f"[red]failed[/] {f['point']} ({f['instance']}): {first}", highlight=False, soft_wrap=True)
    if len(s.failures) > 5:
        out.print(f"... and {len(s.failures) - 5} more failures (`status` = failed in the table)")
    out.print(f"results: {s.results['parquet']}, {s.results['csv']}; records in {Path(s.out) / 'points'}",
              highlight=False, soft_wrap=True)
    if s.interrupted or s.failed:
        out.print("run the same command again to solve what is left", highlight=False)


def exit_code(s: Summary) -> int:
    """130 after Ctrl-C, 3 if a point's solver and the model disagreed, 1 if a point failed, else 0."""
    if s.interrupted:
        return EXIT_INTERRUPT
    if any(f["error_kind"] == "check" for f in s.failures):
        return EXIT_CHECK
    return EXIT_NONE if s.failed else 0


@app.command("sweep")
@handles_errors
def sweep_cmd(
    ctx: typer.Context,
    spec: Annotated[Path, typer.Argument(help="the SPEC (TOML): instances, objectives, budgets per value, catalog substitutions (README: Sweeps)")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="output directory (default: <SPEC's stem>-sweep beside it)")] = None,
    workers: Annotated[int | None, typer.Option("--workers", help="local dask workers (default: one per core; 0: in this process, no dask)")] = None,
    scheduler: Annotated[str | None, typer.Option("--scheduler", help="address of a running dask scheduler, e.g. tcp://10.0.0.5:8786")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Solve every point of a SPEC's product (instances x objectives x budgets x catalog
    substitutions), each proved by the solve driver, on a dask cluster.

    Writes DIR/results.parquet and DIR/results.csv (one row per point) and each point's solution
    record in DIR/points/; a rerun skips finished points; Ctrl-C keeps everything finished."""
    # dask.distributed and pyarrow cost every other command ~0.5 s of CPU at start: loaded here
    from codesign.sweep.executor import Executor
    from codesign.sweep.run import run_sweep

    s = session(ctx)
    sweep = load_sweep(spec, calibration=s.calibration)
    directory = out_dir if out_dir is not None else default_out(spec)
    if directory.exists() and not directory.is_dir():
        raise InputError("the sweep's output is a directory", file=directory, key="--out",
                         expected="a directory (created if missing)")
    with Executor(workers, scheduler=scheduler, solver_threads=sweep.file.threads) as ex:
        if not s.quiet:
            err.print(f"sweep {spec}: {len(sweep.points)} points; {_where(ex)}", highlight=False, soft_wrap=True)
        with Progress("sweep", quiet=s.quiet) as progress:
            summary = run_sweep(sweep, directory, ex, progress=lambda t: progress.text(progress_line(t)))
    if as_json:
        emit_json(summary.as_dict())
    else:
        print_summary(summary)
    if code := exit_code(summary):
        raise typer.Exit(code)
