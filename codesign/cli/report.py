"""``report`` (one self-contained HTML page: the instance, the optimum and its proof, budgets and
sensitivity, the frontier, the baseline's certificate) and ``breakdown`` (the plot of where a
design's time, energy, power and area go)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from codesign.cli.common import (
    BudgetOpt,
    DesignOpt,
    JsonOpt,
    NameArg,
    Progress,
    SetOpt,
    SolverOpt,
    app,
    emit_json,
    handles_errors,
    out,
    output_file,
    session,
)
from codesign.cli.problems import design_from, load_problem
from codesign.errors import InputError
from codesign.jsonio import write_text_atomic
from codesign.proof.driver import check_limits, check_solver
from codesign.tradeoffs.breakdown import breakdown
from codesign.tradeoffs.pareto import known_metrics
from codesign.tradeoffs.plot import breakdown_plot
from codesign.tradeoffs.report import Options, build_report
from codesign.tradeoffs.report_html import render


@app.command("report")
@handles_errors
def report_cmd(
    ctx: typer.Context,
    name: NameArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="the .html file to write (atomically)")],
    x: Annotated[str, typer.Option("--x", help="the frontier's first metric (`codesign metrics`)")] = "tokens_per_s",
    y: Annotated[str | None, typer.Option("--y", help="the frontier's second metric (default energy_per_token_J; power_W with several workloads)")] = None,
    max_points: Annotated[int, typer.Option("--max-points", help="at most this many frontier points")] = 12,
    pareto_time_limit: Annotated[float | None, typer.Option("--pareto-time-limit", help="seconds for the whole frontier")] = 120.0,
    sensitivity_points: Annotated[int, typer.Option("--sensitivity-points", help="values of each binding budget (2..50)")] = 5,
    sensitivity_time_limit: Annotated[float | None, typer.Option("--sensitivity-time-limit", help="seconds for each binding budget's sensitivity (past it: the values proven so far, and the command that computes the rest)")] = 60.0,
    budgets: BudgetOpt = None,
    solver: SolverOpt = "auto",
    time_limit: Annotated[float | None, typer.Option("--time-limit", help="seconds for the whole report: each part gets what is left, a part left without time says so on the page")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write one self-contained HTML page: the instance and its lints, the optimum with its proof,
    the breakdown of the baseline and the optimum, which budgets bind and the sensitivity to them,
    the Pareto frontier and the baseline's certificate (plots embedded, nothing external)."""
    check_solver(solver)
    check_limits(time_limit)
    output_file(output, option="--output", suffixes=(".html", ".htm"))
    for key, m in (("--x", x), ("--y", y)):
        if m is not None and m not in known_metrics():
            raise InputError("not a metric", key=key, value=m, expected="a name `codesign metrics` lists")
    options = Options(solver=solver, time_limit=time_limit, x=x, y=y, max_points=max_points,
                      pareto_time_limit=pareto_time_limit, sensitivity_points=sensitivity_points,
                      sensitivity_time_limit=sensitivity_time_limit,
                      budgets=list(budgets or []))
    options.check()
    problem = load_problem(ctx, name, budgets)
    with Progress(f"report: {problem.name}", quiet=session(ctx).quiet or as_json) as progress:
        r = build_report(problem, options, progress=progress.text)
        page = render(r)
    write_text_atomic(output, page)
    if as_json:
        emit_json({"path": str(output), "instance": problem.name, "status": r.optimum.status,
                   "objective": r.optimum.objective, "bound": r.optimum.bound, "gap": r.optimum.gap,
                   "solves": r.solves, "seconds": r.seconds, "bytes": len(page.encode())})
        return
    out.print(f"wrote {output} ({len(page.encode()) / 1e3:.0f} kB; {r.solves} solves in {r.seconds:.1f} s)")


@app.command("breakdown")
@handles_errors
def breakdown_cmd(
    ctx: typer.Context,
    name: NameArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="the plot to write: .png, .svg or .pdf")],
    design: DesignOpt = None,
    sets: SetOpt = None,
    budgets: BudgetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Plot where a design's time per token, energy per token, device power and area go (the
    model's terms, by component), beside the baseline's (default design: the baseline alone)."""
    output_file(output, option="--output", suffixes=(".png", ".svg", ".pdf"))
    problem = load_problem(ctx, name, budgets)
    full, source = design_from(problem, design, sets)
    designs = {"baseline": problem.parse_design(problem.baseline(), source="the baseline")}
    if design is not None or sets:
        designs["design"] = full
    b = breakdown(problem, designs)
    if b.panels:
        breakdown_plot(b, output)
    if as_json:
        emit_json({"path": str(output) if b.panels else None, "notes": b.notes,
                   "panels": [{"title": p.title, "metric": p.metric, "unit": p.unit, "stacked": p.stacked,
                               "bars": [vars(x) for x in p.bars]} for p in b.panels]})
        return
    for n in b.notes:
        out.print(f"[yellow]{n}[/]")
    if b.panels:
        out.print(f"wrote {output} ({source})")
    else:
        out.print("nothing to plot: no file written")
