"""The HTML page of a :class:`codesign.tradeoffs.report.Report`: one self-contained file (plots as
base64 PNG, styles inline, no script but the report's data as JSON), written with the standard
library (every text through :func:`html.escape`).

Every number shown is a record's (the solve, the certificate, the frontier, the sensitivity, the
model's metrics), printed to 6 significant digits with its full value in the element's ``title``;
the same records are embedded in full as JSON (``<script type="application/json"
id="codesign-report">``) for a program to read back.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from typing import Any

from codesign import __version__
from codesign.jsonio import dumps, jsonable
from codesign.kinds.base import HEADLINE_METRICS
from codesign.model.mapping import format_count
from codesign.tradeoffs.plot import breakdown_plot, frontier_plot, sensitivity_plot
from codesign.tradeoffs.report import Report

#: a number is shown to this many significant digits (its full value in the title)
DIGITS = 6
#: a decision's domain is shown up to this many characters
DOMAIN_CHARS = 160

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1120px;margin:24px auto;
padding:0 20px;color:#1b1f24;line-height:1.45;font-size:15px}
h1{font-size:26px;margin-bottom:4px}h2{font-size:20px;margin-top:34px;border-bottom:2px solid #d0d7de;padding-bottom:4px}
h3{font-size:16px;margin-top:22px}
table{border-collapse:collapse;margin:8px 0 14px;font-size:13.5px}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f7}tbody th{white-space:nowrap;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.muted{color:#57606a;font-size:13px}.ok{color:#116329;font-weight:600}.warn{color:#9a6700;font-weight:600}
.bad{color:#b3261e;font-weight:600}.changed{background:#fff8c5}
.badge{display:inline-block;padding:1px 9px;border-radius:10px;color:#fff;font-weight:600;font-size:13px}
.b-ok{background:#1a7f37}.b-warn{background:#9a6700}.b-bad{background:#b3261e}
img{max-width:100%;border:1px solid #d0d7de;margin:6px 0}
code{background:#f3f5f7;padding:1px 4px;border-radius:3px;font-size:13px}
nav a{margin-right:12px}
"""


def e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def num(x: Any, unit: str = "") -> str:
    """A number to DIGITS significant digits with its full value in the title; anything else as text."""
    if x is None:
        return "–"
    if isinstance(x, bool) or not isinstance(x, int | float):
        return e(x)
    shown = f"{x:,}" if isinstance(x, int) else f"{x:.{DIGITS}g}"
    return f'<span title="{e(repr(x))}">{e(shown)}</span>' + (f" {e(unit)}" if unit else "")


def gap(x: float | None) -> str:
    """A relative gap, also in percent."""
    return num(x) if x is None or x == 0 else f"{num(x)} ({100 * x:.4g} %)"


def unit_of(metric: str) -> str:
    """The unit a metric's name states (``_s``, ``_J``, ``_W``, ``_mm2``, ``_B``) or its headline unit."""
    if metric in HEADLINE_METRICS:
        return HEADLINE_METRICS[metric]
    for suffix, unit in (("_s", "s"), ("_J", "J"), ("_W", "W"), ("_mm2", "mm²"), ("_B", "B"), ("_C", "°C"),
                         ("_Bps", "B/s")):
        if metric.endswith(suffix):
            return unit
    return ""


def table(headers: list[str], rows: list[list[str]], numeric: set[int] | None = None,
          row_class: Callable[[int], str] | None = None) -> str:
    """Cells are HTML already (escape text with :func:`e`); columns in ``numeric`` align right."""
    numeric = numeric or set()
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = []
    for i, r in enumerate(rows):
        cls = row_class(i) if row_class else ""
        cells = "".join(f'<td class="n">{c}</td>' if j in numeric else f"<td>{c}</td>" for j, c in enumerate(r))
        body.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def kv_table(rows: list[list[str]]) -> str:
    """A two-column table of (label, HTML value) without a header row."""
    body = "".join(f"<tr><th>{e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table><tbody>{body}</tbody></table>"


def png(draw: Callable[..., Any], *args: Any, alt: str) -> str:
    """An ``<img>`` of a plot drawn into memory (base64 PNG)."""
    buf = io.BytesIO()
    draw(*args, buf)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{e(alt)}" src="data:image/png;base64,{data}">'


def _value(v: Any) -> str:
    """A decision's value: a number to DIGITS digits, a long list of names as runs (``local ×20,
    host ×3``) with the whole list in the title, anything else as text (shortened)."""
    if isinstance(v, float | int) and not isinstance(v, bool):
        return num(v)
    if isinstance(v, list) and len(v) > 12 and all(isinstance(x, str | int | float) for x in v):
        runs: list[list[Any]] = []
        for x in v:
            if runs and runs[-1][0] == x:
                runs[-1][1] += 1
            else:
                runs.append([x, 1])
        text = f"{len(v)} entries: " + ", ".join(f"{x} ×{n}" if n > 1 else str(x) for x, n in runs)
        short = text if len(text) <= 2 * DOMAIN_CHARS else text[:2 * DOMAIN_CHARS] + " …"
        return f'<span title="{e(v)}">{e(short)}</span>'
    text = str(v)
    return e(text if len(text) <= DOMAIN_CHARS else text[:DOMAIN_CHARS] + " …")


def _badge(status: str) -> str:
    cls = {"optimal": "b-ok", "feasible": "b-warn"}.get(status, "b-bad")
    return f'<span class="badge {cls}">{e(status)}</span>'


def render(r: Report) -> str:
    """The whole page."""
    p, sol = r.problem, r.optimum
    sections = [
        ("instance", "The instance", _instance(r)),
        ("optimum", "The optimum and its proof", _optimum(r)),
        ("breakdown", "Where the time, energy, power and area go", _breakdown(r)),
        ("budgets", "Binding budgets and sensitivity", _budgets(r)),
        ("pareto", f"Pareto frontier: {r.options.x} vs {r.options.y}", _pareto(r)),
        ("certificate", "Certificate of the baseline", _certificate(r)),
    ]
    nav = " ".join(f'<a href="#{k}">{e(title.split(":")[0])}</a>' for k, title, _ in sections)
    body = "".join(f'<section id="{k}"><h2>{e(title)}</h2>{html_}</section>' for k, title, html_ in sections)
    rev = (sol.provenance or {}).get("git_revision")
    head = (f"<h1>codesign report: {e(p.name)}</h1><p>{e(p.description)}</p>"
            f'<p class="muted">{e(p.kind)} instance · {e(p.sense)} {e(p.metric)} · calibration {e(p.calibration.name)}'
            f" · content hash <code>{e(p.content_hash[:16])}</code> · codesign {e(__version__)}"
            + (f" ({e(rev[:10])})" if rev else "")
            + f" · made {e((sol.provenance or {}).get('timestamp', ''))} in {r.seconds:.1f} s ({r.solves} solves, "
            f"{e(r.options.solver)})</p><nav>{nav}</nav>")
    data = dumps(jsonable(_data(r))).replace("</", "<\\/")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>codesign report: {e(p.name)}"
            f"</title><style>{_STYLE}</style></head><body>{head}{body}"
            f'<script type="application/json" id="codesign-report">{data}</script></body></html>\n')


def _data(r: Report) -> dict[str, Any]:
    """The records the page shows, in full (read back by tests and programs)."""
    drop = ("instance_data",)
    return {
        "instance": r.problem.name, "kind": r.problem.kind, "options": vars(r.options),
        "optimum": {k: v for k, v in r.optimum.as_dict().items() if k not in drop},
        "baseline": {k: v for k, v in r.baseline.as_dict().items() if k not in drop},
        "certificate": {k: v for k, v in r.certificate.as_dict().items() if k not in drop},
        "bindings": [{"name": b.name, "binds": b.binds, "limit": b.entry.limit, "value": b.entry.value,
                      "unit": b.entry.unit, "optimum_without": None if b.without is None else b.without.objective,
                      "status_without": None if b.without is None else b.without.status, "vary": b.vary,
                      "note": b.note, "sensitivity": None if b.sensitivity is None else b.sensitivity.as_dict()}
                     for b in r.bindings],
        "binding_note": r.binding_note,
        "frontier": None if r.frontier is None else r.frontier.as_dict(), "frontier_note": r.frontier_note,
        "breakdown": {"panels": [{"title": pl.title, "metric": pl.metric, "unit": pl.unit, "stacked": pl.stacked,
                                  "bars": [vars(b) for b in pl.bars]} for pl in r.breakdown.panels],
                      "notes": r.breakdown.notes},
    }


def _instance(r: Report) -> str:
    p = r.problem
    base = r.baseline.design or {}
    rows = []
    for d in p.decisions():
        domain = d.domain if isinstance(d.domain, str) else ", ".join(map(str, d.domain))
        rows.append([e(d.name), _value(domain), _value(base.get(d.name, "–"))])
    size = p.space_size()
    shown = f"{size:,}" if size < 10**9 else format_count(size)
    out = (f"<p>Design space: {e(shown)} points; baseline: {e(p.baseline_description)}.</p>"
           + table(["decision", "domain", "baseline"], rows))
    budgets = [a for a in r.baseline.audit if a.name.startswith(("budget", "slo"))]
    if budgets:
        custom = {(b.get("name") or f"budgets.custom[{i}]"): b.get("expr", "")
                  for i, b in enumerate(p.data.get("budgets", {}).get("custom", []))}
        written = [f"<code>{e(custom[a.name[7:-1]])}</code>" if a.name.startswith("budget[") and a.name[7:-1] in custom
                   else "" for a in budgets]
        rows = [[e(a.name), num(a.limit), e(a.unit)] + ([w] if any(written) else []) for a, w in zip(budgets, written, strict=True)]
        out += "<h3>Budgets and SLOs</h3>" + table(
            ["constraint", "limit", "unit"] + (["as written"] if any(written) else []), rows, {1})
    lints = r.baseline.lints
    out += "<h3>Lints</h3>"
    if not lints:
        return out + '<p class="ok">No lints: the instance\'s assumptions agree with its hardware.</p>'
    return out + table(["severity", "code", "message"], [
        [f'<span class="{"bad" if x.severity == "error" else "warn"}">{e(x.severity)}</span>', e(x.code),
         e(x.message)] for x in lints])


def _optimum(r: Report) -> str:
    sol, p = r.optimum, r.problem
    unit = unit_of(p.metric)
    tol = (sol.parameters.get("tolerances") or {}).get("verified_gap")
    if sol.status == "optimal":
        claim = (f'<p class="ok">Proven optimal: the solver\'s bound meets the model-verified objective (relative gap '
                 f"{num(sol.gap)} ≤ tolerance {num(tol)}), and a confirming solve found no better design.</p>")
    elif sol.status == "feasible":
        claim = (f'<p class="warn">Not proven optimal: the best design found is within a relative gap of '
                 f"{num(sol.gap)} of the bound ({e(sol.termination)}).</p>")
    else:
        claim = f'<p class="bad">No design: the solve ended {e(sol.status)} ({e(sol.termination)}).</p>'
    mip = sol.mip or {}
    rows = [
        ["status", _badge(sol.status)],
        [f"objective ({p.sense} {p.metric})", num(sol.objective, unit)],
        ["bound", num(sol.bound, unit)],
        ["relative gap", gap(sol.gap)],
        ["gap tolerance (verified)", num(tol)],
        ["solver", e(f"{sol.solver} {sol.solver_version}")],
        ["termination", e(sol.termination)],
        ["time", f"build {num(round(sol.build_s, 3))} s, solve {num(round(sol.solve_s, 3))} s"],
        ["MIP", e(f"{mip.get('binaries', 0)} binaries, {mip.get('variables', 0)} variables, {mip.get('rows', 0)} rows")
         if mip else "–"],
    ]
    out = claim + kv_table(rows)
    if sol.design is None:
        return out
    base = r.baseline.design or {}
    drows = [[e(k), _value(base.get(k, "–")), _value(v)] for k, v in sol.design.items()]
    changed = [base.get(k) != v for k, v in sol.design.items()]
    out += "<h3>Design</h3>" + table(["decision", "baseline", "optimum" if sol.status == "optimal" else "best found"],
                                     drows, row_class=lambda i: "changed" if changed[i] else "")
    mrows = []
    for k, u in HEADLINE_METRICS.items():
        a, b = (r.baseline.metrics or {}).get(k), (sol.metrics or {}).get(k)
        if a is not None or b is not None:
            mrows.append([e(k), num(a), num(b), e(u)])
    out += "<h3>Headline metrics</h3>" + table(["metric", "baseline", "optimum", "unit"], mrows, {1, 2})
    if sol.violations:
        out += "<p class='bad'>Violated: " + e("; ".join(sol.violations)) + "</p>"
    return out


def _breakdown(r: Report) -> str:
    b = r.breakdown
    out = "".join(f'<p class="muted">{e(n)}</p>' for n in b.notes)
    if b.panels:
        labels = ", ".join(dict.fromkeys(bar.label.split(" · ")[0] for pl in b.panels for bar in pl.bars))
        out = (f"<p>The model's terms for {e(labels)}: each part is a term the model sums, each total the "
               "design's metric.</p>" + png(breakdown_plot, b, alt="breakdown by component") + out)
    return out


def _budgets(r: Report) -> str:
    out = f"<p>{e(r.binding_note)}.</p>" if r.binding_note else ""
    if not r.bindings:
        return out
    out += ("<p class='muted'>A budget binds when the proven optimum without it is better (beyond the tie tolerance): "
            "one more proven solve per budget.</p>")
    rows = []
    for b in r.bindings:
        verdict = ("–" if b.binds is None else '<span class="warn">binds</span>' if b.binds else "does not bind")
        rows.append([e(b.name), num(b.entry.limit), num(b.entry.value), num(b.entry.slack), e(b.entry.unit),
                     num(None if b.without is None else b.without.objective, unit_of(r.problem.metric)), verdict,
                     e(b.note)])
    out += table(["budget", "limit", "value at optimum", "slack", "unit", f"optimum without it ({r.problem.metric})",
                  "", "note"], rows, {1, 2, 3, 5})
    for b in r.bindings:
        if b.sensitivity is None:
            continue
        s = b.sensitivity
        out += f"<h3>Sensitivity to {e(b.name)}: <code>{e(b.vary)}</code></h3>"
        out += png(sensitivity_plot, s, alt=f"sensitivity to {b.name}")
        slope = {m["from"]: m["per_unit"] for m in s.marginal}
        out += table(["value", "status", f"proven optimum ({s.sense} {s.metric})", "marginal (per unit, to the next)"],
                     [[num(x.value), _badge(x.status), num(x.objective), num(slope.get(x.value))] for x in s.points],
                     {0, 2, 3})
        if s.breakpoints:
            out += table(["#", "breakpoint between", "optimum before → after", "decisions changed"], [
                [num(i), f"{num(bp['between'][0])} … {num(bp['between'][1])}",
                 f"{num(bp['objective'][0])} → {num(bp['objective'][1])}",
                 e(", ".join(f"{k} {u} → {w}" for k, (u, w) in bp["changed"].items()) or "feasibility")]
                for i, bp in enumerate(s.breakpoints, 1)], {0, 1})
        out += (f'<p class="muted">{s.solves} proven solves in {s.seconds:.1f} s; breakpoints located by bisection. '
                + e(" ".join(s.notes)) + "</p>")
    return out


def _pareto(r: Report) -> str:
    f = r.frontier
    if f is None:
        return f"<p>{e(r.frontier_note)}</p>"
    out = png(frontier_plot, f, alt="Pareto frontier") if f.points else ""
    cls = "ok" if f.complete else "warn"
    out += f'<p class="{cls}">{e(f.statement)}</p>'
    keys = [k for k in (f.points[0].design if f.points else {}) if len({str(p.design.get(k)) for p in f.points}) > 1]
    rows = [[num(i), num(p.x, unit_of(f.x)), num(p.y, unit_of(f.y)), _badge(p.status),
             "; ".join(f"{e(k)} = {_value(p.design[k])}" for k in keys)] for i, p in enumerate(f.points, 1)]
    out += table(["#", f.x, f.y, "status", "design (decisions that differ)"], rows, {0, 1, 2})
    out += (f'<p class="muted">{f.solves} solves in {f.seconds:.1f} s, each optimising {e(f.driver)} under a budget '
            f"on the other (at most {r.options.max_points} points, "
            f"{'no time limit' if r.options.pareto_time_limit is None else f'{r.options.pareto_time_limit:g} s'}).</p>")
    return out


def _certificate(r: Report) -> str:
    c = r.certificate
    unit = unit_of(c.objective_metric)
    src = c.bound_source
    cls = "ok" if c.feasible else "bad"
    out = f'<p class="{cls}">{e(c.statement)}</p>'
    out += kv_table([
        ["design", e(r.problem.baseline_description)],
        ["feasible", "yes" if c.feasible else '<span class="bad">no</span>'],
        [f"objective ({c.sense} {c.objective_metric})", num(c.objective, unit)],
        ["bound on the best design", num(c.bound, unit)],
        ["relative gap to the bound", gap(c.gap)],
        ["bound from", e(f"{src.source} ({src.solver}, {src.status})")],
    ])
    if c.violations:
        out += "<p class='bad'>Violated: " + e("; ".join(c.violations)) + "</p>"
    return out + ('<p class="muted">The same certificate as <code>codesign certify NAME</code> on the baseline, its '
                  "bound from the solve above.</p>")
