"""The benchmark engine's rules: how a measurement row becomes one design the model evaluates.

Each row becomes a one-design catalog instance (:func:`row_instance`): chip = the row's GPU,
devices = ``num_gpus``, the chip's own scale-up domain, the row's workload, precision, KV-cache
precision and input/output lengths, phase ``both``, TP/PP/EP (and attention DP) fixed to the
row's, and the engine's tokens per iteration (``max_num_tokens``, model.md eq. 4.19) where known.
The batch per model replica is

* offline maximum load (empty ``concurrency``): the largest batch (a multiple of ``batch_step``)
  whose KV cache the model's own ``memory-capacity-local`` constraint admits (the engine fills
  memory with KV cache), with the decoding state of the engine's ``max_batch_size`` sequence slots
  taken off the memory first (eq. 4.14b), and at most the engine's maximum batch and the run's
  requests per replica (:func:`max_batch`);
* fixed concurrency: ``ceil(concurrency / dp)``, at most the engine's own maximum batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from codesign import catalog
from codesign.calibration.rows import METRICS, Row
from codesign.errors import InputError
from codesign.kinds.grid.spec import Instance, InstanceFile
from codesign.model.calibration import CalibrationSet, shipped
from codesign.model.engines import Rules
from codesign.model.evaluate import Evaluation, evaluate, holds
from codesign.model.schedule import decoder_state_per_slot_B, structural_reason
from codesign.model.units import BYTES_PER_ELEMENT, GiB
from codesign.model.workload import load_workload
from codesign.schema import as_name

#: maximum batch of a measured engine whose own is not known (``Row.engine_max_batch``, which takes
#: precedence): trtllm-bench's tuning heuristic caps max_batch_size at 4096 (``finetune_setting``:
#: ``min(kv_cache_max_requests, 4096)``). ``cap=None`` drops every cap.
ENGINE_MAX_BATCH = 4096

#: the calibration fields of the memory rule (eq. 3.21, 4.14a)
MEMORY_FIELDS = ("usable_memory_fraction", "runtime_reserve_GiB", "kv_cache_free_fraction")
#: the engine sizes the KV cache from the memory that is free after weights and the runtime's own
#: allocations (TensorRT-LLM: cudaMemGetInfo), so the whole device counts: u = 1
ENGINE_USABLE_FRACTION = 1.0


#: the rules a row's instance is evaluated under (``engine_rules``, read by
#: ``engines.instance_rules``): the physics, with every sequence of the row's batch charged
#: TensorRT-LLM's decoding state (eq. 4.14b) whatever the row's engine, the validation's rule since
#: eq. 4.14b (model.md §4.6). The row's engine enters through the row: its maximum batch, token
#: budget, KV precision, all-reduce (``system.allreduce``, NCCL's where its profile has none), EP
#: dispatch and its other slots' decoding state (:func:`engine_state_B`), and its host time per
#: sequence of a step (:func:`row_rules`).
ROW_RULES = Rules(decoder_state="trtllm")


def row_rules(row: Row) -> Rules:
    """The rules of the row's instance: :data:`ROW_RULES` with the row's engine's host time per
    sequence of a step (``Rules.host_us_per_sequence``; eq. 5.3's host term, added to the
    calibration's)."""
    host_us = row.rules.host_us_per_sequence
    return replace(ROW_RULES, host_us_per_sequence=host_us) if host_us else ROW_RULES


def row_instance(row: Row, batch: int, *, calibration: CalibrationSet | None = None) -> Instance:
    """The one-design catalog instance of ``row`` at ``batch`` sequences per model replica."""
    chip = catalog.load_chip(row.gpu)
    raw = {
        "name": as_name(f"validate-{row.id}"),  # a row id may hold any character; a name may not
        "description": f"measurement row {row.id}",
        "system": {"devices": row.num_gpus, "scale_up_domain": chip.scale_up_domain_size,
                   # the row's engine's all-reduce profile (codesign.model.engines), else NCCL's
                   "allreduce": row.rules.allreduce or "nccl"},
        "hardware": {"family": "catalog", "chip": row.gpu},
        "workloads": [
            {
                "name": "main",
                "workload": row.model,
                "precision": row.precision,
                "kv_precision": row.kv_cache_precision,
                "phase": "both",
                "input_tokens": row.isl,
                "output_tokens": row.osl,
                **({} if row.engine_max_tokens is None else {"max_tokens_per_iteration": row.engine_max_tokens}),
                "decisions": {"tp": [row.tp], "pp": [row.pp], "ep": [row.ep], "batch": [int(batch)],
                              **({"attention_dp": [True]} if row.attention_dp_on else {}),
                              # the engine's EP dispatch: a gather (TensorRT-LLM 1.0 sends MoE tokens by
                              # all-to-all only over multi-node NVLink, which the measured systems lack),
                              # unless its profile sends them where that moves fewer bytes (eq. 4.6a)
                              **({"ep_all_to_all": [False]}
                                 if row.ep > 1 and row.rules.ep_dispatch != "fewer-bytes" else {})},
            }
        ],
    }
    return Instance(InstanceFile.model_validate(raw), source=None, raw=raw, calibration=calibration,
                    engine_rules=row_rules(row))


def evaluate_row(row: Row, batch: int, *, calibration: CalibrationSet | None = None) -> Evaluation:
    """``evaluate`` of the row's instance at ``batch`` (the model, nothing else)."""
    inst = row_instance(row, batch, calibration=calibration)
    return evaluate(inst, inst.baseline())


def memory_audit(ev: Evaluation) -> Any:
    """The evaluation's ``memory-capacity-local`` constraint row."""
    return next(a for a in ev.audit if a.name.startswith("memory-capacity-local"))


def skip_reason(row: Row) -> str | None:
    """Why ``row`` cannot be predicted, or None."""
    if row.metric not in METRICS:
        return f"unsupported metric {row.metric!r} (supported: {', '.join(METRICS)})"
    if not (math.isfinite(row.value) and row.value > 0):
        return f"measured value {row.value!r} is not a positive number"
    try:
        w = load_workload(row.model)
    except InputError as exc:
        return f"unknown model {row.model!r}" + (f" ({exc.suggestion})" if exc.suggestion else "")
    try:
        chip = catalog.load_chip(row.gpu)
    except InputError as exc:
        return f"unknown chip {row.gpu!r}" + (f" ({exc.suggestion})" if exc.suggestion else "")
    if row.precision not in BYTES_PER_ELEMENT:
        return f"unknown precision {row.precision!r} (known: {', '.join(BYTES_PER_ELEMENT)})"
    if row.kv_cache_precision not in BYTES_PER_ELEMENT:
        return f"unknown kv_precision {row.kv_cache_precision!r} (known: {', '.join(BYTES_PER_ELEMENT)})"
    if row.attention_dp > 1 and not row.attention_dp_on:
        return (f"attention_dp = {row.attention_dp} with tp = {row.tp}: attention data parallelism over part "
                "of the TP group is not modelled (only over all of it, model.md §4.8)")
    if min(row.num_gpus, row.tp, row.pp, row.ep) < 1 or min(row.isl, row.osl) < 1:
        return "num_gpus, tp, pp, ep, isl and osl must be positive"
    if row.num_gpus % (row.tp * row.pp):
        return f"tp*pp = {row.tp * row.pp} does not divide num_gpus = {row.num_gpus}"
    if row.concurrency is not None and row.concurrency < 1:
        return f"concurrency {row.concurrency} is not positive"
    if row.concurrency is not None and row.attention_dp_on and math.ceil(row.concurrency / row.dp) % row.batch_step:
        return (f"concurrency {row.concurrency} over dp = {row.dp} does not split evenly over tp x pp = "
                f"{row.batch_step} attention-DP shares (unequal shares are not modelled)")
    probe = {"tp": row.tp, "pp": row.pp, "ep": row.ep, "batch": row.batch_step, "weights_tier": "local",
             "kv_tier": "local", "attention_dp": row.attention_dp_on, "ep_all_to_all": False}
    why = structural_reason(w, None, row.num_gpus, False, probe, chip.scale_up_domain_size)  # type: ignore[arg-type]
    if why:
        return f"layout not supported by the model: {why}"
    return None


# --- memory and the batch -------------------------------------------------------------------------
@dataclass(frozen=True)
class Footprint:
    """The model's per-device memory footprint of a row: weights and the KV cache of one sequence
    (at ISL + OSL), the raw capacity, and the memory rule of the calibration the evaluation ran
    with: KV <= f (u C - R - W), i.e. W + KV / f <= ``usable_B`` = u C - R."""

    weights_B: float
    kv_per_sequence_B: float
    raw_capacity_B: float
    usable_B: float  # u C - R at the calibration the evaluation ran with
    kv_free_fraction: float  # f
    #: what the row's engine allocates for its sequence slots before it sizes the KV cache
    #: (``engine_state_B``), taken off the usable memory like the reserve: KV <= f (u C - R - S - W)
    engine_state_B: float = 0.0
    #: the decoding state the model itself charges per sequence of the batch (eq. 4.14b: an engine
    #: built for the batch, one slot per sequence): with the row's engine known it is part of
    #: ``engine_state_B`` (that engine has at least the batch's slots), else it is the state
    state_per_sequence_B: float = 0.0

    def state_B(self, batch: float) -> float:
        """The decoding state at ``batch``: the row's engine's slots, or the batch's own if more
        (or if the engine is unknown)."""
        return max(self.engine_state_B, batch * self.state_per_sequence_B)


def footprint(row: Row, *, calibration: CalibrationSet | None = None) -> Footprint:
    """Read the affine memory footprint off one evaluation at the smallest batch (``batch_step``)."""
    calibration = shipped() if calibration is None else calibration
    ev = evaluate_row(row, row.batch_step, calibration=calibration)
    m = ev.workload_metrics["main"]
    return Footprint(
        weights_B=m["weights_per_device_B"],
        kv_per_sequence_B=m["kv_per_device_B"] / row.batch_step,
        raw_capacity_B=ev.metrics["raw_capacity_B"],
        usable_B=memory_audit(ev).limit,
        kv_free_fraction=calibration.kv_cache_free_fraction,
        engine_state_B=engine_state_B(row),
        state_per_sequence_B=m["decoder_state_per_device_B"] / row.batch_step,
    )


def engine_state_B(row: Row) -> float:
    """Bytes per device the row's engine allocates for its ``engine_max_batch`` sequence slots
    before sizing the KV cache (``decoder_state_per_slot_B`` at max_seq_len = ISL + OSL, the
    engine's under a ``--dataset`` build); 0 if the row's engine's maximum batch is unknown or its
    profile charges no such state (``decoder_state = "none"``). A row of an unknown engine with a
    known maximum batch is charged it (:data:`ROW_RULES`: TensorRT-LLM's state, the validation's rule)."""
    rules = row.rules if row.engine is not None else ROW_RULES
    if row.engine_max_batch is None or rules.decoder_state == "none":
        return 0.0
    # a device holds its own executor's slots: under attention DP each rank has its own
    # max_batch_size (``engine_cap`` multiplies the replica's batch by TP, not the state); with
    # PP the runtime keeps max_batch_size slots per micro-batch (``mMaxNumSequences`` = PP x
    # max_batch_size), all on the last stage's ranks, which bind: charged on every device
    slots = row.engine_max_batch * row.pp
    per_slot = decoder_state_per_slot_B(load_workload(row.model).vocab_size, row.tp, row.isl + row.osl)
    return float(slots * per_slot)


def fits(ev: Evaluation, fp: Footprint) -> bool:
    """The model's ``memory-capacity-local`` audit, whose value charges the batch's own decoding
    state (eq. 4.14b), with the rest of the engine's slots' state taken off its limit."""
    a = memory_audit(ev)
    own = ev.workload_metrics["main"]["decoder_state_per_device_B"]
    return bool(holds(a.value, a.limit - max(fp.engine_state_B - own, 0.0)))


def batch_from(row: Row, fp: Footprint, mem: dict[str, float] | None, cap: int | None, *,
               requests: bool = True) -> int:
    """Largest batch (multiple of ``batch_step``) whose KV cache fits, at most ``cap`` (the
    engine's, ``Row.engine_cap``) and (if ``requests``) the row's requests per replica
    (``Row.request_limit``); 0 if none fits. A row at a fixed concurrency: its concurrency per
    replica, at most its own engine's maximum batch.

    The rule is the model's: KV <= f (u C - R - S - W), with (u, R, f) from ``mem`` (the fields of
    MEMORY_FIELDS) or, if None, the calibration the footprint was evaluated with, and S the
    decoding state of the larger of the row's engine's slots and the batch's own (eq. 4.14b,
    ``Footprint.state_B``)."""
    if row.concurrency is not None:
        b = math.ceil(math.ceil(row.concurrency / row.dp) / row.batch_step) * row.batch_step
        own = row.own_engine_cap
        return b if own is None else min(b, max(row.batch_step, own // row.batch_step * row.batch_step))
    if mem is None:
        room, f = fp.usable_B, fp.kv_free_fraction
    else:
        room = fp.raw_capacity_B * mem["usable_memory_fraction"] - mem["runtime_reserve_GiB"] * GiB
        f = mem["kv_cache_free_fraction"]
    # W + b KV / f + max(S, b s) <= room: both W + b KV / f + S and W + b (KV / f + s) must fit
    free = room - fp.weights_B
    step = row.batch_step
    per_seq = (fp.kv_per_sequence_B / f, fp.kv_per_sequence_B / f + fp.state_per_sequence_B)
    room_left = (free - fp.engine_state_B, free)
    b = min(math.floor(x / p / step) * step if x > 0 else 0 for x, p in zip(room_left, per_seq, strict=True))
    cap = row.engine_cap(cap)
    if cap is not None:
        b = min(b, max(step, (cap // step) * step))
    if requests and row.request_limit is not None:
        b = min(b, row.request_limit)
    return max(b, 0)


@dataclass
class BatchChoice:
    batch: int
    footprint: Footprint
    #: what set the batch: "memory" (the KV cache fills it), "engine" (the engine's maximum batch),
    #: "requests" (the run has no more requests per replica) or "concurrency"
    bound: str = "memory"
    reason: str = ""


def max_batch(row: Row, cap: int | None = ENGINE_MAX_BATCH, *, calibration: CalibrationSet | None = None) -> BatchChoice:
    """The memory-filling batch of an offline row, decided by the model's ``memory-capacity-local``
    audit: feasible at the returned batch, infeasible one step (``batch_step`` sequences) above it,
    unless the engine's maximum batch ``cap`` or the row's requests per replica bind first
    (``bound``). ``batch == 0`` (with ``reason``) if not even one step fits."""
    fp = footprint(row, calibration=calibration)
    step = row.batch_step
    b = batch_from(row, fp, None, None, requests=False)
    while b > 0 and not fits(evaluate_row(row, b, calibration=calibration), fp):
        b -= step
    while fits(evaluate_row(row, b + step, calibration=calibration), fp):
        b += step
    if b < step:
        return BatchChoice(0, fp, reason=_does_not_fit(row, fp, step))
    limits = [("memory", b)]
    if cap is not None:
        limits.append(("engine", (row.engine_cap(cap) // step) * step))
    if row.request_limit is not None:
        limits.append(("requests", row.request_limit))
    bound, batch = min(limits, key=lambda lim: (lim[1], lim[0] != "memory"))
    return BatchChoice(batch, fp, bound)


def _does_not_fit(row: Row, fp: Footprint, step: int) -> str:
    w = fp.weights_B / 1e9
    usable = (fp.usable_B - fp.engine_state_B) / 1e9
    free = max(usable - w, 0)
    state = (f" (after {fp.engine_state_B / 1e9:.2f} GB of the engine's decoding state for "
             f"{row.engine_max_batch} slots)" if fp.engine_state_B else
             f" (each sequence also holds {fp.state_per_sequence_B / 1e6:.1f} MB of decoding state)")
    return (f"does not fit: weights {w:.1f} GB per device leave {free:.2f} GB of {usable:.1f} GB "
            f"usable{state}; the KV cache of {step} sequence(s) needs {fp.kv_per_sequence_B * step / 1e9:.2f} GB "
            f"at {fp.kv_free_fraction:.0%} of the free memory")


def model_metric(metric: str, m: dict[str, float], osl: int) -> float:
    """A row metric read off ``evaluate``'s workload metrics: ``output_tokens_per_s`` =
    ``tokens_per_s`` (system), ``output_tokens_per_s_per_gpu`` = ``tokens_per_s_per_device``,
    ``itl_s`` = ``tpot_s``, ``ttft_s``, ``e2e_latency_s`` = ttft + (osl - 1) tpot."""
    if metric == "output_tokens_per_s":
        return m["tokens_per_s"]
    if metric == "output_tokens_per_s_per_gpu":
        return m["tokens_per_s_per_device"]
    if metric == "ttft_s":
        return m["ttft_s"]
    if metric == "itl_s":
        return m["tpot_s"]
    if metric == "e2e_latency_s":
        return m["ttft_s"] + max(osl - 1, 0) * m["tpot_s"]
    raise KeyError(metric)
