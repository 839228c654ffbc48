"""The DLRM MIP: an exact compilation of :mod:`codesign.model.dlrm` (formulations/dlrm.md §3).

Variables: ``z[t,k]`` (binary) table t is split into k column shards, exactly one k per table;
``n[t,k,ℓ]`` (integer 0..k) how many of those shards sit at location ℓ, Σ_ℓ n[t,k,ℓ] = k·z[t,k].
A design's per-location sums S, G, I, O (model eq. D1, D2) are linear in n, and so are every stream
of the three phases (D3-D5) and the energy (D7). The iteration time is a sum of three maxima of
linear streams; minimised, each maximum is an epigraph variable (``T_in``, ``T_lookup``,
``T_out`` >= every stream of its phase) and the optimum makes each equal to its largest stream:
exact. Capacity rows are linear (in GiB).

Added rows, each met by every design or by a renumbered twin of equal cost (dlrm.md §3.1-3.2):
lower bounds on each phase's maximum (one table's share at one place; the mean of identical
streams), shard counts bounded by capacity, and symmetry rows that number the identical GPUs (GPU
d owns hbm:d and host:d) and the identical modules by the first table they hold
(:func:`_symmetry`; :func:`canonical` renumbers a design so).

Units inside the MIP: time in microseconds, energy in microjoules per sample, capacity in GiB.
"""

from __future__ import annotations

import math
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
    evaluate,
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

    def encode(self, design: DlrmDesign) -> np.ndarray:
        """The MIP point of a design: n, z, w, and the phase variables at the model's phases (µs)."""
        pb = self.problem
        Lc = len(pb.locations)
        x = np.zeros(len(self.mip.vars))
        for t, s in enumerate(design.shards):
            if s[0] >= Lc:
                x[self.w[t, s[0] - Lc]] = 1.0
                continue
            if (t, len(s)) in self.z:
                x[self.z[t, len(s)]] = 1.0
            for loc in s:
                x[self.n[t, len(s), loc]] += 1.0
        ev = evaluate(pb, design)
        for name, key in (("T_in", "in_s"), ("T_lookup", "lookup_s"), ("T_out", "out_s")):
            x[self.mip.index(name)] = ev.phases_s[key] / TIME_UNIT_S
        return x

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
                # at most as many shards as fit the location alone (a bound every design meets)
                stored = per[t, k][loc, STORED] / GiB
                cap = pb.locations[loc].capacity_B * (1 + FEASIBILITY_RTOL) / GiB
                fit = min(k, math.floor(cap / stored * (1 + 1e-9))) if stored > 0 else k
                n[t, k, loc] = mip.add_var(f"n[{t},{k},{loc}]", 0, fit, integer=True)
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

    _valid_inequalities(mip, pb, n, w, per, spread, total, T_lk, T_in, T_out)
    _symmetry(mip, pb, n)

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


def _shard_time_per_B(pb: DlrmProblem, q: int) -> np.ndarray:
    """(locations,) for quantity q: the time per byte of one stream every byte of q at a location
    runs through (lookup: the location's gather; exchanges: the owner's NVLink ``own`` stream,
    a module's port, the GPUs' appliance links and the switch)."""
    D = pb.gpus
    out = np.zeros(len(pb.locations))
    for loc, p in enumerate(pb.locations):
        if q == GATHERED:
            out[loc] = p.s_per_B
        elif p.kind == "pool":
            out[loc] = max(pb.port_s_per_B, pb.link_s_per_B / D, pb.switch_s_per_B)
        else:
            out[loc] = pb.nv_s_per_B * (D - 1) / D
    return out


def _valid_inequalities(mip: MIP, pb: DlrmProblem, n, w, per, spread, total, T_lk: int, T_in: int, T_out: int) -> None:
    """Rows every design satisfies (formulations/dlrm.md §3.1): they cut fractional points only.

    *One table*: a phase's maximum is at least the share of any one table at any one place. With k
    shards of table t, a location holding one shard carries at least that shard's bytes, so the
    shards' average, Σ_ℓ (n[t,k,ℓ]/k)·c_ℓ·X[t,k,ℓ], is at most the phase's maximum (the weights
    n/k sum to z[t,k]); a spread option's term is its largest member stream.
    *Average*: the maximum over a group of identical streams is at least their mean."""
    tu = TIME_UNIT_S
    for T, q, what in ((T_lk, GATHERED, "lookup"), (T_in, INDEX, "in"), (T_out, OUTPUT, "out")):
        c = _shard_time_per_B(pb, q) / tu
        pool = np.array([p.kind == "pool" for p in pb.locations])
        for t in range(pb.tables):
            idx, val = [], []
            for k in pb.shards:
                for loc in range(len(pb.locations)):
                    idx.append(n[t, k, loc])
                    val.append(c[loc] * per[t, k][loc, q] / k)
            for j in range(len(pb.spreads)):
                x = spread[t, j][:, q]
                b = float((c * x).max())
                if q != GATHERED and pool.any():
                    b = max(b, x[pool].sum() * max(pb.link_s_per_B / pb.gpus, pb.switch_s_per_B) / tu)
                idx.append(w[t, j])
                val.append(b)
            mip.add_row(f"{what}-one-table[{t}]", [T, *idx], [1.0] + [-v for v in val], lb=0.0)
    # averages: every lookup location of one kind and speed; the GPUs' own NVLink streams; the ports
    groups: dict[tuple[str, float], list[int]] = {}
    for loc, p in enumerate(pb.locations):
        groups.setdefault((p.kind, p.s_per_B), []).append(loc)
    for (kind, s), locs in groups.items():
        if len(locs) > 1:
            i, v = total(locs, GATHERED, s / len(locs) / tu)
            mip.add_row(f"lookup-mean[{kind}]", [T_lk, *i], [1.0] + [-x for x in v], lb=0.0)
    gpu_all = [loc for loc, p in enumerate(pb.locations) if p.kind != "pool"]
    pool = [loc for loc, p in enumerate(pb.locations) if p.kind == "pool"]
    D = pb.gpus
    for T, q, what in ((T_in, INDEX, "in"), (T_out, OUTPUT, "out")):
        if D > 1 and pb.nv_s_per_B:
            i, v = total(gpu_all, q, pb.nv_s_per_B * (D - 1) / D / D / tu)
            mip.add_row(f"{what}-nv-mean", [T, *i], [1.0] + [-x for x in v], lb=0.0)
        if pool and pb.port_s_per_B and pb.modules > 1:
            i, v = total(pool, q, pb.port_s_per_B / pb.modules / tu)
            mip.add_row(f"{what}-port-mean", [T, *i], [1.0] + [-x for x in v], lb=0.0)


def symmetry_order(pb: DlrmProblem) -> list[int]:
    """The table order of the symmetry rows: most lookups first, then most rows (any fixed order is
    valid; heavy tables first pins them to GPU 0 / module 0)."""
    return sorted(range(pb.tables), key=lambda t: (-pb.pooling[t], -pb.rows[t], t))


def _symmetry(mip: MIP, pb: DlrmProblem, n) -> None:
    """Identical GPUs (GPU d owns hbm:d and host:d) and identical modules (module m owns pool:m:*)
    in order of the first table they hold (formulations/dlrm.md §3.2).

    Any design maps, by sorting its GPUs (and, independently, its modules) by the first table of
    :func:`symmetry_order` they hold (empty ones last), to one of equal cost where GPU a's first
    table comes no later than GPU a+1's. Row (a, t): if GPU a+1 holds part of table t, GPU a holds
    some table before t, or a shard of t itself (only a table in k > 1 shards can be on both):

        Σ_k Σ_{ℓ of a+1} n[t,k,ℓ]/k  <=  Σ_{t' before t} Σ_k Σ_{ℓ of a} n[t',k,ℓ] + Σ_{k>1} Σ_{ℓ of a} n[t,k,ℓ]

    (the left side is at most 1, and positive exactly when a+1 holds part of t; the right side is
    an integer, at least 1 exactly when the condition holds)."""
    order = symmetry_order(pb)
    Lc = len(pb.locations)
    gpus = [[loc for loc in range(Lc) if pb.locations[loc].owner == d] for d in range(pb.gpus)]
    modules = [[loc for loc in range(Lc) if pb.locations[loc].module == m] for m in range(pb.modules)]
    for what, groups in (("gpu", gpus), ("module", modules)):
        for a, b in pairwise(range(len(groups))):
            before: list[int] = []
            for t in order:
                idx = [n[t, k, loc] for k in pb.shards for loc in groups[b]]
                val = [1.0 / k for k in pb.shards for loc in groups[b]]
                idx += before + [n[t, k, loc] for k in pb.shards if k > 1 for loc in groups[a]]
                val += [-1.0] * (len(idx) - len(val))
                mip.add_row(f"sym-{what}[{a},{t}]", idx, val, ub=0.0)
                before += [n[t, k, loc] for k in pb.shards for loc in groups[a]]


def canonical(pb: DlrmProblem, design: DlrmDesign) -> DlrmDesign:
    """The design with its GPUs and its modules renumbered in order of the first table (of
    :func:`symmetry_order`) they hold, empty ones last: the same cost (the model is symmetric in
    both), and it meets the symmetry rows (the argument of :func:`_symmetry`)."""
    Lc = len(pb.locations)
    rank = {t: i for i, t in enumerate(symmetry_order(pb))}
    first_gpu = [pb.tables] * pb.gpus
    first_mod = [pb.tables] * pb.modules
    for t, s in enumerate(design.shards):
        for loc in s:
            if loc < Lc and pb.locations[loc].owner >= 0:
                first_gpu[pb.locations[loc].owner] = min(first_gpu[pb.locations[loc].owner], rank[t])
            elif loc < Lc and pb.locations[loc].module >= 0:
                first_mod[pb.locations[loc].module] = min(first_mod[pb.locations[loc].module], rank[t])
    new_gpu = {d: i for i, d in enumerate(sorted(range(pb.gpus), key=lambda d: first_gpu[d]))}
    new_mod = {m: i for i, m in enumerate(sorted(range(pb.modules), key=lambda m: first_mod[m]))}
    def tier(p) -> str:
        return p.label.split(":")[2] if p.kind == "pool" else ""

    where = {(p.kind, p.owner, p.module, tier(p)): i for i, p in enumerate(pb.locations)}

    def move(loc: int) -> int:
        if loc >= Lc:
            return loc
        p = pb.locations[loc]
        return where[p.kind, new_gpu.get(p.owner, -1), new_mod.get(p.module, -1), tier(p)]

    return make_design(pb, [[move(loc) for loc in s] for s in design.shards])
