"""Median solve time of every named hardware/schedule (grid) instance with HiGHS and CP-SAT.

Each solve is :func:`codesign.proof.driver.solve` (build the MIP, solve, verify with the model,
exclude, confirm). The script also records where both solvers and the enumeration
(:meth:`Problem.brute_force`: :func:`codesign.kinds.grid.space.brute_force` with its feature
tables, spaces up to ``BRUTE_FORCE_LIMIT`` points) reach the same objective, and whether it is the
optimum stored in ``solutions/``. Results: benchmarks/results/solve_named.json (or ``--out``).

    python benchmarks/solve_named.py [--repeats 3] [--instances a,b] [--time-limit 600]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, load, machine, same, solve_runs, stored_optimum

from codesign.jsonio import write_json_atomic
from codesign.kinds import registry

#: spaces up to this many points are also enumerated
BRUTE_FORCE_LIMIT = 5e7
OUT = RESULTS / "solve_named.json"


def grid_names() -> list[str]:
    return [n for n, p in registry.named_paths().items() if registry.file_kind(p) is None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--instances", default="", help="comma-separated names (default: every grid instance)")
    ap.add_argument("--solvers", default="highs,cpsat")
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    names = args.instances.split(",") if args.instances else grid_names()
    solvers = args.solvers.split(",")
    rows = []
    t_start = time.perf_counter()
    out = {"machine": machine(), "repeats": args.repeats, "time_limit_s": args.time_limit,
           "command": "python benchmarks/solve_named.py " + " ".join(sys.argv[1:]), "results": rows}
    for name in names:
        problem = registry.load(name)
        row = {"instance": name, "space_size": problem.space_size(), "metric": problem.metric, "sense": problem.sense,
               "loadavg_at_start": load(), "solvers": {}}
        for solver in solvers:
            row["solvers"][solver] = r = solve_runs(problem, solver, args.repeats, time_limit=args.time_limit)
            print(f"{name:30s} {solver:6s} {r['status']} obj {r['objective']!s:>22s} median {r['median_total_s']:.3f}s "
                  f"(load {row['loadavg_at_start']:.1f})", flush=True)
        if row["space_size"] <= BRUTE_FORCE_LIMIT:
            t0 = time.perf_counter()
            bf = problem.brute_force()
            row["brute_force"] = {"objective": None if bf.best is None else bf.best.objective,
                                  "seconds": time.perf_counter() - t0, "points": bf.points}
        objs = [v["objective"] for v in row["solvers"].values()] + (
            [row["brute_force"]["objective"]] if "brute_force" in row else [])
        row["agree"] = all(same(o, objs[0]) for o in objs)
        stored = stored_optimum(problem)
        row["stored"] = stored
        row["equals_stored"] = None if stored is None else all(same(o, stored["objective"]) for o in objs)
        rows.append(row)
        out["wall_s"] = time.perf_counter() - t_start
        write_json_atomic(args.out, out)  # a partial run keeps what it measured
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
