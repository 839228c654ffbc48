"""Command line: thin commands, each calling one library function.

Every command takes ``--json``. Bad input prints a message naming file, key and value and exits
with code 2 (no traceback).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from codesign.cli.common import (
    BudgetOpt,
    DesignOpt,
    JsonOpt,
    SetOpt,
    _emit_json,
    app,
    err,
    fmt,
    handles_errors,
    out,
)
from codesign.errors import InputError
from codesign.schema import load_toml


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
