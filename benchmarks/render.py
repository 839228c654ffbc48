"""BENCHMARKS.md from benchmarks/BENCHMARKS.template.md and the result files (nothing is measured
here): the recorded comparison run's tables (from :mod:`plots`) and the re-measured figures of
solve_named.json, mapping_solve_named.json, mapping_cpsat_workers.json, mapping_solve.json,
stress_exactness*.json, explain_least.json and sweep.json, each with its run's command, date,
commit and load.

    python benchmarks/plots.py        # figures, tables, then this
"""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def exact_time(r: dict, key: str) -> tuple[float | None, bool]:
    """(seconds from the instance to the proven optimum, extrapolated?) of an exact method.
    The enumerations get the feature-table build time added (codesign's time includes it)."""
    m = r["methods"].get(key)
    if not m or "error" in m:
        return None, False
    if key.startswith(("codesign", "mip-only")):
        ok = all(s == "optimal" for s in m["status"])
        return (m["median_total_s"] if ok else None), False
    tables = m.get("tables_s", r.get("tables_s", 0.0))
    if key in ("decomposed", "decomposed-pruned"):
        return m["seconds"] + tables, False
    return m["time_s"] + tables, bool(m.get("extrapolated"))


def read(name: str) -> dict | None:
    p = RESULTS / name
    return json.loads(p.read_text()) if p.exists() else None


def _points(n: float) -> str:
    """384 -> 384, 1344 -> 1,344, 470400 -> 4.7e5."""
    if n < 1e4:
        return f"{int(n):,}"
    m, e = f"{n:.1e}".split("e")
    return f"{m}e{int(e)}"


def _points_log(lg: float) -> str:
    """A space size given by its log10 (10^334.86 -> 7.3e334)."""
    e = math.floor(lg)
    m = 10 ** (lg - e)
    if round(m, 1) >= 10:
        m, e = m / 10, e + 1
    return f"{m:.1f}e{e}"


def _opt(v: float | None, metric: str) -> str:
    if v is None:
        return "–"
    if metric == "tokens_per_s":
        return f"{v:,.2f} tok/s"
    if metric == "energy_per_token_J":
        return f"{v:.6g} J/token"
    units = {"energy_per_step_J": "J/step", "samples_per_s": "samples/s", "network_energy_per_step_J": "J/step"}
    if metric in units:
        return f"{v:,.6g} {units[metric]}"
    return f"{v:.6g} {metric}"


def _span(vals, fmt="{:.2f}") -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "–"
    lo, hi = fmt.format(min(vals)), fmt.format(max(vals))
    return lo if lo == hi else f"{lo}–{hi}"


def _secs(s: float | None) -> str:
    if s is None:
        return "–"
    return f"{s / 60:.0f} min" if s >= 120 else f"{s:.0f} s"


def _machine(m: dict) -> str:
    return (f"{m.get('cpu')} ({m.get('hypervisor') or 'bare'} guest), {m.get('cores')} cores, {m.get('memory_GiB')} GiB; "
            f"{m.get('platform')}; Python {m.get('python')}, numpy {m.get('numpy')}, highspy {m.get('highspy')}, "
            f"ortools {m.get('ortools')}")


def _when(doc: dict, name: str | None = None) -> str:
    """When and at which commit a result file's run was made (files that predate this record: the
    commit that added the file, from git)."""
    m = doc.get("machine", {})
    if m.get("date"):
        return f"{m['date']}, commit {m.get('git')}"
    if name:
        try:
            got = subprocess.run(["git", "log", "-1", "--diff-filter=AM", "--format=%ad %h", "--date=short", "--",
                                  str(RESULTS / name)], capture_output=True, text=True, cwd=HERE, timeout=10).stdout.split()
        except (OSError, subprocess.SubprocessError):
            got = []
        if len(got) == 2:
            at = f"at commit {m['git']}, " if m.get("git") else ""
            return f"{at}{got[0]} at the latest (the file, which records no date, was committed in {got[1]})"
    return "at an unrecorded date and commit"


def named_section(sn: dict | None) -> dict[str, str]:
    if not sn:
        return {"NAMED_TABLE": "(not measured: run `python benchmarks/solve_named.py`)", "NAMED_NOTES": "", "NAMED_SHORT": "not measured"}
    rows = sorted(sn["results"], key=lambda r: (r["space_size"], r["instance"]))
    solvers = list(rows[0]["solvers"])
    label = {"highs": "HiGHS", "cpsat": "CP-SAT"}
    out = ["| instance | points | optimum | " + " | ".join(f"{label.get(s, s)} s" for s in solvers) + " | enumeration s |",
           "|---|---|---|" + "---|" * len(solvers) + "---|"]
    for r in rows:
        opt = r["solvers"][solvers[0]]["objective"]
        cells = []
        for s in solvers:
            x = r["solvers"][s]
            ok = all(st == "optimal" for st in x["status"])
            cells.append(f"{x['median_total_s']:.3f}" + ("" if ok else f" ({', '.join(sorted(set(x['status'])))})"))
        bf = r.get("brute_force")
        enum = "–" if not bf else f"{bf['seconds']:.3f}"
        out.append(f"| {r['instance']} | {_points(r['space_size'])} | {_opt(opt, r['metric'])} | " + " | ".join(cells)
                   + f" | {enum} |")
    spread = max(((max(x["total_s"]) - min(x["total_s"]), s, r["instance"], min(x["total_s"]), max(x["total_s"]))
                  for r in rows for s, x in r["solvers"].items()), default=None)
    all_opt = all(st == "optimal" for r in rows for x in r["solvers"].values() for st in x["status"])
    stored = [r.get("equals_stored") for r in rows]
    enum = [r for r in rows if r.get("brute_force")]
    loads = [r["loadavg_at_start"] for r in rows if r.get("loadavg_at_start") is not None]
    notes = [f"Recorded {_when(sn)}; load average {_span(loads, '{:.1f}')}.",
             f"Median of {sn['repeats']} runs per solver"
             + (f" (runs differ by up to {spread[0]:.2f} s: {label.get(spread[1], spread[1])} on `{spread[2]}`, "
                f"{spread[3]:.2f}–{spread[4]:.2f} s)." if spread else "."),
             ("Every run ends `optimal`" if all_opt else "Not every run ends `optimal`")
             + (", at the optimum stored in `solutions/`." if all(x is True for x in stored) else
                f"; {sum(x is True for x in stored)} of {len(rows)} at the optimum stored in `solutions/`."),
             f"Both solvers and the enumeration agree on all {len(enum)} instances it runs on"
             if all(r["agree"] for r in rows) else "Solvers and enumeration DISAGREE on "
             + ", ".join(r["instance"] for r in rows if not r["agree"]),
             ]
    notes[-1] += (" (`Problem.brute_force()`: `codesign.kinds.grid.space.brute_force` with its feature tables; each "
                  "hardware design, each workload's best layout: exact here).")
    worst = {s: max((r["solvers"][s]["median_total_s"], r["instance"]) for r in rows) for s in solvers}
    short = (f"all are proven optimal by {' and '.join(label.get(s, s) for s in solvers)}" if all_opt else "not all proven")
    short += (". The median time per instance is at most " + " and ".join(
        f"{worst[s][0]:.2f} s with {label.get(s, s)}" for s in solvers)
        + ", and both agree with exact enumeration wherever it runs" if all(r["agree"] for r in rows) else "")
    return {"NAMED_TABLE": "\n".join(out), "NAMED_NOTES": " ".join(notes), "NAMED_SHORT": short,
            "NAMED_COUNT": str(len(rows)),
            "NAMED_SPACE": f"{_points(rows[0]['space_size'])} to {_points(rows[-1]['space_size'])}"}


def _cell(runs: list[dict]) -> str:
    """Seconds of the proven runs (their range); runs the time limit stopped: the limit and gap."""
    proven = [r["total_s"] for r in runs if r["status"] == "optimal"]
    stopped = [r for r in runs if r["status"] != "optimal"]
    parts = [_span(proven)] if proven else []
    if stopped:
        gaps = [r["gap"] * 100 for r in stopped if r.get("gap") is not None]
        txt = f"{len(stopped)}/{len(runs)} " if len(runs) > 1 else ""
        txt += f"limit ({_span([r['total_s'] for r in stopped], '{:.0f}')} s)"
        parts.append(f"{txt}, {_span(gaps, '{:.1f}')} % gap" if gaps else f"{txt}, {stopped[0]['status']}")
    return "; ".join(parts)


def mapping_section(ms: dict | None, full: dict | None, workers: dict | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if ms:
        rows = ms["rows"]
        tab = ["| instance | kind | points | optimum | HiGHS s | CP-SAT s |", "|---|---|---|---|---|---|"]
        notes = []
        proven_both = 0
        for r in rows:
            stored = (r.get("stored") or {}).get("objective")
            proven = [x["objective"] for s in r["solvers"].values() for x in s["runs"] if x["status"] == "optimal"]
            opt = stored if stored is not None else (proven[0] if proven else None)
            cells = [_cell(r["solvers"][s]["runs"]) for s in ("highs", "cpsat")]
            proven_both += all(x["status"] == "optimal" for s in r["solvers"].values() for x in s["runs"])
            tab.append(f"| {r['name']} | {r['kind']} | {_points_log(r['space_log10'])} | {_opt(opt, r['metric'])} | "
                       f"{cells[0]} | {cells[1]} |")
            for s, lab in (("highs", "HiGHS"), ("cpsat", "CP-SAT")):
                for x in r["solvers"][s]["runs"]:
                    if x["status"] != "optimal" and x.get("objective") is not None and opt:
                        notes.append(f"{lab}'s incumbent on `{r['name']}` at the limit is "
                                     f"{abs(x['objective'] / opt - 1) * 100:.3g} % from the optimum.")
        eq = [s.get("equals_stored") for r in rows for s in r["solvers"].values() if s.get("equals_stored") is not None]
        loads = [x["loadavg_at_start"] for r in rows for s in r["solvers"].values() for x in s["runs"]]
        workers_default = ms.get("cpsat_default_workers") or (workers or {}).get("default")
        out["MAPPING_TABLE"] = "\n".join(tab)
        out["MAPPING_NOTES"] = " ".join([
            f"Recorded {_when(ms)}; load average {_span(loads, '{:.1f}')}.",
            f"{ms['repeats']} run{'s' if ms['repeats'] > 1 else ''} per instance and solver, {ms['time_limit_s']:.0f} s limit"
            + (f"; CP-SAT with its default {workers_default} workers." if workers_default else "."),
            ("Every proven optimum equals the stored solution in `solutions/`." if eq and all(eq) else
             f"{sum(eq)} of {len(eq)} proven optima equal the stored solution in `solutions/`."),
            *notes])
        times = [x["total_s"] for r in rows for s in r["solvers"].values() for x in s["runs"] if x["status"] == "optimal"]
        hard = [f"on `{r['name']}`, " + ", ".join(
                    f"{lab} stops at its {ms['time_limit_s']:.0f} s limit with a {r['solvers'][s]['runs'][0]['gap'] * 100:.0f} % gap"
                    for s, lab in (("highs", "HiGHS"), ("cpsat", "CP-SAT"))
                    if r["solvers"][s]["runs"][0]["status"] != "optimal" and r["solvers"][s]["runs"][0].get("gap") is not None)
                for r in rows if any(x["status"] != "optimal" for s in r["solvers"].values() for x in s["runs"])]
        out["MAPPING_SHORT"] = (f"both solvers prove {proven_both} of {len(rows)} (each solve "
                                f"{_span(times)} s)" + ("; " + "; ".join(hard) if hard else ""))
        out["MAPPING_COUNT"] = str(len(rows))
    if workers:
        counts = [str(c) for c in workers["counts"]]
        tab = ["| instance | " + " | ".join(f"{c} workers s" for c in counts) + " |", "|---|" + "---|" * len(counts)]
        unproven = {c: 0 for c in counts}
        totals = {c: 0.0 for c in counts}
        for r in workers["rows"]:
            cells = []
            for c in counts:
                runs = r["threads"][c]
                runs = runs if isinstance(runs, list) else [runs]
                unproven[c] += sum(x["status"] != "optimal" for x in runs)
                totals[c] += sum(x["total_s"] for x in runs)
                cells.append(_cell(runs))
            tab.append(f"| {r['name']} | " + " | ".join(cells) + " |")
        n = len(next(iter(workers["rows"][0]["threads"].values()))) if workers["rows"] and isinstance(
            next(iter(workers["rows"][0]["threads"].values())), list) else 1
        tab.append("| all runs, total s | " + " | ".join(f"{totals[c]:.0f}" for c in counts) + " |")
        loads = [x["loadavg_at_start"] for r in workers["rows"] for runs in r["threads"].values()
                 for x in (runs if isinstance(runs, list) else [runs])]
        eq = [x.get("equals_stored") for r in workers["rows"] for runs in r["threads"].values()
              for x in (runs if isinstance(runs, list) else [runs]) if x.get("equals_stored") is not None]
        out["WORKERS_TABLE"] = "\n".join(tab)
        out["WORKERS_NOTES"] = " ".join([
            f"Recorded {_when(workers)}; load average {_span(loads, '{:.1f}')}.",
            f"{n} run{'s' if n > 1 else ''} per instance and worker count (the counts taking turns), {workers['time_limit_s']:.0f} s limit;"
            " a cell gives the range over the runs.",
            "Runs not proven within the limit: " + ", ".join(f"{unproven[c]} with {c} workers" for c in counts) + ".",
            ("Every proven optimum equals the stored solution." if eq and all(eq) else ""),
            f"The default (`DEFAULT_WORKERS` in `codesign/backends/cpsat.py`, which the mapping and placement kinds keep) "
            f"is {_cpsat_default_workers()}" + ("." if workers.get("default") == _cpsat_default_workers() else
                                               f" (it was {workers.get('default')} when this run was recorded).")])
    if full:
        rows = full["rows"]
        scal = [r for r in rows if r["series"] == "scaling" and all(x["status"] == "optimal" for s in r["solvers"].values() for x in s["runs"])]
        hard = [r for r in rows if r["series"] in ("hard", "scaling") and r not in scal]
        tiny = [r for r in rows if r["series"] == "tiny"]
        bullets = []
        if scal:
            bullets.append(f"- **Scaling series:** generated 405B pipelines (`generate_mapping`), {_points_log(scal[0]['space_log10'])} to "
                           f"{_points_log(scal[-1]['space_log10'])} points, proven by both solvers in "
                           f"{_span([s['median']['total_s'] for r in scal for s in r['solvers'].values()])} s (medians).")
        if hard:
            gaps = {lab: _span([x["gap"] * 100 for r in hard for x in r["solvers"][s]["runs"] if x.get("gap") is not None])
                    for s, lab in (("highs", "HiGHS"), ("cpsat", "CP-SAT"))}
            names = ", ".join(f"`{r['name']}`" for r in hard)
            bullets.append(f"- **Two optical ports per GPU** ({names}): "
                           f"neither solver proves these within {full['time_limit_s']:.0f} s; gaps at the limit "
                           f"{gaps['HiGHS']} % (HiGHS) and {gaps['CP-SAT']} % (CP-SAT).")
        if tiny:
            eq = all(s.get("equals_brute_force") for r in tiny for s in r["solvers"].values())
            bullets.append(f"- **Tiny instances:** brute force over all {_points(min(r['brute_force']['points'] for r in tiny))} to "
                           f"{_points(max(r['brute_force']['points'] for r in tiny))} designs takes "
                           f"{_span([r['brute_force']['seconds'] for r in tiny])} s and "
                           + ("equals both solvers." if eq else "DIFFERS from a solver."))
        loads = [x["loadavg_at_start"] for r in rows for s in r["solvers"].values() for x in s["runs"] if "loadavg_at_start" in x]
        named_rows = [r for r in rows if r["series"] == "named"]
        same = []
        for r in named_rows:
            sol = HERE.parent / "solutions" / f"{r['name']}.json"
            if not sol.exists():
                continue
            want = json.loads(sol.read_text())["objective"]
            got = [x["objective"] for s in r["solvers"].values() for x in s["runs"] if x["status"] == "optimal"]
            same += [abs(g / want - 1) <= 2e-6 for g in got]
        out["MAPFULL_OPTIMA"] = ("Its proven optima of the named instances are those stored in `solutions/`." if same and all(same)
                                 else "Its optima predate later model and calibration changes (not those in `solutions/`).")
        out["MAPFULL_WHEN"] = _when(full, "mapping_solve.json") + (f"; load average {_span(loads, '{:.1f}')}" if loads else "")
        out["MAPFULL_BULLETS"] = "\n".join(bullets)
    return out


def _verdict(doc: dict, total: int) -> str:
    """What a stress run found: WRONG claims (brute force refutes them) and UNPROVEN draws (no
    claim: a solver stopped short of a proof), each named with the draw and the solver's end."""
    bad = [r for r in doc["records"] if not r["ok"]]
    if not bad:
        return f"brute force, HiGHS and CP-SAT agree on all {total}"
    wrong = [r for r in bad if any(not m.startswith("UNPROVEN") for m in r["problems"])]
    parts = [f"no solver claim is wrong on any of the {total}" if not wrong else
             f"WRONG claims on {len(wrong)} of {total} (" + "; ".join(f"{r['family']} seed {r['seed']}: {r['problems'][0]}" for r in wrong) + ")"]
    for r in bad:
        if r in wrong:
            continue
        for m in r["problems"]:
            solver = m.split()[1].rstrip(":")
            res = r["results"].get(solver, {})
            parts.append(f"{ {'highs': 'HiGHS', 'cpsat': 'CP-SAT'}.get(solver, solver)} left {r['family']} seed {r['seed']} unproven ({res.get('status')} at "
                         f"{'the brute-force optimum' if res.get('objective') == r['brute'] else res.get('objective')}, "
                         f"gap {res.get('gap')}; the solver's last round ended \"{res.get('termination')}\")")
    return "; ".join(parts)


def exactness_section(stress: dict | None, sym: dict | None, expl: dict | None) -> dict[str, str]:
    out = {}
    if stress:
        sm = stress["summary"]
        fams = " and ".join(f"{v['draws']} {k} instances ({v['infeasible']} infeasible)" for k, v in sm.items())
        total = sum(v["draws"] for v in sm.values())
        pts = max(v["points_max"] for v in sm.values())
        text = (f"{fams}, at most {_points(pts)} points each, with binding budgets and capacities: "
                + _verdict(stress, total)
                + f" ({_secs(stress.get('wall_s'))}, load {_span([stress.get('loadavg_at_start'), stress.get('loadavg_at_end')], '{:.1f}')})")
        if sym:
            v = next(iter(sym["summary"].values()))
            text += (f"; `--family mapping-symmetry --draws {v['draws']}` (identical devices; {v['infeasible']} infeasible): "
                     + _verdict(sym, v["draws"])
                     + f" ({_secs(sym.get('wall_s'))})")
        out["STRESS"] = text + f". Recorded {_when(stress)}."
    else:
        out["STRESS"] = "(not measured)"
    if expl:
        out["EXPLAIN"] = (f"the least relaxation of `{expl['budgets'][-1]}` on `{expl['instance']}`, under two other budgets, is "
                          f"{expl['least_relaxation_tok_s']:,.3f} tok/s by enumeration and "
                          f"{expl['explain_relaxation_tok_s']:,.3f} tok/s by `explain` ("
                          + ("agree; " if expl["agree"] else "DISAGREE; ")
                          + f"proven least: {'yes' if expl['least'] else 'no'}). The run took {expl['solves']} solves and "
                          f"{expl['seconds']:.0f} s (load {_span([expl.get('loadavg_at_start'), expl.get('loadavg_at_end')], '{:.1f}')}); "
                          f"recorded {_when(expl)}")
    else:
        out["EXPLAIN"] = "(not measured)"
    return out


def compare_section(named: dict | None, scaling: dict | None, mapping: dict | None) -> dict[str, str]:
    """When each comparison series ran, and the short statements of "In short" from its data."""
    out = {}
    runs = [f"{name} {_when(d, f'compare_{name}.json')}" for name, d in (("named", named), ("scaling", scaling), ("mapping", mapping)) if d]
    out["COMPARE_RUN"] = "; ".join(runs) if runs else "not measured"
    rows = [r for d in (named, scaling) if d for r in d["results"]]
    ratios = [exact_time(r, "brute")[0] / t for r in rows if r["space_size"] >= 1e12
              and (t := exact_time(r, "codesign-highs")[0]) and exact_time(r, "brute")[0]]
    parts = []
    if ratios:
        parts.append(f"HiGHS at least 1e{math.floor(math.log10(min(ratios)))}× faster than vectorised brute force from "
                     "1e12 points on (brute force extrapolated from its measured rate)")
    dec = [d / t for r in rows if (d := exact_time(r, "decomposed")[0]) and (t := exact_time(r, "codesign-highs")[0])]
    if dec:
        parts.append(f"against a hand-written decomposed enumeration, where the instance decomposes by hardware design, "
                     f"{min(dec):.2g}× to {max(dec):.2g}× as fast (median {statistics.median(dec):.2g}×)")
    if mapping:
        ts = [min(t for s in ("highs", "cpsat") if (t := exact_time(r, f"codesign-{s}")[0])) for r in mapping["results"]
              if any(exact_time(r, f"codesign-{s}")[0] for s in ("highs", "cpsat"))]
        if ts:
            parts.append(f"at most {max(ts):.2g} s (the faster solver) on coupled mapping instances of up to "
                         f"{_points(max(r['space_size'] for r in mapping['results']))} points, where nothing decomposes")
    multi = [r for r in rows if r.get("workloads", 1) > 1]
    reached = sorted({r["instance"] for r in multi for k in ("random", "tpe", "nsga2", "cmaes")
                      if (h := _heur(r, k)) and h * 2 > len(r["methods"][k])})
    if multi:
        parts.append("random search and Optuna get within 1 % (most seeds) on " +
                     ("no multi-workload instance" if not reached else ", ".join(f"`{x}`" for x in reached) + " only")
                     + " within their budgets")
    out["COMPARE_SHORT"] = "; ".join(parts) if parts else "not measured"
    return out


def _heur(r: dict, key: str) -> int | None:
    """How many seeds of a heuristic got within 1 % of the optimum (None: not run)."""
    runs = r["methods"].get(key)
    return sum(1 for x in runs if x.get("within_1pct")) if isinstance(runs, list) and runs else None


def _cpsat_default_workers() -> int:
    from codesign.backends.cpsat import DEFAULT_WORKERS

    return DEFAULT_WORKERS


def solver_section(sn: dict | None, ms: dict | None) -> dict[str, str]:
    """Each named instance's median time to the proof with each solver, and what ``auto`` picks."""
    from codesign.kinds.registry import load
    from codesign.proof.driver import choose_solver

    rows = []
    for r in (sn or {}).get("results", []):
        rows.append((r["instance"], {k: (v["median_total_s"], v["status"][0]) for k, v in r["solvers"].items()}))
    for r in (ms or {}).get("rows", []):
        if r.get("series", "named") == "named":
            rows.append((r["name"], {k: (v["median"]["total_s"], v["statuses"][0]) for k, v in r["solvers"].items()}))
    if not rows:
        return {"SOLVER_SUMMARY": "(no results recorded)", "SOLVER_TABLE": ""}
    lines = ["| instance | kind | HiGHS | CP-SAT | auto picks | auto's time / the faster's |", "|---|---|---|---|---|---|"]
    ratios, lost, worst = [], [], ("", 0.0)
    for name, by in sorted(rows):
        p = load(name)
        pick = choose_solver(p, "auto")

        def cell(k, by=by):
            t, status = by.get(k, (None, None))
            return "–" if t is None else (f"{t:.2f} s" if status == "optimal" else f"{status} at {t:.0f} s")
        proven = {k: t for k, (t, st) in by.items() if st == "optimal"}
        best = min(proven.values()) if proven else None
        mine = proven.get(pick)
        ratio = None if mine is None or not best else mine / best
        if ratio is not None:
            ratios.append(ratio)
            lost.append(mine - best)
            worst = max(worst, (name, ratio), key=lambda x: x[1])
        lines.append(f"| `{name}` | {p.kind} | {cell('highs')} | {cell('cpsat')} | {pick} | "
                     f"{'unproven' if ratio is None else f'{ratio:.2f}x'} |")
    picked_faster = sum(1 for x in ratios if x <= 1.0 + 1e-12)
    summary = (f"On {len(rows)} named instances auto's choice proves the optimum on {len(ratios)}; it is the faster "
               f"solver on {picked_faster}, and at most {worst[1]:.2f}x the faster one's time (`{worst[0]}`); the "
               f"most time it loses on one instance is {max(lost, default=0.0):.2f} s.")
    return {"SOLVER_SUMMARY": summary, "SOLVER_TABLE": "\n".join(lines)}


SWEEP_NAMES = {"3d": "3D tiles", "3d-large": "larger 3D instances", "catalog": "catalog slice"}


def sweep_section(doc: dict | None) -> dict[str, str]:
    """§6: the sweeps of sweep.json, four ways each (median of the repeats, and each way's best)."""
    if not doc or not doc.get("sweeps"):
        return {"SWEEP_TABLE": "(not measured: run `python benchmarks/sweep.py`)", "SWEEP_NOTES": "",
                "SWEEP_SHORT": "not measured", "T_SWEEP": "–"}
    rows = ["| sweep | points | CPU per point, in one process | loop | in process | 1 worker | 2 workers "
            "| 2 workers / 1 (best runs) | overhead per point: 1 worker, 2 workers | points per task: 1, 2 workers "
            "| other jobs' cores during the runs |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    short, notes = [], []
    for name, sw in doc["sweeps"].items():
        s = sw["summary"]
        med, best = s["median"], s["best"]
        cpu = s.get("cpu_s_per_point", {}).get("in process", {})
        per = cpu.get("client_s")
        over = med["overhead_per_point_s"]
        ppt = s.get("points_per_task", {})
        others = [v for span in s.get("others_cores", {}).values() for v in span]
        label = SWEEP_NAMES.get(name, name)
        rows.append(
            f"| {label} | {s['points']} | {'–' if per is None else f'{per * 1e3:.0f} ms'} "
            f"| {med['loop_s']:.1f} s | {med['in_process_s']:.1f} s | {med['one_worker_s']:.1f} s "
            f"| {med['two_workers_s']:.1f} s | **{med['speedup_2_over_1']:.2f}x** ({best['speedup_2_over_1']:.2f}x) "
            f"| {over['1 worker'] * 1e3:.1f} ms, {over['2 workers'] * 1e3:.1f} ms "
            f"| {_span([ppt.get('1 worker')], '{:.1f}')}, {_span([ppt.get('2 workers')], '{:.1f}')} "
            f"| {_span(others, '{:.2f}')} |")
        short.append(f"{label} {med['speedup_2_over_1']:.2f}x")
        lo, hi = s["loadavg_range"]
        scale = s.get("tables_at_scale")
        noop = s.get("noop_task_s", {})
        notes.append(
            f"- **{label}** ({', '.join(f'{k} {v}' for k, v in s['statuses'].items())}; every way gave every "
            f"point the same status and objective: {'yes' if s['all_agree'] else '**no**'}): load average "
            f"{lo:.2f}–{hi:.2f}; {med['points_per_worker_hour']:,.0f} points per worker-hour on 1 worker; "
            f"saving a point's record and ledger took {s['save_s_per_point'] * 1e3:.1f} ms of a saving thread; "
            f"dask's empty task {_span([noop.get('1 worker')], '{:.4f}')} s on 1 worker, "
            f"{_span([noop.get('2 workers')], '{:.4f}')} s on 2; "
            f"{s['disk_per_point_bytes']['points_bytes'] / 1024:.1f} KiB of records per point"
            + (f"; writing the tables of {scale['rows']:,} rows took {scale['seconds']:.1f} s "
               f"({scale['parquet_bytes'] / 2**20:.1f} MiB parquet, {scale['csv_bytes'] / 2**20:.0f} MiB CSV)"
               if scale else "") + ".")
    held = [v for sw in doc["sweeps"].values() for span in sw["summary"].get("others_cores", {}).values() for v in span]
    if held and min(held) > 0.5:
        notes.append(f"- **Other jobs held {min(held):.1f}–{max(held):.1f} of the {doc['machine'].get('cores')} cores** "
                     f"through every run (CPU seconds of the rest of the machine over the run's wall time), leaving the "
                     f"sweep at most {doc['machine'].get('cores', 2) - min(held):.1f}: these ratios are not the speed-up "
                     "of 2 free cores.")
    n = doc.get("repeats")
    when = f"{_when(doc)}; {n} {'run' if n == 1 else 'repeats, interleaved'}; `{doc.get('command')}`"
    return {"SWEEP_TABLE": "\n".join(rows), "SWEEP_NOTES": "\n".join(notes), "SWEEP_WHEN": when,
            "SWEEP_SHORT": "2 workers / 1: " + ", ".join(short), "T_SWEEP": _secs(doc.get("wall_s"))}


def pareto_section(doc: dict | None) -> dict[str, str]:
    """§7: the exact frontiers of pareto.json against a uniform grid of budgeted solves."""
    if not doc or not doc.get("cases"):
        return {"PARETO_TABLE": "(not measured: run `python benchmarks/pareto.py`)", "PARETO_NOTES": "",
                "PARETO_WHEN": "not measured", "PARETO_SHORT": "not measured", "T_PARETO": "–"}
    rows = ["| instance | x / y (optimised) | points | solves (tie-breaks) | exact | to the 10th point "
            "| grid that finds every point | its points at N = 10, 100, 1000 | naive grid | grid time / exact time "
            "| load |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    short = []
    for c in doc["cases"]:
        g = c.get("grid") or {}
        ten = c.get("seconds_to_10th_point")
        need = g.get("n_min")
        grid_n = "–" if not g else (f"{need:,}" if need else f"> {g['scan_max']:,}")
        at = "–" if not g else ", ".join(str(g["found"].get(str(n), "–")) for n in (10, 100, 1000))
        naive = g.get("naive_seconds") if need else g.get("naive_seconds_at_least")
        naive_s = "–" if naive is None else ("" if need else "> ") + _secs(naive)
        speed = "–" if naive is None else ("" if need else "> ") + f"{naive / c['seconds']:.1f}x"
        rows.append(
            f"| `{c['instance']}` | {c['x']} / {c['y']} ({c['optimised']}) "
            f"| {c['points']}{'' if c['complete'] else ' (incomplete)'} | {c['solves']} ({c['tiebreak_solves']}) "
            f"| {_secs(c['seconds'])} | {'–' if ten is None else _secs(ten)} | {grid_n} | {at} | {naive_s} | {speed} "
            f"| {c['loadavg_before']:.1f}–{c['loadavg_after']:.1f} |")
        if c["points"] >= 10:
            short.append(f"`{c['instance']}` {c['x']}/{c['y']}: {c['points']} points in {_secs(c['seconds'])}"
                         + ("" if c["complete"] else " (the time limit)"))
    sampled = sum(c.get("grid", {}).get("sampled_solves", 0) for c in doc["cases"])
    off = sum(c.get("grid", {}).get("sample_mismatches", 0) for c in doc["cases"])
    notes = (f"{sampled} grid solves were run for real ({off} returned an optimum other than the step function's); "
             "a grid's time is its size x their mean time per solve.")
    runs: dict[tuple, list[str]] = {}  # (date, commit, command) -> the cases it measured
    for c in doc["cases"]:
        key = (c.get("date", doc.get("date")), c.get("commit", doc.get("machine", {}).get("git")),
               c.get("command", doc.get("command")))
        runs.setdefault(key, []).append(f"`{c['instance']}`")
    when = "; ".join(f"{d}, commit {g}, `{cmd}`" + (f" ({', '.join(dict.fromkeys(names))})" if len(runs) > 1 else "")
                     for (d, g, cmd), names in runs.items())
    return {"PARETO_TABLE": "\n".join(rows), "PARETO_NOTES": notes,
            "PARETO_WHEN": f"{when}; {doc.get('time_limit_s'):g} s per frontier",
            "PARETO_SHORT": "; ".join(short) or "no frontier of 10 points", "T_PARETO": _secs(doc.get("wall_s"))}


def render(named: dict | None, scaling: dict | None, tables: str, mapping: dict | None, figs: Path) -> None:
    """BENCHMARKS.md from benchmarks/BENCHMARKS.template.md, the recorded comparison run and the
    re-measured result files."""
    tpl = (HERE / "BENCHMARKS.template.md").read_text()
    src = named or scaling or {}
    mach = src.get("machine", {})
    machine = (f"{mach.get('cpu')} ({mach.get('hypervisor') or 'KVM'} guest), {mach.get('cores')} cores, "
               f"{mach.get('memory_GiB') or 24} GiB; {mach.get('platform')}; "
               f"Python {mach.get('python')}, numpy {mach.get('numpy')}, highspy {mach.get('highspy') or '(not recorded)'}, "
               f"ortools {mach.get('ortools')}, optuna {mach.get('optuna')}.")
    loads = [r.get("loadavg_at_start") for d in (named, scaling, mapping) if d for r in d["results"] if r.get("loadavg_at_start")]
    load = (f"{min(loads):.1f}–{max(loads):.1f}" if loads else
            "5.2–6.1 (read with `uptime` during the run; this run predates per-instance recording)")
    sets = []
    for name, d in (("named", named), ("scaling", scaling)):
        if d:
            st = d.get("settings", {})
            sets.append(f"{name}: repeats {st.get('repeats')}, seeds {st.get('seeds')}, trials {st.get('trials')}, "
                        f"Optuna budget {st.get('optuna_budget')} s, random {st.get('random_budget')} s, "
                        f"brute force / DeepStack budget {st.get('bf_budget')} s, MIP-only limit {st.get('mip_only_limit')} s")
    best = "\n".join(f"![{p.stem}](figures/{p.name})" for p in sorted(figs.glob("best_vs_time_*.png")))
    q = next((r for r in (named or {"results": []})["results"] if r["instance"] == "deepstack-qwen3-235b"), None)

    def med(key):
        """The median seconds to the proof, or what a run the limit stopped reached."""
        t, _ = exact_time(q, key) if q else (None, False)
        if t:
            return f"{t:.2f} s"
        m = (q or {}).get("methods", {}).get(key)
        if not m or "error" in m:
            return "–"
        gap = "" if m.get("gap") is None else f", relative gap {m['gap']:.1e}"
        return f"more than {m.get('time_limit') or max(m['total_s']):.0f} s (stopped at the limit: {m['status'][0]}{gap})"

    fills = compare_section(named, scaling, mapping)
    sn, ms, full, wk = read("solve_named.json"), read("mapping_solve_named.json"), read("mapping_solve.json"), read("mapping_cpsat_workers.json")
    stress, sym, expl = read("stress_exactness.json"), read("stress_exactness_symmetry.json"), read("explain_least.json")
    fills.update({**named_section(sn), **mapping_section(ms, full, wk), **exactness_section(stress, sym, expl),
                  **solver_section(sn, ms), **sweep_section(read("sweep.json")),
                  **pareto_section(read("pareto.json"))})
    from joint_scaling import section as joint_scaling_section  # (imports the package: only here)

    fills.update(joint_scaling_section(read("joint_scaling.json")))
    if sn and named:  # are §3's optima the model's of today (§1's)?
        today = {r["instance"]: r["solvers"][next(iter(r["solvers"]))]["objective"] for r in sn["results"]}
        same = [abs(r["optimum"] / today[r["instance"]] - 1) <= 2e-6 for r in named["results"]
                if r.get("optimum") and r["instance"] in today]
        fills["COMPARE_OPTIMA"] = ("its optima of the named instances are §1's" if same and all(same) else
                                   f"{len(same) - sum(same)} of its {len(same)} named optima differ from §1's (an older model)")
    remeasured = sn or ms or {}
    fills["REMEASURED_MACHINE"] = _machine(remeasured.get("machine", {})) if remeasured else "–"
    fills["T_SOLVE_NAMED"] = _secs((sn or {}).get("wall_s") or (sn and sum(
        sum(x["total_s"]) for r in sn["results"] for x in r["solvers"].values()) + sum(
        r["brute_force"]["seconds"] for r in sn["results"] if r.get("brute_force"))))
    fills["T_MAPPING_NAMED"] = _secs((ms or {}).get("wall_s") or (ms and sum(
        x["total_s"] for r in ms["rows"] for s in r["solvers"].values() for x in s["runs"])))
    fills["T_WORKERS"] = _secs((wk or {}).get("wall_s"))
    fills["T_STRESS"] = _secs(sum(x.get("wall_s") or 0 for x in (stress, sym) if x) or None)
    fills["T_EXPLAIN"] = _secs((expl or {}).get("seconds"))
    # the tables' headings one level down: they sit inside a section of the template
    tables = "\n".join("#" + line if line.startswith("#") else line for line in tables.split("\n"))
    text = (tpl.replace("{{MACHINE}}", machine).replace("{{LOAD}}", load).replace("{{SETTINGS}}", "; ".join(sets))
            .replace("{{BEST_VS_TIME}}", best).replace("{{TABLES}}", tables)
            .replace("{{QWEN_HIGHS}}", med("codesign-highs")).replace("{{QWEN_CPSAT}}", med("codesign-cpsat"))
            .replace("{{QWEN_MIP_HIGHS}}", med("mip-only-highs")).replace("{{QWEN_MIP_CPSAT}}", med("mip-only-cpsat")))
    for k, v in fills.items():
        text = text.replace("{{" + k + "}}", v)
    left = sorted(set(re.findall(r"{{([A-Z_]+)}}", text)))
    if left:
        print(f"warning: placeholders without a value: {left}")
    (HERE.parent / "BENCHMARKS.md").write_text(text)
    print(f"wrote BENCHMARKS.md ({len(text.encode()) / 1024:.1f} KiB)")
