"""Solve times of the mapping, placement, training and DLRM instances: the named ones and a mapping scaling series.

For every named instance of kind "mapping", "placement", "training" or "dlrm", and for generated pipeline-mapping
instances of growing size, records per solver (HiGHS, CP-SAT) the median over ``--repeats`` runs
of build time, solve time and total time, with status, objective, bound and gap of each run, the
design-space size, and (for tiny versions) the brute-force time over every design. Every solve is
:func:`codesign.proof.driver.solve`, as ``codesign solve NAME --solver S --time-limit 120`` runs it.

    python benchmarks/mapping_solve.py                 # everything (~30 min on 2 shared cores)
    python benchmarks/mapping_solve.py --quick         # named instances only, 1 repeat: results/mapping_solve_named.json
    python benchmarks/mapping_solve.py --workers 2,4,8 # CP-SAT on the named instances per worker count

``--workers`` measures CP-SAT's worker counts against its default (``codesign.backends.cpsat.DEFAULT_WORKERS``):
each named instance solved once by CP-SAT with each worker count (``--threads N`` on the command
line), 120 s limit; results/mapping_cpsat_workers.json.

Numbers are wall-clock on this machine; other jobs sharing the cores inflate them (the 1-minute
load average at each solve's start is recorded).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import HERE, RESULTS, load, machine, same, solve_runs, stored_optimum

from codesign.backends.cpsat import DEFAULT_WORKERS as CPSAT_WORKERS
from codesign.jsonio import write_json_atomic
from codesign.kinds import registry
from codesign.kinds.mapping.generate import generate_mapping

SOLVERS = ("highs", "cpsat")
KINDS = ("mapping", "placement", "training", "dlrm")

#: the scaling series: (devices, modules, layers, ports) of generated 405B pipeline mappings
SERIES = [(2, 2, 8, 1), (4, 4, 16, 1), (8, 8, 32, 1), (8, 8, 64, 1), (16, 16, 126, 1), (16, 16, 126, 2)]
#: tiny versions where brute force also runs
TINY = [(2, 2, 3, 1), (3, 2, 4, 1), (4, 4, 4, 1)]


def log10(n: int) -> float:
    return math.log10(n) if n < 10**300 else len(str(n)) - 1 + math.log10(int(str(n)[:15]) / 1e14)


def named() -> list[str]:
    """The named mapping instances, then the placement ones (each sorted by name)."""
    kinds = {n: registry.file_kind(p) for n, p in registry.named_paths().items()}
    return [n for k in KINDS for n in sorted(n for n, v in kinds.items() if v == k)]


def runs_of(r: dict[str, Any]) -> dict[str, Any]:
    """solve_runs' summary in this file's shape: median times, the set of statuses, each run."""
    keys = ("status", "objectives", "bounds", "gaps", "build_s", "solve_s", "total_s", "nodes", "rounds", "loadavg_at_start")
    names = ("status", "objective", "bound", "gap", "build_s", "solve_s", "total_s", "nodes", "rounds", "loadavg_at_start")
    runs = [dict(zip(names, vals, strict=True)) for vals in zip(*(r[k] for k in keys), strict=True)]
    return {"median": {"build_s": r["median_build_s"], "solve_s": r["median_solve_s"], "total_s": r["median_total_s"]},
            "statuses": sorted(set(r["status"])), "runs": runs, "threads": r["threads"], "termination": r["termination"][0]}


def solve_row(problem, name: str, series: str, repeats: int, time_limit: float) -> dict[str, Any]:
    row = {"name": name, "kind": problem.kind, "series": series, "space_log10": log10(problem.space_size()),
           "metric": problem.metric, "loadavg_at_start": load(),
           "solvers": {s: runs_of(solve_runs(problem, s, repeats, time_limit=time_limit)) for s in SOLVERS}}
    stored = stored_optimum(problem)
    if stored is not None:
        row["stored"] = stored
        for s in SOLVERS:
            proven = [r["objective"] for r in row["solvers"][s]["runs"] if r["status"] == "optimal"]
            row["solvers"][s]["equals_stored"] = all(same(o, stored["objective"]) for o in proven) if proven else None
    return row


def workers(names: list[str], counts: list[int], repeats: int, time_limit: float, out: Path) -> None:
    """CP-SAT on each named instance with each worker count, ``repeats`` runs each (the counts
    taking turns, so that a change of load falls on all of them)."""
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    doc = {"machine": machine(), "time_limit_s": time_limit, "counts": counts, "repeats": repeats,
           "default": CPSAT_WORKERS, "command": "python benchmarks/mapping_solve.py " + " ".join(sys.argv[1:]),
           "rows": rows}
    for name in names:
        problem = registry.load(name)
        row: dict[str, Any] = {"name": name, "kind": problem.kind, "space_log10": log10(problem.space_size()),
                               "metric": problem.metric, "threads": {str(n): [] for n in counts}}
        stored = stored_optimum(problem)
        for _ in range(repeats):
            for n in counts:
                r = solve_runs(problem, "cpsat", 1, time_limit=time_limit, threads=n)
                row["threads"][str(n)].append({
                    "status": r["status"][0], "objective": r["objective"], "bound": r["bound"], "gap": r["gap"],
                    "total_s": r["total_s"][0], "rounds": r["rounds"][0], "termination": r["termination"][0],
                    "loadavg_at_start": r["loadavg_at_start"][0],
                    "equals_stored": None if stored is None or r["status"][0] != "optimal"
                    else same(r["objective"], stored["objective"])})
                print(f"{name:36s} threads {n}: {r['status'][0]:9s} {r['total_s'][0]:7.2f}s gap {r['gap']} "
                      f"(load {r['loadavg_at_start'][0]:.1f})", flush=True)
        rows.append(row)
        doc["wall_s"] = time.perf_counter() - t_start
        write_json_atomic(out, doc)
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=None, help="runs per solver (default 3; --quick, --workers: 1)")
    ap.add_argument("--time-limit", type=float, default=120.0, help="per solve, seconds")
    ap.add_argument("--quick", action="store_true", help="named instances only, one repeat")
    ap.add_argument("--workers", default="", help="comma-separated CP-SAT worker counts: only that measurement")
    ap.add_argument("--instances", default="", help="comma-separated named instances (default: all of both kinds)")
    ap.add_argument("--out", type=Path, default=None,
                    help="default results/mapping_solve.json (--quick: mapping_solve_named.json; "
                         "--workers: mapping_cpsat_workers.json)")
    a = ap.parse_args()
    names = a.instances.split(",") if a.instances else named()
    if a.workers:
        workers(names, [int(x) for x in a.workers.split(",")], a.repeats or 1, a.time_limit,
                a.out or RESULTS / "mapping_cpsat_workers.json")
        return
    out = a.out or RESULTS / ("mapping_solve_named.json" if a.quick else "mapping_solve.json")
    repeats = a.repeats or (1 if a.quick else 3)
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    doc = {"machine": machine(), "repeats": repeats, "time_limit_s": a.time_limit, "cpsat_default_workers": CPSAT_WORKERS,
           "command": "python benchmarks/mapping_solve.py " + " ".join(sys.argv[1:]), "rows": rows}

    def record(row: dict[str, Any]) -> None:
        rows.append(row)
        doc["wall_s"] = time.perf_counter() - t_start
        meds = {s: row["solvers"][s]["median"]["total_s"] for s in row["solvers"]}
        print(f"{row['name']:40s} 10^{row['space_log10']:7.1f}  " + "  ".join(
            f"{s} {v:7.2f}s {row['solvers'][s]['statuses']}" for s, v in meds.items())
            + f"  (load {row['loadavg_at_start']:.1f})", flush=True)
        write_json_atomic(out, doc)

    for name in names:
        record(solve_row(registry.load(name), name, "named", repeats, a.time_limit))
    if not a.quick:
        hard = registry.load(HERE / "instances" / "pf-llama405b-full-mapping.toml")
        record(solve_row(hard, hard.name, "hard", 1, a.time_limit))
        for devices, modules, layers, ports in SERIES:
            data = generate_mapping(devices=devices, modules=modules, layers=layers, ports=ports, host_GiB=256,
                                    weights=("local", "host", "pool"), kv=("local", "host", "pool"))
            problem = registry.from_data(data, source=f"<{data['name']}>")
            record(solve_row(problem, f"{problem.name}-p{ports}", "scaling", repeats, a.time_limit))
        for devices, modules, layers, ports in TINY:
            data = generate_mapping(devices=devices, modules=modules, layers=layers, ports=ports,
                                    weights=("local", "pool"), kv=("local", "pool") if devices < 4 else ("local",))
            problem = registry.from_data(data, source=f"<{data['name']}>")
            t0 = time.perf_counter()
            brute = problem.brute_force()
            brute_s = time.perf_counter() - t0
            best = None if brute.best is None else brute.best.objective
            row = solve_row(problem, problem.name, "tiny", repeats, a.time_limit)
            row["brute_force"] = {"seconds": brute_s, "points": brute.points, "points_per_s": brute.points / brute_s,
                                  "objective": best}
            for s in SOLVERS:
                row["solvers"][s]["equals_brute_force"] = all(same(r["objective"], best) for r in row["solvers"][s]["runs"])
            record(row)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
