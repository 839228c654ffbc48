"""Renderers of the records for people: what a command prints is the record it saves, summary first.

The summary: the status and the objective (with the bound and gap of a solve), the design, and
tokens/s, TTFT, TPOT, energy per token and power with units; then violations and lints. ``--all``
adds every metric and the constraint audit.
"""

from __future__ import annotations

import math
from typing import Any

from rich.markup import escape
from rich.table import Table

from codesign.cli.common import fmt, out
from codesign.kinds.base import Assessment, Lint, Problem
from codesign.proof import records

#: how the summary names the headline metrics, and the unit each is printed in
HEADLINE = (
    ("tokens_per_s", "tokens/s", ""),
    ("ttft_s", "TTFT", "s"),
    ("tpot_s", "TPOT", "s"),
    ("energy_per_token_J", "energy/token", "J"),
    ("system_power_W", "power", "W"),
)
_PREFIXES = ((1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))


def with_unit(value: float | None, unit: str) -> str:
    """``0.00569 s`` -> ``5.69 ms``; a count without unit keeps thousands separators."""
    if value is None or isinstance(value, str):
        return "-" if value is None else value
    if not unit:
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.4g}"
    if not math.isfinite(value) or value == 0:
        return f"{value:g} {unit}"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale or scale == _PREFIXES[-1][0]:
            shown = value / scale
            return f"{shown:,.4g} {prefix}{unit}" if abs(shown) < 1e4 else f"{shown:,.0f} {prefix}{unit}"
    return f"{value:g} {unit}"


def headline_line(metrics: dict[str, Any] | None) -> str:
    if not metrics:
        return ""
    parts = [f"{label} {with_unit(metrics.get(key), unit)}" for key, label, unit in HEADLINE if metrics.get(key) is not None]
    return "   ".join(parts)


def print_lints(lints: list[Lint] | list[dict[str, Any]]) -> None:
    for x in lints:
        d = x.as_dict() if isinstance(x, Lint) else x
        color = "red" if d["severity"] == "error" else "yellow"
        out.print(f"[{color}]lint {d['severity']} {d['code']}[/]: {escape(d['message'])}", highlight=False)


def print_evaluation(problem: Problem, rec: records.Record, a: Assessment | None, *, everything: bool) -> None:
    """The design, its headline metrics, violations and lints (and with ``everything`` every metric
    and the audit) of a record that holds one."""
    if rec.metrics:
        out.print(headline_line(rec.metrics), highlight=False)
        if len(problem.data.get("workloads", [])) > 1:
            for w in problem.data["workloads"]:
                m = {k.split(".", 1)[1]: v for k, v in rec.metrics.items() if k.startswith(f"{w['name']}.")}
                out.print(f"  {w['name']}: {headline_line(m)}", highlight=False)
    if a is not None:
        problem.render_design(out, a)
    if everything:
        print_all(rec)
    for v in rec.violations:
        out.print(f"[red]violated[/]: {escape(v)}", highlight=False)
    print_lints([x.model_dump() for x in rec.lints])


def print_all(rec: records.Record) -> None:
    """Every metric (SI units, named in the key) and every constraint."""
    m = Table(title="metrics (SI units as named)")
    m.add_column("metric")
    m.add_column("value", justify="right")
    for k, v in (rec.metrics or {}).items():
        if isinstance(v, list | dict):
            v = ", ".join(fmt(x) for x in v) if isinstance(v, list) else ", ".join(f"{a}: {fmt(b)}" for a, b in v.items())
        m.add_row(escape(k), escape(fmt(v)))
    out.print(m)
    if rec.audit:
        a = Table(title="constraints")
        for col in ("constraint", "value", "limit", "slack", "unit", "ok"):
            a.add_column(col, justify="left" if col in ("constraint", "unit") else "right")
        for x in rec.audit:
            a.add_row(escape(x.name), fmt(x.value), fmt(x.limit), fmt(x.slack), x.unit, "[green]yes[/]" if x.ok else "[red]NO[/]")
        out.print(a)


def status_line(sol: records.Solution) -> str:
    color = {"optimal": "green", "feasible": "yellow"}.get(sol.status, "red")
    head = f"[{color}]{sol.status}[/] {sol.sense} {sol.objective_metric}"
    if sol.objective is not None:
        head += f" = {fmt(sol.objective)}"
    if sol.bound is not None:
        head += f"   bound {fmt(sol.bound)}"
    if sol.gap is not None:
        head += f"   gap {sol.gap:.2e}"
    return head


def proof_line(sol: records.Solution) -> str:
    mip = sol.mip
    size = (f"{mip.get('binaries', 0)} binaries, {mip.get('variables', 0)} variables / {mip.get('rows', 0)} rows"
            if mip else "no MIP")
    verified = "; verified by the model" if sol.design is not None else ""
    return (f"[dim]{sol.solver} {sol.solver_version}: {escape(sol.termination)}; build {sol.build_s:.2f}s, "
            f"solve {sol.solve_s:.2f}s, {size}{verified}[/]")


def print_explanation(e: dict[str, Any]) -> None:
    if e["feasible"]:
        out.print("[green]feasible[/]: no constraint conflicts")
        return
    if not e["conflicts"]:
        out.print(f"[red]infeasible[/]: {escape(e.get('note', ''))}")
        return
    if e.get("relaxations") or any("expr" in c or "family" in c for c in e["conflicts"]):
        out.print("[red]infeasible[/]: these constraints cannot all hold together (a minimal set: without any one "
                  "of them the others of the set can; other constraints may conflict too):")
    else:
        out.print("[red]infeasible[/] because of:")
    for c in e["conflicts"]:
        line = f"  - {escape(c['name'])}" + (f"  ({escape(c['expr'])})" if c.get("expr") else "")
        if c.get("message"):
            line += f": {escape(c['message'])}"
        out.print(line, highlight=False)
    if e.get("relaxations"):
        t = Table(title="least relaxation of each, the others kept")
        for col in ("constraint", "relax by", "new limit", "restores feasibility"):
            t.add_column(col)
        for r in e["relaxations"]:
            amount = (fmt(r["relax_by_as_written"]) if "relax_by_as_written" in r else
                      fmt(r["violation_at_best"]) if "violation_at_best" in r else "-")
            limit = r.get("as_written") or (fmt(r["new_limit"]) if isinstance(r.get("new_limit"), float)
                                            else str(r.get("new_limit", "-")))
            t.add_row(escape(r["name"]), amount + ("" if r.get("least", True) else " (at most)"), escape(limit),
                      "yes" if r["restores"] else f"no: {r.get('note', '')}")
        out.print(t)
    if e.get("note"):
        out.print(f"[yellow]{escape(e['note'])}[/]")
