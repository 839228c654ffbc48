"""The DLRM MIP: an exact compilation of :mod:`codesign.model.dlrm` (formulations/dlrm.md §3).

Variables: ``z[t,k]`` (binary) table t is split into k column shards, exactly one k per table;
``n[t,k,ℓ]`` (integer 0..k) how many of those shards sit at location ℓ, Σ_ℓ n[t,k,ℓ] = k·z[t,k].
A design's per-location sums S, G, I, O (model eq. D1, D2) are linear in n, and so are every stream
of the three phases (D3-D5) and the energy (D7). The iteration time is a sum of three maxima of
linear streams; minimised, each maximum is an epigraph variable (``T_in``, ``T_lookup``,
``T_out`` >= every stream of its phase) and the optimum makes each equal to its largest stream:
exact. Capacity rows are linear (in GiB).

Symmetry breaking (dlrm.md §3): the GPUs are identical (GPU d owns hbm:d and host:d) and so are
the modules, so every design maps, by permuting GPUs and modules, to one whose GPUs' gathered bytes
are non-increasing in d and whose modules' are non-increasing in m: rows ``key[d] >= key[d+1]``.

Units inside the MIP: time in microseconds, energy in microjoules per sample, capacity in GiB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from codesign.mip.program import MIP
from codesign.model.dlrm import (
    FEASIBILITY_RTOL,
    GATHERED,
    INDEX,
    OUTPUT,
    STORED,
    DlrmDesign,
    DlrmProblem,
    make_design,
)
from codesign.model.units import GiB

TIME_UNIT_S = 1e-6
ENERGY_UNIT_J = 1e-6


@dataclass
class DlrmMIP:
    mip: MIP
    problem: DlrmProblem
    n: dict[tuple[int, int, int], int]
    z: dict[tuple[int, int], int]
    w: dict[tuple[int, int], int]
    objective_unit: float
    stats: dict[str, int] = field(default_factory=dict)

    def decode(self, x: np.ndarray) -> DlrmDesign:
        pb = self.problem
        shards = []
        Lc = len(pb.locations)
        for t in range(pb.tables):
            j = next((j for j in range(len(pb.spreads)) if round(x[self.w[t, j]]) == 1), None)
            if j is not None:
                shards.append([Lc + j])
                continue
            k = max(pb.shards, key=lambda k: x[self.z[t, k]] if (t, k) in self.z else 1.0)
            shards.append([loc for loc in range(Lc) for _ in range(round(x[self.n[t, k, loc]]))])
        return make_design(pb, shards)

    @property
    def design_vars(self) -> np.ndarray:
        return np.array([*self.n.values(), *self.z.values(), *self.w.values()], dtype=np.int64)


def build_dlrm(pb: DlrmProblem) -> DlrmMIP:
    mip = MIP(name=f"dlrm-{pb.name}")
    tu = TIME_UNIT_S
    Lc, D = len(pb.locations), pb.gpus
    per = {(t, k): pb.shard(t, k) for t in range(pb.tables) for k in pb.shards}
    spread = {(t, j): pb.spread(t, j) for t in range(pb.tables) for j in range(len(pb.spreads))}
    n: dict[tuple[int, int, int], int] = {}
    z: dict[tuple[int, int], int] = {}
    w: dict[tuple[int, int], int] = {}
    choices = len(pb.shards) + len(pb.spreads)
    for t in range(pb.tables):
        for k in pb.shards:
            for loc in range(Lc):
                n[t, k, loc] = mip.add_var(f"n[{t},{k},{loc}]", 0, k, integer=True)
            if choices > 1:
                z[t, k] = mip.add_binary(f"z[{t},{k}]")
                mip.add_row(f"shards[{t},{k}]", [*(n[t, k, loc] for loc in range(Lc)), z[t, k]], [1.0] * Lc + [-float(k)], lb=0.0, ub=0.0)
            else:
                mip.add_row(f"shards[{t},{k}]", [n[t, k, loc] for loc in range(Lc)], [1.0] * Lc, lb=k, ub=k)
        for j, (label, _) in enumerate(pb.spreads):
            w[t, j] = mip.add_var(f"w[{t},{label}]", 0, 1, integer=True) if choices > 1 else mip.add_var(f"w[{t},{label}]", 1, 1, integer=True)
        if choices > 1:
            ids = [z[t, k] for k in pb.shards] + [w[t, j] for j in range(len(pb.spreads))]
            mip.add_row(f"one-choice[{t}]", ids, [1.0] * len(ids), lb=1.0, ub=1.0)

    def total(locs, q: int, scale: float = 1.0) -> tuple[list[int], list[float]]:
        """Σ over ``locs`` of quantity q (S, G, I, O), times ``scale``."""
        idx, val = [], []
        for (t, k), v in per.items():
            for loc in locs:
                idx.append(n[t, k, loc])
                val.append(scale * v[loc, q])
        for (t, j), v in spread.items():
            c = scale * sum(v[loc, q] for loc in locs)
            if c:
                idx.append(w[t, j])
                val.append(c)
        return idx, val

    # capacity (GiB)
    for loc, place in enumerate(pb.locations):
        i, v = total([loc], STORED, 1.0 / GiB)
        mip.add_row(f"capacity[{place.label}]", i, v, ub=place.capacity_B * (1 + FEASIBILITY_RTOL) / GiB)

    # upper bounds of the epigraph variables: every byte through the slowest path
    most = {q: sum(max([k * per[t, k][:, q].max() for k in pb.shards] + [spread[t, j][:, q].sum() for j in range(len(pb.spreads))])
                   for t in range(pb.tables)) for q in (GATHERED, INDEX, OUTPUT)}
    slowest_link = max(pb.nv_s_per_B, pb.link_s_per_B, pb.port_s_per_B, pb.switch_s_per_B)
    T_in = mip.add_var("T_in", 0.0, most[INDEX] * slowest_link / tu + 1.0)
    T_lk = mip.add_var("T_lookup", 0.0, most[GATHERED] * max(x.s_per_B for x in pb.locations) / tu + 1.0)
    T_out = mip.add_var("T_out", 0.0, most[OUTPUT] * slowest_link / tu + 1.0)

    # lookup (D4): T_lookup >= G_ℓ / BW_ℓ at every location
    for loc, place in enumerate(pb.locations):
        i, v = total([loc], GATHERED, place.s_per_B / tu)
        mip.add_row(f"lookup[{place.label}]", [T_lk, *i], [1.0] + [-x for x in v], lb=0.0)

    # exchanges (D3, D5)
    own = [[loc for loc, p in enumerate(pb.locations) if p.owner == d] for d in range(D)]
    gpu_all = [loc for o in own for loc in o]
    pool = [loc for loc, p in enumerate(pb.locations) if p.kind == "pool"]
    for T, q, what in ((T_in, INDEX, "in"), (T_out, OUTPUT, "out")):
        if D > 1 and pb.nv_s_per_B:
            c = pb.nv_s_per_B / tu
            for d in range(D):
                i, v = total(own[d], q, c * (D - 1) / D)
                mip.add_row(f"{what}-nv-own[{d}]", [T, *i], [1.0] + [-x for x in v], lb=0.0)
                others = [loc for loc in gpu_all if loc not in own[d]]
                i, v = total(others, q, c / D)
                mip.add_row(f"{what}-nv-others[{d}]", [T, *i], [1.0] + [-x for x in v], lb=0.0)
        if pool:
            i, v = total(pool, q, pb.link_s_per_B / D / tu)
            mip.add_row(f"{what}-link", [T, *i], [1.0] + [-x for x in v], lb=0.0)
            if pb.switch_s_per_B:
                i, v = total(pool, q, pb.switch_s_per_B / tu)
                mip.add_row(f"{what}-switch", [T, *i], [1.0] + [-x for x in v], lb=0.0)
            if pb.port_s_per_B:
                for m in range(pb.modules):
                    i, v = total([loc for loc in pool if pb.locations[loc].module == m], q, pb.port_s_per_B / tu)
                    mip.add_row(f"{what}-port[{m}]", [T, *i], [1.0] + [-x for x in v], lb=0.0)

    # symmetry: GPUs, then modules, in non-increasing order of gathered bytes (GB)
    for a, b in pairwise(range(D)):
        ia, va = total(own[a], GATHERED, 1e-9)
        ib, vb = total(own[b], GATHERED, -1e-9)
        mip.add_row(f"sym-gpu[{a}]", ia + ib, va + vb, lb=0.0)
    for a, b in pairwise(range(pb.modules)):
        ia, va = total([loc for loc in pool if pb.locations[loc].module == a], GATHERED, 1e-9)
        ib, vb = total([loc for loc in pool if pb.locations[loc].module == b], GATHERED, -1e-9)
        mip.add_row(f"sym-module[{a}]", ia + ib, va + vb, lb=0.0)

    if pb.objective == "samples_per_s":
        mip.set_objective([T_in, T_lk, T_out], [1.0, 1.0, 1.0])
        unit = tu
    else:
        # energy per sample (D7), µJ
        scale = 1.0 / (pb.batch * ENERGY_UNIT_J)
        idx: list[int] = []
        val: list[float] = []
        for loc, place in enumerate(pb.locations):
            i, v = total([loc], GATHERED, place.J_per_B * scale)
            idx += i
            val += v
        for q in (INDEX, OUTPUT):
            i, v = total(gpu_all, q, (D - 1) / D * pb.J_per_B_nv * scale)
            idx += i
            val += v
            if pool:
                i, v = total(pool, q, pb.J_per_B_path * scale)
                idx += i
                val += v
        mip.set_objective(idx, val)
        unit = ENERGY_UNIT_J
    return DlrmMIP(mip, pb, n, z, w, unit, mip.stats())
