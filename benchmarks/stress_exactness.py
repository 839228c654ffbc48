"""Randomised exactness stress test: brute force = HiGHS = CP-SAT on tiny mapping and placement
instances (issue 4), including infeasible draws, binding budgets and capacities, and budgets on
the model's tolerance edge.

    python benchmarks/stress_exactness.py --family both --draws 200 --seed 0 \
        --json benchmarks/results/stress_exactness.json
    python benchmarks/stress_exactness.py --family mapping-symmetry --draws 100 \
        --json benchmarks/results/stress_exactness_symmetry.json
    python benchmarks/stress_exactness.py --family placement --draws 200 --seed 0 --save-failures

Every draw is a TOML-able instance dict (from :func:`codesign.kinds.mapping.generate.generate_mapping`
or :func:`codesign.kinds.placement.spec.generate_placement`, then randomly perturbed: per-group
ports, local memory that binds, electrical medium, explicit routing weights with ties, ...).
Draws are kept only if their whole design space has at most ``--max-points`` points, so that the
brute force (every per-layer / per-expert design, evaluated by the model) is the ground truth.
A draw fails when a solver does not prove optimality, its optimum differs from brute force by
more than 1e-6 relative, the infeasibility verdicts differ, or solving raises. Every draw is
loaded with :func:`codesign.kinds.registry.from_data`, enumerated with ``Problem.brute_force()``
and solved with :func:`codesign.proof.driver.solve`. Failing instances are written to
``tests/data/`` with ``--save-failures``; ``--json`` writes every outcome.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from codesign.errors import InputError  # noqa: E402
from codesign.kinds import registry  # noqa: E402
from codesign.model.calibration import shipped  # noqa: E402
from codesign.proof.driver import solve  # noqa: E402

GiB = 2.0**30

#: relative agreement of an optimum with brute force
RTOL = 1e-6
#: default cap on the design-space size of a draw (brute force must enumerate it)
MAX_POINTS = 3e5
SOLVERS = ("highs", "cpsat")

MAPPING_CHIPS = ("h100-sxm", "h200-sxm", "a100-sxm-80gb", "a100-pcie-80gb", "l40s")
MAPPING_WORKLOADS = ("llama-3.1-405b", "llama-3.1-70b", "llama-3.1-8b")
PLACEMENT_CHIPS = ("h100-sxm", "h200-sxm", "a100-sxm-80gb", "a100-pcie-80gb", "l40s")
PLACEMENT_WORKLOADS = ("mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3")
#: budget factors relative to the fastest design's tpot: below 1 (infeasible), on the model's
#: 1e-9 tolerance edge, exactly tight, and loose enough to bind the energy objective
BUDGET_FACTORS = (0.97, 1.0 - 5e-10, 1.0, 1.0 + 1e-7, 1.02, 1.1, 1.3, 2.0)
#: the same without the tolerance-edge factors (1 - 5e-10 and exactly 1: see tests/data/*edge*)
SAFE_BUDGET_FACTORS = (0.97, 1.0 + 1e-7, 1.02, 1.1, 1.3, 2.0)


@dataclass
class Outcome:
    family: str
    seed: int
    data: dict[str, Any]
    points: int = 0
    brute: float | None = None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


def _choice(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def _subset(rng: np.random.Generator, items: tuple[str, ...]) -> tuple[str, ...]:
    while True:
        out = tuple(x for x in items if rng.random() < 0.6)
        if out:
            return out


def _capacity_GiB(chip: str, usable_B: float) -> float:
    """Raw capacity (GiB) whose usable capacity under the shipped calibration is ``usable_B``."""
    cal = shipped().for_chip(chip)
    return (usable_B / GiB + cal.runtime_reserve_GiB) / cal.usable_memory_fraction


# --- mapping --------------------------------------------------------------------------------


def draw_mapping(rng: np.random.Generator, max_points: float = MAX_POINTS, *, edges: bool = True, symmetry: bool = False) -> dict[str, Any]:
    """A random tiny mapping instance dict whose design space brute force can enumerate.
    ``edges``: also draw budgets and capacities on the model's 1e-9 feasibility tolerance.
    ``symmetry``: 4-5 devices of one chip and 2-3 modules (identical middle devices and modules:
    the symmetry-breaking rows of the MIP are active)."""
    from codesign.kinds.mapping.generate import generate_mapping

    while True:
        D = int(rng.integers(4, 6) if symmetry else rng.integers(2, 5))
        L = int(rng.integers(max(D, 2), 6))
        modules = int(_choice(rng, (2, 3) if symmetry else (0, 0, 1, 2, 2, 3, 4)))
        nchips = 1 if symmetry else int(_choice(rng, (1, 1, 2, 3)))
        chips = tuple(str(c) for c in rng.choice(MAPPING_CHIPS, size=min(nchips, D), replace=False))
        kw: dict[str, Any] = dict(
            devices=D,
            modules=modules,
            layers=L,
            workload=_choice(rng, MAPPING_WORKLOADS),
            chips=chips,
            ports=int(rng.integers(1, 3)),
            host_GiB=float(_choice(rng, (0.0, 0.0, 2.0, 64.0))),
            batch_per_stage=int(_choice(rng, (1, 8, 32, 128))),
            context_tokens=int(_choice(rng, (512, 8192, 65536, 131072))),
            precision=_choice(rng, ("fp8", "fp8", "bf16")),
            weights=_subset(rng, ("local", "host", "pool")),
            kv=_subset(rng, ("local", "host", "pool")),
            objective=_choice(rng, ("tokens_per_s", "energy_per_token_J")),
            name=f"stress-mapping-{int(rng.integers(1 << 30))}",
        )
        if modules:
            if rng.random() < 0.2:
                kw["assumed_device_bandwidth_GBps"] = float(_choice(rng, (26_800.0, 2_000.0, 300.0)))
            if rng.random() < 0.4:
                kw["max_devices_per_module"] = int(_choice(rng, (1, 2)))
        try:
            data = generate_mapping(**kw)
        except ValueError:
            continue
        if not data["tiers"]["weights"] or not data["tiers"]["kv"]:
            continue
        groups = data["devices"]
        if modules and rng.random() < 0.3:  # ports differ between groups (0 = not attached)
            for g in groups:
                g["pool_ports"] = int(rng.integers(0, 3))
        if modules and rng.random() < 0.25:
            data["appliance"]["medium"] = "electrical"
        try:
            problem = registry.from_data(data)
            p = problem.model
        except (InputError, ValueError):
            continue
        if problem.space_size() > max_points:
            continue
        if rng.random() < 0.35:  # local memory that binds: room for a few layers' weights + KV
            lay = p.layer
            for gi, g in enumerate(groups):
                first, last = gi == 0, gi == len(groups) - 1
                fixed = (p.first_store_B if first else 0.0) + (p.last_store_B if last else 0.0)
                per = float(_choice(rng, (lay.w_store_B, lay.kv_store_B, lay.w_store_B + lay.kv_store_B)))
                if edges and rng.random() < 0.3:  # exactly k layers fit, up to the model's 1e-9 tolerance
                    room = (fixed + per * int(rng.integers(1, 4))) / (1 + float(_choice(rng, (0.0, 5e-10))))
                else:
                    room = fixed + per * float(rng.uniform(0.3, 3.0))
                g["memory_capacity_GiB"] = _capacity_GiB(g["chip"], room)
            try:
                registry.from_data(data).model  # noqa: B018 (builds and checks the instance)
            except (InputError, ValueError):
                continue
        if rng.random() < 0.35:
            data["budgets"] = {"tpot_factor": float(_choice(rng, BUDGET_FACTORS if edges else SAFE_BUDGET_FACTORS))}  # see _resolve_*
        return data


def _resolve_mapping_budget(data: dict[str, Any]) -> dict[str, Any]:
    """The draw's relative budget ``tpot_factor`` (x the fastest design's tpot, found by brute
    force) -> an absolute ``tpot_s``; dropped when no design is feasible anyway."""
    b = data.get("budgets", {}).get("tpot_factor")
    if b is None:
        return data
    fast = copy.deepcopy(data)
    fast.pop("budgets")
    fast["objective"] = {"metric": "tokens_per_s"}
    problem = registry.from_data(fast)
    bf = problem.brute_force()
    out = copy.deepcopy(data)
    if bf.best is None:
        out.pop("budgets")
        return out
    p = problem.model
    tpot_min = p.stages * p.micro_batch / bf.best.objective
    out["budgets"] = {"tpot_s": tpot_min * b}
    out["description"] += f"; tpot budget = {b!r} x the fastest design's tpot"
    return out


def check_mapping(data: dict[str, Any], *, solvers=SOLVERS, seed: int = -1) -> Outcome:
    return _check("mapping", data, solvers, seed)


def _check(kind: str, data: dict[str, Any], solvers, seed: int) -> Outcome:
    """Brute force vs every solver on one drawn instance of ``kind``."""
    t0 = time.perf_counter()
    out = Outcome(kind, seed, data)
    problem = registry.from_data(data)
    out.points = problem.space_size()
    bf = problem.brute_force()
    out.brute = None if bf.best is None else bf.best.objective
    for s in solvers:
        try:
            sol = solve(problem, solver=s)
        except Exception as exc:  # a ModelError is a finding, not a crash of the stress run
            out.problems.append(f"ERROR {s}: raised {type(exc).__name__}: {exc}")
            out.results[s] = {"error": traceback.format_exc(limit=3)}
            continue
        out.results[s] = {"status": sol.status, "objective": sol.objective, "bound": sol.bound, "gap": sol.gap, "termination": sol.termination, "design": sol.design}
        _compare(out, s, sol.status, sol.objective, out.brute, sense=sol.sense, bound=sol.bound)
    out.seconds = time.perf_counter() - t0
    return out


def _compare(out: Outcome, solver: str, status: str, obj: float | None, brute: float | None, *, sense: str, bound: float | None = None) -> None:
    """Record a disagreement with brute force. Messages start with the class of the finding:
    WRONG (a claim that brute force refutes: "optimal" at another value, "infeasible" with a
    feasible design, a design where none is feasible) or UNPROVEN (no claim: the solver did not
    prove an optimum that brute force says exists)."""
    if brute is None:
        if status != "infeasible":
            out.problems.append(f"WRONG {solver}: brute force finds no feasible design, solver says {status} ({obj})")
        return
    if status == "infeasible":
        out.problems.append(f"WRONG {solver}: claims infeasible, brute force optimum {brute!r}")
        return
    if obj is not None:
        rel = abs(obj - brute) / abs(brute)
        better = (obj > brute) if sense == "max" else (obj < brute)
        if rel > RTOL and better:
            out.problems.append(f"WRONG {solver}: design at {obj!r} beats brute force {brute!r} (relative {rel:.3g}): model/brute inconsistency")
            return
        if rel > RTOL and status == "optimal":
            out.problems.append(f"WRONG {solver}: 'optimal' {obj!r} vs brute force {brute!r} (relative {rel:.3g}): optimum cut off or wrong proof")
            return
    if bound is not None and ((bound < brute * (1 - RTOL)) if sense == "max" else (bound > brute * (1 + RTOL))):
        out.problems.append(f"WRONG {solver}: bound {bound!r} excludes the brute-force optimum {brute!r}")
        return
    if status != "optimal":
        out.problems.append(f"UNPROVEN {solver}: status {status}, objective {obj!r} (brute force optimum {brute!r})")


# --- placement ------------------------------------------------------------------------------


def _composition(rng: np.random.Generator, n: int) -> list[int]:
    k = int(rng.integers(1, n + 1))
    cuts = sorted(rng.choice(np.arange(1, n), size=k - 1, replace=False).tolist()) if k > 1 else []
    bounds = [0, *cuts, n]
    return [bounds[i + 1] - bounds[i] for i in range(k)]


def draw_placement(rng: np.random.Generator, max_points: float = MAX_POINTS, *, edges: bool = True) -> dict[str, Any]:
    """A random tiny placement instance dict whose design space brute force can enumerate.
    ``edges``: also draw budgets on the model's 1e-9 feasibility tolerance."""
    from codesign.kinds.placement.spec import generate_placement

    while True:
        D = int(_choice(rng, (2, 2, 3, 3, 4, 4, 4, 6)))
        workload = _choice(rng, PLACEMENT_WORKLOADS)
        E = int(rng.integers(2, 10))
        tp = int(_choice(rng, [t for t in (1, 2, 3, 4, 6) if D % t == 0]))
        dom_mode = rng.random()
        domains: Any = None if dom_mode < 0.15 else _composition(rng, D)
        profile = rng.random()
        zipf = None if profile < 0.25 else float(_choice(rng, (0.5, 1.0, 1.5, 3.0)))
        levels = None if rng.random() < 0.4 else int(rng.integers(1, 4))
        first_dense = 3 if workload == "deepseek-v3" else 0
        try:
            data = generate_placement(
                D,
                E,
                domains,
                workload=workload,
                chip=_choice(rng, PLACEMENT_CHIPS),
                tp=tp,
                layers=first_dense + int(rng.integers(1, 3)),
                batch_per_device=int(_choice(rng, (1, 2, 8, 32, 256))),
                context_tokens=int(_choice(rng, (256, 4096, 32768))),
                precision=_choice(rng, ("fp8", "fp8", "bf16")),
                zipf_exponent=zipf,
                levels=levels,
                objective=_choice(rng, ("tokens_per_s", "energy_per_token_J")),
                seed=int(rng.integers(1000)),
                name=f"stress-placement-{int(rng.integers(1 << 30))}",
            )
        except ValueError:
            continue
        if rng.random() < 0.2:  # explicit weights with ties (classes of several experts)
            data["routing"] = {"profile": "weights", "weights": [float(x) for x in rng.integers(1, 4, size=E)], "source": "stress: random integer weights"}
        if rng.random() < 0.3:
            data["network"] = {"dispatch_bytes_per_element": float(_choice(rng, (1.0, 2.0))), "combine_bytes_per_element": float(_choice(rng, (1.0, 2.0, 4.0)))}
        try:
            problem = registry.from_data(data)
            pb = problem.model
        except (InputError, ValueError):
            continue
        if problem.space_size() > max_points:
            continue
        if rng.random() < 0.35:  # device memory with room for exactly n experts (may be infeasible)
            lo = math.ceil(E / D)
            n = int(rng.integers(max(lo - 1, 0), E + 1))
            room = pb.fixed_store_B + (n + float(_choice(rng, (0.5, 0.0)))) * pb.expert_store_B
            data["devices"]["memory_capacity_GiB"] = _capacity_GiB(data["devices"]["chip"], room)
            try:
                registry.from_data(data).model  # noqa: B018 (builds and checks the instance)
            except (InputError, ValueError):
                continue
        if rng.random() < 0.35:
            data["budgets"] = {"tpot_factor": float(_choice(rng, BUDGET_FACTORS if edges else SAFE_BUDGET_FACTORS))}
        return data


def _resolve_placement_budget(data: dict[str, Any]) -> dict[str, Any]:
    """As :func:`_resolve_mapping_budget`, for placement (tpot = batch / tokens/s)."""
    b = data.get("budgets", {}).get("tpot_factor")
    if b is None:
        return data
    fast = copy.deepcopy(data)
    fast.pop("budgets")
    fast["objective"] = {"metric": "tokens_per_s"}
    problem = registry.from_data(fast)
    bf = problem.brute_force()
    out = copy.deepcopy(data)
    if bf.best is None:
        out.pop("budgets")
        return out
    out["budgets"] = {"tpot_s": problem.model.batch / bf.best.objective * b}
    out["description"] += f"; tpot budget = {b!r} x the fastest design's tpot"
    return out


def check_placement(data: dict[str, Any], *, solvers=SOLVERS, seed: int = -1) -> Outcome:
    return _check("placement", data, solvers, seed)


# --- driver ---------------------------------------------------------------------------------


def instance_for(family: str, seed: int, max_points: float = MAX_POINTS, *, edges: bool = True) -> dict[str, Any]:
    """The (budget-resolved) instance dict of draw ``seed`` of ``family`` (deterministic)."""
    rng = np.random.default_rng([seed, 0 if family == "mapping" else 1])
    if family == "mapping":
        return _resolve_mapping_budget(draw_mapping(rng, max_points, edges=edges))
    if family == "mapping-symmetry":
        rng = np.random.default_rng([seed, 2])
        return _resolve_mapping_budget(draw_mapping(rng, max_points, edges=edges, symmetry=True))
    return _resolve_placement_budget(draw_placement(rng, max_points, edges=edges))


def check(family: str, data: dict[str, Any], *, solvers=SOLVERS, seed: int = -1) -> Outcome:
    return (check_placement if family == "placement" else check_mapping)(data, solvers=solvers, seed=seed)


def save_instance(data: dict[str, Any], path: Path) -> None:
    import tomli_w

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(data))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=("mapping", "mapping-symmetry", "placement", "both"), default="both")
    ap.add_argument("--draws", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0, help="first draw seed")
    ap.add_argument("--max-points", type=float, default=MAX_POINTS)
    ap.add_argument("--solvers", default=",".join(SOLVERS))
    ap.add_argument("--no-edges", action="store_true", help="no budgets/capacities on the model's 1e-9 tolerance")
    ap.add_argument("--save-failures", action="store_true", help="write failing instances to tests/data/")
    ap.add_argument("--json", type=Path, help="write every outcome (summary) to this file")
    args = ap.parse_args(argv)
    families = ("mapping", "placement") if args.family == "both" else (args.family,)
    solvers = tuple(args.solvers.split(","))
    summary: dict[str, Any] = {}
    records = []
    t_start = time.perf_counter()
    load_start = os.getloadavg()[0]
    for fam in families:
        stats = {"draws": 0, "infeasible": 0, "failures": 0, "seconds": 0.0, "points_max": 0, "budget": 0, "by_class": {}}
        for seed in range(args.seed, args.seed + args.draws):
            data = instance_for(fam, seed, args.max_points, edges=not args.no_edges)
            o = check(fam, data, solvers=solvers, seed=seed)
            stats["draws"] += 1
            stats["infeasible"] += o.brute is None
            stats["budget"] += "budgets" in data
            stats["seconds"] += o.seconds
            stats["points_max"] = max(stats["points_max"], o.points)
            flag = "ok " if o.ok else "FAIL"
            print(f"{fam:9s} seed {seed:4d} {flag} points {o.points:8d} brute {o.brute!r:24s} {o.seconds:6.2f}s", flush=True)
            # a draw that passed: each solver's status and objective; a finding: all the solver said
            keep = ("status", "objective") if o.ok else ("status", "objective", "bound", "gap", "termination", "error")
            records.append({"family": fam, "seed": seed, "ok": o.ok, "points": o.points, "brute": o.brute, "problems": o.problems,
                            "seconds": round(o.seconds, 4),
                            "results": {s: {k: v for k, v in r.items() if k in keep} for s, r in o.results.items()}})
            if not o.ok:
                stats["failures"] += 1
                print("    " + data["description"], flush=True)
                for msg in o.problems:
                    print("    " + msg, flush=True)
                    key = " ".join(msg.split()[:2]).rstrip(":")
                    stats["by_class"][key] = stats["by_class"].get(key, 0) + 1
                if args.save_failures:
                    path = REPO / "tests" / "data" / f"counterexample-{fam}-seed{seed}.toml"
                    save_instance(data, path)
                    print(f"    saved {path.relative_to(REPO)}")
        summary[fam] = stats
    print(json.dumps(summary, indent=2))
    if args.json:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from common import machine

        args.json.write_text(json.dumps({
            "machine": machine(), "command": "python benchmarks/stress_exactness.py " + " ".join(sys.argv[1:]),
            "loadavg_at_start": load_start, "loadavg_at_end": os.getloadavg()[0],
            "wall_s": time.perf_counter() - t_start, "summary": summary, "records": records}, indent=1, default=str))
    return 1 if any(s["failures"] for s in summary.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
