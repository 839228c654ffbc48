"""The placement MIP: an exact compilation of :mod:`codesign.model.placement` (placement.md §3-5).

Aggregation (exact, placement.md §4):

* experts with the same routing probability are interchangeable (every metric depends on an
  expert only through p_e, q_e and its device), so a design is described by integer counts
  ``n[c,d]`` of class-c experts on device d; every count matrix with column sums m_c is the image
  of at least one per-expert placement and all of its pre-images have the same metrics;
* TP groups are interchangeable and so are the devices of one domain as far as groups go (an
  all-reduce's cost depends only on how many members the group has in each domain), so the
  group decision is the number ``y[π]`` of groups with member-per-domain vector π, Σ_π y = G,
  Σ_π π_K·y[π] = S_K; any such y is realised by handing out each domain's devices in any order.

Maxima under minimisation (epigraphs; the objective and the tpot budget only need upper bounds
and the objective is increasing in each): X >= expert phase of every device; Δ >= the four link
streams of every device's dispatch (the combine is the same streams x a_combine/a_dispatch, so
its maximum is that multiple of Δ); A >= u[π]·cost(π) with u[π] >= y[π]/G ("pattern used").

Symmetry breaking (placement.md §5): devices of one domain are interchangeable, so their count
vectors (n[0,d], .., n[C-1,d]) are ordered non-increasing lexicographically, hottest class most
significant (one row per neighbour pair with weights W_c = Π_{c'>c}(ub_c' + 1); above
LEX_WEIGHT_LIMIT the rows fall back to non-increasing loads P_d); domains of equal size are
interchangeable as whole blocks, so their loads P_K are ordered non-increasing. Sorting devices
inside each domain and then permuting equal-size domains as blocks maps every design to one
satisfying both orders.

Units inside the MIP: time in microseconds, energy in millijoules, capacity as an expert count.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from codesign.mip.program import MIP
from codesign.model.placement import (
    FEASIBILITY_RTOL,
    PlacementDesign,
    PlacementProblem,
    group_patterns,
    pattern_cost,
)

TIME_UNIT_S = 1e-6
#: largest lexicographic weight used in a symmetry row (exact in double precision and CP-SAT)
LEX_WEIGHT_LIMIT = 1e7
ENERGY_UNIT_J = 1e-3


@dataclass
class PlacementMIP:
    mip: MIP
    problem: PlacementProblem
    n: dict[tuple[int, int], int]
    patterns: list[tuple[int, ...]]
    y: list[int]
    objective_unit: float
    stats: dict[str, int] = field(default_factory=dict)

    def decode(self, x: np.ndarray) -> PlacementDesign:
        pb = self.problem
        experts = [-1] * pb.experts
        for c, cl in enumerate(pb.classes):
            members = list(cl.members)
            for d in range(pb.devices):
                if (c, d) in self.n:
                    for _ in range(round(x[self.n[c, d]])):
                        experts[members.pop(0)] = d
        free = {k: pb.domain_devices(k) for k in range(len(pb.domains))}
        groups: list[tuple[int, ...]] = []
        if pb.tp == 1:
            groups = [(d,) for d in range(pb.devices)]
        else:
            for pi, yi in zip(self.patterns, self.y, strict=True):
                for _ in range(round(x[yi])):
                    g: list[int] = []
                    for k, a in enumerate(pi):
                        g += free[k][:a]
                        free[k] = free[k][a:]
                    groups.append(tuple(g))
        return PlacementDesign(tuple(experts), tuple(groups))


def build_placement(pb: PlacementProblem) -> PlacementMIP:
    mip = MIP(name=f"placement-{pb.inst.name}")
    tu = TIME_UNIT_S
    D, C = pb.devices, len(pb.classes)
    K = len(pb.domains)
    cap = pb.max_experts_per_device
    S = [pb.domains[pb.domain_of[d]] for d in range(D)]

    n: dict[tuple[int, int], int] = {}
    for c, cl in enumerate(pb.classes):
        m = len(cl.members)
        for d in range(D):
            n[c, d] = mip.add_var(f"n[{c},{d}]", 0, max(0, min(m, cap)), integer=True)
        mip.add_row(f"class[{c}]", [n[c, d] for d in range(D)], np.ones(D), lb=m, ub=m)
    for d in range(D):
        mip.add_row(f"capacity[{d}]", [n[c, d] for c in range(C)], np.ones(C), ub=float(cap))

    pc = np.array([cl.p for cl in pb.classes])
    qc = np.array([cl.q for cl in pb.classes])

    def load(devs: list[int], scale: float = 1.0) -> tuple[list[int], list[float]]:
        idx = [n[c, d] for d in devs for c in range(C)]
        val = [scale * pc[c] for d in devs for c in range(C)]
        return idx, val

    # --- bounds of the epigraph variables (valid for every design) ---
    k = float(pb.top_k)
    cmax = pb.s_per_flop * (pb.moe_fixed_flops + pb.flops_per_selection * pb.batch * k)
    mmax = pb.s_per_B * (pb.moe_fixed_bytes + pb.expert_bytes * float(pb.q.sum()) + pb.act_per_selection_B * pb.batch * k)
    x_ub = 2.0 * (cmax + mmax) / tu
    ds = pb.dispatch_B_per_selection
    bw_min = min(pb.up_Bps, pb.out_Bps) if K > 1 else pb.up_Bps
    dl_ub = 2.0 * ds * max(D, 1) * k / bw_min / tu

    # --- expert phase (P4): X >= (1-σ)(c_d + m_d) + σ·max(c_d, m_d) ---
    X = mip.add_var("X", 0.0, x_ub)
    cc = pb.s_per_flop * pb.flops_per_selection * pb.batch / tu  # µs per unit of P_d
    c0 = pb.s_per_flop * pb.moe_fixed_flops / tu
    mm = pb.s_per_B * pb.expert_bytes / tu  # µs per unit of Σ q
    ma = pb.s_per_B * pb.act_per_selection_B * pb.batch / tu  # µs of activations per unit of P_d
    m0 = pb.s_per_B * pb.moe_fixed_bytes / tu
    sig = pb.sigma
    for d in range(D):
        idx = [n[c, d] for c in range(C)]
        cval = [cc * pc[c] for c in range(C)]
        mval = [mm * qc[c] + ma * pc[c] for c in range(C)]
        if sig == 0.0:
            mip.add_row(f"expert[{d}]", [X, *idx], [1.0] + [-(a + b) for a, b in zip(cval, mval, strict=True)], lb=c0 + m0)
        else:
            U = mip.add_var(f"U[{d}]", 0.0, x_ub)
            mip.add_row(f"U-compute[{d}]", [U, *idx], [1.0] + [-a for a in cval], lb=c0)
            mip.add_row(f"U-memory[{d}]", [U, *idx], [1.0] + [-b for b in mval], lb=m0)
            mip.add_row(
                f"expert[{d}]", [X, U, *idx], [1.0, -sig] + [-(1 - sig) * (a + b) for a, b in zip(cval, mval, strict=True)], lb=(1 - sig) * (c0 + m0)
            )

    # valid lower bounds (§5, cuts): every expert sits on some device, so the device holding a
    # class-c expert costs at least one such expert; the m_c experts of class c on D devices put
    # ceil(m_c/D) of them on one device; the E experts put ceil(E/D) on one device, costing at
    # least the ceil(E/D) cheapest experts
    # (the streams add only when sig = 0; with an overlap the cuts are left out)
    lb_x = 0.0
    if sig == 0.0:
        units = [(cl, (cc + ma) * cl.p + mm * cl.q) for cl in pb.classes]  # one expert of the class
        unit_cost = sorted(u for cl, u in units for _ in cl.members)
        lb_x = c0 + m0 + sum(unit_cost[: math.ceil(pb.experts / D)])
        for cl, u in units:
            lb_x = max(lb_x, c0 + m0 + math.ceil(len(cl.members) / D) * u)
    if lb_x > 0:
        mip.add_row("cut-expert", [X], [1.0], lb=lb_x)

    # --- dispatch (P5); combine = (a_c/a_d) x dispatch ---
    Dl = mip.add_var("Delta", 0.0, dl_ub)
    up = ds / pb.up_Bps / tu if pb.up_Bps else 0.0
    out = ds / pb.out_Bps / tu
    # the device holding the hottest expert receives at least p_max from the others (cut)
    recv = min(max((D - s) * out, (s - 1) * up) for s in pb.domains)
    if recv > 0:
        mip.add_row("cut-dispatch", [Dl], [1.0], lb=recv * max(cl.p for cl in pb.classes))
    for d in range(D):
        kk = pb.domain_of[d]
        dom = pb.domain_devices(kk)
        if S[d] > 1:
            i, v = load([d], (S[d] - 1) * up)
            mip.add_row(f"recv-up[{d}]", [Dl, *i], [1.0] + [-x for x in v], lb=0.0)
            others = [e for e in dom if e != d]
            i, v = load(others, up)
            mip.add_row(f"send-up[{d}]", [Dl, *i], [1.0] + [-x for x in v], lb=0.0)
        if D - S[d] > 0:
            i, v = load([d], (D - S[d]) * out)
            mip.add_row(f"recv-out[{d}]", [Dl, *i], [1.0] + [-x for x in v], lb=0.0)
    if K > 1:
        for kk in range(K):
            i, v = load(pb.domain_devices(kk), out)  # Δ >= out·(k − P_K)
            mip.add_row(f"send-out[{kk}]", [Dl, *i], [1.0, *v], lb=out * k)

    # --- TP groups (P8) ---
    patterns = group_patterns(pb)
    y: list[int] = []
    A = None
    tp_e_idx: list[int] = []
    tp_e_val: list[float] = []
    if pb.tp > 1:
        G = pb.groups
        costs = [pattern_cost(pb, pi) for pi in patterns]
        # A: the slowest group's TP communication of one step, tp_calls all-reduce equivalents (P8a)
        A = mip.add_var("A", 0.0, pb.tp_calls * max(c[0] for c in costs) / tu)
        for j, pi in enumerate(patterns):
            ub = min([G] + [pb.domains[kk] // a for kk, a in enumerate(pi) if a > 0])
            yj = mip.add_var(f"y[{j}]", 0, ub, integer=True)
            y.append(yj)
            if ub == 0:
                continue
            u = mip.add_binary(f"u[{j}]")
            mip.add_row(f"used[{j}]", [yj, u], [1.0, -float(ub)], ub=0.0)
            if costs[j][0] > 0:
                mip.add_row(f"allreduce[{j}]", [A, u], [1.0, -pb.tp_calls * costs[j][0] / tu], lb=0.0)
            tp_e_idx.append(yj)
            tp_e_val.append(costs[j][1])
        mip.add_row("groups", y, np.ones(len(y)), lb=G, ub=G)
        for kk in range(K):
            idx = [y[j] for j, pi in enumerate(patterns) if pi[kk] > 0]
            val = [float(pi[kk]) for pi in patterns if pi[kk] > 0]
            mip.add_row(f"members[{kk}]", idx, val, lb=pb.domains[kk], ub=pb.domains[kk])

    # --- symmetry breaking (§5) ---
    # devices of one domain: count vectors in non-increasing lexicographic order (class 0 most
    # significant), one row per neighbour pair with weights W_c = Π_{c' > c} (ub_c' + 1); when
    # those weights would be too large for exact arithmetic, order by expected load instead
    ubs = [max(0, min(len(cl.members), cap)) for cl in pb.classes]
    W = [math.prod(u + 1 for u in ubs[c + 1 :]) for c in range(C)]
    lex = W[0] * (ubs[0] + 1) <= LEX_WEIGHT_LIMIT
    for kk in range(K):
        dom = pb.domain_devices(kk)
        for a, b in itertools.pairwise(dom):
            if lex:
                idx = [n[c, a] for c in range(C)] + [n[c, b] for c in range(C)]
                mip.add_row(f"sym-device[{a}]", idx, [float(x) for x in W] + [-float(x) for x in W], lb=0.0)
            else:
                ia, va = load([a])
                ib, vb = load([b], -1.0)
                mip.add_row(f"sym-device[{a}]", ia + ib, va + vb, lb=0.0)
    for kk in range(K - 1):
        nxt = next((j for j in range(kk + 1, K) if pb.domains[j] == pb.domains[kk]), None)
        if nxt is None:
            continue
        ia, va = load(pb.domain_devices(kk))
        ib, vb = load(pb.domain_devices(nxt), -1.0)
        mip.add_row(f"sym-domain[{kk}]", ia + ib, va + vb, lb=0.0)

    # --- step time (P7), µs ---
    Lm = pb.moe_layers
    ratio = pb.combine_B_per_selection / pb.dispatch_B_per_selection
    st_idx = [X, Dl]
    st_val = [float(Lm), Lm * (1.0 + ratio)]
    st_const = (pb.fixed_time_s + Lm * 2 * pb.a2a_latency_s) / tu
    if A is not None:
        st_idx.append(A)
        st_val.append(1.0)
    if pb.tpot_budget_s is not None:
        # the model accepts a step up to FEASIBILITY_RTOL above the budget; so does the MIP
        mip.add_row("tpot", st_idx, st_val, ub=pb.tpot_budget_s * (1 + FEASIBILITY_RTOL) / tu - st_const)

    if pb.objective == "tokens_per_s":
        mip.set_objective(st_idx, st_val, st_const)
        unit = tu
    else:
        # energy per token (P10), mJ
        scale = 1.0 / (pb.batch * ENERGY_UNIT_J)
        idx: list[int] = []
        val: list[float] = []
        link = pb.dispatch_B_per_selection + pb.combine_B_per_selection
        for d in range(D):
            per_p = Lm * (pb.flops_per_selection * pb.batch * pb.J_per_flop + pb.act_per_selection_B * pb.batch * pb.J_per_B_mem
                          + link * ((S[d] - 1) * pb.J_per_B_up + (D - S[d]) * pb.J_per_B_out))
            per_q = Lm * pb.expert_bytes * pb.J_per_B_mem
            for c in range(C):
                idx.append(n[c, d])
                val.append(per_p * pc[c] + per_q * qc[c])
        idx += tp_e_idx
        val += [pb.tp_calls * e for e in tp_e_val]
        static = pb.static_W * D * tu
        idx += st_idx
        val += [static * v for v in st_val]
        const = pb.fixed_energy_J + static * st_const
        mip.set_objective(idx, [v * scale for v in val], const * scale)
        unit = ENERGY_UNIT_J
    return PlacementMIP(mip, pb, n, patterns, y, unit, mip.stats())


def to_user(pb: PlacementProblem, internal: float, unit: float) -> float:
    """MIP objective -> the user's metric (step in µs -> tokens/s; energy in mJ -> J/token)."""
    if pb.objective == "tokens_per_s":
        return pb.batch / (internal * unit) if internal > 0 else math.inf
    return internal * unit
