"""One optimizer step of data-, tensor- and pipeline-parallel training of a dense transformer
(issue 33 item 1; formulations/training.md).

What it models
--------------
``N`` identical devices in nodes of ``G`` (an NVLink domain) train a dense decoder with a global
batch of ``B`` sequences of ``S`` tokens per step, laid out Megatron-style with TP innermost, then
DP, then PP (device d = tp-rank + tp·(dp-rank + dp·stage)); ``tp·dp·pp = N``. A design chooses:

* ``tp``, ``pp`` (then ``dp = N / (tp·pp)``), the ZeRO stage (0 = plain DP, 1, 2, 3), the
  micro-batch ``b`` (sequences; ``m = B / (dp·b)`` micro-batches per step, a whole number), full
  activation recomputation or none;
* a path for each traffic class (TP all-reduces, DP gradient collectives, PP sends): ``electrical``
  (NVLink inside a node, InfiniBand between nodes) or ``appliance`` (device -> optical port ->
  the appliance's switch -> port -> device).

Closed forms (every source in formulations/training.md):

* FLOPs of a step: ``passes/3 · B·S · (6·P_mm + 12·L·H_attn·S)`` (PaLM, Chowdhery et al. 2022,
  App. B: 6N + 12·L·H·Q·T per token), ``passes`` = 3 (forward + backward) or 4 (recomputation);
  ``P_mm`` = the decoder layers' matrices + the LM head (the embedding lookup is no matmul).
* model state, mixed-precision Adam, 16 B/param: bf16 weights 2 + bf16 grads 2 + fp32 master,
  momentum, variance 12; per device over ψ = its stage's parameters / tp (ZeRO, Rajbhandari et al.
  2020, §5): stage 0: 16ψ, 1: 4ψ + 12ψ/dp, 2: 2ψ + 14ψ/dp, 3: 16ψ/dp (+ two layers' gathered bf16
  weights as the prefetch buffer).
* activations of one layer and micro-batch (Korthikanti et al. 2022, eq. 2 with TP, attention
  scores not stored, as flash attention does): ``S·b·h·(10 + 24/tp)`` B; with full recomputation
  the layer's input ``2·S·b·h`` B plus one layer's full activations during its recompute; the first
  stage holds ``min(m, pp)`` micro-batches in flight (1F1B, Narayanan et al. 2021).
* ring collectives: a reduce-scatter or all-gather of S bytes over n devices sends ``(n-1)/n·S``
  per device, an all-reduce twice that. Electrical DP collectives are hierarchical (NVLink inside
  the node over its g devices of the group, InfiniBand across the k nodes on the 1/g shard):
  ``(g-1)/g·S`` + ``(k-1)/(k·g)·S`` per pass.
* passes of DP collectives per step: ZeRO 0/1: 2 (all-reduce, or reduce-scatter + all-gather);
  ZeRO 2: m + 1 (a reduce-scatter per micro-batch, one all-gather of the updated weights);
  ZeRO 3: 3m (all-gather before each forward and backward, reduce-scatter after each backward).
* step time: ``(m + pp - 1)·(t_compute + t_TP + t_PP per micro-batch) + t_DP`` (the bubble is
  ``(pp-1)/(m+pp-1)`` of the pipeline time; DP collectives after the flush, not overlapped).
* energy of a step: compute (FLOPs x J/FLOP), static (N x static power x step time), HBM
  (bytes x J/B) and each network (bits sent x its path's J/bit: NVLink, InfiniBand, appliance).

SI inside: seconds, bytes, FLOP, watts, joules.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

#: mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, §3.1): bf16 weights and grads, fp32
#: master weights, momentum and variance
WEIGHT_B, GRAD_B, OPTIMIZER_B = 2.0, 2.0, 12.0
STATE_B_PER_PARAM = WEIGHT_B + GRAD_B + OPTIMIZER_B  # 16
#: HBM bytes of the optimizer step per parameter: read grads + fp32 states, write weights + states
OPTIMIZER_STEP_B = (GRAD_B + OPTIMIZER_B) + (WEIGHT_B + OPTIMIZER_B)  # 28
#: bytes per activation element (bf16)
ACT_B = 2.0
ZERO_STAGES = (0, 1, 2, 3)
PATHS = ("electrical", "appliance")
#: traffic classes and the design key of each one's path
CLASSES = ("tp", "dp", "pp")
#: relative tolerance of a capacity or budget check (float round-off only)
CHECK_RTOL = 1e-9
#: Korthikanti et al. 2022, eq. 2 without the attention-score term: 10 + 24/t elements per
#: (token, hidden) of one layer; recomputation keeps the layer input only: 2 B per (token, hidden)
ACT_CONST, ACT_TP_CONST, CHECKPOINT_B = 10.0, 24.0, 2.0
#: gathered layers ZeRO-3 holds at once (the layer in use and the prefetched next)
ZERO3_BUFFER_LAYERS = 2


@dataclass(frozen=True)
class TrainingSetup:
    """An instance's numbers (SI), built once from its file (:mod:`codesign.kinds.training.spec`)."""

    # workload
    layers: int
    hidden: int
    attention_width: int  # heads x head_dim
    heads: int
    kv_heads: int
    layer_params: int  # one decoder layer, every weight
    layer_matmul_params: int  # its matrices
    embedding_params: int
    lm_head_params: int  # the output projection's matrix (= embedding's when tied)
    tied: bool
    sequence_tokens: int
    global_batch: int  # sequences per step
    # devices
    devices: int
    node_size: int
    peak_flops: float
    compute_efficiency: float
    J_per_flop: float
    static_W: float  # one device
    capacity_B: float  # usable memory of one device
    hbm_J_per_B: float
    # links: achieved bandwidth per direction (B/s) and energy per byte sent (J/B)
    nvlink_Bps: float
    nvlink_J_per_B: float
    ib_Bps: float
    ib_J_per_B: float
    appliance_Bps: float  # 0 without an appliance
    appliance_J_per_B: float
    # the space
    tp_options: tuple[int, ...]
    pp_options: tuple[int, ...]
    zero_options: tuple[int, ...]
    micro_batch_options: tuple[int, ...]
    recompute_options: tuple[bool, ...]
    paths: tuple[str, ...]
    # the question
    objective: str = "energy_per_step_J"
    step_time_budget_s: float | None = None
    power_budget_W: float | None = None

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.sequence_tokens

    @property
    def matmul_params(self) -> int:
        """P_mm: the decoder layers' matrices and the LM head."""
        return self.layers * self.layer_matmul_params + self.lm_head_params

    @property
    def total_params(self) -> int:
        return self.layers * self.layer_params + self.embedding_params + (0 if self.tied else self.lm_head_params)


@dataclass(frozen=True)
class TrainingDesign:
    tp: int
    pp: int
    zero: int
    micro_batch: int
    recompute: bool
    tp_path: str
    dp_path: str
    pp_path: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TrainingEvaluation:
    """The model's numbers of one design (SI; per step unless the name says otherwise)."""

    dp: int
    micro_batches: int
    flops: float
    compute_s: float
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    bubble_fraction: float
    step_s: float
    tokens_per_s: float
    state_B_per_device: float
    activation_B_per_device: float
    memory_B_per_device: float
    nvlink_B: float  # bytes sent over each network, all devices together
    ib_B: float
    appliance_B: float
    compute_J: float
    static_J: float
    memory_J: float
    nvlink_J: float
    ib_J: float
    appliance_J: float
    network_J: float  # data movement: the three networks
    energy_per_step_J: float
    energy_per_token_J: float
    system_power_W: float
    feasible: bool
    violations: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- closed forms (the tests check each by hand) ---------------------------------------------


def step_flops(s: TrainingSetup, recompute: bool) -> float:
    """FLOPs of one step over every device: passes/3 x tokens x (6 P_mm + 12 L H_attn S)."""
    passes = 4.0 if recompute else 3.0
    per_token = 6.0 * s.matmul_params + 12.0 * s.layers * s.attention_width * s.sequence_tokens
    return passes / 3.0 * s.tokens_per_step * per_token


def ring_bytes_per_device(size_B: float, n: int, passes: float = 2.0) -> float:
    """Bytes one device sends in ``passes`` ring reduce-scatters/all-gathers of ``size_B`` over
    ``n`` devices (an all-reduce is 2 passes: 2(n-1)/n x S)."""
    return passes * (n - 1) / n * size_B


def hierarchical_bytes_per_device(size_B: float, in_node: int, nodes: int, passes: float) -> tuple[float, float]:
    """(NVLink, InfiniBand) bytes one device sends in ``passes`` hierarchical ring passes over a
    group of ``in_node`` devices in each of ``nodes`` nodes."""
    return (passes * (in_node - 1) / in_node * size_B,
            passes * (nodes - 1) / (nodes * in_node) * size_B)


def zero_state_bytes(params: float, zero: int, dp: int) -> float:
    """Model-state bytes of one device holding ``params`` parameters under ZeRO ``zero`` over ``dp``."""
    if zero == 0:
        return STATE_B_PER_PARAM * params
    if zero == 1:
        return (WEIGHT_B + GRAD_B) * params + OPTIMIZER_B * params / dp
    if zero == 2:
        return WEIGHT_B * params + (GRAD_B + OPTIMIZER_B) * params / dp
    if zero == 3:
        return STATE_B_PER_PARAM * params / dp
    raise ValueError(f"ZeRO stage {zero} is not one of {ZERO_STAGES}")


def dp_passes(zero: int, micro_batches: int) -> float:
    """Ring passes (reduce-scatters and all-gathers) of a step's DP collectives."""
    return {0: 2.0, 1: 2.0, 2: micro_batches + 1.0, 3: 3.0 * micro_batches}[zero]


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """The pipeline's idle share: (pp-1)/(m+pp-1)."""
    return (pp - 1) / (micro_batches + pp - 1)


def layer_activation_bytes(s: TrainingSetup, micro_batch: int, tp: int) -> float:
    """Activations one layer keeps for one micro-batch on one device, without recomputation."""
    return s.sequence_tokens * micro_batch * s.hidden * (ACT_CONST + ACT_TP_CONST / tp)


# --- layouts ------------------------------------------------------------------------------------


def layout_problems(s: TrainingSetup, tp: int, pp: int) -> list[str]:
    """Why (tp, pp) is no layout of the instance (empty: it is one)."""
    out = []
    if s.devices % (tp * pp):
        return [f"tp x pp = {tp * pp} does not divide the {s.devices} devices"]
    dp = s.devices // (tp * pp)
    G = min(s.node_size, s.devices)
    if s.layers % pp:
        out.append(f"pp = {pp} does not divide the {s.layers} layers")
    if s.heads % tp or not (s.kv_heads % tp == 0 or tp % s.kv_heads == 0):
        out.append(f"tp = {tp} does not split the {s.heads} heads and {s.kv_heads} KV heads")
    if G % tp:
        out.append(f"tp = {tp} does not divide the node of {G} devices (TP stays in a node)")
    elif tp * dp > G and dp % (G // tp):
        out.append(f"the DP group of {dp} does not tile nodes of {G // tp} TP groups")
    elif tp * dp < G and G % (tp * dp):
        out.append(f"tp x dp = {tp * dp} does not tile a node of {G}")
    return out


def layouts(s: TrainingSetup) -> list[tuple[int, int]]:
    return [(t, p) for t in s.tp_options for p in s.pp_options if not layout_problems(s, t, p)]


def class_degree(tp: int, pp: int, dp: int, cls: str) -> int:
    return {"tp": tp, "dp": dp, "pp": pp}[cls]


def enumerate_designs(s: TrainingSetup) -> list[TrainingDesign]:
    """Every design of the space, in a fixed order: valid layouts, a whole number of micro-batches,
    and a path for each traffic class that carries traffic (a class of degree 1 takes paths[0])."""
    out = []
    for tp, pp in layouts(s):
        dp = s.devices // (tp * pp)
        path_sets = [s.paths if class_degree(tp, pp, dp, c) > 1 else s.paths[:1] for c in CLASSES]
        for zero, b, rc in itertools.product(s.zero_options, s.micro_batch_options, s.recompute_options):
            if s.global_batch % (dp * b):
                continue
            for tpp, dpp, ppp in itertools.product(*path_sets):
                out.append(TrainingDesign(tp, pp, zero, b, rc, tpp, dpp, ppp))
    return out


def canonical(s: TrainingSetup, d: TrainingDesign) -> TrainingDesign:
    """The same design with the path of each class that carries no traffic set to paths[0]."""
    dp = s.devices // (d.tp * d.pp) if d.tp * d.pp and s.devices % (d.tp * d.pp) == 0 else 0
    paths = {c: getattr(d, f"{c}_path") if class_degree(d.tp, d.pp, dp, c) > 1 else s.paths[0] for c in CLASSES}
    return TrainingDesign(d.tp, d.pp, d.zero, d.micro_batch, d.recompute, paths["tp"], paths["dp"], paths["pp"])


def design_problems(s: TrainingSetup, d: TrainingDesign) -> list[str]:
    """Why ``d`` is not of the space (empty: it is; it may still break a constraint)."""
    out = []
    for key, value, options in (("tp", d.tp, s.tp_options), ("pp", d.pp, s.pp_options),
                                ("zero", d.zero, s.zero_options), ("micro_batch", d.micro_batch, s.micro_batch_options),
                                ("recompute", d.recompute, s.recompute_options)):
        if value not in options:
            out.append(f"{key} = {value} is not one of {list(options)}")
    for c in CLASSES:
        if getattr(d, f"{c}_path") not in s.paths:
            out.append(f"{c}_path = {getattr(d, f'{c}_path')!r} is not one of {list(s.paths)}")
    if out:
        return out
    out = layout_problems(s, d.tp, d.pp)
    if not out and s.global_batch % (s.devices // (d.tp * d.pp) * d.micro_batch):
        dp = s.devices // (d.tp * d.pp)
        out.append(f"dp x micro_batch = {dp * d.micro_batch} does not divide the global batch of {s.global_batch}")
    return out


# --- the evaluation --------------------------------------------------------------------------------


def _stage_params(s: TrainingSetup, pp: int) -> tuple[float, float]:
    """Parameters of the first and the last pipeline stage (the embedding on the first, the LM head
    on the last; one stage holds both; a tied head keeps its own copy on the last stage)."""
    body = s.layers // pp * s.layer_params
    head = s.lm_head_params if not s.tied else s.embedding_params
    if pp == 1:
        return body + s.embedding_params + (0 if s.tied else s.lm_head_params), 0.0
    return body + s.embedding_params, body + head


def evaluate(s: TrainingSetup, d: TrainingDesign) -> TrainingEvaluation:
    """The model's verdict on one design of the space (:func:`design_problems` is empty)."""
    tp, pp = d.tp, d.pp
    dp = s.devices // (tp * pp)
    m = s.global_batch // (dp * d.micro_batch)
    G = min(s.node_size, s.devices)
    L_stage = s.layers // pp
    hidden_B = ACT_B * s.sequence_tokens * d.micro_batch * s.hidden  # one (micro-batch, layer) activation

    # compute
    flops = step_flops(s, d.recompute)
    compute_mb_s = flops / (s.devices * m) / (s.peak_flops * s.compute_efficiency)

    # TP: 2 all-reduces in each layer's forward, 2 in its backward, 2 more in a recomputed forward
    tp_ar = 6.0 if d.recompute else 4.0
    tp_dev_mb = L_stage * tp_ar * ring_bytes_per_device(hidden_B, tp) if tp > 1 else 0.0
    tp_bw = s.nvlink_Bps if d.tp_path == "electrical" else s.appliance_Bps
    tp_mb_s = tp_dev_mb / tp_bw if tp > 1 else 0.0
    tp_total_B = s.devices * m * tp_dev_mb

    # PP: each boundary sends the activation forward and its gradient back, split over the TP ranks
    # (scatter/gather, Narayanan et al. 2021 §4.1); a boundary between nodes goes over InfiniBand
    pp_total_B = (pp - 1) * dp * m * 2.0 * hidden_B
    stride = tp * dp
    crossing = (pp - 1) if stride >= G else (pp - 1) // (G // stride)
    pp_bw = s.appliance_Bps if d.pp_path == "appliance" else s.ib_Bps if crossing else s.nvlink_Bps
    pp_mb_s = 2.0 * hidden_B / tp / pp_bw if pp > 1 else 0.0

    # DP: the first stage's shard is the largest (it holds the embedding)
    first, last = _stage_params(s, pp)
    psi = max(first, last) / tp
    passes = dp_passes(d.zero, m)
    if dp > 1 and d.dp_path == "electrical":
        g = min(dp, G // tp)
        k = dp // g
        nvl_dev, ib_dev = hierarchical_bytes_per_device(GRAD_B * psi, g, k, passes)
        dp_s = nvl_dev / s.nvlink_Bps + ib_dev / s.ib_Bps
        nvl_all, ib_all = hierarchical_bytes_per_device(GRAD_B * s.total_params, g, k, passes)
        dp_nvl_B, dp_ib_B, dp_app_B = dp * nvl_all, dp * ib_all, 0.0
    elif dp > 1:
        dp_s = ring_bytes_per_device(GRAD_B * psi, dp, passes) / s.appliance_Bps
        dp_nvl_B, dp_ib_B = 0.0, 0.0
        dp_app_B = dp * ring_bytes_per_device(GRAD_B * s.total_params, dp, passes)
    else:
        dp_s = dp_nvl_B = dp_ib_B = dp_app_B = 0.0

    step_s = (m + pp - 1) * (compute_mb_s + tp_mb_s + pp_mb_s) + dp_s

    # memory of a device: the first stage (most parameters, min(m, pp) micro-batches in flight);
    # the last stage for a heavier tied head
    act_layer = layer_activation_bytes(s, d.micro_batch, tp)
    in_flight = min(m, pp)
    act_first = in_flight * L_stage * (CHECKPOINT_B / ACT_B * hidden_B if d.recompute else act_layer)
    act_first += act_layer if d.recompute else 0.0
    act_last = (CHECKPOINT_B / ACT_B * hidden_B * L_stage + act_layer) if d.recompute else L_stage * act_layer
    buffer = ZERO3_BUFFER_LAYERS * WEIGHT_B * s.layer_params / tp if d.zero == 3 and dp > 1 else 0.0
    state_first = zero_state_bytes(first / tp, d.zero, dp) + buffer
    state_last = zero_state_bytes(last / tp, d.zero, dp) + buffer if pp > 1 else 0.0
    mem_first, mem_last = state_first + act_first, (state_last + act_last if pp > 1 else 0.0)
    memory_B = max(mem_first, mem_last)
    state_B, act_B = (state_first, act_first) if mem_first >= mem_last else (state_last, act_last)

    # HBM traffic (all devices): weights read in every pass of every micro-batch, gradients read and
    # written in each backward, the optimizer reading grads, master, momentum, variance (14 B/param)
    # and writing weights, master, momentum, variance (14 B/param) once per replica of its state,
    # activations written once and read once
    passes_w = 4.0 if d.recompute else 3.0
    replicas = dp if d.zero == 0 else 1
    stored_act = dp * pp * tp * m * (L_stage * act_layer)
    hbm_B = (dp * m * (passes_w * WEIGHT_B + 2.0 * GRAD_B) * s.total_params
             + replicas * OPTIMIZER_STEP_B * s.total_params + 2.0 * stored_act)

    # bytes per network
    nvlink_B = dp_nvl_B + (tp_total_B if d.tp_path == "electrical" else 0.0)
    ib_B = dp_ib_B
    appliance_B = dp_app_B + (tp_total_B if d.tp_path == "appliance" else 0.0)
    if d.pp_path == "appliance":
        appliance_B += pp_total_B
    elif pp > 1:
        ib_B += pp_total_B * crossing / (pp - 1)
        nvlink_B += pp_total_B * (pp - 1 - crossing) / (pp - 1)

    compute_J = flops * s.J_per_flop
    static_J = s.devices * s.static_W * step_s
    memory_J = hbm_B * s.hbm_J_per_B
    nvlink_J, ib_J, app_J = nvlink_B * s.nvlink_J_per_B, ib_B * s.ib_J_per_B, appliance_B * s.appliance_J_per_B
    network_J = nvlink_J + ib_J + app_J
    energy = compute_J + static_J + memory_J + network_J

    v = []
    if memory_B > s.capacity_B * (1 + CHECK_RTOL):
        v.append(f"memory {memory_B / 2**30:.4g} GiB per device > {s.capacity_B / 2**30:.4g} GiB usable")
    if s.step_time_budget_s is not None and step_s > s.step_time_budget_s * (1 + CHECK_RTOL):
        v.append(f"step time {step_s:.6g} s > budget {s.step_time_budget_s:.6g} s")
    if s.power_budget_W is not None and energy / step_s > s.power_budget_W * (1 + CHECK_RTOL):
        v.append(f"power {energy / step_s:.6g} W > budget {s.power_budget_W:.6g} W")
    return TrainingEvaluation(
        dp=dp, micro_batches=m, flops=flops, compute_s=m * compute_mb_s, tp_comm_s=m * tp_mb_s,
        pp_comm_s=m * pp_mb_s, dp_comm_s=dp_s, bubble_fraction=bubble_fraction(pp, m), step_s=step_s,
        tokens_per_s=s.tokens_per_step / step_s, state_B_per_device=state_B, activation_B_per_device=act_B,
        memory_B_per_device=memory_B, nvlink_B=nvlink_B, ib_B=ib_B, appliance_B=appliance_B,
        compute_J=compute_J, static_J=static_J, memory_J=memory_J, nvlink_J=nvlink_J, ib_J=ib_J,
        appliance_J=app_J, network_J=network_J, energy_per_step_J=energy,
        energy_per_token_J=energy / s.tokens_per_step, system_power_W=energy / step_s,
        feasible=not v, violations=v,
    )


#: objective -> (the evaluation's field the MIP minimises, the user's metric's field)
OBJECTIVES: dict[str, str] = {
    "tokens_per_s": "step_s",
    "energy_per_step_J": "energy_per_step_J",
    "network_energy_per_step_J": "network_J",
}


def internal(s: TrainingSetup, ev: TrainingEvaluation) -> float:
    """The minimised quantity of the instance's objective (step time for tokens/s)."""
    return float(getattr(ev, OBJECTIVES[s.objective]))


def user_value(s: TrainingSetup, internal_value: float) -> float:
    return s.tokens_per_step / internal_value if s.objective == "tokens_per_s" else internal_value


def best(s: TrainingSetup, designs: list[TrainingDesign]) -> tuple[TrainingDesign | None, int]:
    """The design the model ranks first among ``designs`` (the first of ties) and how many are feasible."""
    top, top_val, feasible = None, math.inf, 0
    for d in designs:
        ev = evaluate(s, d)
        if not ev.feasible:
            continue
        feasible += 1
        val = internal(s, ev)
        if val < top_val:
            top, top_val = d, val
    return top, feasible
