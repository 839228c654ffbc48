"""Commands that prove things: ``solve``, ``certify``, ``explain``, ``check-solution``,
``check-certificate``, ``export``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from codesign.backends.highs import export as write_mip
from codesign.cli.common import (
    EXIT_CHECK,
    EXIT_INTERRUPT,
    EXIT_NONE,
    BudgetOpt,
    DesignOpt,
    JsonOpt,
    NameArg,
    Progress,
    SetOpt,
    SolverOpt,
    TimeLimitOpt,
    app,
    emit_json,
    fmt,
    handles_errors,
    out,
    session,
)
from codesign.cli.problems import AllOpt, design_from, load_problem
from codesign.cli.render import print_evaluation, print_explanation, proof_line, status_line
from codesign.errors import InputError
from codesign.jsonio import dumps, write_text_atomic
from codesign.kinds.grid.robust import check_robust, solve_robust
from codesign.paths import user_solutions_dir
from codesign.proof import records
from codesign.proof.certify import certify
from codesign.proof.check import check_certificate, check_solution
from codesign.proof.driver import (
    check_limits,
    check_solver,
    choose_solver,
    cross_check,
    other_solver,
    solve,
)

ThreadsOpt = Annotated[int | None, typer.Option("--threads", help="solver threads / workers (0: the solver's choice)")]


def exit_code(sol: records.Solution) -> int:
    """What ``solve`` exits with after printing (and saving): 130 when Ctrl-C ended the run (the
    best design and its bound are kept), 1 without a design, else 0."""
    if sol.termination.startswith("interrupted"):
        return EXIT_INTERRUPT
    return 0 if sol.status in ("optimal", "feasible") else EXIT_NONE


def _solve(problem, solver: str, time_limit, threads, quiet: bool, robust: bool = False) -> records.Solution:
    with Progress(f"{choose_solver(problem, solver)}: {problem.name}", quiet=quiet) as progress:
        how = solve_robust if robust else solve
        return how(problem, solver=solver, time_limit=time_limit, threads=threads, progress=progress.solve)


@app.command("solve")
@handles_errors
def solve_cmd(
    ctx: typer.Context,
    name: NameArg,
    solver: SolverOpt = "auto",
    objective: Annotated[str | None, typer.Option("--objective", help="tokens_per_s | energy_per_token_J | tpot_s | ttft_s (hardware/schedule instances)")] = None,
    time_limit: TimeLimitOpt = None,
    threads: ThreadsOpt = None,
    budgets: BudgetOpt = None,
    cross: Annotated[bool, typer.Option("--cross-check", help="also solve with the other solver; fail if they disagree")] = False,
    save: Annotated[bool, typer.Option("--save", help="write the solution record (atomically) and the ledger")] = False,
    out_dir: Annotated[Path | None, typer.Option("--out-dir", help="where --save writes (default: the user's data directory, `codesign solve --help`)")] = None,
    replace: Annotated[bool, typer.Option("--replace", help="--save replaces a stored solution even when it is better (a proven optimum, a better objective)")] = False,
    robust: Annotated[bool, typer.Option("--robust", help="several workloads: the hardware minimising the worst relative regret against each workload's own optimum (default: the weighted sum)")] = False,
    formulation: Annotated[str, typer.Option("--formulation", help="hardware/schedule instances: enumerated (one-hot over hardware designs) | factored (per-knob tables, for grids too large to enumerate) | boxes (branch-and-bound over the hardware knobs, no MIP) | auto (enumerated up to 1e7 hardware designs; above, boxes with --solver auto, else factored)")] = "auto",
    everything: AllOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Find the provably optimal design: the MIP's optimum, verified by the model and confirmed.

    --save writes <out-dir>/<instance>.json; without --out-dir, $CODESIGN_DATA/solutions (else
    ~/.local/share/codesign/solutions)."""
    check_solver(solver)
    check_limits(time_limit, threads)
    quiet = session(ctx).quiet or as_json
    t0 = time.perf_counter()
    problem = load_problem(ctx, name, budgets, objective).with_formulation(formulation)
    if robust:
        check_robust(problem)
        if save or out_dir is not None:
            raise InputError("--save writes records of the instance's own objective; a --robust solution is printed "
                             "only", key="--robust", suggestion="--json > FILE keeps it")
    sol = _solve(problem, solver, time_limit, threads, quiet, robust)
    if sol.status == "infeasible":
        with Progress(f"explain: {problem.name}", quiet=quiet) as progress:
            left = None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 0.01)
            how = "auto" if solver == "brute" else solver  # (explain solves MIPs)
            sol.explanation = problem.explain(solver=how, time_limit=left, progress=progress.text)
    if cross and not sol.termination.startswith("interrupted"):
        left = None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 0.01)
        second = _solve(problem, other_solver(sol.solver), left, threads, quiet, robust)
        if second.termination.startswith("interrupted"):
            sol.cross_check = {"solvers": [sol.solver, second.solver], "agree": None,
                               "note": f"interrupted during the {second.solver} solve: nothing compared"}
            sol.termination = f"interrupted (during the cross-check's {second.solver} solve)"
        elif robust:  # compared on the worst ratio σ: a regret near 0 has no relative precision
            sol.cross_check = {**cross_check(*(x.model_copy(update={"objective": x.proof["internal_objective"]})
                                               for x in (sol, second))), "compared": "the worst ratio (internal)"}
        else:
            sol.cross_check = cross_check(sol, second)
    if save or out_dir is not None:
        path, done = records.save(sol, out_dir or user_solutions_dir(), replace=replace)
        if not as_json:
            out.print(f"{done} {path}")
    if as_json:
        emit_json({**sol.as_dict(), **({k: sol.proof["robust"][k] for k in ("regret", "workload_optima")}
                                       if "robust" in sol.proof else {})})
    else:
        print_solution(problem, sol, everything=everything)
        if "robust" in sol.proof:
            print_regrets(sol.proof["robust"])
    if code := exit_code(sol):
        raise typer.Exit(code)


def print_regrets(robust: dict[str, Any]) -> None:
    """Each workload's regret at the robust design and its own optimum."""
    regret = robust.get("regret") or {}
    for w, o in robust["workload_optima"].items():
        r = "-" if w not in regret else f"{regret[w]:.4%}"
        out.print(f"  {escape(w)}: regret {r} (its own optimum {robust['weighted_objective']} {fmt(o['objective'])}, "
                  f"{o['status']})", highlight=False)


def print_solution(problem, sol: records.Solution, *, everything: bool) -> None:
    out.print(status_line(sol), highlight=False)
    out.print(proof_line(sol), highlight=False)
    a = None if sol.design is None else problem.assess(problem.parse_design(sol.design))
    print_evaluation(problem, sol, a, everything=everything)
    if sol.cross_check:
        cc = sol.cross_check
        verdict = "[green]agree[/]" if cc["agree"] else f"[yellow]not compared[/]: {cc.get('note', '')}"
        out.print(f"cross-check {cc['solvers']}: objectives {[fmt(x) for x in cc['objectives']]} -> {verdict}")
    if sol.explanation:
        print_explanation(sol.explanation)


@app.command("certify")
@handles_errors
def certify_cmd(
    ctx: typer.Context,
    name: NameArg,
    design: DesignOpt = None,
    sets: SetOpt = None,
    budgets: BudgetOpt = None,
    solver: SolverOpt = "auto",
    time_limit: Annotated[float | None, typer.Option("--time-limit", help="seconds for the bound's solve")] = None,
    solutions: Annotated[Path | None, typer.Option("--solutions", help="directory of stored solutions to take the bound from (default: where `solve --save` writes)")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write the certificate JSON here (atomically)")] = None,
    everything: AllOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Certify a design: how far it can be from the best (a proven bound), every constraint audited."""
    check_solver(solver)
    check_limits(time_limit)
    directory = solutions if solutions is not None else user_solutions_dir()
    if solutions is not None and not solutions.is_dir():
        raise InputError("--solutions is a directory of stored solutions", file=solutions, expected="a directory that exists",
                         suggestion="the directory `solve --save --out-dir` wrote to")
    problem = load_problem(ctx, name, budgets)
    full, source = design_from(problem, design, sets)
    with Progress(f"certify: {problem.name}", quiet=session(ctx).quiet or as_json) as progress:
        cert = certify(problem, full, solver=solver, time_limit=time_limit, solutions=directory, source=source,
                       progress=progress.solve)
    if output is not None:
        write_text_atomic(output, dumps(cert.as_dict()) + "\n")
    if as_json:
        emit_json(cert.as_dict())
        return
    a = problem.assess(full)
    print_evaluation(problem, cert, a, everything=everything)
    bound = "-" if cert.bound is None else fmt(cert.bound)
    out.print(f"{cert.sense} {cert.objective_metric}: design {fmt(cert.objective)}, bound {bound}")
    out.print(f"[{'green' if cert.feasible else 'red'}]{escape(cert.statement)}[/]")
    src = cert.bound_source
    out.print(f"[dim]bound from {escape(src.source)} ({src.solver}, {src.status})[/]")
    if output is not None:
        out.print(f"wrote {output}")


@app.command("check-solution")
@handles_errors
def check_solution_cmd(
    file: Annotated[Path, typer.Argument(help="a solution record written by `solve --save`")],
    prove: Annotated[bool, typer.Option("--prove/--no-prove", help="prove the verdict again with one solve (default); --no-prove: only what the model re-derives")] = True,
    solver: SolverOpt = "auto",
    time_limit: TimeLimitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-verify a stored solution: every field re-derived by the model, the bound proved again
    (exit 3 if anything does not hold)."""
    check_solver(solver)
    check_limits(time_limit)
    _report(check_solution(file, prove=prove, solver=solver, time_limit=time_limit), as_json, f"{file}: ")


@app.command("check-certificate")
@handles_errors
def check_certificate_cmd(
    file: Annotated[Path, typer.Argument(help="a certificate written by `certify -o`")],
    prove: Annotated[bool, typer.Option("--prove/--no-prove", help="prove the bound again with one solve (default); --no-prove: only what the model re-derives")] = True,
    solver: SolverOpt = "auto",
    time_limit: TimeLimitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-derive a certificate from its instance and design: any edited field fails (exit 3)."""
    check_solver(solver)
    check_limits(time_limit)
    _report(check_certificate(file, prove=prove, solver=solver, time_limit=time_limit), as_json, f"{file}: ")


def _report(report: dict[str, Any], as_json: bool, prefix: str = "") -> None:
    """Print a re-check report (ok / FAILED and why); exit 3 when it failed."""
    if as_json:
        emit_json(report)
    else:
        color = "green" if report["ok"] else "red"
        out.print(f"[{color}]{'ok' if report['ok'] else 'FAILED'}[/] {escape(prefix + report['message'])}")
    if not report["ok"]:
        raise typer.Exit(EXIT_CHECK)


@app.command("explain")
@handles_errors
def explain_cmd(
    ctx: typer.Context,
    name: NameArg,
    budgets: BudgetOpt = None,
    solver: SolverOpt = "auto",
    time_limit: TimeLimitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Why is an instance infeasible? A minimal conflicting set and the least relaxation of each."""
    check_solver(solver)
    check_limits(time_limit)
    problem = load_problem(ctx, name, budgets)
    with Progress(f"explain: {problem.name}", quiet=session(ctx).quiet or as_json) as progress:
        e = problem.explain(solver=solver, time_limit=time_limit, progress=progress.text)
    if as_json:
        emit_json(e)
    else:
        print_explanation(e)
    if e.get("interrupted"):
        raise typer.Exit(EXIT_INTERRUPT)


@app.command("export")
@handles_errors
def export_cmd(
    ctx: typer.Context,
    name: NameArg,
    fmt_: Annotated[str | None, typer.Option("--format", help="mps | lp (default: the output's suffix, else mps)")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="file to write (default NAME.FORMAT)")] = None,
    budgets: BudgetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the instance's exact MIP as MPS or LP (any solver can reproduce a result), and beside it
    NAME.FORMAT.json: what the objective means and which decisions each column selects."""
    suffix = output.suffix.lower().lstrip(".") if output is not None else ""
    if fmt_ is None:
        fmt_ = suffix if suffix in ("mps", "lp") else "mps"
    elif fmt_ not in ("mps", "lp"):
        raise InputError("unknown export format", key="--format", value=fmt_, expected="mps | lp")
    elif suffix in ("mps", "lp") and suffix != fmt_:
        raise InputError("the output's suffix names another format", file=output, key="--format", value=fmt_,
                         expected=f"--format {suffix} for a .{suffix} file", suggestion="leave --format out: the suffix decides")
    problem = load_problem(ctx, name, budgets)
    form = problem.formulate("highs", presolve=False)
    if form.empty_reason:
        raise InputError(f"nothing to export: {form.empty_reason}", value=problem.name)
    path = output or Path(f"{problem.name}.{fmt_}")
    written = write_mip(form.mip, path, fmt_)
    legend = {
        "instance": problem.name, "kind": problem.kind, "instance_hash": problem.content_hash, "format": fmt_,
        "objective": {
            "sense": "minimise", "unit": form.objective_unit,
            "meaning": f"(file objective) x {form.objective_unit:.17g} = the internal objective of {problem.metric} "
                       f"({problem.sense}); {problem.metric} = {problem.internal_description}",
        },
        "indicator_rows": "written as the big-M rows the HiGHS backend solves (M from the variables' bounds), named "
                          "<row>.ub / <row>.lb",
        "design_columns": {written["columns"][int(i)]: form.describe(int(i)) if form.describe else form.mip.vars[int(i)].name
                           for i in form.design_vars},
        **form.stats,
    }
    legend_path = path.with_name(path.name + ".json")
    write_text_atomic(legend_path, dumps(legend) + "\n")
    if as_json:
        emit_json({"path": str(path), "legend": str(legend_path), **{k: v for k, v in legend.items() if k != "design_columns"}})
    else:
        out.print(f"wrote {path} ({form.stats.get('variables')} variables, {form.stats.get('rows')} rows) and "
                  f"{legend_path}: the file minimises its objective; x {form.objective_unit:.6g} it is "
                  f"{problem.internal_description}")
