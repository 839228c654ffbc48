"""Schedule features: per-device work of one pipeline-stage step for every feasible parallel layout
of a workload (model.md §4).

A *schedule* fixes TP (tensor parallel inside a stage), PP (pipeline stages), EP (expert parallel
inside the TP group, TensorRT-LLM semantics: moe_ep x moe_tp = tp), the batch per model replica,
and the memory tier of weights and KV cache. DP = devices / (TP x PP) replicas serve independent
requests. Devices are placed TP-fastest, then PP, then DP, so a TP group shares a scale-up domain
whenever TP <= domain size.

Per phase (prefill, decode) the features are the per-device FLOPs, local and pooled bytes, the
scale-up / scale-out bytes and latency steps of the collectives, and the layers of the slowest
stage, for one micro-batch of batch/PP sequences. :mod:`codesign.model.evaluate` combines them
with the hardware features.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from codesign.model import collectives, network, overlap, routing, topology
from codesign.model.engines import instance_rules
from codesign.model.hardware import attention_precision, exp_limited, socket_size_of
from codesign.model.step import attention_side_elements, step_costs
from codesign.model.units import BYTES_PER_ELEMENT, WEIGHT_ONLY_KV_PRECISION
from codesign.model.workload import (
    ACTIVATION_BYTES,
    Workload,
    embedding_bytes_per_param,
    kv_cache_bytes,
    load_workload,
    param_counts,
)

if TYPE_CHECKING:
    from codesign.kinds.grid.spec import Instance, WorkloadSpec

PHASES = ("prefill", "decode")

#: TensorRT-LLM's C++ runtime allocates, for each of the engine's ``max_batch_size`` sequence
#: slots and before it sizes the KV cache from the free memory (``TrtGptModelInflightBatching``:
#: ``createBuffers``, ``createDecoder``, then ``KVCacheManager::calculateMaxNumBlocks``), at beam
#: width 1 with the default fp32 logits and TopKTopP decoding:
#:   - DECODER_VOCAB_ROWS rows of the padded vocabulary x 4 B: the engine's ``logits`` output
#:     (``runtimeBuffers.cpp``), the penalised logits (``DecodingLayerWorkspace::mRuntimeLogitsDevice``),
#:     the top-K sampling workspace's ``tempLogProbs`` (the sampling layers share the largest
#:     workspace; AIR top-P needs about 1/8 row), ``GptDecoderBatched``'s ``embeddingBias``;
#:   - one row of the unpadded vocabulary x 4 B: the penalty layer's int32 occurrence workspace;
#:   - DECODER_TOPK_SCRATCH_B: top-K's temporary ids and values (``TOP_K_MAX`` 1024 x 8 x 8 B);
#:   - DECODER_SEQ_ARRAYS arrays of max_seq_len x 4 B: the cache indirections (3), output ids,
#:     parent ids, slot output ids (int32) and the log-prob arrays (4, fp32).
#: Read on the runtime of the 0.14-0.15 release line (arthurrasmusson/TensorRT-LLM@e00d4e6, its
#: batch_manager; NVIDIA/TensorRT-LLM ``gptDecoderBatched.cpp``, ``decodingLayerWorkspace.cpp``,
#: ``penaltyLayer.cpp``, ``samplingTopKKernels.h``). The count reproduces a published log to three
#: figures (NVIDIA/TensorRT-LLM issue #1188, 2024-11-21: Qwen2.5 0.5B, vocabulary 151,936: "2.66 GB
#: for runtime buffers", "5.76 GB for decoder"; this formula gives 2.659 and 5.762 GiB at 2,048 slots
#: and max_seq_len 32,768, trtllm-build's defaults then, which the log does not print: assumed). TensorRT-LLM's memory guide says the same in words: "Before KV cache
#: blocks are allocated, some amount of GPU memory are pre-allocated by C++ runtime for storing I/O
#: tensors of TensorRT engine and the decoupled dynamic decoder, it's allocated based on runtime
#: max_batch_size and max_seq_len" (docs/source/reference/memory.md §3.1).
DECODER_VOCAB_ROWS = 4
DECODER_TOPK_SCRATCH_B = 1024 * 8 * 8
DECODER_SEQ_ARRAYS = 10


def decoder_state_per_slot_B(vocab_size: Any, tp: Any, max_seq_len: Any) -> Any:
    """Bytes the serving engine's runtime allocates per sequence slot before sizing the KV cache,
    on every TP rank (the decoder runs on each; nothing of it is split): DECODER_VOCAB_ROWS fp32 rows
    of the vocabulary padded to a multiple of ``tp``, one int32 row of the vocabulary, the top-K
    scratch, and DECODER_SEQ_ARRAYS 4-byte arrays of ``max_seq_len`` (eq. 4.14b). Integers in,
    an integer out; arrays of TP degrees give an array."""
    padded = -(-vocab_size // tp) * tp  # ceil(V / tp) tp, for integers and arrays alike
    return DECODER_VOCAB_ROWS * padded * 4 + vocab_size * 4 + DECODER_TOPK_SCRATCH_B + DECODER_SEQ_ARRAYS * 4 * max_seq_len


@dataclass
class ScheduleTable:
    """Feasible schedules of one workload (rows) and their features (columns)."""

    workload: str
    decisions: dict[str, np.ndarray]
    features: dict[str, np.ndarray] = field(default_factory=dict)
    #: the precision the attention runs at where the step prices it apart from the other FLOPs
    #: (columns ``<phase>.flops_attn``, ``<phase>.flops_other`` and, where the hardware has an
    #: exponential rate, ``<phase>.exps``: eq. 2.15m); None: one compute term at the weights'
    attention_precision: str | None = None

    @property
    def size(self) -> int:
        return len(next(iter(self.decisions.values())))

    def column(self, name: str) -> np.ndarray:
        """A feature, or a product of features written ``a*b``."""
        out = np.ones(self.size)
        for part in name.split("*"):
            out = out * self.features[part]
        return out

    def index_of(self, design: dict[str, Any]) -> int:
        mask = np.ones(self.size, dtype=bool)
        for k, vals in self.decisions.items():
            mask &= vals == design[k]
        idx = np.flatnonzero(mask)
        return int(idx[0]) if len(idx) == 1 else -1


def structural_reason(
    w: Workload, spec: WorkloadSpec, devices: int, has_pool: bool, s: dict[str, Any], domain: int | None = None,
    torus: tuple[int, ...] | None = None, max_batch: int | None = None,
) -> str | None:
    """Why a layout cannot run at all (divisibility and placement rules), or None.

    These rules do not depend on the hardware, so infeasible layouts are removed from the
    schedule table (the MIP only sees feasible tuples).
    """
    tp, pp, ep, batch = s["tp"], s["pp"], s["ep"], s["batch"]
    adp = bool(s.get("attention_dp", False))
    if devices % (tp * pp):
        return f"tp*pp = {tp * pp} does not divide the {devices} devices"
    if w.num_attention_heads % tp and not adp:  # attention DP splits sequences, not heads
        return f"tp = {tp} does not divide {w.num_attention_heads} attention heads"
    if w.mla is None and w.num_kv_heads % tp and tp % w.num_kv_heads and not adp:
        return f"tp = {tp} neither divides nor is a multiple of {w.num_kv_heads} KV heads"
    if domain is not None and (domain % tp if tp <= domain else tp % domain):
        return f"tp = {tp} groups do not align with scale-up domains of {domain} devices"
    if (why := topology.torus_reason(torus, tp)) is not None:  # a TP group on a torus is a box (eq. 3.17d)
        return why
    if pp > w.num_layers:
        return f"pp = {pp} exceeds {w.num_layers} layers"
    if pp > 1 and batch % pp:
        return f"batch {batch} is not a multiple of pp = {pp} (one micro-batch per stage)"
    if tp % ep:
        return f"ep = {ep} does not divide tp = {tp}"
    if w.moe is None and ep != 1:
        return "ep > 1 needs a mixture-of-experts workload"
    if w.moe is not None and w.moe.num_experts % ep:
        return f"ep = {ep} does not divide {w.moe.num_experts} experts"
    if not has_pool and "pooled" in (s["weights_tier"], s["kv_tier"]):
        return "a pooled tier needs `system.appliance`"
    if adp and tp == 1:
        return "attention DP needs tp > 1 (at tp = 1 it is the plain layout)"
    if s.get("ep_all_to_all") and ep == 1:
        return "an expert-parallel all-to-all needs ep > 1"
    if adp and batch % (tp * pp):
        return f"batch {batch} is not a multiple of tp x pp = {tp * pp} (attention DP: one share per rank and micro-batch)"
    # the engine's maximum batch per executor (system.engine): one per micro-batch and attention-DP rank
    if max_batch is not None and batch > max_batch * pp * (tp if adp else 1):
        return f"batch {batch} exceeds the engine's maximum batch of {max_batch} per executor"
    return overlap.structural_reason(s)  # two-batch overlap: a sequence per half (eq. 5.3a)


def kv_shards(w: Workload, tp: np.ndarray) -> np.ndarray:
    """Ways the KV cache is split across a TP group: by KV heads (GQA); MLA's latent is shared."""
    if w.mla is not None:
        return np.ones_like(tp, dtype=float)
    return np.minimum(tp, w.num_kv_heads).astype(float)


def schedule_table(inst: Instance, workload: str, designs: dict[str, np.ndarray] | None = None) -> ScheduleTable:
    """Features of every feasible schedule of ``workload`` (or of the given ``designs``)."""
    spec = next(x for x in inst.workloads if x.name == workload)
    w = load_workload(spec.workload)
    devices = inst.system.devices
    has_pool = inst.system.appliance is not None
    decs = inst.schedule_decisions(workload)
    keys = [d.key for d in decs]
    torus = topology.torus_dims(inst)
    if designs is None:
        rows = []
        for combo in itertools.product(*[d.domain for d in decs]):
            s = dict(zip(keys, combo, strict=True))
            if structural_reason(w, spec, devices, has_pool, s, inst.system.scale_up_domain, torus,
                                 instance_rules(inst).max_batch_size) is None:
                rows.append(combo)
        designs = {
            k: np.array([r[j] for r in rows], dtype=object if isinstance(decs[j].domain[0], str) else None)
            for j, k in enumerate(keys)
        }
    table = ScheduleTable(workload=workload, decisions=designs)
    if table.size:
        _features(inst, spec, w, table)
        overlap.apply_two_batch(inst, spec, w, table, _features)  # where overlap is decided (eq. 5.3a)
    return table


def extra_iterations(tokens: Any, static_iterations: float, budget: int | None) -> Any:
    """Iterations beyond ``static_iterations`` that ``tokens`` need when no iteration carries more
    than ``budget`` tokens: ceil(tokens / budget) - static, at least 0 (eq. 4.19); 0 without a budget."""
    if budget is None:
        return np.zeros_like(np.asarray(tokens, dtype=float))
    return np.maximum(np.ceil(np.asarray(tokens, dtype=float) / budget) - static_iterations, 0.0)


#: what one more iteration of a stage costs whatever its tokens: the step's weight reads (local and
#: pooled), the links' per-step latency, the layers' overhead and the TP collectives' ring steps,
#: all as the decode step pays them (eq. 4.19); its FLOPs, KV and activation bytes are the round's
#: anyway
ITERATION_COLUMNS = ("steps_scale_up", "steps_scale_out", "layers", "collective_steps")


def _token_budget(spec: WorkloadSpec, f: dict[str, Any], engine_tokens: int | None, sequences: Any, weights_decode: Any,
                  w_local: Any) -> None:
    """Charge the iterations the engine's token budget adds (eq. 4.19). ``sequences``
    is the sequences one executor runs per micro-batch (a rank's own share under attention DP).
    A round (phase both) runs OSL iterations statically, its prefill step and OSL - 1 decode steps,
    and needs at least n (ISL + OSL) / T: the extra ones go to its prefill step; a prefill-only
    workload's step needs n ISL / T, a decode-only one's n / T, one iteration statically."""
    budget = spec.max_tokens_per_iteration or engine_tokens  # the workload's, else the engine's
    if budget is None:
        return
    n = sequences
    isl, osl = spec.input_tokens, spec.output_tokens
    if spec.phase == "both":
        phase, extra = "prefill", extra_iterations(n * (isl + osl), osl, budget)
    elif spec.phase == "prefill":
        phase, extra = "prefill", extra_iterations(n * isl, 1, budget)
    else:
        phase, extra = "decode", extra_iterations(n, 1, budget)
    reread = extra * weights_decode  # the weights every extra iteration reads again
    f[f"{phase}.extra_iterations"] = extra
    f[f"{phase}.bytes_local"] = f[f"{phase}.bytes_local"] + reread * w_local
    f[f"{phase}.bytes_weights_local"] = f[f"{phase}.bytes_weights_local"] + reread * w_local
    f[f"{phase}.bytes_pool"] = f[f"{phase}.bytes_pool"] + reread * (1 - w_local)
    for col in ITERATION_COLUMNS:
        f[f"{phase}.{col}"] = f[f"{phase}.{col}"] + extra * f[f"decode.{col}"]


def _features(inst: Instance, spec: WorkloadSpec, w: Workload, t: ScheduleTable) -> None:
    d = t.decisions
    rules = instance_rules(inst)  # the engine's rules (system.engine), none: the physics alone
    tp = d["tp"].astype(float)
    pp = d["pp"].astype(float)
    batch = d["batch"].astype(float)
    # attention data-parallel over the TP group (§4.8): 1.0 where on, else 0.0
    adp = np.asarray(d["attention_dp"], dtype=float) if "attention_dp" in d else np.zeros_like(tp)
    devices = float(inst.system.devices)
    domain = inst.system.scale_up_domain
    # how the TP collectives run: system.allreduce on system.topology (eqs. 3.14a, 3.17c, 3.17d)
    plan = collectives.plan_of(inst)
    # 1 where the TP group's scale-up ring crosses the CPU sockets of its server (eq. 3.17b); a
    # torus is its own fabric
    crossing = network.crosses_sockets(tp, domain, socket_size_of(inst)) * (plan.torus is None)
    dp = devices / (tp * pp)
    micro = batch / pp
    layers_stage = np.ceil(w.num_layers / pp)
    frac = layers_stage / w.num_layers
    # MoE layers of the slowest stage (their share of its layers)
    moe_stage = w.moe_layers * frac
    # expert parallelism (eq. 4.6a): the EP group of ep ranks (contiguous inside the TP group,
    # TensorRT-LLM's moe_ep_rank = tp_rank % moe_ep_size) sends each token to its top-k experts by
    # all-to-all where that moves fewer bytes than gathering every token on every rank (ep > k);
    # the moe_tp = tp / ep ranks that share an expert (stride ep) then keep a collective of the
    # EP rank's 1/ep of the tokens, over max(d / ep, 1) of them per scale-up domain
    ep = d["ep"].astype(float)
    top_k = 0 if w.moe is None else w.moe.top_k
    if "ep_all_to_all" in d:  # the instance decides the dataflow (true needs ep > 1, eq. 1.5)
        a2a = np.asarray(d["ep_all_to_all"], dtype=float)
    else:  # the engine's dispatch (system.engine), else the one that moves fewer bytes
        a2a = ((ep > top_k) & (ep > 1) & (rules.ep_dispatch != "gather")).astype(float)
    moe_tp = tp / ep
    moe_tp_domain = np.maximum(domain / ep, 1.0)
    w_local = (d["weights_tier"] == "local").astype(float)
    kv_local = (d["kv_tier"] == "local").astype(float)
    # attention DP partitions the KV cache by sequence: every rank holds 1/TP of it, none twice
    shards = np.where(adp > 0, tp, kv_shards(w, d["tp"]))
    isl, osl = spec.input_tokens, spec.output_tokens
    # the KV cache's precision: the workload's, else the engine's rule (system.engine)
    wb, kvb = spec.weight_bytes_per_param, BYTES_PER_ELEMENT[rules.kv_precision(
        spec.precision, spec.kv_precision, WEIGHT_ONLY_KV_PRECISION)]
    eb = embedding_bytes_per_param(wb)  # embedding and LM head: never below 16 bit (eq. 2.14a)

    # attention priced apart (eq. 2.15m): at its own precision, and against the softmax's
    # exponentials where a chip has an exponential rate; else one compute term as before
    attn_prec = attention_precision(inst, spec)
    with_exps = exp_limited(inst)
    if with_exps or attn_prec != spec.precision:
        t.attention_precision = attn_prec

    # the share of a micro-batch's (and the batch's) sequences one TP rank handles on its own:
    # all of them, or under attention DP its 1/TP
    own_share = 1.0 - adp * (1.0 - 1.0 / tp)

    f = t.features
    f["one"] = np.ones_like(tp)
    f["tp"], f["pp"], f["dp"], f["batch"], f["micro_batch"] = tp, pp, dp, batch, micro
    f["layers_per_stage"] = layers_stage

    weights_by_phase: dict[str, Any] = {}
    for phase in PHASES:
        new = float(isl) if phase == "prefill" else 1.0
        ctx = 0.0 if phase == "prefill" else isl + osl / 2.0
        c = step_costs(w, batch=micro, new_tokens=new, context=ctx, weight_bytes_per_param=wb,
                       kv_bytes_per_element=kvb, embedding_bytes_per_param=eb, routing=spec.routing)
        head_flops = np.asarray(c.flops_lm_head, dtype=float)
        flops = ((np.asarray(c.flops, dtype=float) - head_flops) * frac + head_flops) / tp
        head_b = np.asarray(c.bytes_w_embed_head, dtype=float)
        weights_b = ((np.asarray(c.bytes_weights, dtype=float) - head_b) * frac + head_b) / tp
        # a skewed router under EP (eq. 4.6b): the busiest rank routes lam_tok x the mean rank's
        # tokens and reads lam_b x its expert bytes (both exactly 1 under uniform routing)
        lam_tok, lam_b = routing.busiest_rank_factors(spec.routing, w.moe.num_experts if w.moe else 1,
                                                      top_k, micro * new, ep)
        flops = flops + (lam_tok - 1.0) * np.asarray(c.flops_moe_routed, dtype=float) * frac / tp
        weights_b = weights_b + (lam_b - 1.0) * np.asarray(c.bytes_w_moe_routed, dtype=float) * frac / tp
        # attention DP (eq. 4.16): attention, norms, routers, dense MLPs, shared experts, embedding
        # and LM head whole on every rank (data-parallel); only the routed experts split over TP
        whole = (np.asarray(c.bytes_w_attn, dtype=float) + np.asarray(c.bytes_w_norms, dtype=float)
                 + np.asarray(c.bytes_w_router, dtype=float) + np.asarray(c.bytes_w_mlp_dense, dtype=float)
                 + np.asarray(c.bytes_w_moe_shared, dtype=float)) * frac + head_b
        weights_b = weights_b + adp * whole * (1.0 - 1.0 / tp)
        kv_b = (np.asarray(c.bytes_kv_read, dtype=float) + np.asarray(c.bytes_kv_write, dtype=float)) * frac / shards
        # activations between kernels (eq. 4.5a): always in the device's own memory; the tensors
        # around the all-reduces are whole on every TP rank, the rest split over TP
        act_rep = np.asarray(c.bytes_act_replicated, dtype=float)
        # attention DP (eq. 4.18): the attention side of the whole-tensor traffic touches the
        # rank's own sequences only
        own = ACTIVATION_BYTES * micro * new * attention_side_elements(w)
        act_rep = act_rep - adp * own * (1.0 - 1.0 / tp)
        act_b = (act_rep + np.asarray(c.bytes_act_sharded, dtype=float) / tp) * frac
        # the logits of each sequence's last new token, LM head to sampling (eq. 2.15l): whole on
        # every TP rank after the gather, on the last stage (charged like the head's FLOPs); under
        # attention DP a rank samples only its own sequences
        logits_b = np.asarray(c.bytes_logits, dtype=float) * own_share
        message = micro * new * w.hidden_size * ACTIVATION_BYTES
        # attention DP: a rank sends the next stage only its own sequences' hidden states
        message_p2p = message * own_share
        # two all-reduces per layer (attention output, MLP/MoE output) inside the TP group, as the
        # plan runs them; under "nccl" a ring, or in the switch where the scale-up switches reduce
        # (eq. 3.17a): its time in ring-equivalent bytes, and the bytes it moves (for the energy)
        ar = collectives.tp_allreduce(plan, tp, domain, message, crossing)
        # two all-reduces per layer; attention DP (eq. 4.17): one all-gather before and one
        # reduce-scatter after each MoE block instead (the bytes and steps of one all-reduce), and
        # none around a dense layer, which is data-parallel end to end
        per_layer = ((1.0 - adp) * 2.0 * layers_stage + adp * moe_stage) * (tp > 1)
        # expert parallelism by all-to-all (eq. 4.6a): in each MoE layer the MoE block's TP
        # collective becomes the same collective over the moe_tp ranks of an expert, of the EP
        # rank's 1/ep of the message, plus a dispatch and a combine over the EP group (each rank's
        # T/ep tokens x k selections of one 16-bit hidden vector)
        per_layer = per_layer - a2a * moe_stage
        per_layer_mt = a2a * moe_stage * (moe_tp > 1)
        ar_mt = collectives.tp_allreduce(plan, moe_tp, moe_tp_domain, message / ep, crossing)
        a2a_calls = 2.0 * a2a * moe_stage
        alltoall = network.expert_all_to_all(ep, domain, micro * new / ep * top_k * lam_tok, w.hidden_size * ACTIVATION_BYTES)
        # the LM head is split over the vocabulary (column-parallel) and its 16-bit logits are
        # all-gathered so that every rank holds the full distribution of each sequence's last new
        # token (eq. 4.9a): charged to the stage step like the head's FLOPs
        logits = collectives.tp_allgather(plan, tp, domain, micro * w.vocab_size * ACTIVATION_BYTES)
        # attention DP: every rank holds the whole LM head and gathers no logits
        has_tp = (tp > 1).astype(float) * (1.0 - adp)
        same_domain = tp * pp <= domain
        p2p = network.point_to_point(same_domain, message_p2p)
        has_p2p = (pp > 1).astype(float)
        f[f"{phase}.flops"] = flops
        if t.attention_precision is not None:  # the attention's share of the FLOPs, apart (eq. 2.15m)
            attn = np.asarray(c.flops_attn_score, dtype=float) * frac / tp
            f[f"{phase}.flops_attn"] = attn
            f[f"{phase}.flops_other"] = flops - attn
            if with_exps:  # the softmax's exponentials on one rank: its heads' (or sequences') share
                f[f"{phase}.exps"] = np.asarray(c.exponentials, dtype=float) * frac / tp
        f[f"{phase}.bytes_local"] = weights_b * w_local + kv_b * kv_local + act_b + logits_b
        # three parts of it, reported (evaluate's step breakdown), not costed apart
        f[f"{phase}.bytes_weights_local"] = weights_b * w_local
        f[f"{phase}.bytes_kv_local"] = kv_b * kv_local
        f[f"{phase}.bytes_act_replicated_local"] = act_rep * frac
        f[f"{phase}.bytes_pool"] = weights_b * (1 - w_local) + kv_b * (1 - kv_local)
        other_up = has_p2p * p2p.scale_up_B + a2a_calls * alltoall.scale_up_B
        f[f"{phase}.bytes_scale_up"] = per_layer * ar.timed + per_layer_mt * ar_mt.timed + has_tp * logits.timed + other_up
        # the bytes the links carry (the energy; the timed bytes above less a torus's link factor)
        f[f"{phase}.moved_scale_up"] = per_layer * ar.moved + per_layer_mt * ar_mt.moved + has_tp * logits.moved + other_up
        # the TP collectives' ring bytes where the ring crosses a two-socket server's CPU sockets
        # (eq. 3.17b): charged again at the chip's extra time per byte across them (a moe_tp ring,
        # stride ep over the TP group, crosses them where the TP group's does)
        f[f"{phase}.bytes_scale_up_cross"] = crossing * (per_layer * ar.cross + per_layer_mt * ar_mt.cross
                                                         + has_tp * logits.cross)
        # on links whose switches reduce (interconnect in_switch_reduction, eq. 4.9b)
        f[f"{phase}.bytes_scale_up_in_switch"] = (per_layer * ar.timed_switch + per_layer_mt * ar_mt.timed_switch
                                                  + has_tp * logits.timed + other_up)
        f[f"{phase}.moved_scale_up_in_switch"] = (per_layer * ar.moved_switch + per_layer_mt * ar_mt.moved_switch
                                                  + has_tp * logits.moved + other_up)
        f[f"{phase}.steps_scale_up"] = (per_layer * ar.up_steps + per_layer_mt * ar_mt.up_steps
                                        + has_tp * logits.up_steps + has_p2p * p2p.scale_up_steps
                                        + a2a_calls * alltoall.scale_up_steps)
        f[f"{phase}.bytes_scale_out"] = (per_layer * ar.out_B + per_layer_mt * ar_mt.out_B
                                         + has_tp * logits.out_B + has_p2p * p2p.scale_out_B
                                         + a2a_calls * alltoall.scale_out_B)
        f[f"{phase}.steps_scale_out"] = (per_layer * ar.out_steps + per_layer_mt * ar_mt.out_steps
                                         + has_tp * logits.out_steps + has_p2p * p2p.scale_out_steps
                                         + a2a_calls * alltoall.scale_out_steps)
        f[f"{phase}.layers"] = layers_stage
        # sequences of the stage step on one rank's host (each handled once per step, eq. 5.3);
        # attention DP: each rank schedules and samples only its own share
        f[f"{phase}.sequences"] = micro / (1.0 + adp * (tp - 1.0))
        weights_by_phase[phase] = weights_b
        # ring steps of the step's TP collectives (eq. 4.10a): 2(n-1) per all-reduce (two per
        # layer) and n-1 for the logits all-gather, on scale-up and scale-out; at every step the
        # ranks hand a block on and pass a flag barrier, whatever the message size
        # (the all-to-alls post all their sends at once and have no ring steps, as in placement P7)
        f[f"{phase}.collective_steps"] = (per_layer * (ar.up_steps + ar.out_steps)
                                          + per_layer_mt * (ar_mt.up_steps + ar_mt.out_steps)
                                          + has_tp * (logits.up_steps + logits.out_steps))
        # useful work for MFU: the whole replica's FLOPs of one micro-batch step
        f[f"{phase}.model_flops"] = np.asarray(c.flops, dtype=float) * np.ones_like(tp)

    # a rank's own sequences, divided (not multiplied by a rounded 1/TP): exact when TP divides them,
    # so the ceilings of eq. 4.19 do not count an iteration for a rounding error
    _token_budget(spec, f, rules.max_num_tokens, micro / (1.0 + adp * (tp - 1.0)), weights_by_phase["decode"], w_local)

    # memory footprint per device (full context at the end of generation)
    pc = param_counts(w)
    body = pc.total - pc.embedding - pc.lm_head
    # the ends (embedding, LM head) of the heaviest stage: both at PP 1, the larger one otherwise
    embed_dev = pc.embedding * eb / tp
    head_dev = pc.lm_head * eb / tp
    ends_dev = np.where(pp == 1, embed_dev + head_dev, np.maximum(embed_dev, head_dev))
    ends_whole = np.where(pp == 1, pc.embedding + pc.lm_head, max(pc.embedding, pc.lm_head)) * eb
    weights_dev = body * frac * wb / tp + ends_dev
    # attention DP (eq. 4.16): attention, norms, routers, dense MLPs, shared experts and the ends
    # whole on every rank
    whole_body = pc.attention + pc.norms + pc.router + pc.dense_mlp + pc.shared_experts
    weights_dev = weights_dev + adp * (whole_body * frac * wb * (1.0 - 1.0 / tp) + ends_whole - ends_dev)
    kv_dev = batch * np.asarray(kv_cache_bytes(w, isl + osl, kvb), dtype=float) * frac / shards
    f["weights_per_device_B"] = weights_dev
    f["kv_per_device_B"] = kv_dev
    # the engine sizes its KV pool as the fraction f of the memory left after weights (and the
    # runtime reserve, subtracted from the capacity): KV <= f (C - W - R) <=> W + KV / f <= C - R
    # (eq. 4.14, 4.14a)
    # and before it sizes the pool, the runtime allocates each sequence slot's decoding state
    # (eq. 4.14b): an engine built for the design's batch has one slot per sequence of it, all on
    # every TP rank of the last stage (the binding device, as the heavier end of the weights
    # above); under attention DP a rank keeps only its own sequences' slots. Always in the
    # device's own memory, whatever the KV cache's tier: W + S + KV / f <= C - R
    # (none under an engine whose profile charges none: decoder_state = "none")
    state_dev = batch * own_share * decoder_state_per_slot_B(w.vocab_size, tp, isl + osl) * (rules.decoder_state != "none")
    f["decoder_state_per_device_B"] = state_dev
    f["memory_local_B"] = weights_dev * w_local + state_dev + kv_dev * kv_local / inst.calibration.kv_cache_free_fraction
    # pooled tier: one shared copy of the weights for the whole system, every device's KV cache
    weights_all = body * wb + (pc.embedding + pc.lm_head) * eb
    f["memory_pool_B"] = weights_all * (1 - w_local) + devices * kv_dev * (1 - kv_local)
    # its two parts: the weights (stored once per copy, model/appliances.py) and the KV cache
    f["memory_pool_weights_B"], f["memory_pool_kv_B"] = weights_all * (1 - w_local), devices * kv_dev * (1 - kv_local)

    # metric scale factors per phase (model.md §5)
    steps_decode = max(osl - 1, 0)
    tokens_round = batch * dp * (osl if spec.phase != "prefill" else isl)
    f["scale.tpot_s|decode"] = pp
    f["scale.ttft_s|prefill"] = 2 * pp - 1
    if spec.phase == "decode":
        f["scale.time_per_token_s|decode"] = pp / (batch * dp)
    elif spec.phase == "prefill":
        f["scale.time_per_token_s|prefill"] = pp / tokens_round
    else:
        f["scale.time_per_token_s|prefill"] = pp / tokens_round
        f["scale.time_per_token_s|decode"] = pp * steps_decode / tokens_round
    for phase in PHASES:
        key = f"scale.time_per_token_s|{phase}"
        if key in f:
            f[f"scale.energy_per_token_J|{phase}"] = devices * f[key]
    for k in list(f):
        f[k] = np.broadcast_to(np.asarray(f[k], dtype=float), (t.size,)).copy()

