"""Brute force over every per-layer mapping design (tiny instances only).

Enumerates what the MIP aggregates away: every contiguous partition of the layers into stages,
every attachment of every device, and every tier of every layer's weights and KV cache, then
evaluates them all with the model (:func:`codesign.model.mapping.assess`, vectorised over the
per-layer tier choices). Used by the tests to check that the MIP's optimum is the true optimum.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from codesign.model.mapping import (
    MappingDesign,
    MappingProblem,
    assess,
    attach_matrix,
    block_counts,
)

#: refuse spaces larger than this (the brute force is for tiny instances)
MAX_POINTS = 5e7
CHUNK = 200_000


@dataclass
class BruteResult:
    objective: float | None
    design: MappingDesign | None
    points: int
    feasible_points: int


def compositions(total: int, parts: int):
    """All tuples of ``parts`` positive integers summing to ``total``."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield tuple(bounds[i + 1] - bounds[i] for i in range(parts))


def brute_force_mapping(p: MappingProblem) -> BruteResult:
    L = p.layers
    per_layer = len(p.weight_tiers) ** L * len(p.kv_tiers) ** L
    attach_sets = [p.attach_options(d) for d in range(p.stages)]
    total = math.comb(L - 1, p.stages - 1) * per_layer * math.prod(len(a) for a in attach_sets)
    if total > MAX_POINTS:
        raise ValueError(f"{total:.3g} points: too many for brute force (limit {MAX_POINTS:.0e})")
    sense = 1.0 if p.objective == "tokens_per_s" else -1.0  # maximise tokens/s, minimise energy
    best_val = -math.inf
    best: MappingDesign | None = None
    feasible_points = 0
    w_opts = np.array(p.weight_tiers)
    k_opts = np.array(p.kv_tiers)
    # all per-layer tier tuples: weights (Nw, L), kv (Nk, L)
    w_all = np.array(list(itertools.product(w_opts, repeat=L))).reshape(-1, L)
    k_all = np.array(list(itertools.product(k_opts, repeat=L))).reshape(-1, L)
    for parts in compositions(L, p.stages):
        for attach in itertools.product(*attach_sets):
            att = attach_matrix(p, attach)
            pairs = len(w_all) * len(k_all)
            for lo in range(0, pairs, CHUNK):
                sel = np.arange(lo, min(lo + CHUNK, pairs))
                W = w_all[sel // len(k_all)]
                K = k_all[sel % len(k_all)]
                cw, ck = block_counts(p, parts, W, K)
                a = assess(p, np.array(parts), cw, ck, att)
                ok = a.feasible
                feasible_points += int(ok.sum())
                if not ok.any():
                    continue
                value = p.micro_batch / a.period_s if sense > 0 else a.energy_per_token_J
                score = np.where(ok, sense * value, -np.inf)
                i = int(np.argmax(score))
                if score[i] > best_val:
                    best_val = float(score[i])
                    best = MappingDesign(
                        parts,
                        tuple(p.tiers[t].label for t in W[i]),
                        tuple(p.tiers[t].label for t in K[i]),
                        tuple(tuple(m) for m in attach),
                    )
    return BruteResult(None if best is None else sense * best_val, best, total, feasible_points)
