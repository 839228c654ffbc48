"""The mapping model: pipeline stages, tier placement and appliance attachment (formulations/mapping.md §1).

A mapping instance (:mod:`codesign.kinds.mapping.spec`) serves one model in steady-state pipelined
decode: the ``D`` devices are the pipeline stages in the listed order, the ``B`` sequences form
``D`` micro-batches of ``m = B/D``, and in every *period* each stage runs one micro-batch through
its layers. One period yields ``m`` tokens, so tokens/s = m / T and the time per output token of
one sequence is D·T (eq. 9.1).

A design (:class:`MappingDesign`) gives

* ``layers_per_stage``: contiguous blocks of decoder layers, ``n_d >= 1``, Σ n_d = L;
* ``weights`` / ``kv``: per layer, the tier holding its weights / its KV cache: ``local`` (the
  device's own memory), ``host`` (its host memory over the host link) or ``pool:<j>:<tier>`` (tier
  ``<tier>`` of appliance module ``j``);
* ``attach``: per device, the modules its optical ports attach to (one port per module).

Per device and period (all sums over the device's layers, per-layer costs from
:func:`codesign.model.step.step_costs` for one micro-batch, eq. 9.2-9.6):

    compute_d = flops_d / (F_d·η_c) + n_d·t_layer                       (+ LM head on the last)
    local_d   = bytes read from local memory (incl. every layer's activations) / (BW_d·η_m)
    host_d    = bytes read from host memory / BW_host,d
    link_dj   = bytes read from module j / BW_port          (one device port per attached module)
    M_d       = max(local_d, host_d, max_j link_dj)          memory streams run side by side
    stage_d   = (1 − σ_d)·(compute_d + M_d) + σ_d·max(compute_d, M_d)   (σ = stream_overlap)
                + n_d·c_d + [last]·c_last + m·t_host                     (exposed, eq. 9.6')

where a "device" is a pipeline stage of ``tp`` devices (tensor parallelism inside a stage, eq.
9.2a: its figures are the device's with rates x tp, capacities and static power x tp, see
:mod:`codesign.model.mapping_build`), ``c_d`` its two all-reduces per layer, ``c_last`` the last
stage's logits all-gather and ``t_host`` the engine's host time per sequence of a step (eq. 9.2b).

and the period is the slowest of the stages and of the shared appliance resources:

    T = max( max_d stage_d,  max_j Σ_d bytes(d, j) / BW_port,  Σ_{d,j} bytes(d, j) / BW_switch ).

Under the paper's assumption (``assumed_device_bandwidth_GBps``) a device's pooled bytes stream at
that bandwidth whatever its ports, and module-port and switch limits are not applied.

Capacity: each tier holds the stored bytes placed in it (weights of a layer, the KV cache of all B
sequences for a layer); the first stage also holds the embedding table, the last the LM head
(and, under an engine that keeps one, the decoding state of the B sequence slots: eq. 4.14b of
model.md), both in local memory. Energy per token = (dynamic energy of a period + static power of all devices
and of the appliance's lit optical ports (``port_static_power_W``, default 0) x T) / m, with
per-byte energies of each path (local DRAM; PCIe + DDR5 for host; adapter + switch + adapter +
module memory for the pool).

This module and :mod:`codesign.model.mapping_build` (the numbers of a problem, derived from an
instance under its ``system.engine``: the KV cache's precision, the decoding state) are the single
source of truth for mapping designs; the MIP in :mod:`codesign.kinds.mapping.formulation` compiles
them and every solve is re-checked here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from itertools import combinations
from typing import Any

import numpy as np

from codesign.errors import InputError, did_you_mean
from codesign.model.mapping_budgets import MappingBudget
from codesign.model.tiers import Tier
from codesign.model.units import GiB

#: relative tolerance of capacity and budget checks (float round-off only)
FEASIBILITY_RTOL = 1e-9


@dataclass(frozen=True)
class Device:
    name: str
    group: str
    chip: str
    ports: int
    s_per_flop: float
    s_per_layer: float
    s_per_B_local: float
    s_per_B_host: float
    local_capacity_B: float
    host_capacity_B: float
    J_per_flop: float
    J_per_B_local: float
    J_per_B_host: float
    static_W: float
    stream_overlap: float
    #: devices of the stage (tensor parallelism inside it); every figure above is the stage's: time
    #: per FLOP and per byte 1/tp of a device's, capacities and static power tp x (eq. 9.2a)
    tp: int = 1
    #: activations one layer moves through the stage's devices' memories, all tp of them, B (eq. 9.2a)
    act_B: float = 0.0
    #: exposed time per layer of the stage's TP collectives (two all-reduces), s; their energy, J
    s_per_layer_comm: float = 0.0
    J_per_layer_comm: float = 0.0
    #: exposed time and energy of the logits all-gather, charged on the last stage only
    s_last_comm: float = 0.0
    J_last_comm: float = 0.0
    #: exposed host time per period: the micro-batch's m sequences x the engine's host time per
    #: sequence of a step (eq. 9.2b; model.md eq. 5.3's m·t_host), s
    s_host: float = 0.0


@dataclass(frozen=True)
class LayerCosts:
    """One decoder layer, one micro-batch, one period."""

    flops: float
    w_read_B: float
    w_store_B: float
    kv_read_B: float  # reads of the micro-batch's cached context + writes of its new token
    kv_store_B: float  # KV cache of all B sequences
    act_B: float = 0.0  # activations between kernels, always in the stage device's own memory


@dataclass
class MappingProblem:
    """Everything the model needs, in SI units, derived once from the instance."""

    inst: Any
    layers: int
    micro_batch: int
    layer: LayerCosts
    first_store_B: float
    first_read_B: float
    last_store_B: float
    last_read_B: float
    last_flops: float
    devices: list[Device]
    tiers: list[Tier]
    weight_tiers: list[int]  # indices into tiers allowed for weights
    kv_tiers: list[int]
    modules: int
    port_Bps: float
    switch_Bps: float
    pool_J_per_B_path: float
    assumed_device_Bps: float | None
    max_devices_per_module: int | None
    tpot_budget_s: float | None
    objective: str
    module_tiers: list[str] = field(default_factory=list)
    #: metric budgets (``[[budgets.custom]]``, ``--budget``; :mod:`codesign.model.mapping_budgets`)
    budgets: tuple[MappingBudget, ...] = ()
    #: static power of the appliance's lit optical ports (devices' and modules'), W
    hardware_static_W: float = 0.0
    #: the devices' TDP (provisioned power), W, and its budget (``budgets.power_W``; None: none)
    devices_tdp_W: float = 0.0
    power_budget_W: float | None = None

    @property
    def stages(self) -> int:
        return len(self.devices)

    @property
    def paper_mode(self) -> bool:
        return self.assumed_device_Bps is not None

    @cached_property
    def tier_index(self) -> dict[str, int]:
        return {t.label: i for i, t in enumerate(self.tiers)}

    def attach_options(self, d: int) -> list[tuple[int, ...]]:
        """Sets of modules device d may attach to (at most its port count, distinct modules)."""
        if self.paper_mode:
            return [()]
        p = min(self.devices[d].ports, self.modules)
        return [c for k in range(p + 1) for c in combinations(range(self.modules), k)]


# --- designs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MappingDesign:
    layers_per_stage: tuple[int, ...]
    weights: tuple[str, ...]
    kv: tuple[str, ...]
    attach: tuple[tuple[int, ...], ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "layers_per_stage": list(self.layers_per_stage),
            "weights": list(self.weights),
            "kv": list(self.kv),
            "attach": [list(a) for a in self.attach],
        }


def parse_mapping_design(p: MappingProblem, data: dict[str, Any], source: str = "design") -> MappingDesign:
    """Check the shape of a design dict (values are checked by :func:`evaluate_mapping`)."""
    known = {"layers_per_stage", "weights", "kv", "attach"}
    extra = sorted(set(data) - known)
    if extra:
        raise InputError("unknown keys in a mapping design", file=source, key=extra[0], expected=f"only {sorted(known)}")
    missing = sorted(known - set(data) - {"attach"})
    if missing:
        raise InputError("mapping design is missing a key", file=source, key=missing[0], expected=f"all of {sorted(known)}")

    def ints(key: str, v: Any) -> tuple[int, ...]:
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            raise InputError("expected a list of integers", file=source, key=key, value=v)
        return tuple(v)

    def labels(key: str, v: Any) -> tuple[str, ...]:
        if not isinstance(v, list) or len(v) != p.layers or not all(isinstance(x, str) for x in v):
            raise InputError(f"expected a list of {p.layers} tier names (one per layer)", file=source, key=key, value=v if not isinstance(v, list) else f"list of {len(v)}")
        bad = [x for x in v if x not in p.tier_index]
        if bad:
            raise InputError("unknown tier", file=source, key=key, value=bad[0], expected="local, host or pool:<module>:<tier>", suggestion=did_you_mean(bad[0], list(p.tier_index)))
        return tuple(v)

    attach_raw = data.get("attach", [[] for _ in p.devices])
    if not isinstance(attach_raw, list) or len(attach_raw) != p.stages:
        raise InputError(f"expected one module list per device ({p.stages})", file=source, key="attach", value=attach_raw)
    attach = tuple(ints(f"attach[{d}]", a) for d, a in enumerate(attach_raw))
    return MappingDesign(ints("layers_per_stage", data["layers_per_stage"]), labels("weights", data["weights"]), labels("kv", data["kv"]), attach)


# --- evaluation -------------------------------------------------------------------------------


@dataclass
class MappingEvaluation:
    feasible: bool
    violations: list[str]
    period_s: float
    tokens_per_s: float
    tpot_s: float
    energy_per_token_J: float
    objective: float
    stage_s: list[float]
    compute_s: list[float]
    memory_s: list[float]
    port_load_s: list[float]
    switch_load_s: float
    bottleneck: str
    local_used_B: list[float]
    host_used_B: list[float]
    pool_used_B: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def counts_of(p: MappingProblem, design: MappingDesign) -> tuple[np.ndarray, np.ndarray]:
    """(weights, kv) layer counts per device and tier: shape (D, tiers)."""
    w = np.array([[p.tier_index[x] for x in design.weights]])
    k = np.array([[p.tier_index[x] for x in design.kv]])
    cw, ck = block_counts(p, design.layers_per_stage, w, k)
    return cw[0], ck[0]


def block_counts(p: MappingProblem, layers_per_stage, w_tier: np.ndarray, kv_tier: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer tier indices (N, L) -> counts per device and tier (N, D, tiers) for one partition."""
    N = w_tier.shape[0]
    T = len(p.tiers)
    cw = np.zeros((N, p.stages, T))
    ck = np.zeros((N, p.stages, T))
    lo = 0
    for d, nd in enumerate(layers_per_stage):
        hi = min(lo + nd, p.layers)
        for t in range(T):
            cw[:, d, t] = (w_tier[:, lo:hi] == t).sum(1)
            ck[:, d, t] = (kv_tier[:, lo:hi] == t).sum(1)
        lo += nd
    return cw, ck


@dataclass
class Assessment:
    """Metrics of N designs sharing a partition and attachment (arrays over N)."""

    period_s: np.ndarray
    stage_s: np.ndarray  # (N, D)
    compute_s: np.ndarray
    memory_s: np.ndarray
    local_s: np.ndarray
    host_s: np.ndarray
    link_s: np.ndarray
    port_load_s: np.ndarray  # (N, modules)
    switch_load_s: np.ndarray
    energy_per_token_J: np.ndarray
    local_used_B: np.ndarray  # (N, D)
    host_used_B: np.ndarray
    pool_used_B: np.ndarray  # (N, tiers): stored bytes per pool tier (0 for local/host)
    placement_ok: np.ndarray  # (N,) pool data only on attached modules
    capacity_ok: np.ndarray  # (N,)
    budget_ok: np.ndarray  # (N,)

    @property
    def feasible(self) -> np.ndarray:
        return self.placement_ok & self.capacity_ok & self.budget_ok


def assess(p: MappingProblem, n: np.ndarray, cw: np.ndarray, ck: np.ndarray, att: np.ndarray) -> Assessment:
    """The model's equations (9.1-9.9) for designs given as counts.

    n: (D,) layers per stage; cw, ck: (N, D, tiers) weights / KV layer counts per device and tier;
    att: (D, modules) attachment. Every metric is a sum over a device's layers of a per-layer
    value that depends only on the tier, i.e. count x per-layer value.
    """
    D = p.stages
    lay = p.layer
    dev = p.devices
    n = np.asarray(n, dtype=float)
    Mods = max(p.modules, 1)
    pool = [i for i, t in enumerate(p.tiers) if t.kind == "pool"]
    N = cw.shape[0]
    pool_read = np.zeros((N, D, Mods))
    for i in pool:
        pool_read[:, :, p.tiers[i].module] += cw[:, :, i] * lay.w_read_B + ck[:, :, i] * lay.kv_read_B
    if p.paper_mode or not p.modules:
        placement_ok = np.ones(N, dtype=bool)
    else:
        placement_ok = ~np.any((pool_read > 0) & ~att[None, :, :Mods], axis=(1, 2))

    first = np.zeros(D)
    last = np.zeros(D)
    first[0] = 1.0
    last[-1] = 1.0
    li, hi = p.tier_index["local"], p.tier_index["host"]

    def col(attr: str) -> np.ndarray:
        return np.array([getattr(x, attr) for x in dev])

    local_read = (cw[:, :, li] * lay.w_read_B + ck[:, :, li] * lay.kv_read_B + n * col("act_B")
                  + first * p.first_read_B + last * p.last_read_B)
    host_read = cw[:, :, hi] * lay.w_read_B + ck[:, :, hi] * lay.kv_read_B
    flops = n * lay.flops + last * p.last_flops  # (D,)

    compute = np.broadcast_to(flops * col("s_per_flop") + n * col("s_per_layer"), (N, D))
    # exposed: the TP collectives (per layer; the logits gather on the last stage) and the host
    exposed = n * col("s_per_layer_comm") + last * col("s_last_comm") + col("s_host")
    local_t = local_read * col("s_per_B_local")
    host_t = host_read * col("s_per_B_host")
    tp = col("tp")  # a stage's tp devices each read 1/tp of its pooled bytes over their own ports
    if p.paper_mode:
        link_t = pool_read.sum(2) / (p.assumed_device_Bps * tp)
    elif p.modules:
        link_t = pool_read.max(2) / (p.port_Bps * tp)
    else:
        link_t = np.zeros((N, D))
    mem_t = np.maximum(np.maximum(local_t, host_t), link_t)
    sigma = col("stream_overlap")
    stage = (1 - sigma) * (compute + mem_t) + sigma * np.maximum(compute, mem_t) + exposed
    if p.modules and not p.paper_mode:
        port_load = pool_read.sum(1) / p.port_Bps
        switch_load = pool_read.sum((1, 2)) / p.switch_Bps
    else:
        port_load = np.zeros((N, Mods))
        switch_load = np.zeros(N)
    period = np.maximum(np.maximum(stage.max(1), port_load.max(1)), switch_load)

    local_used = cw[:, :, li] * lay.w_store_B + ck[:, :, li] * lay.kv_store_B + first * p.first_store_B + last * p.last_store_B
    host_used = cw[:, :, hi] * lay.w_store_B + ck[:, :, hi] * lay.kv_store_B
    pool_used = cw.sum(1) * lay.w_store_B + ck.sum(1) * lay.kv_store_B
    pool_used[:, [li, hi]] = 0.0
    tol = 1 + FEASIBILITY_RTOL
    cap_ok = np.all(local_used <= col("local_capacity_B") * tol, axis=1) & np.all(host_used <= col("host_capacity_B") * tol, axis=1)
    pool_cap = np.array([t.capacity_B if t.kind == "pool" else np.inf for t in p.tiers])
    cap_ok &= np.all(pool_used <= pool_cap * tol, axis=1)
    budget_ok = np.ones(N, dtype=bool) if p.tpot_budget_s is None else D * period <= p.tpot_budget_s * tol
    budget_ok &= p.power_budget_W is None or p.devices_tdp_W + p.hardware_static_W <= p.power_budget_W * tol

    pool_J = np.array([t.J_per_B if t.kind == "pool" else 0.0 for t in p.tiers])
    dyn = (
        (flops * col("J_per_flop")).sum()
        + (local_read * col("J_per_B_local")).sum(1)
        + (host_read * col("J_per_B_host")).sum(1)
        + ((cw.sum(1) * lay.w_read_B + ck.sum(1) * lay.kv_read_B) * pool_J).sum(1)
        + (n * col("J_per_layer_comm") + last * col("J_last_comm")).sum()
    )
    energy = (dyn + (col("static_W").sum() + p.hardware_static_W) * period) / p.micro_batch
    for b in p.budgets:
        budget_ok = budget_ok & b.holds(b.lhs(period, energy, D, p.micro_batch))
    return Assessment(
        period, stage, compute, mem_t, local_t, host_t, link_t, port_load, switch_load, energy,
        local_used, host_used, pool_used, placement_ok, cap_ok, budget_ok,
    )


def structural_violations(p: MappingProblem, design: MappingDesign) -> list[str]:
    """Checks of a design's shape: partition, allowed tier kinds, attachment."""
    v: list[str] = []
    D, L = p.stages, p.layers
    n = design.layers_per_stage
    if len(n) != D:
        v.append(f"layers_per_stage has {len(n)} entries, expected {D} (one per device)")
    if any(x < 1 for x in n):
        v.append("every stage needs at least one layer")
    if sum(n) != L:
        v.append(f"layers_per_stage sums to {sum(n)}, the model has {L} layers")
    for name, labels, allowed in (("weights", design.weights, p.weight_tiers), ("kv", design.kv, p.kv_tiers)):
        bad = sorted({x for x in labels if p.tier_index[x] not in allowed})
        if bad:
            v.append(f"{name} placed in {bad[0]}, a tier kind the instance does not allow for {name}")
    if len(design.attach) != D:
        v.append(f"attach has {len(design.attach)} entries, expected {D}")
    for d, mods in enumerate(design.attach[:D]):
        if p.paper_mode and mods:
            v.append(f"attach[{d}]: under the assumed per-device bandwidth there is no attachment decision; give []")
        if len(set(mods)) != len(mods):
            v.append(f"attach[{d}] repeats a module")
        if len(mods) > p.devices[d].ports:
            v.append(f"{p.devices[d].name} attaches to {len(mods)} modules but has {p.devices[d].ports} ports")
        for j in mods:
            if not 0 <= j < p.modules:
                v.append(f"attach[{d}] names module {j}; modules are 0..{p.modules - 1}")
    if p.max_devices_per_module is not None and p.modules:
        for j in range(p.modules):
            k = sum(p.devices[d].tp for d, mods in enumerate(design.attach[:D]) if j in mods)
            if k > p.max_devices_per_module:
                v.append(f"module {j} has {k} devices attached, at most {p.max_devices_per_module}")
    return v


def attach_matrix(p: MappingProblem, attach) -> np.ndarray:
    att = np.zeros((p.stages, max(p.modules, 1)), dtype=bool)
    for d, mods in enumerate(attach[: p.stages]):
        for j in mods:
            if 0 <= j < p.modules:
                att[d, j] = True
    return att


def evaluate_mapping(p: MappingProblem, design: MappingDesign) -> MappingEvaluation:
    """Metrics and constraint audit of one mapping design (eq. 9.1-9.9)."""
    v = structural_violations(p, design)
    if any(s.startswith("layers_per_stage has") or s.startswith("attach has") for s in v):
        raise InputError("; ".join(v), key="design")
    cw, ck = counts_of(p, design)
    att = attach_matrix(p, design.attach)
    a = assess(p, np.array(design.layers_per_stage), cw[None], ck[None], att)
    dev = p.devices
    if not a.placement_ok[0]:
        pool_read = np.zeros((p.stages, max(p.modules, 1)))
        for i, t in enumerate(p.tiers):
            if t.kind == "pool":
                pool_read[:, t.module] += cw[:, i] + ck[:, i]
        for d, j in zip(*np.nonzero((pool_read > 0) & ~att), strict=True):
            v.append(f"{dev[d].name} places data on module {j} without attaching to it")
    tol = 1 + FEASIBILITY_RTOL
    for d in range(p.stages):
        if a.local_used_B[0, d] > dev[d].local_capacity_B * tol:
            v.append(f"{dev[d].name}: local memory {a.local_used_B[0, d] / GiB:.3f} GiB > usable {dev[d].local_capacity_B / GiB:.3f} GiB")
        if a.host_used_B[0, d] > dev[d].host_capacity_B * tol:
            v.append(f"{dev[d].name}: host memory {a.host_used_B[0, d] / GiB:.3f} GiB > {dev[d].host_capacity_B / GiB:.3f} GiB")
    pool_used: dict[str, float] = {}
    for i, t in enumerate(p.tiers):
        used = float(a.pool_used_B[0, i])
        if t.kind != "pool" or not used:
            continue
        pool_used[t.label] = used
        if used > t.capacity_B * tol:
            v.append(f"{t.label}: {used / GiB:.3f} GiB > {t.capacity_B / GiB:.3f} GiB")
    period = float(a.period_s[0])
    D = p.stages
    if p.tpot_budget_s is not None and D * period > p.tpot_budget_s * tol:
        v.append(f"tpot {D * period:.6g} s > budget {p.tpot_budget_s:.6g} s")
    if p.power_budget_W is not None and (w := p.devices_tdp_W + p.hardware_static_W) > p.power_budget_W * tol:
        v.append(f"provisioned power {w:.6g} W (TDP + lit ports) > budget {p.power_budget_W:.6g} W")
    for b in p.budgets:
        if not b.holds(lhs := float(b.lhs(a.period_s, a.energy_per_token_J, D, p.micro_batch)[0])):
            v.append(f"budget {b.name} ({b.text}): {lhs:.6g} > {b.rhs:.6g}")
    stage, compute, mem = a.stage_s[0], a.compute_s[0], a.memory_s[0]
    port, switch = a.port_load_s[0], float(a.switch_load_s[0])
    if stage.max() >= max(port.max(), switch):
        d = int(stage.argmax())
        if compute[d] >= mem[d]:
            what = "compute"
        elif mem[d] == a.local_s[0, d]:
            what = "local memory"
        elif mem[d] == a.host_s[0, d]:
            what = "host link"
        else:
            what = "pool link"
        bottleneck = f"stage {dev[d].name} ({what})"
    elif port.max() >= switch:
        bottleneck = f"module {int(port.argmax())} port"
    else:
        bottleneck = "appliance switch"
    m = p.micro_batch
    energy = float(a.energy_per_token_J[0])
    tps = m / period
    return MappingEvaluation(
        feasible=not v,
        violations=v,
        period_s=period,
        tokens_per_s=tps,
        tpot_s=D * period,
        energy_per_token_J=energy,
        objective=tps if p.objective == "tokens_per_s" else energy,
        stage_s=stage.tolist(),
        compute_s=compute.tolist(),
        memory_s=mem.tolist(),
        port_load_s=port.tolist() if p.modules else [],
        switch_load_s=switch,
        bottleneck=bottleneck,
        local_used_B=a.local_used_B[0].tolist(),
        host_used_B=a.host_used_B[0].tolist(),
        pool_used_B=pool_used,
    )


def objective_sense(p: MappingProblem) -> str:
    return "max" if p.objective == "tokens_per_s" else "min"


def space_size(p: MappingProblem) -> int:
    """Points of the decision space (before any constraint): contiguous partitions x tier choice
    per layer for weights and for KV x attachment choices per device."""
    parts = math.comb(p.layers - 1, p.stages - 1)
    attach = 1
    for d in range(p.stages):
        attach *= len(p.attach_options(d))
    return parts * len(p.weight_tiers) ** p.layers * len(p.kv_tiers) ** p.layers * attach


def format_count(n: int) -> str:
    """A (possibly astronomically large) integer in scientific notation: 4.535e+07, 1.2e+386."""
    if n < 10**15:
        return f"{float(n):.3e}"
    e = len(str(n)) - 1
    return f"{int(str(n)[:4]) / 1000:.3f}e+{e}"
