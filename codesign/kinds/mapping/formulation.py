"""The mapping MIP: an exact compilation of :mod:`codesign.model.mapping` (formulations/mapping.md §2).

Aggregation (exact because every decoder layer is alike): a design is described by integer
counts per device — ``n[d]`` layers, ``cw[d,t]`` of them with weights in tier ``t``, ``ck[d,t]``
with KV cache in tier ``t`` — and attachment binaries ``a[d,j]``. Every metric of the model is a
sum over layers of a per-layer value that depends only on (device, tier), so it is linear in the
counts; every count vector with Σ_t cw[d,t] = Σ_t ck[d,t] = n[d] is the image of at least one
per-layer design (place the device's block of layers in any order), and the model's metrics of
all of its pre-images are equal. The maxima (memory streams, stage time, period) enter as
epigraphs: the objective (period, or energy with a positive static-power term) and the tpot
budget both only need an upper bound on them, so the epigraph is exact at every optimum.

Symmetry breaking (both valid for the instance's symmetries and compatible with each other):
identical modules are numbered by the first device attached to them
(``a[d,j] <= Σ_{d'<=d} a[d',j-1]``); identical devices in the middle of the pipeline (same group,
neither first nor last) hold non-increasing layer counts.

Units inside the MIP: time in microseconds, bytes in GB (capacity rows), energy in mJ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from codesign.kinds.mapping import envelope
from codesign.kinds.mapping.chips import Affine, ChipOptions, DeviceTerms
from codesign.mip.program import MIP
from codesign.model.mapping import (
    FEASIBILITY_RTOL,
    Device,
    MappingDesign,
    MappingProblem,
    evaluate_mapping,
)
from codesign.model.mapping_budgets import BUDGET_RTOL, MappingBudget

TIME_UNIT_S = 1e-6
#: the model's feasibility rule: a value up to RELAX x its limit holds (float round-off only)
RELAX = 1 + FEASIBILITY_RTOL
#: a feasible design's period (tokens/s objective) caps the time variables with this margin
CUTOFF_MARGIN = 1e-6
BYTE_UNIT = 1e9
ENERGY_UNIT_J = 1e-3
#: ``extend(mip, a, T, t_ub, port_load)`` of :func:`build_mapping` -> (variables, coefficients) of energy
#: per token; ``port_load[j]`` is module j's port load (9.7) in µs as (variables, coefficients)
Extension = Callable[[MIP, dict[tuple[int, int], int], int, float, dict[int, tuple[list[int], list[float]]]],
                     tuple[list[int], list[float]]]


@dataclass
class MappingMIP:
    mip: MIP
    problem: MappingProblem
    n: list[int]
    cw: dict[tuple[int, int], int]
    ck: dict[tuple[int, int], int]
    a: dict[tuple[int, int], int]
    T: int
    objective_unit: float  # objective in SI = (MIP objective) x unit
    stats: dict[str, int] = field(default_factory=dict)

    def decode(self, x: np.ndarray) -> MappingDesign:
        p = self.problem
        D = p.stages
        n = [round(x[self.n[d]]) for d in range(D)]
        weights: list[str] = []
        kv: list[str] = []
        for d in range(D):
            for src, out in ((self.cw, weights), (self.ck, kv)):
                block: list[str] = []
                for (dd, t), i in sorted(src.items()):
                    if dd == d:
                        block += [p.tiers[t].label] * round(x[i])
                out += block
        attach = tuple(
            tuple(j for j in range(p.modules) if (d, j) in self.a and x[self.a[d, j]] > 0.5) for d in range(D)
        )
        return MappingDesign(tuple(n), tuple(weights), tuple(kv), attach)


def time_ub_s(p: MappingProblem) -> float:
    """A valid upper bound on any stage time or shared-resource load of a design, in seconds."""
    lay = p.layer
    nmax = p.layers - p.stages + 1
    per_layer = lay.w_read_B + lay.kv_read_B
    slowest_B = max(
        max(x.s_per_B_local for x in p.devices),
        max(x.s_per_B_host for x in p.devices),
        (1.0 / p.port_Bps) if p.port_Bps else 0.0,
        (1.0 / p.assumed_device_Bps) if p.assumed_device_Bps else 0.0,
    )
    extra_B = p.first_read_B + p.last_read_B
    worst_local = max(x.s_per_B_local for x in p.devices) * extra_B
    compute = max(x.s_per_flop * (nmax * lay.flops + p.last_flops) + nmax * x.s_per_layer for x in p.devices)
    exposed = max(nmax * x.s_per_layer_comm + x.s_last_comm + x.s_host for x in p.devices)
    memory = nmax * (per_layer + max(x.act_B for x in p.devices)) * slowest_B + worst_local
    shared = 0.0
    if p.port_Bps:
        shared = p.layers * per_layer * max(1.0 / p.port_Bps, 1.0 / p.switch_Bps)
    return 2.0 * max(compute + memory + exposed, shared)


def greedy_design(p: MappingProblem) -> MappingDesign:
    """A simple design: balanced stages; each device attaches to consecutive modules; every layer's
    weights, then KV cache, go to the first allowed tier with room (local, host, attached pool)."""
    D, L = p.stages, p.layers
    parts = [L // D + (1 if d < L % D else 0) for d in range(D)]
    attach = []
    for d in range(D):
        k = 0 if p.paper_mode or not p.modules else min(p.devices[d].ports, p.modules)
        attach.append(tuple(sorted({(d * k + i) % p.modules for i in range(k)})))
    local_left = [x.local_capacity_B for x in p.devices]
    local_left[0] -= p.first_store_B
    local_left[-1] -= p.last_store_B
    host_left = [x.host_capacity_B for x in p.devices]
    pool_left = {t.label: t.capacity_B for t in p.tiers if t.kind == "pool"}
    weights: list[str] = []
    kv: list[str] = []
    for d, nd in enumerate(parts):
        for _ in range(nd):
            for size, allowed, out in ((p.layer.w_store_B, p.weight_tiers, weights), (p.layer.kv_store_B, p.kv_tiers, kv)):
                choice = None
                for t in allowed:
                    tier = p.tiers[t]
                    if tier.kind == "local" and local_left[d] >= size:
                        local_left[d] -= size
                        choice = tier.label
                    elif tier.kind == "host" and host_left[d] >= size:
                        host_left[d] -= size
                        choice = tier.label
                    elif tier.kind == "pool" and (p.paper_mode or tier.module in attach[d]) and pool_left[tier.label] >= size:
                        pool_left[tier.label] -= size
                        choice = tier.label
                    if choice:
                        break
                out.append(choice or p.tiers[allowed[0]].label)
    return MappingDesign(tuple(parts), tuple(weights), tuple(kv), tuple(attach))


def time_cap_s(p: MappingProblem) -> float:
    """An upper bound on the period of every design at least as good as a known feasible one
    (the greedy design), else the generic bound :func:`time_ub_s`. Exact for optimisation: the
    optimum is never worse than a feasible design. Tokens/s: T <= T_greedy. Energy: the static
    part alone gives E >= P_static·T/m, so E <= E_greedy implies T <= E_greedy·m/P_static."""
    generic = time_ub_s(p)
    ev = evaluate_mapping(p, greedy_design(p))
    if not ev.feasible:
        return generic
    if p.objective == "tokens_per_s":
        cap = ev.period_s
    else:
        static = sum(x.static_W for x in p.devices) + p.hardware_static_W
        cap = ev.energy_per_token_J * p.micro_batch / static if static > 0 else generic
    return min(generic, cap * (1 + CUTOFF_MARGIN))


def budget_time_cap_s(p: MappingProblem) -> float:
    """The period every feasible design meets by its budgets (inf: none bounds it): the tpot budget,
    ``D·T <= budget``, and each metric budget with a time metric, ``Σ c·metric <= rhs`` with every
    coefficient and metric positive, so its time terms alone are at most the limit. Each carries
    the model's tolerance, as its row does. Valid for every feasible design (not just an optimum)."""
    cap = math.inf
    if p.tpot_budget_s is not None:
        cap = p.tpot_budget_s * RELAX / p.stages
    for b in p.budgets:
        per_T = sum(c * (1.0 / p.micro_batch if metric == "time_per_token_s" else float(p.stages))
                    for metric, c in b.coefs if metric != "energy_per_token_J")
        if per_T > 0:
            cap = min(cap, max(b.rhs + BUDGET_RTOL * abs(b.rhs), 0.0) / per_T)
    return cap


def build_mapping(p: MappingProblem, *, extend: Extension | None = None, t_cap_s: float | None = None,
                  chips: ChipOptions | None = None, envelopes: bool = True) -> MappingMIP:
    """The MIP of ``p``; ``extend`` adds rows over the attachment and the period and returns terms of
    the energy per token (joint hardware: :mod:`codesign.kinds.mapping.joint`); ``t_cap_s`` replaces
    :func:`time_cap_s` as the bound on the period; ``chips`` makes each device's chip a decision
    (:mod:`codesign.kinds.mapping.chips`; its devices' static power is then ``extend``'s);
    ``envelopes`` adds the stage envelopes (valid cuts, :func:`_add_envelopes`; they speed HiGHS and
    slow CP-SAT on pf-llama405b-joint, formulations/mapping.md §4)."""
    mip = MIP(name=f"mapping-{p.inst.name}")
    D, L, lay = p.stages, p.layers, p.layer
    nmax = L - D + 1
    tau = TIME_UNIT_S
    t_ub = min(time_cap_s(p) if t_cap_s is None else t_cap_s, budget_time_cap_s(p)) / tau

    n = [mip.add_var(f"n[{d}]", 1, nmax, integer=True) for d in range(D)]
    mip.add_row("layers", n, np.ones(D), lb=L, ub=L)

    pooled = [i for i, t in enumerate(p.tiers) if t.kind == "pool"]
    cw: dict[tuple[int, int], int] = {}
    ck: dict[tuple[int, int], int] = {}
    for d in range(D):
        dev = p.devices[d]
        for src, allowed, tag in ((cw, p.weight_tiers, "w"), (ck, p.kv_tiers, "k")):
            for t in allowed:
                tier = p.tiers[t]
                ub = nmax
                if tier.kind == "pool" and not p.paper_mode and dev.ports == 0:
                    continue
                if tier.kind == "host" and dev.host_capacity_B <= 0:
                    continue
                src[d, t] = mip.add_var(f"c{tag}[{d},{tier.label}]", 0, ub, integer=True)
            idx = [n[d]] + [i for (dd, _), i in src.items() if dd == d]
            mip.add_row(f"tiers-{tag}[{d}]", idx, [-1.0] + [1.0] * (len(idx) - 1), lb=0, ub=0)

    a: dict[tuple[int, int], int] = {}
    if p.modules and not p.paper_mode:
        for d in range(D):
            if p.devices[d].ports == 0:
                continue
            for j in range(p.modules):
                a[d, j] = mip.add_binary(f"a[{d},{j}]")
            mip.add_row(f"ports[{d}]", [a[d, j] for j in range(p.modules)], np.ones(p.modules), ub=p.devices[d].ports)
            for src, tag in ((cw, "w"), (ck, "k")):
                for j in range(p.modules):
                    idx = [i for (dd, t), i in src.items() if dd == d and p.tiers[t].module == j]
                    if idx:
                        mip.add_row(f"attached-{tag}[{d},{j}]", [*idx, a[d, j]], [1.0] * len(idx) + [-float(nmax)], ub=0)
        if p.max_devices_per_module is not None:
            for j in range(p.modules):
                idx = [a[d, j] for d in range(D) if (d, j) in a]
                if idx:
                    mip.add_row(f"sharers[{j}]", idx, [float(p.devices[d].tp) for d in range(D) if (d, j) in a],
                                ub=p.max_devices_per_module)
        # symmetry: modules numbered by their first attached device
        for j in range(1, p.modules):
            for d in range(D):
                if (d, j) not in a:
                    continue
                prev = [a[e, j - 1] for e in range(d + 1) if (e, j - 1) in a]
                mip.add_row(f"sym-module[{d},{j}]", [a[d, j], *prev], [1.0] + [-1.0] * len(prev), ub=0)
    # symmetry: identical middle devices are sorted descending by (layers, layers with local
    # weights, layers with local KV), i.e. by the key K²·n + K·cw_local + ck_local, K = nmax + 1
    li = p.tier_index["local"]
    K = float(nmax + 1)
    for d in range(1, D - 2):
        if p.devices[d].group == p.devices[d + 1].group:
            idx, val = [n[d], n[d + 1]], [K * K, -K * K]
            for dd, sign in ((d, 1.0), (d + 1, -1.0)):
                if (dd, li) in cw:
                    idx.append(cw[dd, li])
                    val.append(sign * K)
                if (dd, li) in ck:
                    idx.append(ck[dd, li])
                    val.append(sign)
            mip.add_row(f"sym-device[{d}]", idx, val, lb=0)

    T = mip.add_var("T", 0.0, t_ub)
    hi = p.tier_index["host"]

    def read_terms(d: int, tiers: list[int]) -> tuple[list[int], list[float]]:
        idx: list[int] = []
        val: list[float] = []
        for t in tiers:
            if (d, t) in cw:
                idx.append(cw[d, t])
                val.append(lay.w_read_B)
            if (d, t) in ck:
                idx.append(ck[d, t])
                val.append(lay.kv_read_B)
        return idx, val

    pool_by_module = {j: [t for t in pooled if p.tiers[t].module == j] for j in range(p.modules)}
    terms = DeviceTerms(mip, p, chips)
    for d in range(D):
        dev = p.devices[d]  # its chip-independent figures (ports, host capacity)
        first, last = d == 0, d == D - 1
        M = mip.add_var(f"M[{d}]", 0.0, t_ub)
        # local stream
        idx, val = read_terms(d, [li])
        if dev.act_B:  # activations of every layer on the device, whatever tier holds it
            idx, val = [n[d], *idx], [dev.act_B, *val]
        const = (p.first_read_B if first else 0.0) + (p.last_read_B if last else 0.0)

        def scaled(per_B: str, idx=idx, val=val, const=const) -> Callable[[Device], Affine]:
            return lambda dv: (idx, [getattr(dv, per_B) / tau * v for v in val], getattr(dv, per_B) * const / tau)
        e_idx, e_val, e_c = terms.expr(d, scaled("s_per_B_local"))
        mip.add_row(f"local[{d}]", [M, *e_idx], [1.0] + [-v for v in e_val], lb=e_c)
        idx, val = read_terms(d, [hi])
        if idx:
            e_idx, e_val, _ = terms.expr(d, scaled("s_per_B_host", idx, val, 0.0))
            mip.add_row(f"host[{d}]", [M, *e_idx], [1.0] + [-v for v in e_val], lb=0)
        if p.paper_mode:
            idx, val = read_terms(d, pooled)
            if idx:
                mip.add_row(f"pool-link[{d}]", [M, *idx], [1.0] + [-v / (p.assumed_device_Bps * dev.tp) / tau for v in val], lb=0)
        else:
            every_idx: list[int] = []
            every_val: list[float] = []
            link_Bps = p.port_Bps * dev.tp  # the stage's tp devices each read 1/tp over their own port
            for j in range(p.modules):
                idx, val = read_terms(d, pool_by_module[j])
                if idx:
                    mip.add_row(f"link[{d},{j}]", [M, *idx], [1.0] + [-v / link_Bps / tau for v in val], lb=0)
                    if (d, j) in a:  # valid cut: a link's time is at most M <= stage <= T <= t_ub, 0 unattached
                        mip.add_row(f"link-attached[{d},{j}]", [*idx, a[d, j]],
                                    [v / link_Bps / tau for v in val] + [-t_ub], ub=0)
                    every_idx += idx
                    every_val += val
            if every_idx:
                # valid cut: data sits on at most `ports` attached modules, each link <= M
                mip.add_row(f"links[{d}]", [M, *every_idx], [float(dev.ports)] + [-v / link_Bps / tau for v in every_val], lb=0)

        # compute (µs) = c1·n + c0
        def compute(x: Device, d=d, last=last) -> Affine:
            return [n[d]], [(lay.flops * x.s_per_flop + x.s_per_layer) / tau], (p.last_flops * x.s_per_flop / tau) if last else 0.0

        # exposed (µs): the TP collectives per layer, the logits gather on the last stage, the host
        def exposed(x: Device, d=d, last=last) -> Affine:
            return [n[d]], [x.s_per_layer_comm / tau], (x.s_host + (x.s_last_comm if last else 0.0)) / tau

        def compute_exposed(x: Device, d=d) -> Affine:
            (i1, v1, c1), (_, v2, c2) = compute(x), exposed(x)
            return i1, [v1[0] + v2[0]], c1 + c2
        opts = terms.options(d)
        if not any(x.stream_overlap for x in opts):
            e_idx, e_val, e_c = terms.expr(d, compute_exposed)
            mip.add_row(f"stage[{d}]", [T, *e_idx, M], [1.0, *(-v for v in e_val), -1.0], lb=e_c)
        else:  # per chip k: (1 − σ_k)(compute_k + M_k) + σ_k·U_k, U_k >= compute_k, M_k
            Ms = [M] if len(opts) == 1 else terms.split(d, M)
            s_idx, s_val, s_lb = [T], [1.0], 0.0
            for k, x in enumerate(opts):
                c_idx, c_val, c0 = terms.part(d, k, compute)
                sigma = x.stream_overlap
                tag = "" if len(opts) == 1 else f"@{k}"
                x_idx, x_val, x0 = terms.part(d, k, exposed)
                s_idx += x_idx
                s_val += [-v for v in x_val]
                s_lb += x0
                if sigma == 0.0:
                    s_idx += [*c_idx, Ms[k]]
                    s_val += [*(-v for v in c_val), -1.0]
                    s_lb += c0
                    continue
                U = mip.add_var(f"U[{d}]{tag}", 0.0, t_ub)
                mip.add_row(f"U-compute[{d}]{tag}", [U, *c_idx], [1.0, *(-v for v in c_val)], lb=c0)
                mip.add_row(f"U-memory[{d}]{tag}", [U, Ms[k]], [1.0, -1.0], lb=0)
                s_idx += [*c_idx, Ms[k], U]
                s_val += [*(-(1 - sigma) * v for v in c_val), -(1 - sigma), -sigma]
                s_lb += (1 - sigma) * c0
            mip.add_row(f"stage[{d}]", s_idx, s_val, lb=s_lb)
        # capacity (GB)
        idx, val = [], []
        if (d, li) in cw:
            idx.append(cw[d, li])
            val.append(lay.w_store_B / BYTE_UNIT)
        if (d, li) in ck:
            idx.append(ck[d, li])
            val.append(lay.kv_store_B / BYTE_UNIT)
        fixed = ((p.first_store_B if first else 0.0) + (p.last_store_B if last else 0.0)) / BYTE_UNIT
        # Σ stored − (room − fixed) <= 0; the room carries the model's feasibility tolerance
        # (it accepts up to RELAX x the limit)
        e_idx, e_val, e_c = terms.expr(d, lambda x, idx=idx, val=val, fixed=fixed: (
            idx, val, fixed - x.local_capacity_B * RELAX / BYTE_UNIT))
        if e_idx:
            mip.add_row(f"capacity-local[{d}]", e_idx, e_val, ub=-e_c)
        elif e_c > 0:
            mip.add_row(f"capacity-local[{d}]", [n[d]], [1.0], ub=0.0)  # infeasible (n >= 1): embedding/head alone do not fit
        idx, val = [], []
        if (d, hi) in cw:
            idx.append(cw[d, hi])
            val.append(lay.w_store_B / BYTE_UNIT)
        if (d, hi) in ck:
            idx.append(ck[d, hi])
            val.append(lay.kv_store_B / BYTE_UNIT)
        if idx:
            mip.add_row(f"capacity-host[{d}]", idx, val, ub=dev.host_capacity_B * RELAX / BYTE_UNIT)
    for t in pooled:
        idx, val = [], []
        for src, per in ((cw, lay.w_store_B), (ck, lay.kv_store_B)):
            for (_, tt), i in src.items():
                if tt == t:
                    idx.append(i)
                    val.append(per / BYTE_UNIT)
        if idx:
            mip.add_row(f"capacity-{p.tiers[t].label}", idx, val, ub=p.tiers[t].capacity_B * RELAX / BYTE_UNIT)
    port_load: dict[int, tuple[list[int], list[float]]] = {}
    if p.modules and not p.paper_mode:
        all_idx: list[int] = []
        all_val: list[float] = []
        for j in range(p.modules):
            idx: list[int] = []
            val: list[float] = []
            for d in range(D):
                i2, v2 = read_terms(d, pool_by_module[j])
                idx += i2
                val += v2
            if idx:
                port_load[j] = (idx, [v / p.port_Bps / tau for v in val])
                mip.add_row(f"port[{j}]", [T, *idx], [1.0] + [-v for v in port_load[j][1]], lb=0)
                all_idx += idx
                all_val += val
        if all_idx:
            mip.add_row("switch", [T, *all_idx], [1.0] + [-v / p.switch_Bps / tau for v in all_val], lb=0)
    if p.tpot_budget_s is not None:
        mip.add_row("tpot", [T], [float(D)], ub=p.tpot_budget_s * RELAX / tau)
    if p.power_budget_W is not None and p.devices_tdp_W + p.hardware_static_W > p.power_budget_W * RELAX:
        mip.add_row("power", [n[0]], [1.0], ub=0.0)  # infeasible (n >= 1): the hardware is over its power budget

    per_device: list[Affine] = []
    energy = _energy_per_token(p, terms, n, cw, ck, T, per_device)
    if envelopes and p.objective == "energy_per_token_J" and all(len(terms.options(d)) == 1 for d in range(D)):
        _add_envelopes(mip, p, n, per_device, t_ub * tau)
    if extend is not None:
        e_idx, e_val = extend(mip, a, T, t_ub, port_load)
        energy = (energy[0] + e_idx, energy[1] + e_val, energy[2])
    for b in p.budgets:
        add_budget(mip, p, b, energy, T)
    if p.objective == "tokens_per_s":
        mip.set_objective([T], [1.0])
        unit = tau  # objective = period in µs; tokens/s = m / period
    else:
        idx, val, const = energy
        scale = 1.0 / ENERGY_UNIT_J
        mip.set_objective(idx, [v * scale for v in val], const * scale)
        unit = ENERGY_UNIT_J
    return MappingMIP(mip, p, n, cw, ck, a, T, unit, mip.stats())


def _add_envelopes(mip: MIP, p: MappingProblem, n: list[int], per_device: list[Affine], t_ub_s: float) -> None:
    """Stage envelopes (:mod:`codesign.kinds.mapping.envelope`): each device's dynamic energy is at
    least each line of the lower hull of its least energies per layer count, and its layer count at
    most the largest that fits the period's cap (valid cuts: every design with T <= t_ub meets them)."""
    D = p.stages
    cache: dict[tuple, list[float] | None] = {}
    for d in range(D):
        key = envelope.device_key(p.devices[d], d == 0, d == D - 1)
        if key not in cache:
            cache[key] = envelope.floor_energies(p, p.devices[d], d == 0, d == D - 1, t_ub_s)
        g = cache[key]
        if g is None:
            continue
        mip.vars[n[d]].ub = min(mip.vars[n[d]].ub, float(len(g)))
        idx, val, _ = per_device[d]  # the counts part; its constant is not in g
        for i, (icpt, slope) in enumerate(envelope.hull(g)):
            mip.add_row(f"envelope[{d},{i}]", [*idx, n[d]], [*val, -slope], lb=icpt)


def _energy_per_token(p: MappingProblem, terms: DeviceTerms, n: list[int], cw: dict, ck: dict, T: int,
                      per_device: list[Affine] | None = None) -> Affine:
    """Energy per token in J as (variables, coefficients, constant): the model's dynamic energy of
    a period (linear in the counts) plus the static power of every device x T, over m; each device's
    dynamic energy of a period is appended to ``per_device``."""
    lay, D = p.layer, p.stages
    li, hi = p.tier_index["local"], p.tier_index["host"]
    pooled = [i for i, t in enumerate(p.tiers) if t.kind == "pool"]
    idx: list[int] = []
    val: list[float] = []
    const = 0.0
    for d in range(D):
        def dynamic(dev: Device, d: int = d) -> Affine:
            i_: list[int] = [n[d]]
            v_: list[float] = [lay.flops * dev.J_per_flop + dev.act_B * dev.J_per_B_local + dev.J_per_layer_comm]
            c = 0.0
            if d == D - 1:
                c += p.last_flops * dev.J_per_flop + p.last_read_B * dev.J_per_B_local + dev.J_last_comm
            if d == 0:
                c += p.first_read_B * dev.J_per_B_local
            for t in [li, hi, *pooled]:
                e = dev.J_per_B_local if t == li else dev.J_per_B_host if t == hi else p.tiers[t].J_per_B
                if (d, t) in cw:
                    i_.append(cw[d, t])
                    v_.append(lay.w_read_B * e)
                if (d, t) in ck:
                    i_.append(ck[d, t])
                    v_.append(lay.kv_read_B * e)
            return i_, v_, c
        e_idx, e_val, e_c = terms.expr(d, dynamic)
        if per_device is not None:
            per_device.append((e_idx, e_val, e_c))
        idx += e_idx
        val += e_val
        const += e_c
    idx.append(T)
    val.append((sum(x.static_W for x in p.devices) + p.hardware_static_W) * TIME_UNIT_S)
    m = p.micro_batch
    return idx, [v / m for v in val], const / m


def add_budget(mip: MIP, p: MappingProblem, b: MappingBudget, energy: tuple[list[int], list[float], float], T: int) -> None:
    """Σ coef·metric <= rhs as one row (``budget[<name>]``), in units of |rhs| (coefficients near 1):
    time per token = T·τ/m, tpot = D·T·τ, energy per token = the objective's expression. The limit
    carries the model's tolerance (it accepts up to rhs + BUDGET_RTOL·|rhs|). Exact with the period's
    epigraph T because every coefficient is positive (:mod:`codesign.model.mapping_budgets`)."""
    scale = abs(b.rhs) if b.rhs else 1.0
    coef: dict[int, float] = {}
    const = 0.0
    for metric, c in b.coefs:
        if metric == "energy_per_token_J":
            idx, val, k = energy
            for i, v in zip(idx, val, strict=True):
                coef[i] = coef.get(i, 0.0) + c * v
            const += c * k
        else:
            per_T = TIME_UNIT_S / p.micro_batch if metric == "time_per_token_s" else p.stages * TIME_UNIT_S
            coef[T] = coef.get(T, 0.0) + c * per_T
    ub = (b.rhs + BUDGET_RTOL * abs(b.rhs) - const) / scale
    mip.add_row(f"budget[{b.name}]", list(coef), [v / scale for v in coef.values()], ub=ub)
