"""The mapping problem's numbers, derived once from an instance (formulations/mapping.md §1).

:func:`build_problem` turns a mapping instance (:mod:`codesign.kinds.mapping.spec`) into the
:class:`codesign.model.mapping.MappingProblem` the model evaluates designs on: one decoder layer's
costs for one micro-batch (:func:`codesign.model.step.step_costs`, eq. 9.2-9.6), the first and last
stages' extra stores and reads, each device's seconds and joules per FLOP and byte, the tiers.

The serving engine's rules (``system.engine``, :mod:`codesign.model.engines`; none: the physics
alone) set the KV cache's precision when the workload states none, and whether the last stage
holds a decoding state for each of the B sequence slots it samples for (eq. 4.14b of model.md:
TensorRT-LLM's, ``decoder_state = "trtllm"``; the physics holds none). A micro-batch is one
executor's batch: an engine that cannot run it as one iteration (``max_batch_size``,
``max_num_tokens``) is refused; its host time per sequence of a step (``host_us_per_sequence``) is
charged to every stage per period, m sequences (eq. 9.2b; model.md eq. 5.3's m·t_host).

A device group's ``tp`` devices form each of its stages (tensor parallelism inside a stage, eq.
9.2a, as the grid's schedule splits a TP group: model.md §4): every device holds and reads 1/tp of
the stage's weights, KV cache (tp divides the KV heads), embedding and LM head and computes 1/tp of
its FLOPs, over its own memory, host link and optical ports; the activations around the
all-reduces and the logits are whole on every device, as is the decoding state. The stage's figures
(:class:`codesign.model.mapping.Device`) are therefore the device's with times per FLOP and per
byte over tp and capacities and static power times tp, and its byte totals count the whole tensors
tp times. Each layer adds two all-reduces of the micro-batch's hidden states (m x hidden x 2 B)
over the TP group's scale-up links and the last stage an all-gather of the logits
(:mod:`codesign.model.collectives`, the algorithm by the engine's rule, else the physics' fastest),
exposed. No EP dispatch applies (a stage is one TP group).
"""

from __future__ import annotations

from typing import Any

from codesign import catalog
from codesign.errors import InputError
from codesign.model import collectives
from codesign.model.engines import PHYSICS_ALLREDUCE, Rules, chip_rules, executor_excess
from codesign.model.hardware import achieved_memory_Bps, math_format, usable_capacity_B
from codesign.model.mapping import Device, LayerCosts, MappingProblem
from codesign.model.mapping_budgets import parse_mapping_budget
from codesign.model.schedule import decoder_state_per_slot_B
from codesign.model.step import step_costs
from codesign.model.tiers import memory_tiers
from codesign.model.topology import ALLREDUCE_MODES
from codesign.model.units import (
    BYTES_PER_ELEMENT,
    MICRO,
    NANO,
    PICO,
    WEIGHT_ONLY_KV_PRECISION,
    GBps,
    GiB,
)
from codesign.model.workload import (
    ACTIVATION_BYTES,
    embedding_bytes_per_param,
    layer_weight_params,
    load_workload,
)

BITS_PER_BYTE = 8
#: host-link interconnect and host-memory technology used for the host tier's energy
HOST_LINK = "pcie-gen5-x16"
HOST_MEMORY = "ddr5"


def engine_rules(spec: Any) -> Rules:
    """The rules of a mapping file's ``system.engine`` (None: the physics) on every chip its
    device groups may use; InputError if the engine's rules differ between them."""
    chips = sorted({c for g in spec.devices for c in (g.chip if isinstance(g.chip, list) else [g.chip])})
    return chip_rules(spec.system.engine, chips)


def tp_reason(w: Any, tp: int, chip: Any) -> str | None:
    """Why a stage of ``tp`` devices of ``chip`` cannot serve workload ``w``, else None: its KV
    heads split evenly (no copies: tp divides them; MLA's latent is not split) inside one scale-up
    domain (the all-reduce's links)."""
    if tp == 1:
        return None
    if w.mla is not None:
        return "tensor parallelism inside a stage needs a workload without MLA (its latent KV cache is not split)"
    if w.num_kv_heads % tp or w.num_attention_heads % tp:
        return f"tp = {tp} must divide the {w.num_kv_heads} KV heads and {w.num_attention_heads} query heads"
    if tp > chip.scale_up_domain_size:
        return f"tp = {tp} exceeds {chip.id}'s scale-up domain of {chip.scale_up_domain_size} devices"
    return None


def tp_collectives(rules: Rules, chip: Any, cal: Any, tp: int, message_B: float, logits_B: float
                   ) -> tuple[float, float, float, float]:
    """(s, J) of one layer's two all-reduces of ``message_B`` and (s, J) of the logits all-gather of
    ``logits_B`` in a stage of ``tp`` devices of ``chip`` (all its devices' energy): the grid's
    collectives (:func:`codesign.model.collectives.tp_allreduce`, ``tp_allgather``) on the chip's
    scale-up link, timed bytes at its rate plus steps at its latency and the calibration's time per
    collective step (model.md eq. 5.3), the algorithm the engine's rule (its ``allreduce`` or size
    bands), else the physics' fastest (eq. 3.17c). Zeros for tp = 1."""
    if tp == 1:
        return 0.0, 0.0, 0.0, 0.0
    up = catalog.load_interconnect(chip.scale_up_interconnect)
    s_B = 1.0 / (chip.scale_up_bandwidth_GBps_per_direction * GBps * cal.network_efficiency)
    lat, soft = up.latency_ns * NANO, cal.collective_step_latency_us * MICRO
    J_B = up.energy_pJ_per_bit * BITS_PER_BYTE * PICO
    reduces = bool(up.in_switch_reduction)
    mode = rules.allreduce or PHYSICS_ALLREDUCE
    if mode not in ALLREDUCE_MODES:  # an engine's name: its all-reduce by message size
        plan = collectives.Plan("nccl", None, reduces=reduces, bands=rules.allreduce_bands)
    elif mode == "fastest":
        plan = collectives.Plan(mode, None, s_B, 0.0, lat + soft, reduces)
    else:
        if mode == "in-switch" and not reduces:
            raise InputError("an in-switch all-reduce needs scale-up switches that reduce", key="system.engine",
                             value=rules.engine, expected=f"a chip whose scale-up switches reduce, not {chip.id}")
        plan = collectives.Plan(mode)
    domain = chip.scale_up_domain_size
    ar = collectives.tp_allreduce(plan, tp, domain, message_B, 0.0)
    timed = float(ar.timed_switch if reduces else ar.timed)  # the grid's reduce_in_switch / reduce_ring columns
    moved = float(ar.moved_switch if reduces else ar.moved)
    steps = float(ar.up_steps)
    s_layer = 2.0 * (timed * s_B + steps * (lat + soft))
    J_layer = 2.0 * tp * moved * J_B
    g = collectives.tp_allgather(plan, tp, domain, logits_B)
    return s_layer, J_layer, float(g.timed) * s_B + float(g.up_steps) * (lat + soft), tp * float(g.moved) * J_B


def build_problem(inst) -> MappingProblem:
    """Derive the numbers of a mapping instance (:class:`codesign.kinds.mapping.spec.MappingInstance`)."""
    s = inst.spec
    if any(isinstance(v, list) for v in [*(x for g in s.devices for x in (g.pool_ports, g.chip)), s.appliance and s.appliance.modules]):
        raise ValueError(f"{inst.name} decides its hardware: build the problem of one hardware design "
                         "(codesign.kinds.mapping.joint.instance_at)")
    w = load_workload(s.workload.workload)
    if s.workload.layers is not None:
        w = w.model_copy(update={"num_layers": s.workload.layers})
    stages = sum(g.count for g in s.devices)
    m = s.workload.batch // stages
    rules = engine_rules(s)
    if (excess := executor_excess(rules, m)) is not None:
        raise InputError(f"{excess}; each pipeline stage runs a micro-batch of {m} sequences",
                         file=getattr(inst, "source", None), key="workload.batch", value=s.workload.batch,
                         expected=f"a micro-batch (batch / {stages} stages) the engine runs in one iteration",
                         suggestion="a smaller batch, more stages, or another system.engine")
    wb = BYTES_PER_ELEMENT[s.workload.precision]
    kvb = BYTES_PER_ELEMENT[rules.kv_precision(s.workload.precision, s.workload.kv_precision, WEIGHT_ONLY_KV_PRECISION)]
    eb = embedding_bytes_per_param(wb)
    c = float(s.workload.context_tokens)
    L = w.num_layers
    # one micro-batch decoding one token; every layer is alike, so per-layer = whole / L
    step = step_costs(w, batch=m, new_tokens=1, context=c, weight_bytes_per_param=wb, kv_bytes_per_element=kvb, embedding_bytes_per_param=eb)
    full = step_costs(w, batch=s.workload.batch, new_tokens=0, context=c, weight_bytes_per_param=wb, kv_bytes_per_element=kvb, embedding_bytes_per_param=eb)
    layer_flops = float(step.flops - step.flops_lm_head) / L
    w_read = float(step.bytes_w_attn + step.bytes_w_mlp_dense + step.bytes_w_moe_routed + step.bytes_w_moe_shared + step.bytes_w_router) / L
    norms_layer = float(step.bytes_w_norms) - wb * w.hidden_size
    w_read += norms_layer / L
    lp = layer_weight_params(w)
    w_store = wb * (lp.attention + (lp.dense_mlp if lp.dense_layers else 0) + lp.routed_experts + lp.shared_experts + lp.router + lp.layer_norms)
    kv_read = float(step.bytes_kv_read + step.bytes_kv_write) / L
    kv_store = float(full.bytes_kv_read) / L  # B sequences x c cached tokens
    head_params = w.vocab_size * w.hidden_size
    embed_rows_B = eb * min(m, w.vocab_size) * w.hidden_size
    first_store = eb * head_params
    # LM head (tied: a second copy) + final norm, and under an engine that keeps one the decoding
    # state of the B sequence slots the last stage samples for (eq. 4.14b of model.md: whole on
    # each of the last stage's tp devices, the vocabulary padded to a multiple of tp)
    t_last = s.devices[-1].tp
    state = s.workload.batch * decoder_state_per_slot_B(w.vocab_size, t_last, c) if rules.decoder_state != "none" else 0
    last_store = (eb * head_params) + wb * w.hidden_size + t_last * state
    # LM head and final norm; the micro-batch's logits from the head through sampling (eq. 2.15l),
    # whole on each of the last stage's devices after the gather
    last_read = eb * head_params + wb * w.hidden_size + t_last * float(step.bytes_logits)
    # activations between kernels (model.md eq. 2.15j, k): in the stage devices' own memories
    # whatever tier holds the layer's weights; the replicated part whole on each of a stage's tp
    # devices (Device.act_B), the sharded part split; LayerCosts keeps one device's (tp = 1)
    act_rep, act_sh = float(step.bytes_act_replicated) / L, float(step.bytes_act_sharded) / L
    layer = LayerCosts(layer_flops, w_read, w_store, kv_read, kv_store, float(step.bytes_act_replicated + step.bytes_act_sharded) / L)
    message = m * w.hidden_size * ACTIVATION_BYTES  # the micro-batch's hidden states, 16 bit
    logits_B = m * w.vocab_size * ACTIVATION_BYTES

    devices: list[Device] = []
    host_link = catalog.load_interconnect(HOST_LINK)
    host_mem = catalog.load_memory(HOST_MEMORY)
    for g in s.devices:
        chip = catalog.load_chip(g.chip)
        cal = inst.calibration.for_chip(g.chip)
        t = g.tp
        if (why := tp_reason(w, t, chip)) is not None:
            raise InputError(why, file=getattr(inst, "source", None), key=f"devices.{g.name}.tp", value=t)
        s_comm, J_comm, s_last, J_last = tp_collectives(rules, chip, cal, t, message, logits_B)
        mem = catalog.load_memory(chip.memory_technology)
        p = math_format(chip.peak_dense_TFLOPS, s.workload.precision, f"chip {g.chip} peak_dense_TFLOPS")
        peak = chip.peak_dense_TFLOPS[p] * 1e12
        bw = (g.memory_bandwidth_GBps or chip.memory_bandwidth_GBps) * GBps
        cap = (g.memory_capacity_GiB or chip.memory_capacity_GiB) * GiB
        for i in range(g.count):
            devices.append(
                Device(
                    name=f"{g.name}[{i}]",
                    group=g.name,
                    chip=g.chip,
                    ports=g.pool_ports,
                    s_per_flop=1.0 / (peak * cal.compute_efficiency_at(p) * t),
                    s_per_layer=cal.layer_overhead_us * 1e-6,
                    s_per_B_local=1.0 / (float(achieved_memory_Bps(bw, cal)) * t),
                    s_per_B_host=1.0 / (chip.host_link_bandwidth_GBps_per_direction * GBps * cal.network_efficiency * t),
                    local_capacity_B=float(usable_capacity_B(cap, cal)) * t,
                    host_capacity_B=g.host_capacity_GiB * GiB * t,
                    J_per_flop=cal.compute_power_fraction * chip.tdp_W / peak,
                    J_per_B_local=mem.energy_pJ_per_bit * BITS_PER_BYTE * PICO,
                    J_per_B_host=(host_link.energy_pJ_per_bit + host_mem.energy_pJ_per_bit) * BITS_PER_BYTE * PICO,
                    static_W=cal.static_power_fraction * chip.tdp_W * t,
                    stream_overlap=cal.stream_overlap,
                    tp=t,
                    act_B=layer.act_B if t == 1 else t * act_rep + act_sh,
                    s_per_layer_comm=s_comm,
                    J_per_layer_comm=J_comm,
                    s_last_comm=s_last,
                    J_last_comm=J_last,
                    s_host=m * rules.host_us_per_sequence * MICRO,
                )
            )

    pool = memory_tiers(s.appliance)
    tiers = pool.tiers

    def allowed(kinds: list[str]) -> list[int]:
        return [i for i, t in enumerate(tiers) if t.kind in kinds]

    return MappingProblem(
        inst=inst,
        layers=L,
        micro_batch=m,
        layer=layer,
        first_store_B=first_store,
        first_read_B=embed_rows_B,
        last_store_B=last_store,
        last_read_B=last_read,
        last_flops=float(step.flops_lm_head),
        devices=devices,
        tiers=tiers,
        weight_tiers=allowed(s.tiers.weights),
        kv_tiers=allowed(s.tiers.kv),
        modules=pool.modules,
        port_Bps=pool.port_Bps,
        switch_Bps=pool.switch_Bps,
        pool_J_per_B_path=pool.path_J_per_B,
        assumed_device_Bps=pool.assumed_device_Bps,
        max_devices_per_module=pool.max_devices_per_module,
        tpot_budget_s=s.budgets.tpot_s,
        objective=s.objective.metric,
        module_tiers=pool.module_tiers,
        budgets=tuple(parse_mapping_budget(b.expr, name=b.name, source="budgets.custom") for b in s.budgets.custom),
        hardware_static_W=0.0 if s.appliance is None else (s.appliance.port_static_power_W or 0.0) * (
            sum(x.ports * x.tp for x in devices) + pool.module_ports),
        devices_tdp_W=sum(g.count * g.tp * catalog.load_chip(g.chip).tdp_W for g in s.devices),
        power_budget_W=s.budgets.power_W,
    )
