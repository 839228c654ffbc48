"""Brute force over every per-layer mapping design (tiny instances only).

Enumerates what the MIP aggregates away: every contiguous partition of the layers into stages,
every attachment of every device, and every tier of every layer's weights and KV cache, then
evaluates them all with the model (:func:`codesign.model.mapping.assess`, vectorised over the
per-layer tier choices). Used by the tests to check that the MIP's optimum is the true optimum.
"""

from __future__ import annotations

import itertools
import math
import time
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
    complete: bool = True  # False: a deadline stopped the enumeration


def compositions(total: int, parts: int):
    """All tuples of ``parts`` positive integers summing to ``total``."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield tuple(bounds[i + 1] - bounds[i] for i in range(parts))


def _sharing_ok(p: MappingProblem, attach) -> bool:
    """At most ``max_devices_per_module`` devices on any module, a stage's tp devices each (ports per device are already
    respected by :meth:`MappingProblem.attach_options`)."""
    if p.max_devices_per_module is None:
        return True
    return all(sum(p.devices[d].tp for d, mods in enumerate(attach) if j in mods) <= p.max_devices_per_module
               for j in range(p.modules))


def brute_force_mapping(p: MappingProblem, deadline: float | None = None) -> BruteResult:
    """Every design evaluated; ``deadline`` (a ``time.perf_counter()`` value): no chunk starts after it
    but the first, and the result is the best of the part done (``complete`` False)."""
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
    # the attachment only decides which placements are allowed (data on attached modules only)
    # and whether module sharing limits hold; every other metric is independent of it
    attachments = [att for att in itertools.product(*attach_sets) if _sharing_ok(p, att)]
    pool_module = np.array([t.module if t.kind == "pool" else -1 for t in p.tiers])
    started, complete = False, True
    for parts in compositions(L, p.stages):
        if not complete:
            break
        pairs = len(w_all) * len(k_all)
        for lo in range(0, pairs, CHUNK):
            if deadline is not None and time.perf_counter() > deadline and started:
                complete = False
                break
            started = True
            sel = np.arange(lo, min(lo + CHUNK, pairs))
            W = w_all[sel // len(k_all)]
            K = k_all[sel % len(k_all)]
            cw, ck = block_counts(p, parts, W, K)
            a = assess(p, np.array(parts), cw, ck, np.ones((p.stages, max(p.modules, 1)), dtype=bool))
            base_ok = a.capacity_ok & a.budget_ok
            # used[n, d, j]: design n puts data of device d on module j
            used = np.zeros((len(sel), p.stages, max(p.modules, 1)), dtype=bool)
            for t in np.flatnonzero(pool_module >= 0):
                used[:, :, pool_module[t]] |= (cw[:, :, t] + ck[:, :, t]) > 0
            value = p.micro_batch / a.period_s if sense > 0 else a.energy_per_token_J
            for attach in attachments:
                att = attach_matrix(p, attach)
                ok = base_ok if p.paper_mode or not p.modules else base_ok & ~np.any(used & ~att, axis=(1, 2))
                feasible_points += int(ok.sum())
                if not ok.any():
                    continue
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
    return BruteResult(None if best is None else sense * best_val, best, total, feasible_points, complete)
