"""The placement problem's numbers, derived once from an instance (placement.md §1-2).

:func:`build_problem` turns a placement instance (:mod:`codesign.kinds.placement.spec`) into the
:class:`codesign.model.placement.PlacementProblem` the model evaluates designs on: the routing
profile (P1, P2), a device's per-MoE-layer costs and the phases every device runs alike (C_fix),
the all-to-all's bytes per selection and its links (P5), the TP all-reduce's message (P8a), the
topology graph's path energies (P10) and the capacity rule's fixed and per-expert bytes.

The serving engine's rules (``system.engine``, :mod:`codesign.model.engines`; none: the physics
alone) set the KV cache's precision when the workload states none, and whether every TP rank holds
a decoding state for each of its group's sequence slots (eq. 4.14b of model.md: TensorRT-LLM's,
``decoder_state = "trtllm"``; the physics holds none). A TP group is one executor: an engine that
cannot run its B/G sequences as one iteration (``max_batch_size``, ``max_num_tokens``) is refused,
as is one that gathers every token on every rank (``ep_dispatch = "gather"``): the model prices the
all-to-all dispatch and combine (P5). The TP all-reduce is the ring of P8 under every engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from codesign import catalog
from codesign.errors import InputError
from codesign.model import network
from codesign.model.engines import chip_rules, executor_excess
from codesign.model.hardware import achieved_memory_Bps, math_format, usable_capacity_B
from codesign.model.placement import BITS_PER_BYTE, FLOPS_PER_MAC, PlacementProblem
from codesign.model.routing import expert_routing
from codesign.model.schedule import decoder_state_per_slot_B
from codesign.model.step import activation_parts, step_costs
from codesign.model.units import BYTES_PER_ELEMENT, PICO, WEIGHT_ONLY_KV_PRECISION, GBps, GiB
from codesign.model.workload import (
    ACTIVATION_BYTES,
    embedding_bytes_per_param,
    kv_cache_bytes,
    layer_weight_params,
    load_workload,
)


def build_problem(inst) -> PlacementProblem:
    """Derive the numbers of a placement instance (:class:`codesign.kinds.placement.spec.PlacementInstance`)."""
    s = inst.spec
    wl = s.workload
    w = load_workload(wl.workload)
    upd: dict[str, Any] = {}
    if wl.layers is not None:
        upd["num_layers"] = wl.layers
    moe = w.moe
    if wl.experts is not None:
        moe = moe.model_copy(update={"num_experts": wl.experts, "top_k": min(moe.top_k, wl.experts)})
        upd["moe"] = moe
    if upd:
        w = w.model_copy(update=upd)
    E, k = moe.num_experts, moe.top_k
    D, t, B = s.devices.count, s.devices.tp, wl.batch
    G = D // t
    rules = chip_rules(s.system.engine, [s.devices.chip])
    source = getattr(inst, "source", None)
    if (excess := executor_excess(rules, B / G)) is not None:
        raise InputError(f"{excess}; each TP group of {t} runs {B // G} sequences", file=source,
                         key="workload.batch", value=B, expected=f"B / {G} groups the engine runs in one iteration",
                         suggestion="a smaller batch, or another system.engine")
    if rules.ep_dispatch == "gather":
        raise InputError(f"engine {rules.engine!r} gathers every token on every rank (ep_dispatch = gather); the "
                         "placement model prices the all-to-all dispatch and combine (placement.md eq. P5)",
                         file=source, key="system.engine", value=rules.engine,
                         expected="an engine whose EP dispatch is the all-to-all (or none: the physics)")
    wb = BYTES_PER_ELEMENT[wl.precision]
    kvb = BYTES_PER_ELEMENT[rules.kv_precision(wl.precision, wl.kv_precision, WEIGHT_ONLY_KV_PRECISION)]
    eb = embedding_bytes_per_param(wb)
    c = float(wl.context_tokens)
    L, Lm = w.num_layers, w.moe_layers
    Ld = L - Lm
    lp = layer_weight_params(w)
    h = w.hidden_size

    # routing profile: each expert's selection and touch probabilities, in classes (P1, P2)
    r = s.routing
    p, q, classes = expert_routing(r.profile, E, k, B, exponent=r.zipf_exponent, levels=r.levels, weights=r.weights)

    # chip
    chip = catalog.load_chip(s.devices.chip)
    cal = inst.calibration.for_chip(s.devices.chip)
    mem = catalog.load_memory(chip.memory_technology)
    prec = math_format(chip.peak_dense_TFLOPS, wl.precision, f"chip {s.devices.chip} peak_dense_TFLOPS")
    peak = chip.peak_dense_TFLOPS[prec] * 1e12
    bw = (s.devices.memory_bandwidth_GBps or chip.memory_bandwidth_GBps) * GBps
    cap_raw = (s.devices.memory_capacity_GiB or chip.memory_capacity_GiB) * GiB
    s_flop = 1.0 / (peak * cal.compute_efficiency_at(prec))
    s_byte = 1.0 / float(achieved_memory_Bps(bw, cal))
    sigma = cal.stream_overlap
    J_flop = cal.compute_power_fraction * chip.tdp_W / peak
    J_byte = mem.energy_pJ_per_bit * BITS_PER_BYTE * PICO
    layer_s = cal.layer_overhead_us * 1e-6
    step_s = cal.collective_step_latency_us * 1e-6  # software time of one TP ring step

    def comb(cflops: float, mbytes: float) -> float:
        ct, mt = cflops * s_flop, mbytes * s_byte
        return (1 - sigma) * (ct + mt) + sigma * max(ct, mt)

    # activations between kernels (model.md eq. 2.15j, k): whole on every rank of a TP group, or
    # split over it; the MoE permutation and shared experts for this device's B/D tokens; the
    # routed experts' intermediates per selection (eq. P4a)
    act = activation_parts(w)
    act_group = ACTIVATION_BYTES * (B / G)

    # costs of one group's tokens (B/G sequences), whole model
    st = step_costs(w, batch=B / G, new_tokens=1, context=c, weight_bytes_per_param=wb, kv_bytes_per_element=kvb, embedding_bytes_per_param=eb)
    kv_shard = 1 if w.mla is not None else min(t, w.num_kv_heads)
    # attention phase per layer, per device (TP over the group)
    attn_flops = float(st.flops_attn_proj + st.flops_attn_score) / (L * t)
    attn_bytes = (float(st.bytes_w_attn) / (L * t) + float(st.bytes_w_norms) / L + float(st.bytes_kv_read + st.bytes_kv_write) / (L * kv_shard)
                  + act_group * (act.replicated_per_layer + act.attention_per_layer / t))
    dense_flops = float(st.flops_mlp_dense) / (max(Ld, 1) * t)
    dense_bytes = float(st.bytes_w_mlp_dense) / (max(Ld, 1) * t) + act_group * act.dense_mlp_per_layer / t
    head_flops = float(st.flops_lm_head) / t
    # the group's logits from the LM head through sampling, whole on every rank after the gather (eq. 2.15l)
    head_bytes = float(st.bytes_w_embed_head) / t + act_group * act.per_step + float(st.bytes_logits)
    moe_fixed_flops = float(st.flops_moe_shared + st.flops_router) / (Lm * t)  # this device's B/D tokens
    moe_fixed_bytes = (float(st.bytes_w_moe_shared + st.bytes_w_router) / Lm  # replicated on every device
                       + ACTIVATION_BYTES * (B / D) * (act.moe_permutation_per_layer + act.moe_shared_per_layer))
    fixed_time = L * (comb(attn_flops, attn_bytes) + layer_s) + Ld * comb(dense_flops, dense_bytes) + comb(head_flops, head_bytes)
    fixed_flops = L * attn_flops + Ld * dense_flops + head_flops + Lm * moe_fixed_flops
    fixed_bytes = L * attn_bytes + Ld * dense_bytes + head_bytes + Lm * moe_fixed_bytes
    static_W = cal.static_power_fraction * chip.tdp_W
    fixed_energy = D * (fixed_flops * J_flop + fixed_bytes * J_byte)

    # links
    up_ic = catalog.load_interconnect(chip.scale_up_interconnect)
    out_ic = catalog.load_interconnect(chip.scale_out_interconnect)
    if up_ic.in_switch_reduction and t >= network.IN_SWITCH_MIN_RANKS:
        # eq. P8 prices every group's all-reduce as a ring; the main model's in-switch all-reduce
        # (model.md eq. 3.17a) would make its cost differ from the step model's (placement.md §2)
        raise InputError(
            f"a TP group of {t} on {up_ic.id}, whose switches reduce in the network, is not modelled by placement",
            file=getattr(inst, "source", None), key="devices.tp", value=t,
            expected=f"tp <= {network.IN_SWITCH_MIN_RANKS - 1} on {up_ic.id} (in-switch all-reduce from "
                     f"{network.IN_SWITCH_MIN_RANKS} ranks on)",
            suggestion="use a smaller TP group, or a chip whose scale-up links reduce in a ring",
        )
    dv = s.devices  # the explicit domain sizes, else domain_size (default: the chip's) repeated
    domains = list(dv.domains) if dv.domains is not None else network.domain_sizes(
        dv.count, dv.domain_size or chip.scale_up_domain_size)
    topo = network.placement_topology(domains, up_ic.energy_pJ_per_bit, out_ic.energy_pJ_per_bit)
    domain_of = np.repeat(np.arange(len(domains)), domains)
    # path energies from the graph (a pair in one domain, a pair across two domains)
    J_up = J_out = 0.0
    big = int(np.argmax(domains))
    if domains[big] > 1:
        a, b = (int(x) for x in np.flatnonzero(domain_of == big)[:2])
        J_up = network.path_energy_pJ_per_bit(topo, f"dev{a}", f"dev{b}") * BITS_PER_BYTE * PICO
    if len(domains) > 1:
        J_out = network.path_energy_pJ_per_bit(topo, "dev0", f"dev{D - 1}") * BITS_PER_BYTE * PICO
    eff = cal.network_efficiency
    up_Bps = chip.scale_up_bandwidth_GBps_per_direction * GBps * eff
    out_Bps = chip.scale_out_bandwidth_GBps_per_direction * GBps * eff
    net = s.network
    a2a_lat = (out_ic.latency_s if len(domains) > 1 else up_ic.latency_s if D > 1 else 0.0)

    # capacity
    kv_store = (B / G) * float(kv_cache_bytes(w, c, kvb)) / kv_shard
    head_params = w.vocab_size * h * (1 if w.tied_embeddings else 2)
    fixed_store = (
        wb * (L * lp.attention + Ld * lp.dense_mlp) / t
        + wb * Lm * (lp.shared_experts + lp.router)
        + wb * (L * lp.layer_norms + h)
        + eb * head_params / t
        + kv_store
        # under an engine that keeps one, the decoding state of the group's sequence slots, whole
        # on each of its TP ranks (eq. 4.14b of model.md)
        + ((B / G) * decoder_state_per_slot_B(w.vocab_size, t, c) if rules.decoder_state != "none" else 0.0)
    )
    expert_bytes = wb * lp.routed_expert
    # TP: n_ar all-reduces of M_ar and the logits all-gather of M_lg (16-bit logits of each
    # sequence's new token, model.md eq. 4.9a) per step
    M_ar = (B / G) * h * net.activation_bytes_per_element
    M_lg = (B / G) * w.vocab_size * ACTIVATION_BYTES
    n_ar = (L + Ld) if t > 1 else 0
    return PlacementProblem(
        inst=inst,
        devices=D,
        domains=domains,
        domain_of=domain_of,
        experts=E,
        top_k=k,
        p=p,
        q=q,
        classes=classes,
        tp=t,
        batch=B,
        moe_layers=Lm,
        s_per_flop=s_flop,
        s_per_B=s_byte,
        sigma=sigma,
        J_per_flop=J_flop,
        J_per_B_mem=J_byte,
        static_W=static_W,
        flops_per_selection=FLOPS_PER_MAC * lp.routed_expert,
        expert_bytes=expert_bytes,
        act_per_selection_B=ACTIVATION_BYTES * act.routed_per_selection,
        moe_fixed_flops=moe_fixed_flops,
        moe_fixed_bytes=moe_fixed_bytes,
        fixed_time_s=fixed_time,
        fixed_energy_J=fixed_energy,
        dispatch_B_per_selection=(B / D) * h * net.dispatch_bytes_per_element,
        combine_B_per_selection=(B / D) * h * net.combine_bytes_per_element,
        up_Bps=up_Bps,
        out_Bps=out_Bps,
        up_socket=chip.scale_up_socket_size,
        cross_socket_fraction=chip.cross_socket_bandwidth_fraction or 1.0,
        # a TP ring step: the link's latency and the software step latency (eq. P8; model.md 3.13d)
        up_latency_s=up_ic.latency_s + step_s,
        out_latency_s=out_ic.latency_s + step_s,
        a2a_latency_s=a2a_lat,
        J_per_B_up=J_up,
        J_per_B_out=J_out,
        allreduce_B=M_ar,
        allreduces=n_ar,
        tp_calls=n_ar + 0.5 if t > 1 else 0.0,
        tp_message_B=(n_ar * M_ar + 0.5 * M_lg) / (n_ar + 0.5) if t > 1 else M_ar,
        fixed_store_B=fixed_store,
        expert_store_B=Lm * expert_bytes,
        capacity_B=float(usable_capacity_B(cap_raw, cal)),
        tpot_budget_s=s.budgets.tpot_s,
        objective=s.objective.metric,
        topology=topo,
    )
