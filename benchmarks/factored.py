"""Enumerated vs factored hardware formulation on hardware grids of growing size (issue 29, item 1).

The grids refine the knobs of ``small-3d-llama8b`` (Llama-3.1-8B decode on 8 tiles, TPOT SLO,
area budget): TSV count in 1k (then 256) steps, compute area in mm² (then 0.5 mm²) steps, clock in
50 MHz (then 25 MHz) steps, 1–16 DRAM layers, finer pitch and SRAM steps. Each (grid, formulation)
runs in its own process, so its peak memory (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) is its
own: build time (``Problem.formulate``), the MIP's size, and the proof driver's solve
(:func:`codesign.proof.driver.solve`, HiGHS, ``--time-limit``) with status, objective and gap;
``boxes`` is the box branch-and-bound of :mod:`codesign.kinds.grid.boxes` (no MIP: its counters
instead of the MIP's size, the coarse sub-grid solves that gave its first incumbent among them); ``boxes-interval`` the same search with the interval bound alone
(halves, no bandwidth cap or budget tightening), run right after it for an A/B on the same load.
The enumerated formulation is skipped (with the reason) where its hardware table would exceed
``--max-enumerated`` designs (7.2 M designs took 5.7 GB in issue 29's measurement).

    python benchmarks/factored.py                    # results/factored.json (~15 min, 2 shared cores)
    python benchmarks/factored.py --time-limit 60 --grids 1e4,1e6
    python benchmarks/factored.py --solver cpsat --out benchmarks/results/factored_cpsat.json
    python benchmarks/factored.py --formulations boxes --out benchmarks/results/boxes.json
    python benchmarks/factored.py --formulations boxes,boxes-interval --grids 1e4,1e6,1e8,1e10,1e12,1e14,1e16 \
        --time-limit 120 --out benchmarks/results/boxes.json     # coupled vs interval bound, back to back
    python benchmarks/factored.py --formulations boxes --grids 1e16,1e18,1e20 --time-limit 300 --out /tmp/bx.json

Numbers are wall-clock on this machine; the 1-minute load average at each run's start is recorded.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, load, machine

from codesign.kinds.grid import boxes
from codesign.kinds.grid.problem import Grid
from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.proof.driver import solve

BASE = "small-3d-llama8b"


def _steps(lo: float, hi: float, step: float, nd: int = 8) -> list[float]:
    n = round((hi - lo) / step)
    return [round(lo + i * step, nd) for i in range(n + 1)]


#: hardware grids by their approximate number of hardware designs
GRIDS: dict[str, dict[str, list]] = {
    "1e4": load_instance(BASE).spec.model_dump(mode="json")["hardware"]["decisions"],
    "1e6": {"dram_layers": list(range(1, 17)), "tsv_count": list(range(4096, 65537, 4096)),
            "tsv_pitch_um": [9.0, 20.0, 40.0], "compute_area_mm2": _steps(40, 200, 10),
            "clock_GHz": _steps(0.8, 2.2, 0.1), "sram_MiB": [0.25, 0.5, 1.0, 2.0, 4.0]},
    "1e8": {"dram_layers": list(range(1, 17)), "tsv_count": list(range(1024, 65537, 1024)),
            "tsv_pitch_um": [9.0, 12.0, 15.0, 20.0, 30.0, 40.0], "compute_area_mm2": _steps(40, 240, 2),
            "clock_GHz": _steps(0.8, 2.2, 0.05), "sram_MiB": _steps(0.25, 2.0, 0.25)},
    "1e10": {"dram_layers": list(range(1, 17)), "tsv_count": list(range(1024, 131073, 1024)),
             "tsv_pitch_um": _steps(9, 40, 1), "compute_area_mm2": _steps(40, 440, 1),
             "clock_GHz": _steps(0.8, 2.2, 0.05), "sram_MiB": _steps(0.25, 4.0, 0.25)},
    "1e12": {"dram_layers": list(range(1, 17)), "tsv_count": list(range(256, 131073, 256)),
             "tsv_pitch_um": _steps(9, 40, 0.5), "compute_area_mm2": _steps(40, 440, 0.5),
             "clock_GHz": _steps(0.8, 2.2, 0.025), "sram_MiB": _steps(0.125, 4.0, 0.125)},
    # the same ranges, finer steps (each grid holds the one before it; the resolutions go far past
    # anything physical: they measure how the box search scales with the grid, not design sense)
    "1e14": {"dram_layers": list(range(1, 17)), "tsv_count": list(range(256, 131073, 32)),
             "tsv_pitch_um": _steps(9, 40, 0.25), "compute_area_mm2": _steps(40, 440, 0.25),
             "clock_GHz": _steps(0.8, 2.2, 0.0125), "sram_MiB": _steps(0.125, 4.0, 0.0625)},
    "1e16": {"dram_layers": list(range(1, 17)), "tsv_count": list(range(256, 131073, 8)),
             "tsv_pitch_um": _steps(9, 40, 0.125), "compute_area_mm2": _steps(40, 440, 0.0625),
             "clock_GHz": _steps(0.8, 2.2, 0.00625), "sram_MiB": _steps(0.125, 4.0, 0.03125)},
    "1e18": {"dram_layers": list(range(1, 17)), "tsv_count": list(range(256, 131073, 1)),
             "tsv_pitch_um": _steps(9, 40, 0.0625), "compute_area_mm2": _steps(40, 440, 0.03125),
             "clock_GHz": _steps(0.8, 2.2, 0.003125), "sram_MiB": _steps(0.125, 4.0, 0.015625)},
    "1e20": {"dram_layers": list(range(1, 17)), "tsv_count": list(range(256, 131073, 1)),
             "tsv_pitch_um": _steps(9, 40, 0.03125), "compute_area_mm2": _steps(40, 440, 0.0078125),
             "clock_GHz": _steps(0.8, 2.2, 0.00078125), "sram_MiB": _steps(0.125, 4.0, 0.0078125)},
}


def instance(grid: str):
    data = load_instance(BASE).spec.model_dump(mode="json")
    data["name"] = f"{BASE}-grid{grid}"
    data["hardware"]["decisions"] = GRIDS[grid]
    data.pop("baseline", None)
    data.pop("extends", None)
    return instance_from_data(data, source=f"<benchmarks/factored.py {grid}>")


def one_boxes(grid: str, time_limit: float, bound: str = "coupled") -> dict[str, Any]:
    """Solve one grid with the box branch-and-bound (:mod:`codesign.kinds.grid.boxes`; no MIP)
    and its ``bound`` (``boxes.BOUNDS``: "interval" is the search before the coupled bound)."""
    inst = instance(grid)
    start_load = load()
    t0 = time.perf_counter()
    sol = boxes.solve(Grid(inst), time_limit=time_limit, bound=bound)
    return {
        "grid": grid, "formulation": "boxes" if bound == "coupled" else f"boxes-{bound}", "solver": "boxes",
        "hardware_designs": math.prod(len(v) for v in GRIDS[grid].values()),
        "domain_sum": sum(len(v) for v in GRIDS[grid].values()),
        "build_s": 0.0, "mip": None, "pruned": sol.mip.get("pruned_values"), "search": sol.mip,
        "solve_s": time.perf_counter() - t0, "status": sol.status, "objective": sol.objective,
        "bound": sol.bound, "gap": sol.gap, "design": sol.design,
        "peak_memory_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "load_1min": start_load,
    }


def one(grid: str, formulation: str, time_limit: float, solver: str = "highs") -> dict[str, Any]:
    """Build and solve one grid with one formulation (in this process)."""
    if formulation == "boxes" or formulation.startswith("boxes-"):
        return one_boxes(grid, time_limit, formulation.partition("-")[2] or "coupled")
    inst = instance(grid)
    problem = Grid(inst).with_formulation(formulation)
    start_load = load()
    t0 = time.perf_counter()
    form = problem.formulate(solver)
    build_s = time.perf_counter() - t0
    rss_build = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    stats = {k: v for k, v in form.stats.items() if k in ("variables", "binaries", "rows", "indicators", "nonzeros")}
    t1 = time.perf_counter()
    sol = solve(problem, solver=solver, time_limit=time_limit)
    solve_s = time.perf_counter() - t1
    return {
        "grid": grid, "formulation": formulation, "solver": solver,
        "hardware_designs": math.prod(len(v) for v in GRIDS[grid].values()),
        "domain_sum": sum(len(v) for v in GRIDS[grid].values()),
        "build_s": build_s, "mip": stats, "pruned": form.stats.get("pruned"),
        "peak_memory_MB_after_build": rss_build / 1024,
        "solve_s": solve_s, "solve_build_s": sol.build_s, "status": sol.status, "objective": sol.objective,
        "bound": sol.bound, "gap": sol.gap, "rounds": sol.proof.get("rounds"),
        "design": sol.design, "peak_memory_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load_1min": start_load,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grids", default="1e4,1e6,1e8,1e10,1e12",
                    help=f"comma-separated, of {','.join(GRIDS)} (the default: those every formulation is run on)")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--solver", default="highs", choices=("highs", "cpsat"))
    ap.add_argument("--formulations", default="enumerated,factored,boxes",
                    help="comma-separated: enumerated, factored (MIPs solved by --solver), boxes (box search), "
                         "boxes-interval (the box search with the interval bound only, for A/B)")
    ap.add_argument("--max-enumerated", type=float, default=2e6,
                    help="skip the enumerated formulation above this many hardware designs")
    ap.add_argument("--one", nargs=2, metavar=("GRID", "FORMULATION"), help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(RESULTS / "factored.json"))
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], args.time_limit, args.solver), default=str))
        return
    runs = []
    for grid in args.grids.split(","):
        designs = math.prod(len(v) for v in GRIDS[grid].values())
        for formulation in args.formulations.split(","):
            if formulation == "enumerated" and designs > args.max_enumerated:
                runs.append({"grid": grid, "formulation": formulation, "hardware_designs": designs,
                             "skipped": f"{designs:.3g} hardware designs > --max-enumerated {args.max_enumerated:.3g} "
                                        "(the hardware table alone holds ~70 float columns per design)"})
                print(f"{grid} {formulation}: skipped", flush=True)
                continue
            cmd = [sys.executable, __file__, "--one", grid, formulation, "--time-limit", str(args.time_limit),
                   "--solver", args.solver]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.time_limit * 4 + 900)
            if p.returncode != 0:
                runs.append({"grid": grid, "formulation": formulation, "hardware_designs": designs,
                             "error": p.stderr.strip().splitlines()[-1:], "wall_s": time.perf_counter() - t0})
            else:
                runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
            r = runs[-1]
            print(f"{grid} {formulation}: build {r.get('build_s', float('nan')):.2f}s solve {r.get('solve_s', float('nan')):.2f}s "
                  f"{r.get('status', r.get('error'))} {r.get('objective')} mem {r.get('peak_memory_MB', float('nan')):.0f} MB "
                  f"{r.get('mip')}", flush=True)
    out = {"machine": machine(), "base_instance": BASE, "solver": args.solver, "time_limit_s": args.time_limit,
           "grids": {g: {k: len(v) for k, v in GRIDS[g].items()} for g in args.grids.split(",")}, "runs": runs}
    Path(args.out).write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
