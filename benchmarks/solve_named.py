"""Median solve time of every named instance with HiGHS and CP-SAT (issue 3 / issue 7).

Each solve builds the MIP, solves to a proven optimum (gap 0), decodes and verifies with the
model; the script also checks that both solvers and (where the space is small enough) brute
force reach the same objective. Results go to benchmarks/results/solve_named.json.

    python benchmarks/solve_named.py [--repeats 3] [--instances a,b] [--time-limit 600]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

from codesign.jsonio import write_json_atomic
from codesign.kinds.grid.space import brute_force, build_tables, space_size
from codesign.kinds.grid.spec import list_instances, load_instance
from codesign.proof.driver import solve_instance

#: spaces up to this many points are also enumerated
BRUTE_FORCE_LIMIT = 5e7
OUT = Path(__file__).resolve().parent / "results" / "solve_named.json"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--instances", default="")
    ap.add_argument("--solvers", default="highs,cpsat")
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    names = args.instances.split(",") if args.instances else list_instances()
    solvers = args.solvers.split(",")
    rows = []
    for name in names:
        inst = load_instance(name)
        row = {"instance": name, "space_size": space_size(inst), "solvers": {}}
        for solver in solvers:
            runs = []
            for _ in range(args.repeats):
                sol = solve_instance(inst, solver=solver, time_limit=args.time_limit)
                runs.append(sol)
            row["solvers"][solver] = {
                "status": [r.status for r in runs],
                "objective": runs[0].objective,
                "bound": runs[0].bound,
                "gap": runs[0].gap,
                "build_s": [r.build_s for r in runs],
                "solve_s": [r.solve_s for r in runs],
                "total_s": [r.time_s for r in runs],
                "median_total_s": statistics.median(r.time_s for r in runs),
                "nodes": runs[0].nodes,
                "mip": runs[0].mip,
            }
            print(f"{name:30s} {solver:6s} {runs[0].status:9s} obj {runs[0].objective!s:>22s} "
                  f"median {row['solvers'][solver]['median_total_s']:.2f}s", flush=True)
        if space_size(inst) <= BRUTE_FORCE_LIMIT:
            t0 = time.perf_counter()
            bf = brute_force(inst, build_tables(inst))
            row["brute_force"] = {"objective": bf.objective, "seconds": time.perf_counter() - t0, "points": bf.points}
        objs = [v["objective"] for v in row["solvers"].values()] + ([row["brute_force"]["objective"]] if "brute_force" in row else [])
        ref = objs[0]
        row["agree"] = all(o is not None and ref is not None and abs(o - ref) <= 1e-9 * abs(ref) for o in objs)
        rows.append(row)
    write_json_atomic(args.out, {
        "machine": {"python": platform.python_version(), "processor": platform.processor(), "cores": __import__("os").cpu_count()},
        "repeats": args.repeats,
        "results": rows,
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
