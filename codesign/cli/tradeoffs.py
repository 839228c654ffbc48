"""Trade-off commands: ``pareto`` (the exact frontier between two metrics)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from codesign.cli.common import (
    BudgetOpt,
    JsonOpt,
    NameArg,
    Progress,
    SolverOpt,
    TimeLimitOpt,
    app,
    emit_json,
    fmt,
    handles_errors,
    out,
    session,
)
from codesign.cli.problems import load_problem
from codesign.errors import InputError
from codesign.proof.driver import check_limits, check_solver
from codesign.tradeoffs.pareto import frontier
from codesign.tradeoffs.plot import frontier_plot


@app.command("pareto")
@handles_errors
def pareto_cmd(
    ctx: typer.Context,
    name: NameArg,
    x: Annotated[str, typer.Option("--x", help="a metric (`codesign metrics`), e.g. tokens_per_s")],
    y: Annotated[str, typer.Option("--y", help="another metric, e.g. energy_per_token_J, power_W, area_mm2")],
    max_points: Annotated[int | None, typer.Option("--max-points", help="stop after this many points (the rest is bounded, not listed)")] = None,
    budgets: BudgetOpt = None,
    solver: SolverOpt = "highs",
    time_limit: TimeLimitOpt = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="write the frontier as a PNG/SVG/PDF")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The exact Pareto frontier between two metrics: every point a proven optimum, and without
    --max-points every non-dominated design found."""
    check_solver(solver)
    check_limits(time_limit)
    if plot is not None and plot.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise InputError("a plot is a .png, .svg or .pdf file", file=plot)
    problem = load_problem(ctx, name, budgets)
    with Progress(f"pareto: {problem.name}", quiet=session(ctx).quiet or as_json) as progress:
        f = frontier(problem, x, y, solver=solver, max_points=max_points, time_limit=time_limit, progress=progress.text)
    if plot is not None:
        frontier_plot(f, plot)
    if as_json:
        emit_json(f.as_dict())
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
    if plot is not None:
        out.print(f"wrote {plot}")
