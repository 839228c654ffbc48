"""The placement model: MoE expert placement and TP-group-to-topology placement (placement.md).

A placement instance (:mod:`codesign.kinds.placement.spec`) serves one MoE model in steady-state
decode on ``D`` identical devices grouped in scale-up *domains* (NVLink-style; the sizes may
differ, e.g. the free slots of a fragmented cluster allocation). Every device runs attention for
its share of the ``B`` sequences in a tensor-parallel *group* of ``t`` devices (``t = 1``: pure
data-parallel attention); the routed experts of every MoE layer are spread over all devices
(expert parallelism) with one all-to-all *dispatch* before and one *combine* after the experts.

A design (:class:`PlacementDesign`) gives

* ``experts``: the device of each routed expert (the same placement in every MoE layer);
* ``groups``: the devices of each TP group (``t`` each, every device in exactly one group).

Per decode step (one token for each of the B sequences; eq. numbers of placement.md):

    p_e   = probability that a token's top-k contains expert e   (Σ_e p_e = k, p_e <= 1)   (P1)
    q_e   = 1 − (1 − p_e)^B   probability that expert e is touched in a step               (P2)
    P_d   = Σ_{e on d} p_e     expected selections per token landing on device d           (P3)
    expert_d = combine_σ( s_flop·(F_fix + 2·P_exp·B·P_d),  s_byte·(W_fix + W_exp·Σ_{e on d} q_e) )
    dispatch_d = max( max(recv_up, send_up)/BW_up, max(recv_out, send_out)/BW_out )        (P5)
        recv_up = (S_K − 1)·τ·h·a·P_d      recv_out = (D − S_K)·τ·h·a·P_d
        send_up = τ·h·a·(P_K − P_d)         send_out = τ·h·a·(k − P_K)
      (τ = B/D tokens dispatched by each device, K its domain of size S_K, P_K = Σ_{d∈K} P_d;
       combine_d: the same with sends and receives swapped and the combine element size)
    step = C_fix + L_moe·(max_d expert_d + max_d dispatch_d + max_d combine_d + 2·λ_a2a)
           + N_ar·max_g allreduce(g)                                                        (P7)

combine_σ(c, m) = (1 − σ)(c + m) + σ·max(c, m) (σ = stream_overlap, as the other models);
C_fix: attention, dense-MLP and LM-head phases and per-layer overheads, equal on every device.
The layers run bulk-synchronously: every phase ends when its slowest device ends.

A TP group split over domains as parts a_1..a_m runs a hierarchical all-reduce of the group's
activations M: reduce-scatter/all-gather inside each part over scale-up, then an all-reduce of
the shards across the m parts over scale-out, bottlenecked by the smallest part (P8).

Energy per token = (compute + memory + link bytes x pJ/bit of each path on the topology graph +
static power x D x step) / B. Capacity per device: replicated/TP-sharded weights + KV cache (+
under an engine that keeps one, the decoding state of its group's sequence slots, model.md eq.
4.14b) + L_moe x (experts on d) x expert bytes <= usable memory.

This module and :mod:`codesign.model.placement_build` (the numbers of a problem, derived from an
instance under its ``system.engine``: the KV cache's precision, the decoding state) are the single
source of truth; the MIP in :mod:`codesign.kinds.placement.formulation` compiles them and every
solve is re-checked here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import networkx as nx
import numpy as np

from codesign.errors import InputError
from codesign.model import network
from codesign.model.routing import ExpertClass
from codesign.model.units import GiB

BITS_PER_BYTE = 8
FLOPS_PER_MAC = 2
#: relative tolerance of capacity and budget checks (float round-off only)
FEASIBILITY_RTOL = 1e-9


# --- problem ----------------------------------------------------------------------------------


@dataclass
class PlacementProblem:
    """Everything the model needs, in SI units, derived once from the instance."""

    inst: Any
    devices: int
    domains: list[int]  # sizes
    domain_of: np.ndarray  # (D,) domain index of each device
    experts: int
    top_k: int
    p: np.ndarray  # (E,)
    q: np.ndarray  # (E,)
    classes: list[ExpertClass]
    tp: int
    batch: int
    moe_layers: int
    # per device, one MoE layer
    s_per_flop: float
    s_per_B: float
    sigma: float
    J_per_flop: float
    J_per_B_mem: float
    static_W: float
    flops_per_selection: float  # 2·P_exp: one token through one expert
    expert_bytes: float  # one expert of one layer
    act_per_selection_B: float  # activations of one token through one routed expert (eq. P4a)
    moe_fixed_flops: float  # shared experts + router, per device per MoE layer
    moe_fixed_bytes: float
    fixed_time_s: float  # C_fix
    fixed_energy_J: float  # everything but the routed experts and the links, per step (all devices)
    # all-to-all, per MoE layer
    dispatch_B_per_selection: float  # τ·h·a_dispatch
    combine_B_per_selection: float
    up_Bps: float
    out_Bps: float
    #: a two-socket PCIe scale-up fabric (the chip's scale_up_socket_size, eq. 3.17b): a TP ring
    #: over more members of one domain than a socket holds runs at cross_socket_fraction of up_Bps
    up_socket: int | None
    cross_socket_fraction: float
    up_latency_s: float
    out_latency_s: float
    a2a_latency_s: float
    J_per_B_up: float
    J_per_B_out: float
    # TP all-reduce
    allreduce_B: float  # M: activations of one group's tokens
    allreduces: int  # per step
    # the TP communication of a step as all-reduce equivalents (eq. P8a): the logits all-gather of
    # M_lg bytes costs half an all-reduce of M_lg on every pattern, so N_ar AR(M) + AR(M_lg)/2 =
    # tp_calls x AR(tp_message_B) with tp_calls = N_ar + 1/2 and tp_message_B the weighted message
    tp_calls: float
    tp_message_B: float
    # capacity
    fixed_store_B: float
    expert_store_B: float  # one expert, all MoE layers
    capacity_B: float
    tpot_budget_s: float | None
    objective: str
    topology: nx.Graph = field(repr=False, default_factory=nx.Graph)
    notes: list[str] = field(default_factory=list)

    @property
    def groups(self) -> int:
        return self.devices // self.tp

    @property
    def tau(self) -> float:
        return self.batch / self.devices

    @property
    def max_experts_per_device(self) -> int:
        """Capacity rule as a count: the largest n with fixed + n·expert <= usable (same tolerance)."""
        room = self.capacity_B * (1 + FEASIBILITY_RTOL) - self.fixed_store_B
        if room < 0:
            return -1
        return min(self.experts, math.floor(room / self.expert_store_B))

    def domain_devices(self, k: int) -> list[int]:
        return [int(d) for d in np.flatnonzero(self.domain_of == k)]


# --- TP groups --------------------------------------------------------------------------------


def pattern_cost(pb: PlacementProblem, parts: tuple[int, ...]) -> tuple[float, float]:
    """(time s, energy J) of one all-reduce of M bytes by a TP group with ``parts[K]`` members in
    domain K (eq. P8, P10). One part: a ring on scale-up, 2(t−1)/t·M per device. m >= 2 parts:
    reduce-scatter + all-gather inside each part (2(a−1)/a·M per device, scale-up), then an
    all-reduce across the m parts of the shard M/a_i each device holds (2(m−1)/m·M/a_min per device
    on the slowest part, scale-out)."""
    M = pb.tp_message_B
    a = [x for x in parts if x > 0]
    t = sum(a)
    if t <= 1:
        return 0.0, 0.0
    m = len(a)
    amax, amin = max(a), min(a)
    # the largest part's ring crosses the sockets' link if it spans more than one socket (eq. 3.17b)
    crossing = float(network.crosses_sockets(amax, max(pb.domains), pb.up_socket))
    slow = 1.0 + crossing * (1.0 / pb.cross_socket_fraction - 1.0)
    intra = 2.0 * (amax - 1) / amax * M / pb.up_Bps * slow + 2 * (amax - 1) * pb.up_latency_s if amax > 1 else 0.0
    e = sum(2.0 * (x - 1) * M for x in a) * pb.J_per_B_up
    if m == 1:
        return intra, e
    cross = 2.0 * (m - 1) / m * M / amin / pb.out_Bps + 2 * (m - 1) * pb.out_latency_s
    e += 2.0 * (m - 1) * M * pb.J_per_B_out
    return intra + cross, e


def group_parts(pb: PlacementProblem, group: tuple[int, ...]) -> tuple[int, ...]:
    parts = [0] * len(pb.domains)
    for d in group:
        parts[pb.domain_of[d]] += 1
    return tuple(parts)


def group_patterns(pb: PlacementProblem) -> list[tuple[int, ...]]:
    """Every vector (members per domain) a TP group may have: Σ = t, entry K <= S_K."""
    out: list[tuple[int, ...]] = []
    K = len(pb.domains)

    def rec(k: int, left: int, acc: list[int]) -> None:
        if k == K:
            if left == 0:
                out.append(tuple(acc))
            return
        for x in range(min(left, pb.domains[k]), -1, -1):
            rec(k + 1, left - x, [*acc, x])

    if pb.tp > 1:
        rec(0, pb.tp, [])
    return out


def tp_costs(pb: PlacementProblem, groups) -> tuple[float, float]:
    """(slowest group's all-reduce time s, all groups' all-reduce energy J), one all-reduce."""
    if pb.tp <= 1:
        return 0.0, 0.0
    costs = [pattern_cost(pb, group_parts(pb, g)) for g in groups]
    return max(c[0] for c in costs), sum(c[1] for c in costs)


# --- designs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlacementDesign:
    experts: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...]

    def as_dict(self) -> dict[str, Any]:
        return {"experts": list(self.experts), "groups": [list(g) for g in self.groups]}


def parse_placement_design(pb: PlacementProblem, data: dict[str, Any], source: str = "design") -> PlacementDesign:
    """Check the shape of a design dict; values are audited by :func:`evaluate_placement`."""
    known = {"experts", "groups"}
    extra = sorted(set(data) - known)
    if extra:
        raise InputError("unknown keys in a placement design", file=source, key=extra[0], expected=f"only {sorted(known)}")
    if "experts" not in data:
        raise InputError("placement design is missing a key", file=source, key="experts", expected=f"a list of {pb.experts} device indices")
    ex = data["experts"]
    if not isinstance(ex, list) or len(ex) != pb.experts or not all(isinstance(x, int) and not isinstance(x, bool) for x in ex):
        raise InputError(f"expected a list of {pb.experts} device indices (one per expert)", file=source, key="experts", value=ex if not isinstance(ex, list) else f"list of {len(ex)}")
    default = [[d] for d in range(pb.devices)] if pb.tp == 1 else None
    gr = data.get("groups", default)
    if gr is None:
        raise InputError(f"placement design needs 'groups': {pb.groups} lists of {pb.tp} devices", file=source, key="groups")
    if not isinstance(gr, list) or not all(isinstance(g, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in g) for g in gr):
        raise InputError("expected a list of device-index lists", file=source, key="groups", value=gr)
    return PlacementDesign(tuple(ex), tuple(tuple(g) for g in gr))


def structural_violations(pb: PlacementProblem, design: PlacementDesign) -> list[str]:
    v: list[str] = []
    D = pb.devices
    bad = [x for x in design.experts if not 0 <= x < D]
    if bad:
        v.append(f"experts names device {bad[0]}; devices are 0..{D - 1}")
    if len(design.groups) != pb.groups or any(len(g) != pb.tp for g in design.groups):
        v.append(f"groups must be {pb.groups} lists of {pb.tp} devices")
    flat = [x for g in design.groups for x in g]
    if sorted(flat) != list(range(D)):
        v.append("every device must be in exactly one group")
    return v


@dataclass
class Assessment:
    """Metrics of N expert placements (arrays over N) under one group assignment."""

    load: np.ndarray  # (N, D) P_d
    touched: np.ndarray  # (N, D) Σ q_e
    count: np.ndarray  # (N, D) experts per device
    expert_s: np.ndarray  # (N, D) MoE phase time of each device, one layer
    dispatch_s: np.ndarray  # (N, D)
    combine_s: np.ndarray  # (N, D)
    link_energy_J: np.ndarray  # (N,) all-to-all bytes x path energy, one MoE layer
    step_s: np.ndarray
    energy_per_token_J: np.ndarray
    used_B: np.ndarray  # (N, D)
    capacity_ok: np.ndarray
    budget_ok: np.ndarray

    @property
    def feasible(self) -> np.ndarray:
        return self.capacity_ok & self.budget_ok


def assess(pb: PlacementProblem, A: np.ndarray, tp_time_s: float, tp_energy_J: float) -> Assessment:
    """The model's equations (P1-P11) for N expert placements A (N, E) of device indices."""
    A = np.asarray(A)
    N = A.shape[0]
    D = pb.devices
    onehot = A[:, :, None] == np.arange(D)[None, None, :]  # (N, E, D)
    load = np.einsum("ned,e->nd", onehot, pb.p)
    touched = np.einsum("ned,e->nd", onehot, pb.q)
    count = onehot.sum(1).astype(float)
    c = pb.s_per_flop * (pb.moe_fixed_flops + pb.flops_per_selection * pb.batch * load)
    m = pb.s_per_B * (pb.moe_fixed_bytes + pb.expert_bytes * touched + pb.act_per_selection_B * pb.batch * load)
    expert = (1 - pb.sigma) * (c + m) + pb.sigma * np.maximum(c, m)

    S = np.array(pb.domains, dtype=float)[pb.domain_of]  # (D,)
    K = len(pb.domains)
    dom_load = np.zeros((N, K))
    for kk in range(K):
        dom_load[:, kk] = load[:, pb.domain_of == kk].sum(1)
    PK = dom_load[:, pb.domain_of]  # (N, D)
    k = float(pb.top_k)

    def phase(per_sel: float, outgoing_is_expert_side: bool) -> tuple[np.ndarray, np.ndarray]:
        to_up = (S - 1) * per_sel * load  # bytes between d's experts and the rest of its domain
        to_out = (D - S) * per_sel * load
        from_up = per_sel * (PK - load)  # bytes between d's tokens and the domain's other experts
        from_out = per_sel * (k - PK)
        up = np.maximum(to_up, from_up) / pb.up_Bps if pb.up_Bps else np.zeros_like(load)
        out = np.maximum(to_out, from_out) / pb.out_Bps
        t = np.maximum(up, out)
        e = ((to_up + from_up).sum(1) * pb.J_per_B_up + (to_out + from_out).sum(1) * pb.J_per_B_out) / 2.0
        return t, e

    # each byte between two devices is counted once at the sender and once at the receiver: /2
    dispatch, e_d = phase(pb.dispatch_B_per_selection, False)
    combine, e_c = phase(pb.combine_B_per_selection, True)
    Lm = pb.moe_layers
    step = (
        pb.fixed_time_s
        + Lm * (expert.max(1) + dispatch.max(1) + combine.max(1) + 2 * pb.a2a_latency_s)
        + pb.tp_calls * tp_time_s
    )
    routed_J = ((pb.flops_per_selection * pb.batch * load.sum(1)) * pb.J_per_flop
                + (pb.expert_bytes * touched.sum(1) + pb.act_per_selection_B * pb.batch * load.sum(1)) * pb.J_per_B_mem)
    energy = pb.fixed_energy_J + Lm * (routed_J + e_d + e_c) + pb.tp_calls * tp_energy_J + pb.static_W * D * step
    used = pb.fixed_store_B + count * pb.expert_store_B
    tol = 1 + FEASIBILITY_RTOL
    cap_ok = np.all(used <= pb.capacity_B * tol, axis=1)
    budget_ok = np.ones(N, dtype=bool) if pb.tpot_budget_s is None else step <= pb.tpot_budget_s * tol
    return Assessment(load, touched, count, expert, dispatch, combine, e_d + e_c, step, energy / pb.batch, used, cap_ok, budget_ok)


@dataclass
class PlacementEvaluation:
    feasible: bool
    violations: list[str]
    step_s: float
    tokens_per_s: float
    tpot_s: float
    energy_per_token_J: float
    objective: float
    expert_phase_s: float
    dispatch_s: float
    combine_s: float
    tp_allreduce_s: float
    fixed_s: float
    load: list[float]
    experts_per_device: list[int]
    expert_s: list[float]
    used_B: list[float]
    group_parts: list[list[int]]
    cross_domain_groups: int
    bottleneck_device: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def evaluate_placement(pb: PlacementProblem, design: PlacementDesign) -> PlacementEvaluation:
    """Metrics and constraint audit of one placement design."""
    v = structural_violations(pb, design)
    if v:
        raise InputError("; ".join(v), key="design")
    tp_t, tp_e = tp_costs(pb, design.groups)
    a = assess(pb, np.array([design.experts]), tp_t, tp_e)
    for d in range(pb.devices):
        if a.used_B[0, d] > pb.capacity_B * (1 + FEASIBILITY_RTOL):
            v.append(f"device {d}: {a.used_B[0, d] / GiB:.3f} GiB > usable {pb.capacity_B / GiB:.3f} GiB ({int(a.count[0, d])} experts)")
    step = float(a.step_s[0])
    if not a.budget_ok[0]:
        v.append(f"tpot {step:.6g} s > budget {pb.tpot_budget_s:.6g} s")
    energy = float(a.energy_per_token_J[0])
    tps = pb.batch / step
    parts = [list(group_parts(pb, g)) for g in design.groups] if pb.tp > 1 else []
    return PlacementEvaluation(
        feasible=not v,
        violations=v,
        step_s=step,
        tokens_per_s=tps,
        tpot_s=step,
        energy_per_token_J=energy,
        objective=tps if pb.objective == "tokens_per_s" else energy,
        expert_phase_s=float(a.expert_s[0].max()),
        dispatch_s=float(a.dispatch_s[0].max()),
        combine_s=float(a.combine_s[0].max()),
        tp_allreduce_s=tp_t,
        fixed_s=pb.fixed_time_s,
        load=a.load[0].tolist(),
        experts_per_device=[int(x) for x in a.count[0]],
        expert_s=a.expert_s[0].tolist(),
        used_B=a.used_B[0].tolist(),
        group_parts=parts,
        cross_domain_groups=sum(1 for x in parts if sum(1 for y in x if y) > 1),
        bottleneck_device=int(a.expert_s[0].argmax()),
    )


def objective_sense(pb: PlacementProblem) -> str:
    return "max" if pb.objective == "tokens_per_s" else "min"


def space_size(pb: PlacementProblem) -> int:
    """Points of the decision space before any constraint: a device for every expert (D^E) x the
    assignments of the D devices to the D/t labelled TP groups of t (D! / (t!)^(D/t); 1 for t = 1)."""
    groups = 1
    if pb.tp > 1:
        groups = math.factorial(pb.devices) // math.factorial(pb.tp) ** pb.groups
    return pb.devices**pb.experts * groups


def set_partitions(items: list[int], size: int):
    """Every partition of ``items`` into unlabelled blocks of ``size`` (for brute force)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for others in combinations(rest, size - 1):
        left = [x for x in rest if x not in others]
        for tail in set_partitions(left, size):
            yield [(first, *others), *tail]
