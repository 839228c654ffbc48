"""Commands that read instances: ``instances``, ``show``, ``evaluate``, ``metrics``, ``generate``."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Annotated, Any

import tomli_w
import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from codesign.cli.common import (
    BudgetOpt,
    DesignOpt,
    JsonOpt,
    NameArg,
    SetOpt,
    app,
    emit_json,
    fmt,
    handles_errors,
    out,
    session,
)
from codesign.cli.render import print_evaluation, print_lints
from codesign.errors import InputError, did_you_mean
from codesign.jsonio import read_json, write_text_atomic
from codesign.kinds.base import Problem, decision_groups
from codesign.kinds.registry import kind_class, kinds, load, named_paths
from codesign.model.budgets import metric_table
from codesign.model.mapping import format_count
from codesign.proof import records
from codesign.schema import load_toml

AllOpt = Annotated[bool, typer.Option("--all", help="every metric and the constraint audit, not only the summary")]


def load_problem(ctx: typer.Context, name: str, budgets: list[str] | None = None, objective: str | None = None) -> Problem:
    """The instance a command names, under the session's calibration, with ``--budget`` and
    ``--objective`` applied (InputError where its kind takes neither)."""
    p = load(name, calibration=session(ctx).calibration)
    return p.with_budgets(list(budgets or [])).with_objective(objective)


def read_design_file(path: Path) -> dict[str, Any]:
    """A design file: JSON or TOML mapping decision names to values (a record's ``design`` object
    also works)."""
    if not path.exists():
        raise InputError("design file not found", file=path)
    try:
        data = load_toml(path) if path.suffix == ".toml" else read_json(path)
    except InputError as exc:  # say what a design file may be
        raise InputError(exc.message, file=path, expected="a JSON design file, or TOML with the suffix .toml") from None
    if not isinstance(data, dict):
        raise InputError("a design file maps decision names to values", file=path, value=type(data).__name__)
    if isinstance(data.get("design"), dict):
        data = data["design"]
    return data


def parse_sets(sets: list[str]) -> dict[str, Any]:
    """``--set key=value``: values read as JSON where they are (numbers, true/false, lists), else
    as text."""
    d: dict[str, Any] = {}
    for s in sets:
        if "=" not in s:
            raise InputError("--set takes key=value", value=s, expected="e.g. --set tp=8")
        k, v = (x.strip() for x in s.split("=", 1))
        if not k or not v:
            raise InputError("--set takes key=value with both given", value=s, expected="e.g. --set tp=8")
        try:
            d[k] = json.loads(v)
        except json.JSONDecodeError:
            d[k] = v
    return d


def design_from(problem: Problem, design: Path | None, sets: list[str] | None) -> tuple[dict[str, Any], str]:
    """The design a command evaluates: the baseline, updated by ``--design`` and ``--set``."""
    given: dict[str, Any] = {}
    source = "the baseline"
    if design is not None:
        given.update(read_design_file(design))
        source = str(design)
    if sets:
        given.update(parse_sets(sets))
        source = "--set" if design is None else f"{design} and --set"
    return problem.parse_design(given or problem.baseline(), source=source), source


#: the decision groups as the instance list abbreviates them
GROUP_ABBREVIATIONS = {"hardware": "hw", "parallelism": "par", "mapping": "map", "placement": "place"}


@app.command("instances")
@handles_errors
def instances_cmd(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the named instances: objective, what each decides, design-space size (--json: and kind)."""
    rows = []
    for name, path in named_paths().items():
        p = load(path, calibration=session(ctx).calibration)
        rows.append({"name": name, "kind": p.kind, "objective": p.metric, "sense": p.sense,
                     "decisions": len(p.decisions()),
                     "decision_groups": decision_groups(p.decisions()), "space_size": p.space_size(), "description": p.description})
    if as_json:
        emit_json(rows)
        return
    t = Table(title="named instances", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("name", "objective", "decides", "points"):
        t.add_column(col, no_wrap=True, justify="right" if col == "points" else "left")
    for r in rows:
        t.add_row(r["name"], f"{r['sense']} {r['objective']}",
                  "+".join(GROUP_ABBREVIATIONS[g] for g in r["decision_groups"]), format_count(r["space_size"]))
    out.print(t)
    out.print("decides: " + ", ".join(f"{a} = {g}" for g, a in GROUP_ABBREVIATIONS.items()), style="dim")


@app.command("show")
@handles_errors
def show_cmd(ctx: typer.Context, name: NameArg, as_json: JsonOpt = False) -> None:
    """Show an instance: decisions and domains, objective, baseline, what its kind adds, lints."""
    p = load_problem(ctx, name)
    lints = p.lints()
    data = {
        "name": p.name, "kind": p.kind, "description": p.description,
        "provenance": getattr(p.spec, "provenance", None), "source": None if p.source is None else str(p.source),
        "content_hash": p.content_hash, "calibration": p.calibration.name,
        "objective": {"metric": p.metric, "sense": p.sense}, "space_size": p.space_size(),
        "decision_groups": decision_groups(p.decisions()), "decisions": [d.as_dict() for d in p.decisions()],
        "baseline": p.baseline(), "baseline_description": p.baseline_description,
        **p.summary(), "lints": [x.as_dict() for x in lints],
    }
    if as_json:
        emit_json(data)
        return
    out.print(f"[bold]{escape(p.name)}[/] ({p.kind}): {escape(p.description)}")
    if data["provenance"]:
        out.print(f"[dim]{escape(data['provenance'])}[/]")
    out.print(f"objective: {p.sense} {p.metric}    space: {format_count(data['space_size'])} points")
    t = Table(title="decisions")
    t.add_column("decision")
    t.add_column("group")
    t.add_column("domain")
    t.add_column("baseline", justify="right")
    base = data["baseline"]
    for d in p.decisions():
        domain = d.domain if isinstance(d.domain, str) else ", ".join(map(str, d.domain))
        shown = baseline_value(base, d.name)
        if isinstance(shown, list):
            shown = f"({len(shown)} entries)"
        t.add_row(escape(d.name), d.group, escape(domain), escape(str(shown)))
    out.print(t)
    out.print(f"baseline: {escape(p.baseline_description)}")
    p.render_summary(out, p.summary())
    print_lints(lints)


def baseline_value(baseline: dict[str, Any], name: str) -> Any:
    """A decision's value in a baseline, where a joint kind nests its hardware decisions
    (``{"hardware": {"pool_ports": {"h100": 1}}}`` holds ``pool_ports[h100]``); "-" if it has none."""
    scopes = [baseline, *(v for v in baseline.values() if isinstance(v, dict))]
    key, _, index = name.partition("[")
    for scope in scopes:
        if name in scope:
            return scope[name]
        if index and isinstance(scope.get(key), dict) and index[:-1] in scope[key]:
            return scope[key][index[:-1]]
    return "-"


@app.command("evaluate")
@handles_errors
def evaluate_cmd(
    ctx: typer.Context,
    name: NameArg,
    design: DesignOpt = None,
    sets: SetOpt = None,
    budgets: BudgetOpt = None,
    everything: AllOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Evaluate a design with the analytical model (default: the instance's baseline)."""
    p = load_problem(ctx, name, budgets)
    full, _ = design_from(p, design, sets)
    a = p.assess(full)
    rec = records.evaluation(p, a)
    if as_json:
        emit_json(rec.as_dict())
        return
    status = "[green]feasible[/]" if a.feasible else "[red]infeasible[/]"
    out.print(f"{status} {p.sense} {p.metric} = {fmt(a.objective)}   ({escape(p.name)}, {p.kind})")
    print_evaluation(p, rec, a, everything=everything)


@app.command("metrics")
@handles_errors
def metrics_cmd(as_json: JsonOpt = False) -> None:
    """The metric names a budget may use (--budget, an instance's custom budgets), with their units."""
    rows = metric_table()
    if as_json:
        emit_json(rows)
        return
    t = Table(title="metrics for budgets")
    for col in ("name", "scope", "unit", "description"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], r["scope"], r["unit"], r["description"])
    out.print(t)
    out.print("In a multi-workload instance, name a workload's metric as <workload>.<metric> (e.g. llama8b.tpot_s).")


def _parse_value(text: str) -> Any:
    """``16`` -> 16, ``0.5`` -> 0.5, ``true`` -> True, ``a,b`` -> ("a", "b"), else the string."""
    try:
        v = json.loads(text)
    except json.JSONDecodeError:
        return tuple(x.strip() for x in text.split(",")) if "," in text else text
    return tuple(v) if isinstance(v, list) else v


def generator_value(key: str, text: str, annotation: Any) -> Any:
    """A ``--set key=text`` value for a generator parameter annotated ``annotation`` (a string such
    as ``'int | None'``): parsed by :func:`_parse_value`, kept as text for a ``str`` parameter, a
    one-element tuple for a ``tuple[str, ...]`` given one name, and refused (InputError) if it is
    not of the annotated type."""
    kinds_ = {k.strip() for k in str(annotation).split("|")}
    value = _parse_value(text)
    if "str" in kinds_ and value is not None and not isinstance(value, str):
        value = text  # a name that reads like a number stays a name
    if any(k.startswith("tuple") for k in kinds_) and isinstance(value, str):
        value = (value,)  # one name where a tuple of names is expected, not its characters
    simple = {"int", "float", "bool", "str", "list"}
    if not kinds_ & simple or (value is None and "None" in kinds_):
        return value  # not a simple annotation (the generator checks it), or an optional left out
    ok = (("int" in kinds_ and isinstance(value, int) and not isinstance(value, bool))
          or ("float" in kinds_ and isinstance(value, int | float) and not isinstance(value, bool))
          or ("bool" in kinds_ and isinstance(value, bool))
          or ("str" in kinds_ and isinstance(value, str))
          or ("list" in kinds_ and isinstance(value, tuple)))
    if not ok:
        raise InputError("a generator parameter of another type", key=f"--set {key}", value=text,
                         expected=" or ".join(sorted(kinds_ - {"None"})), suggestion="`--set help=1` lists the parameters")
    return value


@app.command("generate")
@handles_errors
def generate_cmd(
    kind: Annotated[str, typer.Argument(help="grid | mapping | placement")],
    out_file: Annotated[Path, typer.Option("-o", "--out", help="the .toml to write (atomically)")],
    params: Annotated[list[str] | None, typer.Option("--set", help="generator parameter=value (repeatable), e.g. devices=16")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a generated instance of a kind (sizes scale for benchmarks).

    Parameters are the generator's keyword arguments (`--set help=1` lists them)."""
    generators = {k: c for k, c in kinds().items() if c.generator is not None}
    if kind not in generators:
        raise InputError("no generator for this instance kind", value=kind, expected=" | ".join(generators),
                         suggestion=did_you_mean(kind, list(generators)))
    cls = kind_class(kind)
    fn = cls.generator
    signature = inspect.signature(fn).parameters
    names = list(signature)
    kwargs: dict[str, Any] = {}
    for item in params or []:
        if "=" not in item:
            raise InputError("--set takes parameter=value", value=item, expected=f"one of {names}")
        k, v = (x.strip() for x in item.split("=", 1))
        if k == "help":
            out.print(f"{fn.__module__}.{fn.__name__}{inspect.signature(fn)}\n\n{inspect.getdoc(fn)}")
            return
        if k not in names:
            raise InputError("unknown generator parameter", key=k, expected=f"one of {names}", suggestion=did_you_mean(k, names))
        kwargs[k] = generator_value(k, v, signature[k].annotation)
    if out_file.suffix != ".toml":
        raise InputError("the output must be a .toml file", file=out_file)
    given = ", ".join(f"{k}={v}" for k, v in kwargs.items()) or "the defaults"
    try:
        data = fn(**kwargs)
    except (TypeError, ValueError) as exc:
        raise InputError(f"the generator rejected {given}: {exc}", key="--set", suggestion="`--set help=1` lists the parameters") from None
    try:
        cls.from_data(data, source=str(out_file))  # validates
    except InputError as exc:  # the file is not written: name the parameters, not a key of it
        where = f"its {exc.key}: " if exc.key else ""
        raise InputError(f"the parameters ({given}) give no valid {kind} instance ({where}{exc.message})",
                         key="--set", value=exc.value, expected=exc.expected,
                         suggestion="`--set help=1` lists the parameters") from None
    write_text_atomic(out_file, tomli_w.dumps(data))
    if as_json:
        emit_json({"path": str(out_file), "kind": kind, "name": data["name"], "parameters": kwargs})
    else:
        out.print(f"wrote {out_file} ({data['name']})")
