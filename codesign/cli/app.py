"""Command line: thin commands, each calling one library function (DESIGN.md §6).

Every command takes ``--json``. Bad input prints a message naming file, key and value and exits
with code 2 (no traceback).
"""

from __future__ import annotations

import functools
import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from codesign.errors import InputError, ModelError
from codesign.jsonio import dumps
from codesign.schema import load_toml

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


# --- instances / show ---------------------------------------------------------------------------
@app.command("instances")
@handles_errors
def instances_cmd(as_json: JsonOpt = False) -> None:
    """List the named instances with their design-space sizes."""
    from codesign.kinds.grid.space import space_size
    from codesign.kinds.grid.spec import list_instances, load_instance

    rows = []
    for name in list_instances():
        inst = load_instance(name)
        rows.append({
            "name": name,
            "workloads": [w.workload for w in inst.workloads],
            "objective": inst.objective.metric,
            "decisions": len(inst.decisions),
            "space_size": space_size(inst),
            "description": inst.spec.description,
        })
    import importlib

    from codesign.kinds.mapping.spec import KIND_COMMANDS
    from codesign.model.mapping import format_count

    mapping_rows = []
    for module in KIND_COMMANDS.values():
        try:
            mapping_rows += importlib.import_module(module).instance_rows()
        except ModuleNotFoundError:
            continue
    if as_json:
        _emit_json(rows + mapping_rows)
        return
    t = Table(title="named instances")
    t.add_column("name", no_wrap=True)
    t.add_column("workload(s)")
    t.add_column("objective", no_wrap=True)
    t.add_column("decisions", justify="right")
    t.add_column("space size", justify="right", no_wrap=True)
    for r in rows:
        t.add_row(r["name"], ", ".join(r["workloads"]), r["objective"], str(r["decisions"]), f"{r['space_size']:.3e}")
    out.print(t)
    if mapping_rows:
        t = Table(title="mapping instances (stages, tiers, attachment, experts, groups)")
        t.add_column("name", no_wrap=True)
        t.add_column("kind", no_wrap=True)
        t.add_column("workload")
        t.add_column("objective")
        t.add_column("space size", justify="right", no_wrap=True)
        for r in mapping_rows:
            t.add_row(r["name"], r["kind"], r["workloads"][0], r["objective"], format_count(r["space_size"]))
        out.print(t)


@app.command("show")
@handles_errors
def show_cmd(name: Annotated[str, typer.Argument(help="named instance or path to a .toml")], as_json: JsonOpt = False) -> None:
    """Show an instance: decisions and domains, budgets, objective, baseline and lints."""
    from codesign.kinds.mapping.spec import is_mapping_source

    if is_mapping_source(name):
        from codesign.kinds.mapping.spec import commands_for

        mapping = commands_for(name)
        data = mapping.summary(name)
        _emit_json(data) if as_json else mapping.print_summary(out, data)
        return
    from codesign.kinds.grid.lints import lint
    from codesign.kinds.grid.space import space_size
    from codesign.kinds.grid.spec import load_instance

    inst = load_instance(name)
    lints = lint(inst)
    data = {
        "name": inst.name,
        "description": inst.spec.description,
        "provenance": inst.spec.provenance,
        "source": str(inst.source),
        "content_hash": inst.content_hash,
        "workloads": [w.model_dump() for w in inst.workloads],
        "system": inst.system.model_dump(),
        "hardware": {"family": inst.hardware.family, "chip": inst.hardware.chip, "stack": inst.hardware.stack},
        "decisions": [{"name": d.name, "domain": list(d.domain)} for d in inst.decisions],
        "space_size": space_size(inst),
        "budgets": inst.budgets.model_dump(exclude_none=True),
        "objective": {"metric": inst.objective.metric, "sense": inst.objective.resolved_sense},
        "baseline": inst.baseline(),
        "baseline_description": inst.spec.baseline_description,
        "lints": [x.as_dict() for x in lints],
    }
    if as_json:
        _emit_json(data)
        return
    out.print(f"[bold]{inst.name}[/]: {inst.spec.description}")
    if inst.spec.provenance:
        out.print(f"[dim]{inst.spec.provenance}[/]")
    out.print(f"objective: {data['objective']['sense']} {inst.objective.metric}    space: {data['space_size']:.4e} points")
    t = Table(title="decisions")
    t.add_column("decision")
    t.add_column("domain")
    t.add_column("baseline", justify="right")
    base = data["baseline"]
    for d in inst.decisions:
        t.add_row(d.name, ", ".join(map(str, d.domain)), str(base[d.name]))
    out.print(t)
    if data["budgets"]:
        out.print("budgets: " + ", ".join(f"{k} <= {fmt(v)}" for k, v in data["budgets"].items()))
    _print_lints(lints)


def _print_lints(lints) -> None:
    for x in lints:
        color = "red" if x.severity == "error" else "yellow"
        out.print(f"[{color}]lint {x.severity} {x.code}[/]: {x.message}", highlight=False)


# --- evaluate -----------------------------------------------------------------------------------
def read_design_file(path: Path) -> dict[str, Any]:
    """A design file is JSON or TOML mapping decision names to values (a solution file's
    ``design`` object also works)."""
    from codesign.jsonio import read_json

    if not path.exists():
        raise InputError("design file not found", file=path)
    try:
        data = load_toml(path) if path.suffix == ".toml" else read_json(path)
    except InputError as exc:  # say what a design file may be
        raise InputError(exc.message, file=path, expected="a JSON design file, or TOML with the suffix .toml") from None
    if not isinstance(data, dict):
        raise InputError("a design file maps decision names to values", file=path, value=type(data).__name__)
    if "design" in data and isinstance(data["design"], dict):
        data = data["design"]
    return data


def parse_sets(sets: list[str]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for s in sets:
        if "=" not in s:
            raise InputError("--set takes key=value", value=s, expected="e.g. --set tp=8")
        k, v = s.split("=", 1)
        d[k.strip()] = v.strip()
    return d


@app.command("evaluate")
@handles_errors
def evaluate_cmd(
    name: Annotated[str, typer.Argument(help="named instance or path to a .toml")],
    design: DesignOpt = None,
    sets: SetOpt = None,
    budgets: BudgetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Evaluate a design with the analytical model (default: the instance's baseline)."""
    from codesign.kinds.mapping.spec import is_mapping_source

    if is_mapping_source(name):
        from codesign.kinds.mapping.spec import commands_for

        mapping = commands_for(name)
        if sets or budgets:
            raise InputError("--set and --budget do not apply to mapping instances", expected="--design FILE")
        given = None if design is None else read_design_file(design)
        mapping.evaluate(out, name, given, str(design), as_json, _emit_json)
        return
    from codesign.kinds.grid.lints import lint
    from codesign.kinds.grid.spec import load_instance, with_budgets
    from codesign.model.evaluate import evaluate

    inst = with_budgets(load_instance(name), budgets or [])
    full, _ = _design_from(inst, design, sets)
    ev = evaluate(inst, full)
    lints = lint(inst)
    if as_json:
        d = ev.as_dict()
        d["instance"] = inst.name
        d["objective_metric"] = inst.objective.metric
        d["sense"] = inst.objective.resolved_sense
        d["lints"] = [x.as_dict() for x in lints]
        _emit_json(d)
        return
    print_evaluation(inst, ev)
    _print_lints(lints)


def print_evaluation(inst, ev) -> None:
    t = Table(title=f"{inst.name}: design")
    t.add_column("decision")
    t.add_column("value", justify="right")
    for k, v in ev.design.items():
        t.add_row(k, str(v))
    out.print(t)
    m = Table(title="metrics")
    m.add_column("metric")
    m.add_column("value", justify="right")
    for k, v in ev.metrics.items():
        m.add_row(escape(k), fmt(v))
    if len(inst.workloads) > 1:
        for w, vals in ev.workload_metrics.items():
            for k, v in vals.items():
                m.add_row(escape(f"{w}.{k}"), fmt(v))
    out.print(m)
    a = Table(title="constraints")
    for col in ("constraint", "value", "limit", "slack", "ok"):
        a.add_column(col, justify="left" if col == "constraint" else "right")
    for x in ev.audit:
        a.add_row(escape(x.name), fmt(x.value), fmt(x.limit), fmt(x.slack), "[green]yes[/]" if x.ok else "[red]NO[/]")
    out.print(a)
    for s in ev.structural:
        out.print(f"[red]infeasible layout[/]: {s}")
    status = "[green]feasible[/]" if ev.feasible else "[red]infeasible[/]"
    out.print(f"objective {inst.objective.resolved_sense} {inst.objective.metric} = {fmt(ev.objective)}  ({status})")


# --- solve ----------------------------------------------------------------------------------------
@app.command("solve")
@handles_errors
def solve_cmd(
    name: Annotated[str, typer.Argument(help="named instance or path to a .toml")],
    solver: Annotated[str, typer.Option("--solver", help="highs | cpsat | pyomo:<name>")] = "highs",
    objective: Annotated[str | None, typer.Option("--objective", help="tokens_per_s | energy_per_token_J | tpot_s | ttft_s")] = None,
    time_limit: Annotated[float | None, typer.Option("--time-limit", help="seconds; the incumbent and its bound are kept")] = None,
    threads: Annotated[int | None, typer.Option("--threads", help="solver threads / workers")] = None,
    budgets: BudgetOpt = None,
    cross_check: Annotated[bool, typer.Option("--cross-check", help="also solve with the other solver; fail if they disagree")] = False,
    save: Annotated[bool, typer.Option("--save", help="write solutions/<instance>.json atomically")] = False,
    out_dir: Annotated[Path, typer.Option("--out-dir", help="where --save writes")] = Path("solutions"),
    as_json: JsonOpt = False,
) -> None:
    """Find the provably optimal design (the MIP optimum, verified by the model)."""
    from codesign.kinds.mapping.spec import is_mapping_source
    from codesign.proof.driver import check_limits

    check_limits(time_limit, threads)
    if is_mapping_source(name):
        from codesign.kinds.mapping.spec import commands_for

        mapping = commands_for(name)
        if objective is not None or budgets:
            raise InputError("--objective and --budget do not apply to mapping instances", expected="set [objective] / [budgets] in the instance file")
        if solver not in ("highs", "cpsat"):
            raise InputError("mapping instances are solved with highs or cpsat", key="--solver", value=solver, expected="highs | cpsat")
        explicit = out_dir if out_dir != Path("solutions") else None
        mapping.solve(out, err, name, solver, time_limit, threads, cross_check, save, explicit, as_json, _emit_json)
        return
    from codesign.jsonio import write_json_atomic
    from codesign.kinds.grid.spec import load_instance, with_budgets, with_objective
    from codesign.proof.driver import SOLVERS, check_solver, exit_code, write_ledger
    from codesign.proof.driver import cross_check as compare_solvers  # `cross_check` is the option

    check_solver(solver)
    inst = with_budgets(load_instance(name), budgets or [])
    if objective is not None:
        inst = with_objective(inst, objective)
    sol = _solve_live(inst, solver, time_limit, threads, quiet=as_json)
    if sol.status == "infeasible":
        from codesign.kinds.grid.explain import explain

        record = sol.as_dict()
        record["explanation"] = explain(inst).as_dict()
        if as_json:
            _emit_json(record)
        else:
            print_solution(inst, sol)
            print_explanation(record["explanation"])
        raise typer.Exit(1)
    record = sol.as_dict()
    if cross_check:
        other = next(s for s in SOLVERS if s != solver)  # highs <-> cpsat (pyomo:* -> highs)
        sol2 = _solve_live(inst, other, time_limit, threads, quiet=as_json)
        record["cross_check"] = compare_solvers(sol, sol2)
    if save:
        path = out_dir / f"{inst.name}.json"
        write_json_atomic(path, record)
        write_ledger(out_dir)
        if not as_json:
            out.print(f"saved {path}")
    if as_json:
        _emit_json(record)
    else:
        print_solution(inst, sol)
        if cross_check:
            cc = record["cross_check"]
            verdict = "[green]agree[/]" if cc["agree"] else f"[yellow]not compared[/]: {cc.get('note', '')}"
            out.print(f"cross-check {cc['solvers']}: objectives {cc['objectives']} -> {verdict}")
    if code := exit_code(sol):
        raise typer.Exit(code)


def _solve_live(inst, solver, time_limit, threads, *, quiet: bool):
    from codesign.proof.driver import solve_instance

    if quiet or not err.is_terminal:
        return solve_instance(inst, solver=solver, time_limit=time_limit, threads=threads)
    with err.status(f"{solver}: building and solving {inst.name} ...") as status:

        def progress(incumbent, bound, gap, elapsed):
            inc = "-" if incumbent is None else fmt(incumbent)
            bnd = "-" if bound is None else fmt(bound)
            g = "-" if gap is None else f"{100 * gap:.3g}%"
            status.update(f"{solver}: incumbent {inc}  bound {bnd}  gap {g}  {elapsed:.1f}s")

        return solve_instance(inst, solver=solver, time_limit=time_limit, threads=threads, progress=progress)


def print_solution(inst, sol) -> None:
    from codesign.model.evaluate import evaluate
    from codesign.proof.driver import headline

    out.print(headline(sol, fmt))
    out.print(
        f"[dim]{sol.solver} {sol.solver_version}: {sol.termination}; build {sol.build_s:.2f}s, solve {sol.solve_s:.2f}s, "
        f"{sol.mip['binaries']} binaries / {sol.mip['rows']} rows; verified by the model[/]"
    )
    if sol.reason:
        out.print(f"reason: {sol.reason}")
    if sol.design is not None:
        print_evaluation(inst, evaluate(inst, sol.design))


@app.command("check-solution")
@handles_errors
def check_solution_cmd(
    file: Annotated[Path, typer.Argument(help="a solution JSON written by `solve --save`")],
    as_json: JsonOpt = False,
) -> None:
    """Re-verify a stored solution with the model, without solving."""
    from codesign.jsonio import read_json
    from codesign.proof.driver import check_solution

    data = read_json(file) if file.exists() else None
    if isinstance(data, dict) and data.get("kind") in ("mapping", "placement"):
        import importlib

        from codesign.kinds.mapping.spec import KIND_COMMANDS

        module = importlib.import_module(KIND_COMMANDS[data["kind"]])
        _report_check(module.check_solution(data, file), as_json, f"{file}: ")
        return
    _report_check(check_solution(file), as_json, f"{file}: ")


def _design_from(inst, design: Path | None, sets: list[str] | None) -> tuple[dict[str, Any], str]:
    from codesign.kinds.grid.spec import parse_design

    given: dict[str, Any] = {}
    source = "--set"
    if design is not None:
        given.update(read_design_file(design))
        source = str(design)
    given.update(parse_sets(sets or []))
    return parse_design(inst, given, source=source), source


@app.command("certify")
@handles_errors
def certify_cmd(
    name: Annotated[str, typer.Argument(help="named instance or path to a .toml")],
    design: DesignOpt = None,
    sets: SetOpt = None,
    budgets: BudgetOpt = None,
    solver: Annotated[str, typer.Option("--solver", help="highs | cpsat")] = "highs",
    time_limit: Annotated[float | None, typer.Option("--time-limit", help="seconds for the bound's solve")] = None,
    solutions: Annotated[Path, typer.Option("--solutions", help="directory of stored solutions to reuse")] = Path("solutions"),
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write the certificate JSON here")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Certify a design: audit every constraint and state how far it can be from the best."""
    from codesign.kinds.mapping.spec import commands_for, is_mapping_source
    from codesign.proof.driver import check_limits

    check_limits(time_limit, None)
    if solutions.exists() and not solutions.is_dir():
        raise InputError("--solutions is a directory of stored solutions", file=solutions, expected="a directory",
                         suggestion="the directory `solve --save --out-dir` wrote to")
    if is_mapping_source(name):
        mapping = commands_for(name)
        if not hasattr(mapping, "certify"):
            raise InputError("certify is not available for this instance kind yet", value=name, expected="a hardware/schedule or mapping instance")
        if sets or budgets:
            raise InputError("--set and --budget do not apply to mapping instances", expected="--design FILE")
        given = None if design is None else read_design_file(design)
        mapping.certify(out, name, given, str(design), solver, time_limit, solutions, output, as_json, _emit_json)
        return
    from codesign.jsonio import write_json_atomic
    from codesign.kinds.grid.spec import load_instance, with_budgets
    from codesign.proof.certify import certify
    from codesign.proof.driver import check_solver

    check_solver(solver)
    inst = with_budgets(load_instance(name), budgets or [])
    full, source = _design_from(inst, design, sets)
    cert = certify(inst, full, solver=solver, time_limit=time_limit, solution_dir=solutions, source=source)
    if output is not None:
        write_json_atomic(output, cert)
    if as_json:
        _emit_json(cert)
        return
    a = Table(title=f"{inst.name}: audit of the design")
    for col in ("constraint", "value", "limit", "slack", "ok"):
        a.add_column(col, justify="left" if col == "constraint" else "right")
    for x in cert["audit"]:
        a.add_row(escape(x["name"]), fmt(x["value"]), fmt(x["limit"]), fmt(x["slack"]), "[green]yes[/]" if x["ok"] else "[red]NO[/]")
    out.print(a)
    out.print(f"{cert['sense']} {cert['objective_metric']}: design {fmt(cert['objective'])}, bound {fmt(cert['bound']) if cert['bound'] is not None else '-'}")
    color = "green" if cert["feasible"] else "red"
    out.print(f"[{color}]{escape(cert['statement'])}[/]")
    out.print(f"[dim]bound from {cert['bound_provenance']['source']} ({cert['bound_provenance'].get('solver')}, {cert['bound_provenance'].get('status')})[/]")
    if output is not None:
        out.print(f"wrote {output}")


@app.command("check-certificate")
@handles_errors
def check_certificate_cmd(
    file: Annotated[Path, typer.Argument(help="a certificate JSON written by `certify -o`")],
    as_json: JsonOpt = False,
) -> None:
    """Re-check a certificate without solving (audit and objective recomputed; bound as recorded)."""
    from codesign.proof.certify import check_certificate

    _report_check(check_certificate(file), as_json)


def _report_check(report: dict[str, Any], as_json: bool, prefix: str = "") -> None:
    """Print a re-check report (ok / FAILED and its message); exit 1 when it failed."""
    if as_json:
        _emit_json(report)
    else:
        color = "green" if report["ok"] else "red"
        out.print(f"[{color}]{'ok' if report['ok'] else 'FAILED'}[/] {escape(prefix + report['message'])}")
    if not report["ok"]:
        raise typer.Exit(1)


@app.command("explain")
@handles_errors
def explain_cmd(
    name: Annotated[str, typer.Argument(help="named instance or path to a .toml")],
    budgets: BudgetOpt = None,
    solver: Annotated[str, typer.Option("--solver", help="highs | cpsat")] = "highs",
    as_json: JsonOpt = False,
) -> None:
    """Why is an instance infeasible? A minimal conflicting set and the least relaxation of each."""
    from codesign.kinds.grid.explain import explain
    from codesign.kinds.grid.spec import load_instance, with_budgets
    from codesign.kinds.mapping.spec import instance_kind
    from codesign.proof.driver import check_solver

    if (kind := instance_kind(name)) is not None:
        raise InputError(f"explain takes hardware/schedule instances; this is a {kind} instance", value=name,
                         suggestion=f"`codesign solve {name}` explains why when no {kind} is feasible")
    check_solver(solver)
    inst = with_budgets(load_instance(name), budgets or [])
    e = explain(inst, solver=solver).as_dict()
    if as_json:
        _emit_json(e)
    else:
        print_explanation(e)


def print_explanation(e: dict[str, Any]) -> None:
    if e["feasible"]:
        out.print("[green]feasible[/]: no constraint conflicts")
        return
    if not e["conflicts"]:
        out.print(f"[red]infeasible[/]: {e['note']}")
        return
    out.print("[red]infeasible[/]: these constraints cannot all hold together (a minimal set: without any one of "
              "them the others of the set can; other constraints may conflict too):")
    for c in e["conflicts"]:
        out.print(f"  - {escape(c['name'])}" + (f"  ({escape(c['expr'])})" if c.get("expr") else ""), highlight=False)
    t = Table(title="least relaxation of each, the others kept")
    for col in ("constraint", "relax by", "new limit", "restores feasibility"):
        t.add_column(col)
    for r in e["relaxations"]:
        t.add_row(
            escape(r["name"]),
            (fmt(r["relax_by_as_written"]) if "relax_by_as_written" in r else
             fmt(r["violation_at_best"]) if "violation_at_best" in r else "-")
            + ("" if r.get("least", True) else " (at most)"),
            r.get("as_written") or (fmt(r["new_limit"]) if isinstance(r.get("new_limit"), float) else str(r.get("new_limit", "-"))),
            "yes" if r["restores"] else f"no: {r.get('note', '')}",
        )
    out.print(t)


@app.command("metrics")
@handles_errors
def metrics_cmd(as_json: JsonOpt = False) -> None:
    """The metric names budgets (--budget, [[budgets.custom]]) may use."""
    from codesign.kinds.grid.budgets import metric_table

    rows = metric_table()
    if as_json:
        _emit_json(rows)
        return
    t = Table(title="metrics for budgets")
    for col in ("name", "scope", "unit", "description"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], r["scope"], r["unit"], r["description"])
    out.print(t)
    out.print("In a multi-workload instance, name a workload's metric as <workload>.<metric> (e.g. llama8b.tpot_s).")


@app.command("export")
@handles_errors
def export_cmd(
    name: Annotated[str, typer.Argument(help="named instance or path to a .toml")],
    fmt: Annotated[str | None, typer.Option("--format", help="mps | lp (default: the output's suffix, else mps)")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="file to write (default NAME.FORMAT)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the instance's exact MIP as MPS or LP so any solver can reproduce a result."""
    from codesign.backends.pyomo import export
    from codesign.kinds.grid.formulation import build
    from codesign.kinds.grid.spec import load_instance
    from codesign.kinds.mapping.spec import instance_kind

    if (kind := instance_kind(name)) is not None:
        raise InputError(f"export takes hardware/schedule instances; this is a {kind} instance", value=name,
                         expected="an instance listed without a kind by `codesign instances`")
    suffix = output.suffix.lower().lstrip(".") if output is not None else ""
    if fmt is None:
        fmt = suffix if suffix in ("mps", "lp") else "mps"
    elif suffix in ("mps", "lp") and suffix != fmt:
        raise InputError("the output's suffix names another format", file=output, key="--format", value=fmt,
                         expected=f"--format {suffix} for a .{suffix} file", suggestion="leave --format out: the suffix decides")
    inst = load_instance(name)
    comp = build(inst)
    if comp.empty_reason:
        raise InputError(f"nothing to export: {comp.empty_reason}", value=inst.name)
    path = export(comp.mip, output or Path(f"{inst.name}.{fmt}"), fmt)
    info = {"path": str(path), "format": fmt, **comp.mip.stats(), "objective_unit": comp.objective_unit}
    if as_json:
        _emit_json(info)
    else:
        internal = ("seconds per token (weighted over the workloads; tokens/s = weights / it)"
                    if inst.objective.metric == "tokens_per_s" else f"{inst.objective.metric} x the workloads' total weight")
        out.print(f"wrote {path} ({info['variables']} variables, {info['rows']} rows); the file minimises its "
                  f"objective, which x {comp.objective_unit:.6g} is {internal}")


@app.command("validate")
@handles_errors
def validate_cmd(
    csv: Annotated[Path, typer.Argument(help="measurements CSV (schema of shared/validation/measurements.csv)")],
    by: Annotated[str, typer.Option("--by", help="comma-separated row fields to group by")] = "model,gpu",
    split: Annotated[Path | None, typer.Option("--split", help="fit/held-out split JSON (labels rows)")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="write a predicted-vs-measured PNG")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Predict measured inference performance with the model; report per-row error and MAPE.

    Rows follow shared/validation/measurements.csv's schema; optional columns num_requests and kv_precision. Models and GPUs may be catalog ids, Hugging Face repositories or nvidia-smi names (the report lists the names it read as ids)."""
    from codesign import validate as v

    if not csv.exists():
        raise InputError("measurements file not found", file=csv)
    if split is not None and not split.exists():
        raise InputError("split file not found", file=split,
                         suggestion="`codesign calibrate CSV --out FILE` writes FILE's split beside it")
    kwargs = {} if split is None else {"split_file": split}
    report = v.run_validation(csv, tuple(x.strip() for x in by.split(",") if x.strip()), **kwargs)
    if not report.rows:
        reasons = "; ".join(f"{s['id']}: {s['reason']}" for s in report.skipped[:3])
        raise InputError("the file has no rows" if not report.skipped else
                         f"no row of the file could be predicted ({len(report.skipped)} skipped; {reasons}"
                         f"{' ...' if len(report.skipped) > 3 else ''})",
                         file=csv, expected="rows of known models, chips and metrics (README of shared/validation)")
    if plot_path is not None:
        v.plot(report, plot_path)
    if as_json:
        _emit_json(report.as_dict())
    else:
        out.print(v.format_report(report), highlight=False, soft_wrap=True)


@app.command("calibrate")
@handles_errors
def calibrate_cmd(
    csv: Annotated[Path, typer.Argument(help="measurements CSV")],
    split: Annotated[Path | None, typer.Option(
        "--split", help="fit/held-out split JSON; only 'fit' rows are used (default: every row by its id's hash)")] = None,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="write a calibration TOML here (chips not fitted keep the calibration in use); "
                      "use it with `codesign --calibration FILE ...`")] = None,
    write: Annotated[bool, typer.Option("--write", help="update the shipped calibration.toml")] = False,
    fit_host: Annotated[bool, typer.Option(
        "--fit-host", help="also fit the host time per sequence of a step (engines with a Python scheduler; VALIDATION.md §6.3)")] = False,
    fit_8bit: Annotated[bool, typer.Option(
        "--fit-8bit/--no-fit-8bit", help="fit the FP8/INT8 tensor rate's own compute efficiency for chip families whose "
                                         "fit rows run at both an 8-bit and a wider precision (VALIDATION.md §5.15); "
                                         "the default, --no-fit-8bit: one compute efficiency for every "
                                         "precision")] = False,
    fit_overlap: Annotated[bool, typer.Option(
        "--fit-overlap", help="also fit the overlap of a step's compute and memory streams per family (0..1) instead "
                              "of holding it at 0, the streams adding (VALIDATION.md §5.17)")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Fit the per-chip-family calibration on the fit rows of a split (documented in VALIDATION.md)."""
    from codesign import validate as v
    from codesign.model.hardware import calibration_path, shipped_calibration_path

    for f in (csv, split):
        if f is not None and not f.exists():
            raise InputError("file not found", file=f)
    if write and out_file is not None:
        raise InputError("--write and --out are exclusive", expected="one of them: the shipped file or your own")
    if out_file is not None and out_file.suffix != ".toml":
        raise InputError("the calibration must be a .toml file", file=out_file)
    if out_file is not None and out_file.resolve() == shipped_calibration_path().resolve():
        raise InputError("--out names the shipped calibration", file=out_file,
                         suggestion="use --write to update the shipped file, or give --out a file of your own")
    made_split = None
    if split is None and out_file is not None:
        # the split the fit uses (every row by its id's hash), kept beside the calibration so that
        # `codesign validate --split` reports the rows it did not see
        split = made_split = out_file.with_suffix(".split.json")
        v.make_split(csv, split)
    # your own file: only the families your rows measure are fitted; every other chip keeps the
    # calibration in use (no pooled fit, which the shipped file gives GPUs without measurements)
    fitted = v.fit_calibration(csv, split, write=True if write else None, pooled=bool(write) or out_file is None,
                               variant=v.Variant(fit_host=fit_host, fit_8bit=fit_8bit, fit_overlap=fit_overlap))
    if not fitted:
        if made_split is not None:
            made_split.unlink(missing_ok=True)
        rows, bad = v.read_rows(csv)
        reasons = sorted({v.skip_reason(r) or "no row of this family is in the split's fit half" for r in rows}
                         | {b["reason"] for b in bad})
        raise InputError("no row can be fitted", file=csv, value=reasons[:5],
                         expected="rows of a known model and chip with a supported metric, half of them in the split's fit set")
    if out_file is not None:
        v.write_calibration(fitted, out_file, csv_path=csv, split_file=split, base=calibration_path())
    if as_json:
        _emit_json(fitted)
    else:
        out.print_json(dumps(fitted))
        if out_file is not None:
            err.print(f"wrote {out_file} and the split it was fitted on, {split}; check it on the other rows with "
                      f"`codesign --calibration {out_file} validate {csv} --split {split}`, then use it with "
                      f"`codesign --calibration {out_file} solve|evaluate|certify ...`", soft_wrap=True)


GENERATORS = {
    "mapping": ("codesign.kinds.mapping.generate", "generate_mapping", "codesign.kinds.mapping.spec", "mapping_from_data"),
    "placement": ("codesign.kinds.placement.spec", "generate_placement", "codesign.kinds.placement.spec", "placement_from_data"),
}


def _parse_value(text: str) -> Any:
    """``16`` -> 16, ``0.5`` -> 0.5, ``true`` -> True, ``a,b`` -> ("a", "b"), else the string."""
    try:
        v = json.loads(text)
    except json.JSONDecodeError:
        return tuple(x.strip() for x in text.split(",")) if "," in text else text
    return tuple(v) if isinstance(v, list) else v


def _generator_value(key: str, text: str, annotation: Any) -> Any:
    """A ``--set key=text`` value for a generator parameter annotated ``annotation`` (a string such
    as ``'int | None'``): parsed by :func:`_parse_value`, kept as text for a ``str`` parameter, and
    refused (InputError) if it is not of the annotated type."""
    kinds = {k.strip() for k in str(annotation).split("|")}
    value = _parse_value(text)
    if "str" in kinds and value is not None and not isinstance(value, str):
        value = text  # a name that reads like a number stays a name
    if not kinds & {"int", "float", "bool", "str", "list"} or (value is None and "None" in kinds):
        return value  # not a simple annotation (the generator checks it), or an optional left out
    ok = (("int" in kinds and isinstance(value, int) and not isinstance(value, bool))
          or ("float" in kinds and isinstance(value, int | float) and not isinstance(value, bool))
          or ("bool" in kinds and isinstance(value, bool))
          or ("str" in kinds and isinstance(value, str))
          or ("list" in kinds and isinstance(value, tuple)))
    if not ok:
        raise InputError("a generator parameter of another type", key=f"--set {key}", value=text,
                         expected=" or ".join(sorted(kinds - {"None"})), suggestion="`--set help=1` lists the parameters")
    return value


@app.command("generate")
@handles_errors
def generate_cmd(
    kind: Annotated[str, typer.Argument(help="mapping | placement")],
    out_file: Annotated[Path, typer.Option("-o", "--out", help="the .toml to write (atomically)")],
    params: Annotated[list[str] | None, typer.Option("--set", help="generator parameter=value (repeatable), e.g. devices=16")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a generated mapping or placement instance (sizes scale for benchmarks).

    Parameters are the generator function's keyword arguments (see `--set help=1`)."""
    import importlib
    import inspect

    import tomli_w

    from codesign.errors import did_you_mean
    from codesign.jsonio import write_text_atomic

    if kind not in GENERATORS:
        raise InputError("unknown instance kind", value=kind, expected=" | ".join(GENERATORS), suggestion=did_you_mean(kind, list(GENERATORS)))
    gen_mod, gen_fn, load_mod, load_fn = GENERATORS[kind]
    fn = getattr(importlib.import_module(gen_mod), gen_fn)
    signature = inspect.signature(fn).parameters
    names = list(signature)
    kwargs: dict[str, Any] = {}
    for item in params or []:
        if "=" not in item:
            raise InputError("--set takes parameter=value", value=item, expected=f"one of {names}")
        k, v = (x.strip() for x in item.split("=", 1))
        if k == "help":
            out.print(f"{gen_mod}.{gen_fn}{inspect.signature(fn)}\n\n{inspect.getdoc(fn)}")
            return
        if k not in names:
            raise InputError("unknown generator parameter", key=k, expected=f"one of {names}", suggestion=did_you_mean(k, names))
        kwargs[k] = _generator_value(k, v, signature[k].annotation)
    if out_file.suffix != ".toml":
        raise InputError("the output must be a .toml file", file=out_file)
    given = ", ".join(f"{k}={v}" for k, v in kwargs.items()) or "the defaults"
    try:
        data = fn(**kwargs)
    except (TypeError, ValueError) as exc:
        raise InputError(f"the generator rejected {given}: {exc}", key="--set", suggestion="`--set help=1` lists the parameters") from None
    try:
        getattr(importlib.import_module(load_mod), load_fn)(data, source=out_file)  # validates
    except InputError as exc:  # the file is not written: name the parameters, not a key of it
        where = f"its {exc.key}: " if exc.key else ""
        raise InputError(f"the parameters ({given}) give no valid {kind} instance ({where}{exc.message})",
                         key="--set", value=exc.value, expected=exc.expected,
                         suggestion="`--set help=1` lists the parameters") from None
    write_text_atomic(out_file, tomli_w.dumps(data))
    if as_json:
        _emit_json({"path": str(out_file), "kind": kind, "name": data["name"], "parameters": kwargs})
    else:
        out.print(f"wrote {out_file} ({data['name']})")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
