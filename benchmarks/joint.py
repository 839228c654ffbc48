"""Joint against sequential co-design (issue 29, item 3): for every named joint instance (a mapping
whose module count, pool ports or device chips are decisions, :mod:`codesign.kinds.mapping.joint`),
the proven joint optimum beside

* the *sequential* design: hardware chosen first with the default mapping (the kind's rule: each
  hardware design with its greedy mapping, the best by the model, feasible ones first), then the
  mapping optimised for that hardware, proven;
* the instance's baseline, evaluated by the model;
* every hardware design's own proven optimum (the decomposition an exact alternative would
  enumerate): their best must equal the joint optimum, and the sum of their times is what that
  alternative costs;
* with a chip decision, the best fixed-chip designs: every group on the same chip, the other
  hardware decisions still free, proven (HiGHS).

Every solve is :func:`codesign.proof.driver.solve` (the one driver), HiGHS and CP-SAT for the joint
and sequential solves, HiGHS for the decomposition (the faster of the two on these instances).

    python benchmarks/joint.py                 # results/joint.json
    python benchmarks/joint.py --no-decomposition
    python benchmarks/joint.py --only hetero-pipeline-405b-joint   # that row of results/joint.json

Times are wall-clock on shared cores (the 1-minute load average at each solve's start is recorded).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, load, machine, same

from codesign.jsonio import write_json_atomic
from codesign.kinds import registry
from codesign.kinds.mapping import joint
from codesign.kinds.mapping.problem import Mapping
from codesign.proof.driver import solve

SOLVERS = ("highs", "cpsat")


def joint_instances() -> list[str]:
    """Named mapping instances with a hardware decision."""
    out = []
    for name, path in registry.named_paths().items():
        if registry.file_kind(path) == "mapping" and registry.load(path).hardware.joint:
            out.append(name)
    return sorted(out)


def run(problem: Any, solver: str, time_limit: float) -> dict[str, Any]:
    at = load()
    t0 = time.perf_counter()
    sol = solve(problem, solver=solver, time_limit=time_limit)
    wall = time.perf_counter() - t0
    hw = sol.design.get(joint.HARDWARE_KEY) if sol.design else None
    return {"solver": solver, "status": sol.status, "objective": sol.objective, "bound": sol.bound,
            "hardware": hw, "time_s": wall, "build_s": sol.build_s, "solve_s": sol.solve_s, "loadavg_at_start": at}


def relative(a: float | None, b: float | None, sense: str) -> float | None:
    """How much worse b is than a, as a fraction of a (positive: b is worse)."""
    if a is None or b is None:
        return None
    return (b - a) / a if sense == "min" else (a - b) / a


def row(name: str, time_limit: float, decomposition: bool) -> dict[str, Any]:
    p = registry.load(registry.named_paths()[name])
    sense = p.sense
    out: dict[str, Any] = {"name": name, "metric": p.metric, "sense": sense,
                           "hardware_domains": {d.name: list(d.domain) for d in p.decisions() if d.group == "hardware"}}
    base = p.assess(p.baseline())
    out["baseline"] = {"description": p.baseline_description, "hardware": p.baseline()[joint.HARDWARE_KEY],
                       "feasible": base.feasible, "objective": base.objective}
    out["joint"] = {s: run(p, s, time_limit) for s in SOLVERS}
    proven = [r["objective"] for r in out["joint"].values() if r["status"] == "optimal"]
    opt = proven[0] if proven else None
    out["joint_optimum"] = opt
    out["solvers_agree"] = len(proven) == len(SOLVERS) and all(same(x, opt) for x in proven)

    t0 = time.perf_counter()
    hw, design, feasible = joint.greedy(p)
    rule_s = time.perf_counter() - t0
    greedy_eval = p.assess({joint.HARDWARE_KEY: hw, **design.as_dict()})
    fixed = Mapping(joint.instance_at(p.inst, hw))
    seq = {"hardware": hw, "rule_s": rule_s, "greedy_feasible": feasible,
           "greedy_objective": greedy_eval.objective, "mapping": {s: run(fixed, s, time_limit) for s in SOLVERS}}
    seq_proven = [r for r in seq["mapping"].values() if r["status"] in ("optimal", "infeasible")]
    seq["status"] = seq_proven[0]["status"] if seq_proven else "unproven"
    seq["objective"] = seq_proven[0]["objective"] if seq_proven and seq["status"] == "optimal" else None
    seq["worse_than_joint"] = relative(opt, seq["objective"], sense)
    out["sequential"] = seq
    out["baseline"]["worse_than_joint"] = relative(opt, base.objective if base.feasible else None, sense)
    if p.hardware.chips:
        out["fixed_chip"] = fixed_chip(p, opt, time_limit)

    if decomposition:
        parts = []
        for h in p.hardware.choices():
            r = run(Mapping(joint.instance_at(p.inst, h)), "highs", time_limit)
            parts.append(r | {"hardware": h})
        best = [r["objective"] for r in parts if r["status"] == "optimal"]
        pick = (min if sense == "min" else max)(best) if best else None
        out["decomposition"] = {"solver": "highs", "per_hardware": parts, "best": pick,
                                "equals_joint": same(pick, opt) if pick is not None and opt is not None else None,
                                "all_proven": all(r["status"] in ("optimal", "infeasible") for r in parts),
                                "total_s": sum(r["time_s"] for r in parts)}
    return out


def fixed_chip(p: Any, opt: float | None, time_limit: float) -> dict[str, Any]:
    """Every group on one chip (each chip all groups offer), the other hardware decisions free: the
    proven optimum of each (HiGHS), and how much worse the best of them is than the joint optimum."""
    common = set.intersection(*(set(v) for v in p.hardware.chips.values()))
    per: dict[str, Any] = {}
    for chip in [c for c in next(iter(p.hardware.chips.values())) if c in common]:
        raw = copy.deepcopy(p.data)
        raw.pop("baseline", None)
        for g in raw["devices"]:
            g["chip"] = chip
        r = run(Mapping.from_data(raw, source=f"{p.name} with every group on {chip}"), "highs", time_limit)
        per[chip] = r
    proven = [r["objective"] for r in per.values() if r["status"] == "optimal"]
    best = (min if p.sense == "min" else max)(proven) if proven else None
    return {"solver": "highs", "per_chip": per, "best": best, "worse_than_joint": relative(opt, best, p.sense)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--no-decomposition", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS / "joint.json")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="run these instances only and replace their rows of --out (the others kept)")
    a = ap.parse_args()
    rows = []
    for name in a.only or joint_instances():
        print(f"{name} ...", flush=True)
        rows.append(row(name, a.time_limit, not a.no_decomposition))
        r = rows[-1]
        print(f"  joint {r['joint_optimum']}  sequential {r['sequential']['objective']} "
              f"({r['sequential']['status']})  baseline {r['baseline']['objective']}"
              + (f"  best fixed chip {r['fixed_chip']['best']}" if "fixed_chip" in r else ""), flush=True)
    if a.only and a.out.exists():  # keep the other instances' rows (each row records its machine)
        old = json.loads(a.out.read_text())
        for r in old["instances"]:
            r.setdefault("machine", old["machine"])
            r.setdefault("time_limit_s", old["time_limit_s"])
        for r in rows:
            r["machine"], r["time_limit_s"] = machine(), a.time_limit
        done = {r["name"] for r in rows}
        rows = sorted([r for r in old["instances"] if r["name"] not in done] + rows, key=lambda r: r["name"])
    write_json_atomic(a.out, {"machine": machine(), "time_limit_s": a.time_limit, "instances": rows})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
