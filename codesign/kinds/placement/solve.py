"""Solve a placement instance (build the MIP, run a backend, decode, re-check with the model) and
brute force over every per-expert placement and every TP-group partition (tiny instances).

What "optimal" means, and the re-check with the model, are in :mod:`codesign.kinds.family`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from codesign.errors import InputError
from codesign.kinds.family import FamilySolution, check_stored, solve_compiled
from codesign.kinds.placement.formulation import build_placement, to_user
from codesign.kinds.placement.spec import (
    PlacementInstance,
    list_placement_instances,
    load_placement,
)
from codesign.model.placement import (
    PlacementDesign,
    PlacementProblem,
    assess,
    build_problem,
    evaluate_placement,
    objective_sense,
    parse_placement_design,
    set_partitions,
    space_size,
    tp_costs,
)

#: brute force refuses spaces larger than this
MAX_POINTS = 5e7
CHUNK = 50_000



def solve_placement(
    inst: PlacementInstance,
    *,
    solver: str = "highs",
    time_limit: float | None = None,
    threads: int | None = None,
    progress=None,
    verbose: bool = False,
    problem: PlacementProblem | None = None,
) -> FamilySolution:
    t0 = time.perf_counter()
    pb = problem or build_problem(inst)
    pm = build_placement(pb)
    return solve_compiled(
        inst, "placement", pm,
        evaluate=lambda d: evaluate_placement(pb, d),
        to_user=lambda v: to_user(pb, v, pm.objective_unit),
        sense=objective_sense(pb), metric=pb.objective, space=space_size(pb),
        solver=solver, t0=t0, time_limit=time_limit, threads=threads, progress=progress, verbose=verbose,
    )


def check_placement_solution(data: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """Re-verify a stored placement solution with the model (no solver)."""

    def evaluate_record(inst, design, source):
        pb = build_problem(inst)
        return evaluate_placement(pb, require_design(pb, design, source)), pb.objective

    return check_stored(data, path, load=load_placement, named=list_placement_instances(), evaluate_record=evaluate_record)


def require_design(pb: PlacementProblem, data: Any, source: str) -> PlacementDesign:
    if not isinstance(data, dict):
        raise InputError("a placement design must be a table", file=source, value=type(data).__name__)
    return parse_placement_design(pb, data, source=source)


# --- brute force ------------------------------------------------------------------------------


@dataclass
class BruteResult:
    objective: float | None
    design: PlacementDesign | None
    points: int
    feasible_points: int


def brute_force_placement(pb: PlacementProblem) -> BruteResult:
    """Evaluate every per-expert placement (D^E) under every TP-group partition with the model."""
    D, E = pb.devices, pb.experts
    partitions = [[(d,) for d in range(D)]] if pb.tp == 1 else list(set_partitions(list(range(D)), pb.tp))
    total = D**E * len(partitions)
    if total > MAX_POINTS:
        raise ValueError(f"{total:.3g} points: too many for brute force (limit {MAX_POINTS:.0e})")
    sense = 1.0 if pb.objective == "tokens_per_s" else -1.0
    best_val = -math.inf
    best: PlacementDesign | None = None
    feasible = 0
    powers = D ** np.arange(E)
    for groups in partitions:
        tp_t, tp_e = tp_costs(pb, groups)
        for lo in range(0, D**E, CHUNK):
            codes = np.arange(lo, min(lo + CHUNK, D**E))
            A = (codes[:, None] // powers[None, :]) % D
            a = assess(pb, A, tp_t, tp_e)
            ok = a.feasible
            feasible += int(ok.sum())
            if not ok.any():
                continue
            value = pb.batch / a.step_s if sense > 0 else a.energy_per_token_J
            score = np.where(ok, sense * value, -np.inf)
            i = int(np.argmax(score))
            if score[i] > best_val:
                best_val = float(score[i])
                best = PlacementDesign(tuple(int(x) for x in A[i]), tuple(tuple(g) for g in groups))
    return BruteResult(None if best is None else sense * best_val, best, total, feasible)
