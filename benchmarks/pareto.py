"""The exact frontier (``codesign pareto``) against a naive grid of ``solve --budget`` calls, at equal
completeness.

For each case the exact method runs once (``frontier``, a time limit per case): its points, solves,
wall time and the time to its 10th point. Then the naive method: a uniform grid of N budgets
ε_1..ε_N on the bounded metric between the frontier's two extreme values (given to it for free),
one proven ``solve --budget`` each, optimising the other metric.

How fine must that grid be? The optimum under a budget ε is a step function of ε whose steps are
the frontier's points: on a complete frontier, point k is the optimum exactly for ε in
[b_k, b_{k-1}) (b the bounded metric of the points, sorted from the loosest). A grid finds point k
iff one of its ε lands in that interval, so the points a grid of N finds follow from the proven
frontier: ``found(N)``, and ``n_min`` the smallest N (scanned up to ``SCAN_MAX``) whose grid finds
every point. The naive grid is run for real on a sample of its ε (``--sample``, or all of it when
it is small): each solve's optimum must be the one the step function predicts (checked), and the
mean time per solve x ``n_min`` is the naive method's time. (Counting a found step as the found
point favours the grid: with ties its solve may return a weakly dominated design of that step.)

    python benchmarks/pareto.py [--only NAME] [--sample 12] [--time-limit 60]

(``--only``: that instance's cases are measured again, the others keep their recorded run; each
case states its own load average and time.)

Writes ``results/pareto.json``. Times are wall-clock on a shared machine (the 1-minute load average
is recorded beside them); nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, load, machine

from codesign.kinds.registry import load as load_instance
from codesign.proof.driver import solve
from codesign.tradeoffs.pareto import STEP_RTOL, frontier, sense_of, value_of

#: (instance, --x, --y)
CASES = [
    ("tiny-3d-llama8b", "tokens_per_s", "power_W"),
    ("deepstack-qwen3-235b", "tokens_per_s", "energy_per_token_J"),
    ("deepstack-qwen3-235b", "tokens_per_s", "area_mm2"),
    ("deepstack-qwen3-235b", "tokens_per_s", "power_W"),
    ("tiny-pf-mapping", "tokens_per_s", "energy_per_token_J"),
    ("hetero-pipeline-405b", "tokens_per_s", "energy_per_token_J"),
    ("pf-llama405b-mapping", "tokens_per_s", "energy_per_token_J"),
]
#: the largest grid whose coverage is checked
SCAN_MAX = 200_000
#: grid sizes a person might pick, reported with the points each finds
TYPICAL = (10, 20, 50, 100, 1000)


def steps(points: list[dict], bounded: str) -> tuple[np.ndarray, np.ndarray]:
    """The frontier's budgets as intervals of ε (in 'smaller is looser-first' form: a max-sense
    metric is negated): point k is the optimum for ε in [lo_k, hi_k)."""
    b = np.array([p[bounded] for p in points], dtype=float)
    if sense_of(bounded) == "max":
        b = -b
    b = np.sort(b)[::-1]  # loosest budget first
    hi = np.concatenate([[np.inf], b[:-1]])
    return b, hi


def found(n: int, lo: np.ndarray, hi: np.ndarray) -> int:
    """Points a uniform grid of n budgets over [min lo, max lo] finds."""
    a, z = lo.min(), lo.max()
    if n < 2 or z == a:
        return int(n >= 1)
    h = (z - a) / (n - 1)
    first = np.ceil((lo - a) / h - 1e-12)  # the first grid index at or above each interval's start
    eps = a + first * h
    return int(np.sum((first <= n - 1) & (eps < hi)))


def n_min(lo: np.ndarray, hi: np.ndarray) -> int | None:
    k = len(lo)
    for n in range(max(k, 1), SCAN_MAX + 1):
        if found(n, lo, hi) == k:
            return n
    return None


def grid_budget(bounded: str, eps: float) -> str:
    """The naive solve's budget at a grid value (in the metric's own sign)."""
    eps = float(eps)
    return f"{bounded} >= {-eps!r}" if sense_of(bounded) == "max" else f"{bounded} <= {eps!r}"


def run_case(name: str, x: str, y: str, time_limit: float, sample: int) -> dict:
    p = load_instance(name)
    before = load()
    stamps: list[float] = []
    t0 = time.perf_counter()
    f = frontier(p, x, y, time_limit=time_limit, progress=lambda _m: stamps.append(time.perf_counter() - t0))
    out = {"instance": name, "x": x, "y": y, "optimised": f.driver, "complete": f.complete, "points": len(f.points),
           "solves": f.solves, "tiebreak_solves": f.tiebreak_solves, "seconds": f.seconds,
           "seconds_to_10th_point": stamps[9] if len(stamps) >= 10 else None, "found_points_in_order": len(stamps),
           "statement": f.statement, "loadavg_before": before, "loadavg_after": load()}
    print(f"{name} {x}/{y}: {len(f.points)} points ({'complete' if f.complete else 'incomplete'}), {f.solves} solves, "
          f"{f.seconds:.1f} s", flush=True)
    if len(f.points) < 2:
        return out
    bounded = y if f.driver == x else x
    lo, hi = steps([{bounded: value_of(bounded, q.metrics)} for q in f.points], bounded)
    need = n_min(lo, hi)
    out["grid"] = {"bounded": bounded, "n_min": need, "scan_max": SCAN_MAX,
                   "smallest_gap_rel": float(np.min(np.diff(np.sort(lo)) / np.abs(np.sort(lo)[1:]))),
                   "found": {str(n): found(n, lo, hi) for n in TYPICAL}}
    # the naive grid for real on a sample of its budgets: each optimum must be the predicted step's
    n = need or SCAN_MAX
    a, z = lo.min(), lo.max()
    idx = np.unique(np.linspace(0, n - 1, min(sample, n)).round().astype(int))
    driver_at = {}  # a point's bound (in the negated-if-max form) -> its optimised metric
    for q in f.points:
        b = value_of(bounded, q.metrics)
        driver_at[-b if sense_of(bounded) == "max" else b] = value_of(f.driver, q.metrics)
    base = p.with_objective(f.driver)
    times, mismatches = [], 0
    for i in idx:
        eps = z if i == n - 1 else a + i * (z - a) / (n - 1)
        # the loosest point the budget admits, within the model's tolerance of a budget (1e-9)
        k = int(np.flatnonzero(lo <= eps + 1e-9 * abs(eps))[0])
        t = time.perf_counter()
        sol = solve(base.with_budgets([grid_budget(bounded, eps)]), solver="highs")
        times.append(time.perf_counter() - t)
        want = driver_at[float(lo[k])]
        ok = sol.status == "optimal" and abs(sol.objective - want) <= max(STEP_RTOL * abs(want), 1e-12)
        mismatches += not ok
    mean = float(np.mean(times))
    out["grid"].update({"sampled_solves": len(idx), "sample_mismatches": mismatches, "mean_solve_s": mean,
                        "naive_seconds": None if need is None else need * mean,
                        "naive_seconds_at_least": n * mean,
                        "speedup": None if need is None else need * mean / f.seconds})
    g = out["grid"]
    print(f"   grid: n_min {need}, found {g['found']}, {len(idx)} sampled solves ({mismatches} off the step), "
          f"{mean:.2f} s each -> naive {g['naive_seconds_at_least']:.0f} s, x{(g['naive_seconds_at_least'] / f.seconds):.1f}",
          flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="run only the cases of this instance")
    ap.add_argument("--sample", type=int, default=12, help="naive grid solves actually run per case")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds for each exact frontier")
    args = ap.parse_args()
    t0 = time.perf_counter()
    cases = [c for c in CASES if args.only in (None, c[0])]
    mach = machine()
    command = "python benchmarks/pareto.py " + " ".join(sys.argv[1:])
    results = []
    for c in cases:
        t = time.perf_counter()
        r = run_case(*c, time_limit=args.time_limit, sample=args.sample)
        results.append({**r, "wall_s": time.perf_counter() - t, "commit": mach.get("git"), "command": command,
                        "date": time.strftime("%Y-%m-%d")})
    wall = time.perf_counter() - t0
    out = RESULTS / "pareto.json"
    if args.only and out.exists():  # the other cases keep their recorded run (and state which it was)
        old = json.loads(out.read_text())
        ran = {(c["instance"], c["x"], c["y"]) for c in results}
        kept = [{"commit": old["machine"].get("git"), "command": old["command"], "date": old["date"], **c}
                for c in old["cases"] if (c["instance"], c["x"], c["y"]) not in ran]
        order = {c: i for i, c in enumerate(CASES)}
        results = sorted(kept + results, key=lambda c: order.get((c["instance"], c["x"], c["y"]), len(order)))
        wall += old.get("wall_s") or 0.0
    doc = {"machine": mach, "command": command, "date": time.strftime("%Y-%m-%d"), "time_limit_s": args.time_limit,
           "cases": results, "wall_s": wall}
    out.write_text(json.dumps(doc, indent=1, default=lambda v: None if isinstance(v, float) and math.isnan(v) else v))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
