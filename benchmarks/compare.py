"""codesign side by side with brute force, enumeration and black-box search (issue 7).

For every instance of a series, in one run: codesign with HiGHS and CP-SAT (median of
``--repeats``; build and solve times, nodes, objective, gap), optionally the same solvers with the
decomposed bound presolve switched off (``--mip-only``: the "before" figures), the vectorised
brute force (points/s, time to the optimum or extrapolated), the decomposed exact enumeration
(plain and with bound pruning), a DeepStack-style enumeration with hand-written pruning rules,
random search and Optuna (TPE, NSGA-II, CMA-ES) over ``--seeds`` seeds. Every exact method's
optimum is compared with codesign's (``agree``). Results: benchmarks/results/compare_<series>.json
(updated instance by instance, so a partial run keeps what it measured).

    python benchmarks/compare.py --series named            # the 11 named instances
    python benchmarks/compare.py --series scaling          # generated, 7e5 .. 5e22 points
    python benchmarks/compare.py --series scaling --quick  # small budgets, for a smoke run
    python benchmarks/compare.py --series named --instances tiny-3d-llama8b --methods codesign,tpe

Series are functions in ``SERIES`` returning (label, Instance) pairs; a mapping series (issue 4)
is added there once its instance generator exists (methods that assume the instance decomposes
by hardware design report "not applicable" for coupled instances).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # the repo, when not pip-installed

import baselines as B

from codesign.instance import Instance, load_instance
from codesign.model.evaluate import evaluate, objective_from_internal
from codesign.solve import solve_instance
from codesign.space import build_tables, space_size

RESULTS = Path(__file__).resolve().parent / "results"

NAMED = [
    "tiny-3d-llama8b", "dgx-llama70b-chip-choice", "pf-llama405b-paper", "pf-llama405b-consistent",
    "pf-dense1t-paper", "pf-dense1t-consistent", "small-3d-llama8b", "deepstack-llama70b-decode",
    "deepstack-qwen3-235b", "deepstack-deepseek-v3-ep", "deepstack-multi-workload",
]

#: (workloads, hardware level, objective) of the scaling series, smallest space first
SCALING = [
    (1, 0, "tokens_per_s"), (1, 1, "tokens_per_s"), (1, 2, "tokens_per_s"), (2, 1, "tokens_per_s"),
    (3, 1, "tokens_per_s"), (4, 1, "tokens_per_s"), (4, 2, "tokens_per_s"), (6, 1, "tokens_per_s"),
    (8, 1, "tokens_per_s"), (3, 1, "energy_per_token_J"), (8, 1, "energy_per_token_J"),
]


def named_series(names: list[str] | None = None):
    for n in names or NAMED:
        yield n, load_instance(n)


def scaling_series(names: list[str] | None = None):
    from codesign.generate import generate

    for w, lvl, obj in SCALING:
        inst = generate(w, lvl, objective=obj)
        if names and inst.name not in names:
            continue
        yield inst.name, inst


def mapping_series(names: list[str] | None = None):
    """Issue 4's mapping instances (device-to-memory attachment, placement): coupled, so the
    decomposed methods do not apply. Filled in when codesign's mapping generator lands."""
    raise NotImplementedError("the mapping instances of issue 4 are not available yet")


SERIES = {"named": named_series, "scaling": scaling_series, "mapping": mapping_series}

METHODS = ["codesign", "mip-only", "brute", "decomposed", "decomposed-pruned", "deepstack",
           "random", "tpe", "nsga2", "cmaes"]


def machine() -> dict:
    def sh(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    lscpu = {ln.split(":", 1)[0].strip(): ln.split(":", 1)[1].strip() for ln in sh(["lscpu"]).splitlines() if ":" in ln}
    import highspy
    import ortools

    try:
        import optuna

        ov = optuna.__version__
    except ImportError:
        ov = None
    return {
        "cpu": lscpu.get("Model name"), "cores": os.cpu_count(), "python": platform.python_version(),
        "numpy": np.__version__, "highspy": getattr(highspy, "__version__", None),
        "ortools": ortools.__version__, "optuna": ov, "platform": platform.platform(),
        "git": sh(["git", "-C", str(RESULTS.parent.parent), "rev-parse", "--short", "HEAD"]).strip(),
    }


def decomposable(inst: Instance) -> bool:
    """Every constraint involves the hardware alone or one workload (all current instances)."""
    return not getattr(inst.spec, "mapping", None)


def run_codesign(inst, solver, repeats, time_limit, decompose=True) -> dict:
    runs = []
    for _ in range(repeats):
        s = solve_instance(inst, solver=solver, time_limit=time_limit, decompose=decompose)
        runs.append(s)
    med = statistics.median(r.time_s for r in runs)
    r0 = runs[0]
    return {
        "status": [r.status for r in runs], "objective": r0.objective, "internal": r0.internal_objective,
        "bound": r0.bound, "gap": r0.gap, "nodes": [r.nodes for r in runs],
        "build_s": [r.build_s for r in runs], "solve_s": [r.solve_s for r in runs],
        "total_s": [r.time_s for r in runs], "median_total_s": med,
        "median_build_s": statistics.median(r.build_s for r in runs),
        "median_solve_s": statistics.median(r.solve_s for r in runs),
        "binaries": r0.mip.get("binaries"), "rows": r0.mip.get("rows"), "pruned": r0.mip.get("pruned"),
        "decompose": decompose, "time_limit": time_limit,
    }


def scale_of(inst, tables, opt_internal) -> float:
    if opt_internal is not None and np.isfinite(opt_internal):
        return float(opt_internal)
    try:
        return float(evaluate(inst, inst.baseline).internal_objective)
    except Exception:
        return 1.0


def bench_instance(label, inst, methods, args) -> dict:
    print(f"== {label}: {space_size(inst):.3g} points", flush=True)
    t0 = time.perf_counter()
    tables = build_tables(inst)
    tables_s = time.perf_counter() - t0
    row: dict = {"instance": label, "space_size": float(space_size(inst)), "structural_size": float(tables.structural_size),
                 "hardware_designs": tables.hw.size, "layouts": {w: s.size for w, s in tables.scheds.items()},
                 "workloads": len(inst.workloads), "objective_metric": inst.objective.metric,
                 "sense": inst.objective.resolved_sense, "tables_s": tables_s, "methods": {},
                 "loadavg_at_start": os.getloadavg()[0]}
    m = row["methods"]
    opt = None

    def timed(name, fn):
        t = time.perf_counter()
        try:
            out = fn()
        except Exception as exc:
            traceback.print_exc()
            out = {"error": f"{type(exc).__name__}: {exc}"}
        m[name] = out
        print(f"   {name:18s} {time.perf_counter() - t:7.2f}s  {_short(out)}", flush=True)
        return out

    if "codesign" in methods:
        for solver in ("highs", "cpsat"):
            timed(f"codesign-{solver}", lambda s=solver: run_codesign(inst, s, args.repeats, args.time_limit))
        opts = [m[f"codesign-{s}"].get("internal") for s in ("highs", "cpsat") if "error" not in m[f"codesign-{s}"]]
        opt = opts[0] if opts else None
    if "mip-only" in methods:
        for solver in ("highs", "cpsat"):
            timed(f"mip-only-{solver}", lambda s=solver: run_codesign(inst, s, 1, args.mip_only_limit, decompose=False))
    dec = decomposable(inst)
    if "decomposed" in methods and dec:
        timed("decomposed", lambda: B.decomposed(inst, tables))
    if "decomposed-pruned" in methods and dec:
        timed("decomposed-pruned", lambda: B.decomposed_pruned(inst, tables))
    if opt is None:
        opt = m.get("decomposed", {}).get("internal")
    row["optimum_internal"] = opt
    row["optimum"] = objective_from_internal(inst, opt) if opt is not None else None
    if "brute" in methods:
        timed("brute", lambda: B.naive_brute_force(inst, tables, args.bf_budget))
    if "deepstack" in methods and dec:
        timed("deepstack", lambda: B.deepstack_enumeration(inst, tables, args.bf_budget))
    scale = scale_of(inst, tables, opt)
    if "random" in methods:
        timed("random", lambda: [B.random_search(inst, tables, args.random_budget, seed, scale, opt)
                                 for seed in range(args.seeds)])
    for sampler in ("tpe", "nsga2", "cmaes"):
        if sampler in methods:
            timed(sampler, lambda s=sampler: [B.optuna_search(inst, tables, s, seed, args.trials, args.optuna_budget, scale, opt)
                                              for seed in range(args.seeds)])
    exact = [v.get("internal") for k, v in m.items()
             if k.startswith(("codesign", "mip-only", "decomposed", "brute", "deepstack")) and isinstance(v, dict)
             and v.get("internal") is not None and (not k.startswith("mip-only") or v["status"][0] == "optimal")]
    row["agree"] = bool(exact) and all(abs(e - exact[0]) <= 1e-9 * abs(exact[0]) for e in exact)
    print(f"   optimum {row['optimum']}  exact methods agree: {row['agree']}", flush=True)
    return row


def _short(out) -> str:
    if isinstance(out, list):
        w = [o.get("within_1pct") for o in out]
        return f"best {[_fmt(o.get('best')) for o in out]} within1% {w}"
    if not isinstance(out, dict):
        return ""
    keys = ("status", "median_total_s", "internal", "time_s", "points_per_s", "extrapolated", "error")
    return " ".join(f"{k}={_fmt(out[k])}" for k in keys if k in out)


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return v[0] if v else v
    return v


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", default="named", choices=sorted(SERIES))
    ap.add_argument("--instances", default="", help="comma-separated labels (default: the whole series)")
    ap.add_argument("--methods", default="", help=f"comma-separated subset of {METHODS}")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=1000, help="Optuna trials per seed (cap)")
    ap.add_argument("--optuna-budget", type=float, default=6.0, help="seconds per Optuna run (cap)")
    ap.add_argument("--random-budget", type=float, default=3.0, help="seconds per random-search run")
    ap.add_argument("--bf-budget", type=float, default=15.0, help="seconds for brute force / DeepStack loop")
    ap.add_argument("--time-limit", type=float, default=600.0, help="codesign solve time limit")
    ap.add_argument("--mip-only-limit", type=float, default=90.0, help="time limit of the --mip-only solves")
    ap.add_argument("--quick", action="store_true", help="1 repeat, small budgets (smoke run)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.trials, args.optuna_budget, args.random_budget, args.bf_budget = 1, 150, 2.0, 1.0, 3.0
        args.mip_only_limit = 20.0
    methods = args.methods.split(",") if args.methods else [x for x in METHODS if x != "mip-only" or args.series == "named"]
    out = args.out or RESULTS / f"compare_{args.series}{'_quick' if args.quick else ''}.json"
    data = json.loads(out.read_text()) if out.exists() else {"results": []}
    data.update({"machine": machine(), "series": args.series, "settings": {k: str(v) for k, v in vars(args).items()}})
    names = [x for x in args.instances.split(",") if x] or None
    for label, inst in SERIES[args.series](names):
        row = bench_instance(label, inst, methods, args)
        old = next((r for r in data["results"] if r["instance"] == label), None)
        if old is not None:
            old["methods"].update(row.pop("methods"))
            old.update(row)
        else:
            data["results"].append(row)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, default=_json_default))
        tmp.replace(out)
    print(f"wrote {out}")


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


if __name__ == "__main__":
    main()
