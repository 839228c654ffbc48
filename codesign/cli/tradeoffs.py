"""Trade-off commands: ``pareto`` (the exact frontier between two metrics) and ``sensitivity`` (how
the proven optimum moves with a budget or a parameter)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from codesign.cli.common import (
    EXIT_INTERRUPT,
    BudgetOpt,
    JsonOpt,
    NameArg,
    Progress,
    SolverOpt,
    TimeLimitOpt,
    app,
    emit_json,
    err,
    fmt,
    handles_errors,
    out,
    output_file,
    session,
)
from codesign.cli.problems import load_problem
from codesign.errors import InputError
from codesign.proof.driver import check_limits, check_solver
from codesign.tradeoffs.pareto import frontier
from codesign.tradeoffs.plot import frontier_plot, sensitivity_plot
from codesign.tradeoffs.sensitivity import BREAKPOINT_RTOL, sensitivity

#: the files --plot writes (matplotlib's format by suffix)
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


@app.command("pareto")
@handles_errors
def pareto_cmd(
    ctx: typer.Context,
    name: NameArg,
    x: Annotated[str, typer.Option("--x", help="a metric (`codesign metrics`), e.g. tokens_per_s")],
    y: Annotated[str, typer.Option("--y", help="another metric, e.g. energy_per_token_J, power_W, area_mm2")],
    max_points: Annotated[int | None, typer.Option("--max-points", help="stop after this many points (the rest is bounded, not listed)")] = None,
    budgets: BudgetOpt = None,
    solver: SolverOpt = "auto",
    time_limit: TimeLimitOpt = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="write the frontier as a PNG/SVG/PDF")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The exact Pareto frontier between two metrics: every point a proven optimum, and without
    --max-points every non-dominated design found."""
    check_solver(solver)
    check_limits(time_limit)
    if plot is not None:
        output_file(plot, option="--plot", suffixes=PLOT_SUFFIXES)
    problem = load_problem(ctx, name, budgets)
    with Progress(f"pareto: {problem.name}", quiet=session(ctx).quiet or as_json) as progress:
        f = frontier(problem, x, y, solver=solver, max_points=max_points, time_limit=time_limit, progress=progress.text)
    if plot is not None and f.points:
        frontier_plot(f, plot)
    if as_json:
        emit_json(f.as_dict())
        exit_if_interrupted(f.interrupted)
        return
    t = Table(title=f"{problem.name}: {f.x} vs {f.y} ({len(f.points)} points, each optimal for its budget)")
    t.add_column(f.x, justify="right")
    t.add_column(f.y, justify="right")
    t.add_column("design")
    varying = [k for k in (f.points[0].design if f.points else {}) if len({str(p.design.get(k)) for p in f.points}) > 1]
    for p in f.points:
        t.add_row(fmt(p.x), fmt(p.y), escape(", ".join(f"{k}={p.design[k]}" for k in varying)))
    out.print(t)
    out.print(f"[{'green' if f.complete else 'yellow'}]{escape(f.statement)}[/]")
    out.print(f"[dim]{f.solves} solves in {f.seconds:.1f} s ({solver}), each optimising {f.driver} under a budget on "
              "the other[/]")
    if plot is not None and f.points:
        out.print(f"wrote {plot}")
    exit_if_interrupted(f.interrupted, kept=f"the {len(f.points)} points proven before it")


def exit_if_interrupted(interrupted: bool, *, kept: str | None = None) -> None:
    """After a Ctrl-C the results so far are out (printed or JSON): say what was kept, exit 130."""
    if interrupted:
        if kept:
            err.print(f"[yellow]interrupted (Ctrl-C)[/]: kept {kept}")
        raise typer.Exit(EXIT_INTERRUPT)


@app.command("sensitivity")
@handles_errors
def sensitivity_cmd(
    ctx: typer.Context,
    name: NameArg,
    vary: Annotated[str, typer.Option("--vary", help="'EXPR <= LO..HI step S' (a budget; >= too) or 'path.to.key=LO..HI step S' (a numeric instance field)")],
    budgets: BudgetOpt = None,
    solver: SolverOpt = "auto",
    time_limit: Annotated[float | None, typer.Option("--time-limit", help="seconds for the whole run (what was found is kept; with --workers, per value)")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="write the curve as a PNG/SVG/PDF")] = None,
    workers: Annotated[int | None, typer.Option("--workers", help="solve the range's values on a local dask cluster of N workers (default: one after another in this process)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The proven optimum at each value of a budget or parameter, the breakpoints where the optimal
    design changes (located by bisection), and the marginal value per unit between the points."""
    check_solver(solver)
    check_limits(time_limit)
    if workers is not None and workers < 0:
        raise InputError("a number of workers", key="--workers", value=workers,
                         expected=">= 1 (a local dask cluster), or 0 to solve in this process")
    if plot is not None:
        output_file(plot, option="--plot", suffixes=PLOT_SUFFIXES)
    problem = load_problem(ctx, name, budgets)
    with Progress(f"sensitivity: {problem.name}", quiet=session(ctx).quiet or as_json) as progress:
        r = sensitivity(problem, vary, solver=solver, time_limit=time_limit, progress=progress.text, workers=workers)
    if plot is not None and r.points:
        sensitivity_plot(r, plot)
    if as_json:
        emit_json(r.as_dict())
        exit_if_interrupted(r.interrupted)
        return
    t = Table(title=f"{problem.name}: {r.sense} {r.metric} as {escape(vary)}")
    for c in ("value", "status", "optimum", "marginal (per unit, to the next value)"):
        t.add_column(c, justify="right")
    slope = {m["from"]: m["per_unit"] for m in r.marginal}
    for p in r.points:
        t.add_row(fmt(p.value), p.status, "-" if p.objective is None else fmt(p.objective),
                  "-" if p.value not in slope else fmt(slope[p.value]))
    out.print(t)
    for b in r.breakpoints:
        lo, hi = b["between"]
        changes = ", ".join(f"{k} {u} -> {w}" for k, (u, w) in b["changed"].items()) or "status"
        out.print(f"breakpoint in [{fmt(lo)}, {fmt(hi)}]: {escape(changes)}")
    for note in r.notes:
        out.print(f"[yellow]{escape(note)}[/]")
    out.print(f"[dim]{r.solves} proven solves in {r.seconds:.1f} s ({solver}); breakpoints located to "
              f"{BREAKPOINT_RTOL:g} of the range{'' if r.complete else '; incomplete'}[/]")
    if plot is not None and r.points:
        out.print(f"wrote {plot}")
    exit_if_interrupted(r.interrupted, kept=f"the {len(r.points)} values proven before it")
