"""Solve times of the mapping-family instances (issue 4): named instances and a scaling series.

For every named instance of kind "mapping" or "placement", and for generated pipeline-mapping
instances of growing size, records per solver (HiGHS, CP-SAT) the median over ``--repeats`` runs
of build time, solve time and total time, with status, objective, bound and gap of each run, the
design-space size, and (for tiny versions) the brute-force time over every per-layer design.

    python benchmarks/mapping_solve.py                 # everything (~30 min on 2 shared cores)
    python benchmarks/mapping_solve.py --quick         # named instances only, 1 repeat
    python benchmarks/mapping_solve.py --out benchmarks/results/mapping_solve.json

Numbers are wall-clock on this machine; other jobs sharing the cores inflate them.
"""

from __future__ import annotations

import argparse
import importlib
import math
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from codesign.jsonio import write_json_atomic
from codesign.kinds.mapping.brute import brute_force_mapping
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.solve import solve_mapping
from codesign.kinds.mapping.spec import (
    KIND_COMMANDS,
    list_mapping_instances,
    load_mapping,
    mapping_from_data,
)
from codesign.model.mapping import build_problem, space_size

SOLVERS = ("highs", "cpsat")
HERE = Path(__file__).resolve().parent

#: the scaling series: (devices, modules, layers, ports) of generated 405B pipeline mappings
SERIES = [(2, 2, 8, 1), (4, 4, 16, 1), (8, 8, 32, 1), (8, 8, 64, 1), (16, 16, 126, 1), (16, 16, 126, 2)]
#: tiny versions where brute force also runs
TINY = [(2, 2, 3, 1), (3, 2, 4, 1), (4, 4, 4, 1)]


def log10(n: int) -> float:
    return math.log10(n) if n < 10**300 else len(str(n)) - 1 + math.log10(int(str(n)[:15]) / 1e14)


def run_mapping(inst, solver: str, repeats: int, time_limit: float) -> dict[str, Any]:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        s = solve_mapping(inst, solver=solver, time_limit=time_limit)
        runs.append({
            "status": s.status, "objective": s.objective, "bound": s.bound, "gap": s.gap,
            "build_s": s.build_s, "solve_s": s.solve_s, "total_s": time.perf_counter() - t0, "nodes": s.nodes,
        })
    return summarise(runs)


def run_placement(name: str, solver: str, repeats: int, time_limit: float) -> dict[str, Any]:
    mod = importlib.import_module("codesign.kinds.placement.solve") if _has("codesign.kinds.placement.solve") else None
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        if mod is not None and hasattr(mod, "solve_placement"):
            from codesign.kinds.placement.spec import load_placement

            s = mod.solve_placement(load_placement(name), solver=solver, time_limit=time_limit)
            rec = s.as_dict() if hasattr(s, "as_dict") else dict(s)
        else:
            raise RuntimeError("placement solver module not found")
        runs.append({
            "status": rec["status"], "objective": rec["objective"], "bound": rec.get("bound"), "gap": rec.get("gap"),
            "build_s": rec.get("build_s"), "solve_s": rec.get("solve_s"), "total_s": time.perf_counter() - t0, "nodes": rec.get("nodes"),
        })
    return summarise(runs)


def _has(module: str) -> bool:
    try:
        importlib.import_module(module)
        return True
    except ModuleNotFoundError:
        return False


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    med = {k: statistics.median(r[k] for r in runs if r[k] is not None) if any(r[k] is not None for r in runs) else None for k in ("build_s", "solve_s", "total_s")}
    return {"median": med, "statuses": sorted({r["status"] for r in runs}), "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=120.0, help="per solve, seconds")
    ap.add_argument("--quick", action="store_true", help="named instances only, one repeat")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "mapping_solve.json")
    a = ap.parse_args()
    repeats = 1 if a.quick else a.repeats
    rows: list[dict[str, Any]] = []

    def record(row: dict[str, Any]) -> None:
        rows.append(row)
        meds = {s: row["solvers"][s]["median"]["total_s"] for s in row["solvers"]}
        print(f"{row['name']:40s} 10^{row['space_log10']:7.1f}  " + "  ".join(f"{s} {v:7.2f}s {row['solvers'][s]['statuses']}" for s, v in meds.items()), flush=True)
        write_json_atomic(a.out, {"machine": machine(), "repeats": repeats, "time_limit_s": a.time_limit, "rows": rows})

    for name in list_mapping_instances("mapping"):
        inst = load_mapping(name)
        p = build_problem(inst)
        record({"name": name, "kind": "mapping", "series": "named", "space_log10": log10(space_size(p)),
                "solvers": {s: run_mapping(inst, s, repeats, a.time_limit) for s in SOLVERS}})
    if "placement" in KIND_COMMANDS and _has("codesign.kinds.placement.spec"):
        from codesign.kinds.placement.spec import list_placement_instances

        for name in list_placement_instances():
            try:
                solvers = {s: run_placement(name, s, repeats, a.time_limit) for s in SOLVERS}
            except RuntimeError as exc:
                print(f"{name}: skipped ({exc})")
                continue
            from codesign.kinds.placement import commands as placement_commands

            size = placement_commands.summary(name).get("space_size", 0)
            record({"name": name, "kind": "placement", "series": "named", "space_log10": log10(int(size)) if size else None, "solvers": solvers})
    if not a.quick:
        hard = HERE / "instances" / "pf-llama405b-full-mapping.toml"
        inst = load_mapping(str(hard))
        record({"name": inst.name, "kind": "mapping", "series": "hard", "space_log10": log10(space_size(build_problem(inst))),
                "solvers": {s: run_mapping(inst, s, 1, a.time_limit) for s in SOLVERS}})
        for devices, modules, layers, ports in SERIES:
            inst = mapping_from_data(generate_mapping(devices=devices, modules=modules, layers=layers, ports=ports, host_GiB=256, weights=("local", "host", "pool"), kv=("local", "host", "pool")))
            record({"name": inst.name + f"-p{ports}", "kind": "mapping", "series": "scaling", "space_log10": log10(space_size(build_problem(inst))),
                    "solvers": {s: run_mapping(inst, s, repeats, a.time_limit) for s in SOLVERS}})
        for devices, modules, layers, ports in TINY:
            inst = mapping_from_data(generate_mapping(devices=devices, modules=modules, layers=layers, ports=ports, weights=("local", "pool"), kv=("local", "pool") if devices < 4 else ("local",)))
            p = build_problem(inst)
            t0 = time.perf_counter()
            brute = brute_force_mapping(p)
            brute_s = time.perf_counter() - t0
            row = {"name": inst.name, "kind": "mapping", "series": "tiny", "space_log10": log10(space_size(p)),
                   "solvers": {s: run_mapping(inst, s, repeats, a.time_limit) for s in SOLVERS},
                   "brute_force": {"seconds": brute_s, "points": brute.points, "points_per_s": brute.points / brute_s, "objective": brute.objective}}
            for s in SOLVERS:
                objs = {r["objective"] for r in row["solvers"][s]["runs"]}
                row["solvers"][s]["equals_brute_force"] = all(abs(o - brute.objective) <= 1e-6 * abs(brute.objective) for o in objs)
            record(row)
    print(f"wrote {a.out}")


def machine() -> dict[str, Any]:
    import os

    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(), "node": platform.node()}


if __name__ == "__main__":
    main()
