"""Stage envelopes: a valid lower bound on one device's dynamic energy as a function of its layer
count (formulations/mapping.md §4, "Stage envelopes").

The LP relaxation of the mapping MIP lets a stage hold 7.95 layers, 7.09 of their weights in local
memory and the rest in the pool, exactly filling its time budget. With whole layers a stage of 8
layers must stream one whole layer's weights from a costlier tier. For each device and each layer
count ``n`` this module finds the least dynamic energy of a period (the counts part of (9.9)) over
every integer split of the ``n`` layers' weights and KV cache among local memory, host memory and
the pool whose stage fits the period's cap ``t_ub`` (a *relaxation* of the device's rows: shared
resources and the pool's capacity are left out, and the pooled bytes of a device may stream through
all of its ports at once). Every design meets the device's rows, so its dynamic energy is at least
``g(n_d)``, and at least the lower convex hull of the points ``(n, g(n))``: one linear row per hull
segment. A count with no split that fits is not a count of any design: ``n_d`` is bounded by the
largest that fits.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from codesign.model.mapping import FEASIBILITY_RTOL, Device, MappingProblem

#: the envelope is computed while this many layers fit a stage (the enumeration grows as n^4)
MAX_LAYERS = 24
#: slack on every limit of the enumeration (it must keep each split the MIP keeps) and on the floor
SLACK = 1e-9


def splits(n: int, allowed: tuple[bool, bool, bool]) -> np.ndarray:
    """Every split of ``n`` layers over (local, host, pool) with only the allowed classes, one row each."""
    rows = [(a, b, n - a - b) for a in range(n + 1) for b in range(n + 1 - a)]
    out = np.array([r for r in rows if all(ok or c == 0 for ok, c in zip(allowed, r, strict=True))], dtype=float)
    return out.reshape(-1, 3)


def floor_energies(p: MappingProblem, dev: Device, first: bool, last: bool, t_ub_s: float,
                   max_layers: int = MAX_LAYERS) -> list[float] | None:
    """``g[n-1]`` for n = 1 … N, the least dynamic energy (J per period, the counts part of device's
    energy in (9.9): FLOPs, activations and the bytes read from each tier) of a split of n layers whose
    stage fits ``t_ub_s``; N is the largest count with such a split. None when more than
    ``max_layers`` fit (no envelope), or when not even one layer fits (the MIP's rows say so)."""
    lay = p.layer
    kinds = [p.tiers[t].kind for t in range(len(p.tiers))]
    has_pool = p.paper_mode or dev.ports > 0
    host_ok = dev.host_capacity_B > 0

    def classes(allowed: list[int]) -> tuple[tuple[bool, bool, bool], float]:
        pool_J = [p.tiers[t].J_per_B for t in allowed if kinds[t] == "pool"]
        ok = ("local" in [kinds[t] for t in allowed], host_ok and "host" in [kinds[t] for t in allowed],
              has_pool and bool(pool_J))
        return ok, min(pool_J) if pool_J else 0.0

    w_ok, w_pool_J = classes(list(p.weight_tiers))
    k_ok, k_pool_J = classes(list(p.kv_tiers))
    fixed = (p.first_store_B if first else 0.0) + (p.last_store_B if last else 0.0)
    extra_read = (p.first_read_B if first else 0.0) + (p.last_read_B if last else 0.0)
    room = dev.local_capacity_B * (1 + FEASIBILITY_RTOL) * (1 + SLACK) - fixed
    host_room = dev.host_capacity_B * (1 + FEASIBILITY_RTOL) * (1 + SLACK)
    pool_s_per_B = (1.0 / (p.assumed_device_Bps * dev.tp) if p.paper_mode else
                    1.0 / (p.port_Bps * dev.ports * dev.tp) if has_pool and p.port_Bps else 0.0)
    limit = t_ub_s * (1 + SLACK)
    sigma = dev.stream_overlap
    out: list[float] = []
    for n in range(1, max_layers + 2):
        if n > max_layers:
            return None
        w, k = splits(n, w_ok)[:, None, :], splits(n, k_ok)[None, :, :]
        local_B = lay.w_read_B * w[..., 0] + lay.kv_read_B * k[..., 0] + dev.act_B * n + extra_read
        memory = np.maximum.reduce([
            local_B * dev.s_per_B_local,
            (lay.w_read_B * w[..., 1] + lay.kv_read_B * k[..., 1]) * dev.s_per_B_host,
            (lay.w_read_B * w[..., 2] + lay.kv_read_B * k[..., 2]) * pool_s_per_B,
        ])
        compute = n * (lay.flops * dev.s_per_flop + dev.s_per_layer) + (p.last_flops * dev.s_per_flop if last else 0.0)
        exposed = n * dev.s_per_layer_comm + (dev.s_last_comm if last else 0.0) + dev.s_host
        stage = (1 - sigma) * (compute + memory) + sigma * np.maximum(compute, memory) + exposed
        fits = ((stage <= limit)
                & (lay.w_store_B * w[..., 0] + lay.kv_store_B * k[..., 0] <= room)
                & (lay.w_store_B * w[..., 1] + lay.kv_store_B * k[..., 1] <= host_room))
        if not fits.any():
            break
        energy = (n * (lay.flops * dev.J_per_flop + dev.act_B * dev.J_per_B_local + dev.J_per_layer_comm)
                  + lay.w_read_B * (w[..., 0] * dev.J_per_B_local + w[..., 1] * dev.J_per_B_host + w[..., 2] * w_pool_J)
                  + lay.kv_read_B * (k[..., 0] * dev.J_per_B_local + k[..., 1] * dev.J_per_B_host + k[..., 2] * k_pool_J))
        out.append(float(np.min(energy[fits])))
    return out or None


def hull(g: list[float]) -> list[tuple[float, float]]:
    """The lower convex hull of the points (n, g[n-1]), n = 1 … len(g), as lines (intercept, slope)
    each at most every point, lowered by SLACK relative (float round-off of the rows); one point: a
    horizontal line."""
    pts = [(float(i + 1), v - SLACK * abs(v)) for i, v in enumerate(g)]
    lower: list[tuple[float, float]] = []
    for q in pts:
        while len(lower) >= 2 and ((lower[-1][0] - lower[-2][0]) * (q[1] - lower[-2][1])
                                   - (lower[-1][1] - lower[-2][1]) * (q[0] - lower[-2][0])) <= 0:
            lower.pop()
        lower.append(q)
    if len(lower) == 1:
        return [(lower[0][1], 0.0)]
    lines = []
    for (x1, y1), (x2, y2) in itertools.pairwise(lower):
        slope = (y2 - y1) / (x2 - x1)
        lines.append((y1 - slope * x1, slope))
    return lines


def device_key(dev: Device, first: bool, last: bool) -> tuple:
    """Devices with equal figures (names aside) and position class share an envelope."""
    return replace(dev, name=""), first, last
