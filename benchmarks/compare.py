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

Series are functions in ``SERIES`` returning (label, problem) pairs. The ``mapping`` series
(issue 4: generated pipeline mappings, coupled through shared port/switch capacity) runs codesign
and the mapping brute force only (the other methods assume a decomposable hardware x schedule
space). Every codesign solve is :func:`codesign.proof.driver.solve` (``common.solve_runs``); the
"MIP only" runs give the same driver the grid MIP built without the decomposed bound presolve
(:class:`MipOnly`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

# The 2 cores are shared with other jobs: a multithreaded BLAS (numpy's matrix products in the
# vectorised evaluation) then waits for a busy core and runs 2-10x slower than on one thread.
# Every method runs single-threaded numpy/BLAS (HiGHS and CP-SAT keep their own threads);
# set OPENBLAS_NUM_THREADS yourself to override. Must precede the first numpy import.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # the repo, when not pip-installed

import baselines as B
from common import RESULTS, machine, solve_runs

from codesign.kinds import registry
from codesign.kinds.base import Formulation
from codesign.kinds.grid.formulation import build, formulation_of
from codesign.kinds.grid.generate import scaled_instance
from codesign.kinds.grid.problem import Grid
from codesign.kinds.grid.space import build_tables, space_size
from codesign.kinds.grid.spec import Instance
from codesign.model.evaluate import evaluate, objective_from_internal

NAMED = [
    "tiny-3d-llama8b", "dgx-llama70b-chip-choice", "pf-llama405b-paper", "pf-llama405b-consistent",
    "pf-dense1t-paper", "pf-dense1t-consistent", "small-3d-llama8b", "deepstack-llama70b-decode",
    "deepstack-qwen3-235b", "deepstack-deepseek-v3-ep", "deepstack-multi-workload",
    "dgx-qwen3-235b-attention-dp",
]

#: (workloads, hardware level, objective) of the scaling series, smallest space first
SCALING = [
    (1, 0, "tokens_per_s"), (1, 1, "tokens_per_s"), (1, 2, "tokens_per_s"), (2, 1, "tokens_per_s"),
    (3, 1, "tokens_per_s"), (4, 1, "tokens_per_s"), (4, 2, "tokens_per_s"), (6, 1, "tokens_per_s"),
    (8, 1, "tokens_per_s"), (3, 1, "energy_per_token_J"), (8, 1, "energy_per_token_J"),
]


class MipOnly(Grid):
    """The same grid problem, its MIP built without the decomposed bound presolve (the
    "before" figures); solved by the same driver."""

    def formulate(self, solver: str) -> Formulation:
        return formulation_of(build(self.inst, integer_grid=solver == "cpsat", decompose=False))


def named_series(names: list[str] | None = None):
    for n in names or NAMED:
        yield n, registry.load(n)


def scaling_series(names: list[str] | None = None):
    for w, lvl, obj in SCALING:
        data = scaled_instance(w, lvl, objective=obj)
        if names and data["name"] not in names:
            continue
        yield data["name"], registry.from_data(data, source=f"<{data['name']}>")


#: mapping series (issue 4): (devices, modules, layers, ports, tiers); brute force runs on the
#: first two (tiny), its measured rate extrapolates the others (spaces up to 1e177: beyond
#: ~1e300 the sizes no longer fit a float for the plots)
MAPPING = [(2, 2, 3, 1, "lp"), (4, 4, 4, 1, "l"), (2, 2, 8, 1, "lhp"), (4, 4, 16, 1, "lhp"),
           (8, 8, 32, 1, "lhp"), (8, 8, 64, 1, "lhp")]


def mapping_series(names: list[str] | None = None):
    """Issue 4's pipeline-mapping instances (layer-to-stage partition, per-layer weight/KV tiers,
    device-to-module attachment under shared port and switch capacity), generated by
    ``codesign.kinds.mapping.generate.generate_mapping``. The stages share port/switch capacity and
    the pipeline period is a max over stages, so the instance does not decompose: the
    decomposed enumeration, the DeepStack loop and the searches over flat decision vectors do
    not apply; codesign is compared with the mapping brute force (``Problem.brute_force()``)."""
    from codesign.kinds.mapping.generate import generate_mapping

    tiers = {"l": ("local",), "lp": ("local", "pool"), "lhp": ("local", "host", "pool")}
    for d, m, layers, ports, t in MAPPING:
        raw = generate_mapping(devices=d, modules=m, layers=layers, ports=ports, host_GiB=256 if "h" in t else 0.0,
                               weights=tiers[t if t != "l" else "lp"], kv=tiers[t])
        label = f"{raw['name']}-p{ports}"
        if names and label not in names:
            continue
        yield label, registry.from_data(raw, source=f"<{raw['name']}>")


def bench_mapping(label, problem, methods, args, rate_box: list) -> dict:
    """codesign (both solvers) and the brute force on one coupled mapping instance. Objectives
    are compared in the user's metric (``internal`` holds it here)."""
    from codesign.kinds.mapping.brute import MAX_POINTS

    n = problem.space_size()
    print(f"== {label}: {float(n):.3g} points (mapping)", flush=True)
    row: dict = {"instance": label, "kind": "mapping", "space_size": float(n), "workloads": 1,
                 "objective_metric": problem.metric, "sense": problem.sense,
                 "tables_s": 0.0, "methods": {}, "loadavg_at_start": os.getloadavg()[0]}
    m = row["methods"]
    if "codesign" in methods:
        for solver in ("highs", "cpsat"):
            t = time.perf_counter()
            r = solve_runs(problem, solver, args.repeats, time_limit=args.mapping_limit)
            m[f"codesign-{solver}"] = {**r, "internal": r["objective"]}
            print(f"   codesign-{solver:6s} {time.perf_counter() - t:7.2f}s  {_short(m[f'codesign-{solver}'])}", flush=True)
    opt = next((m[k]["objective"] for k in ("codesign-highs", "codesign-cpsat") if k in m and m[k]["status"][0] == "optimal"), None)
    row["optimum"] = row["optimum_internal"] = opt
    if "brute" in methods:
        if n <= MAX_POINTS:
            t = time.perf_counter()
            b = problem.brute_force()
            el = time.perf_counter() - t
            rate_box.append(b.points / el)
            m["brute"] = {"finished": True, "seconds": el, "time_s": el, "points_per_s": b.points / el,
                          "points_total": b.points, "extrapolated": False,
                          "internal": None if b.best is None else b.best.objective}
        elif rate_box:
            rate = statistics.median(rate_box)
            m["brute"] = {"finished": False, "seconds": 0.0, "time_s": n / rate, "points_per_s": rate,
                          "points_total": float(n), "extrapolated": True, "internal": None,
                          "note": "rate measured on the tiny mapping instances of this series"}
        print(f"   brute              {_short(m.get('brute', {}))}", flush=True)
    exact = [v.get("internal") for k, v in m.items() if v.get("internal") is not None
             and (not k.startswith("codesign") or v["status"][0] == "optimal")]
    row["agree"] = bool(exact) and all(abs(e - exact[0]) <= 1e-6 * abs(exact[0]) for e in exact)
    print(f"   optimum {opt}  exact methods agree: {row['agree']}", flush=True)
    return row


SERIES = {"named": named_series, "scaling": scaling_series, "mapping": mapping_series}

METHODS = ["codesign", "mip-only", "brute", "decomposed", "decomposed-pruned", "deepstack",
           "random", "tpe", "nsga2", "cmaes"]


def decomposable(inst: Instance) -> bool:
    """Every constraint involves the hardware alone or one workload (all current instances)."""
    return not getattr(inst.spec, "mapping", None)


def run_codesign(inst: Instance, solver, repeats, time_limit, decompose=True) -> dict:
    """codesign's solve of a grid instance, ``repeats`` times, by the one driver."""
    problem = Grid(inst) if decompose else MipOnly(inst)
    r = solve_runs(problem, solver, repeats, time_limit=time_limit)
    mip = r.pop("mip")
    return {**r, "binaries": mip.get("binaries"), "rows": mip.get("rows"), "pruned": mip.get("pruned"),
            "decompose": decompose}


def scale_of(inst, tables, opt_internal) -> float:
    if opt_internal is not None and np.isfinite(opt_internal):
        return float(opt_internal)
    try:
        return float(evaluate(inst, inst.baseline).internal_objective)
    except Exception:
        return 1.0


def bench_instance(label, problem: Grid, methods, args) -> dict:
    inst = problem.inst
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
        if isinstance(out, dict):
            out["tables_s"] = tables_s  # the feature tables this method's run started from
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
    row["agree"] = agree(m)
    print(f"   optimum {row['optimum']}  exact methods agree: {row['agree']}", flush=True)
    return row


def agree(m: dict) -> bool:
    """Do all exact methods that finished report the same optimum (1e-9 relative)?"""
    exact = [v.get("internal") for k, v in m.items()
             if k.startswith(("codesign", "mip-only", "decomposed", "brute", "deepstack")) and isinstance(v, dict)
             and v.get("internal") is not None and (not k.startswith(("mip-only", "codesign")) or v["status"][0] == "optimal")]
    return bool(exact) and all(abs(e - exact[0]) <= 1e-9 * abs(exact[0]) for e in exact)


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
    ap.add_argument("--mapping-limit", type=float, default=120.0, help="time limit of a mapping solve")
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
    rate_box: list = []
    t_start = time.perf_counter()
    for label, problem in SERIES[args.series](names):
        if args.series == "mapping":
            row = bench_mapping(label, problem, methods, args, rate_box)
        else:
            row = bench_instance(label, problem, methods, args)
        old = next((r for r in data["results"] if r["instance"] == label), None)
        if old is not None:
            # a partial re-run (--methods) replaces only the methods it measured
            old["methods"].update(row.pop("methods"))
            old.update({k: v for k, v in row.items() if v is not None and k not in ("agree", "tables_s")})
            old["agree"] = agree(old["methods"])
        else:
            data["results"].append(row)
        data["wall_s"] = time.perf_counter() - t_start  # this invocation's, so far
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
