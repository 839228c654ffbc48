"""Brute force over every per-expert placement and every TP-group partition (tiny instances only):
the reference the placement MIP is tested against."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from codesign.model.placement import (
    PlacementDesign,
    PlacementProblem,
    assess,
    set_partitions,
    tp_costs,
)

#: brute force refuses spaces larger than this
MAX_POINTS = 5e7
CHUNK = 50_000


@dataclass
class BruteResult:
    objective: float | None
    design: PlacementDesign | None
    points: int
    feasible_points: int
    complete: bool = True  # False: a deadline stopped the enumeration


def brute_force_placement(pb: PlacementProblem, deadline: float | None = None) -> BruteResult:
    """Evaluate every per-expert placement (D^E) under every TP-group partition with the model;
    ``deadline`` (a ``time.perf_counter()`` value): no chunk starts after it but the first, and the
    result is the best of the part done (``complete`` False)."""
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
    started, complete = False, True
    for groups in partitions:
        if not complete:
            break
        tp_t, tp_e = tp_costs(pb, groups)
        for lo in range(0, D**E, CHUNK):
            if deadline is not None and time.perf_counter() > deadline and started:
                complete = False
                break
            started = True
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
    return BruteResult(None if best is None else sense * best_val, best, total, feasible, complete)
