"""Six probes of the open errors of VALIDATION.md §5.2 and §5.4, each a calibration-free term of
the model scaled on a class of rows with every family re-fitted (VALIDATION.md §6.5). They are
questions, not mechanisms: a probe that helped would point at a term to look for in the engine.
Each is judged twice: on the held-out rows of the measurements, and on rows of two models no
calibration was fitted on (``validation/other-models.csv``, the same engine; VALIDATION.md §6.2).
A change that fits the held-out rows better but predicts the never-fitted ones worse fits these
rows, not the engine.

* ``moe-compute-1.3``: Mixtral's compute stream (both phases) 1.3x, as if its grouped expert GEMMs
  ran at 1/1.3 of the dense GEMMs' efficiency. Mixtral at TP 2 is over-predicted on prefill-heavy
  rows on hopper (+13 to +19 %) where Llama 70B at TP 8 is under-predicted (-17 to -22 %).
  ``moe-compute-1.15`` the same at 1.15, where the held-out rows' error is lowest.
* ``prefill-activations-0.5``: the prefill step's local-memory stream (activations between
  kernels; weights are read once per step) halved, as if an engine fused half of the kernel
  boundaries or kept a chunk's tensors in L2. Llama 70B at TP 8, prefill-heavy, is predicted too
  slow, and its prefill activations do not shrink with TP (§5.7).
* ``prefill-links-0.5``: the prefill step's link bytes halved, as if its all-reduces ran at twice
  the fitted efficiency (large NCCL messages).
* ``in-switch-2-steps``: an all-reduce the NVSwitch reduces (TP >= 5 on the H100 and H200, eq.
  3.17a) pays the collective step latency twice (reduce through the switch, then broadcast)
  instead of the ring's 2(n - 1) times: is the fixed time of a TP 8 step the ring's count or the
  engine's?
* ``fp8-compute-1.15``: the compute stream of FP8 rows 1.15x, as if FP8 GEMMs reached 1/1.15 = 0.87
  of the fraction of their (doubled) peak that 16-bit GEMMs reach of theirs. Llama 70B FP8 is
  over-predicted on prefill-heavy rows at TP 2 and 4 (+8 to +9 % bias on hopper) where FP16 is not.

Three more kinds (VALIDATION.md §6.7), also re-fitting every family:

* ``kv-read-<factor>``: the decode step's KV-cache reads and writes (part of its local-memory
  stream) scaled by the factor, as if the attention kernel streamed the cache at 1/factor of the
  bandwidth the weight-streaming GEMMs reach.
* ``gemm-roofline``: each step's weight reads hidden under its compute (a GEMM streams its weights
  while it multiplies): the step's serial streams lose min(compute, weights) (eq. 5.3 with o = 0
  becomes max(c, w) + the rest of m); the KV cache, activations and links stay serial.
* Reserve forms: the runtime reserve R of the memory rule (eq. 4.14a) depending on the layout.
  ``reserve-16bit-<GiB>``: hopper's 16-bit engines keep that much less than its fitted R (its
  FP8 engines keep R); ``reserve-tp2-<GiB>``: the same for hopper's layouts at TP >= 2 (TP 1 keeps
  R); ``reserve-over-tp``: on every family R(TP) = R0 + (R - R0) / TP with R0 = 1 GiB (a CUDA
  context and runtime buffers every rank holds; the rest split over TP, as an activation
  workspace is), R fitted as the TP 1 reserve; ``reserve-over-tp-hopper``: that on hopper alone;
  ``reserve-pcie-as-sxm``: the A100 PCIe's reserve held at the A100 SXM family's 2.25 GiB (same
  die, memory and engine).
  These ask whether the open §5.3 reserve (H100 FP8 at TP 1 implies 7.5-8.6 GiB, FP16 at TP 2
  4.0-4.7 GiB) is one of TP or of precision.

And (VALIDATION.md §6.8): ``replicated-activations-<factor>`` scales the activation bytes every
TP rank moves whole (eq. 2.15j: 20 h per layer, 4 h per step, the MoE permutation; the schedule's
own per-device bytes, ``<phase>_step.bytes_act_replicated_local``) in both steps,
``prefill-replicated-activations-<factor>`` in the prefill step only (the one term of a prefill
that does not shrink with TP, which a fused engine moves less of),
``decode-replicated-activations-<factor>`` in the decode step only; ``replicated-activations-in-l2``
takes them off a step whose hidden-size tensor (tokens x hidden x 2 B) fits in half the chip's L2
(``sram_MiB``): read back from cache by the next kernel instead of DRAM.

And (VALIDATION.md §6.9), an engine's own limits: ``engine-table-batch`` caps the batch at the
maximum of trtllm-bench's per-model table (``engine_table_limits``, the release line before the tuning
heuristic; not the 0.14 release's own). Since fix 19 the model charges the iterations a token
budget forces (eq. 4.19, each row's engine's ``max_num_tokens``), and the token probes only swap
the budget: ``engine-table-tokens`` the table's where it has an entry and none elsewhere (where the
shipped model assumes the BuildConfig default, 8,192), ``engine-table`` that and the table's batch
maximum, ``engine-heuristic-tokens`` the tuning heuristic's budget below for every row.

Also (``--probes engine-limits`` alone, seconds): the maximum batch and tokens per iteration
trtllm-bench's tuning heuristic builds each engine with (``calc_engine_setting`` and
``finetune_setting`` in ``tensorrt_llm/bench/build/tuning.py``: engine bytes = parameters x bytes per
element, 0.95 of the rest for the KV cache, max(TP, KV heads) heads per token, the estimated
requests, at most 4,096, divided by PP and rounded up to 64/32, 128 or 256; tokens per iteration
= batch x (1 + ISL/OSL) rounded up, at least 2,048, at most 32,768) against the model's batch: the
rows where the engine would cap it. The heuristic as read on TensorRT-LLM main; the 0.14 release's
may differ (an older version takes the engine's size in decimal GB).
The device memory is the catalog's capacity; the runtime reads NVML's total, which can be a little
lower, so the estimate here is at most that much more generous.

Writes validation/term_probes.json (per probe: held-out and fit MAPE, per family, the fitted
parameters, each held-out and never-fitted row's error, the never-fitted rows' MAPE overall and per
(model, chip); the engine limits per row).

    python benchmarks/term_probes.py [--csv ../shared/validation/measurements.csv] [--probes a,b]

``--probes`` also takes ``moe-compute-<factor>`` for any factor (the scan of VALIDATION.md §6.5),
``kv-read-<factor>``, ``replicated-activations-<factor>``, ``prefill-replicated-activations-<factor>``,
``decode-replicated-activations-<factor>``,
``reserve-16bit-<GiB>`` and ``reserve-tp2-<GiB>``. The default runs the six
term probes of §6.5 and the engine limits (about 9 minutes: one full re-fit per probe and one of
the model, about a minute each); §6.7's probes are named on the command line (§9).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from codesign import validate as V
from codesign.jsonio import results_to_extend, write_json_atomic

OUT = V.REPO_ROOT / "validation" / "term_probes.json"


def _moe_compute(factor: float) -> Callable[[V.Row, V.RowTerms], None]:
    def change(row: V.Row, t: V.RowTerms) -> None:
        if row.model.startswith("mixtral"):
            t.prefill["compute"] *= factor
            t.decode["compute"] *= factor

    return change


def _prefill_activations(row: V.Row, t: V.RowTerms) -> None:
    t.prefill["memory_local"] *= 0.5


def _prefill_links(row: V.Row, t: V.RowTerms) -> None:
    t.prefill["net_bw"] *= 0.5


def _in_switch_two_steps(row: V.Row, t: V.RowTerms) -> None:
    from codesign import catalog

    up = catalog.load_interconnect(catalog.load_chip(row.gpu).scale_up_interconnect)
    if up.in_switch_reduction and row.tp >= 5 and not row.attention_dp_on:
        for phase in (t.prefill, t.decode):  # two all-reduces per layer: 2(n - 1) ring steps -> 2
            phase["collective_steps"] -= 2 * phase["layers"] * (2 * (row.tp - 1) - 2)


def _fp8_compute(row: V.Row, t: V.RowTerms) -> None:
    if row.precision == "fp8":
        t.prefill["compute"] *= 1.15
        t.decode["compute"] *= 1.15


def _kv_read(factor: float) -> Callable[[V.Row, V.RowTerms], None]:
    """The decode step's KV-cache bytes per device (the schedule's own, ``RowTerms.evaluated``) x factor."""
    def change(row: V.Row, t: V.RowTerms) -> None:
        kv = t.evaluated["decode_step.bytes_kv_local"]
        t.decode["memory_local"] += (factor - 1.0) * kv / (t.decode["memory_peak_GBps"] * 1e9)

    return change


def _replicated_activations(factor: float, phases: tuple[str, ...]) -> Callable[[V.Row, V.RowTerms], None]:
    """The named steps' activation bytes that every TP rank moves whole (the schedule's own,
    ``RowTerms.evaluated``: eq. 2.15j's 20 h per layer and the MoE permutation, per device) x factor."""
    def change(row: V.Row, t: V.RowTerms) -> None:
        for name in phases:
            phase = getattr(t, name)
            rep = t.evaluated[f"{name}_step.bytes_act_replicated_local"]
            phase["memory_local"] += (factor - 1.0) * rep / (phase["memory_peak_GBps"] * 1e9)

    return change


def engine_table_limits(row: V.Row) -> tuple[int, int] | None:
    """(max batch, max tokens per iteration) of ``row``'s engine in trtllm-bench's per-model table
    as the shipped ``benchmark_engines.toml`` holds it for the 0.14 overview (the public version at
    NVIDIA/TensorRT-LLM@8fcf9fc; Llama 3 entries read for Llama 3.1; VALIDATION.md §5.16, §6.9), or
    None (no entry for its model and TP degree, or PP > 1). Since fix 16 the validation itself
    applies the max batch and the slots' state; the probes here are fix 14's experiments, and apply
    the table to a row of any source, as they did."""
    return _overview_engines().limits(row.model, row.tp, row.pp, row.isl + row.osl)


@cache
def _overview_engines() -> V.BenchmarkEngines:
    """The shipped engine table's one entry, the 0.14 overview's (read once: the probes ask per row
    and batch; a table with a second benchmark fails here rather than pick one silently)."""
    (engines,) = V.read_benchmark_engines()
    return engines


def _engine_table_tokens(row: V.Row) -> int | None:
    """The engine table's token budget for the row's layout (None where it has no entry: no budget)."""
    limits = engine_table_limits(row)
    return None if limits is None else limits[1]


def _engine_heuristic_tokens(row: V.Row) -> int | None:
    """The tuning heuristic's token budget (``engine_limits``)."""
    return engine_limits(row)[2]


def _engine_table_batch(row: V.Row) -> int | None:
    limits = engine_table_limits(row)
    return None if limits is None else limits[0]


#: of the L2, the largest hidden-size tensor that ``replicated-activations-in-l2`` keeps on chip
L2_SHARE = 0.5


def _replicated_activations_in_l2(row: V.Row, t: V.RowTerms) -> None:
    """The whole-tensor activations of a step off DRAM where one hidden-size tensor of the step's
    tokens (tokens x hidden x 2 B, whole on every rank) fits in L2_SHARE of the chip's L2
    (``sram_MiB``): a kernel's output read by the next kernel from cache. Rows of one pipeline stage
    only (the tokens of a stage step are the batch, or the batch x ISL in the prefill)."""
    from codesign import catalog
    from codesign.model.workload import load_workload

    if row.pp != 1:
        raise ValueError(f"row {row.id}: replicated-activations-in-l2 takes PP 1 rows only")
    hidden = load_workload(row.model).hidden_size
    l2_B = catalog.load_chip(row.gpu).sram_MiB * 2**20
    for name, tokens in (("prefill", t.batch * row.isl), ("decode", t.batch)):
        if tokens * hidden * 2.0 <= L2_SHARE * l2_B:
            phase = getattr(t, name)
            rep = t.evaluated[f"{name}_step.bytes_act_replicated_local"]
            phase["memory_local"] -= rep / (phase["memory_peak_GBps"] * 1e9)


def _weights_term(row: V.Row, t: V.RowTerms) -> None:
    """Add each step's local weight bytes per device (the schedule's own), at the peak bandwidth
    (term ``weights``, part of ``memory_local``), for the ``gemm-roofline`` form."""
    for name, phase in (("prefill", t.prefill), ("decode", t.decode)):
        phase["weights"] = t.evaluated[f"{name}_step.bytes_weights_local"] / (phase["memory_peak_GBps"] * 1e9)


def _gemm_roofline(base: Callable[[dict[str, Any], dict[str, Any]], Any]) -> Callable[[dict[str, Any], dict[str, Any]], Any]:
    """``base`` (the step time in force, ``validate.step_time``) less (1 - o) min(c, w): the weight
    reads hidden under the compute, c the compute stream, w the weights' share of the local-memory
    one."""
    from codesign.model.hardware import achieved_memory_fraction

    def step_time(t: dict[str, Any], cal: dict[str, Any]) -> Any:
        c = t["compute"] / V.compute_efficiency(t, cal)
        wt = t["weights"] / achieved_memory_fraction(cal["memory_efficiency"], cal.get(V.CAP_FIELD), t.get("memory_peak_GBps"))
        return base(t, cal) - (1.0 - cal["stream_overlap"]) * np.minimum(c, wt)

    return step_time


def _hopper(row: V.Row) -> bool:
    """The row's chip is of the hopper calibration family (the catalog's ``family``: H100, H200)."""
    return V.family_of(row.gpu) == "hopper"


def _a100_sxm_reserve_GiB() -> float:
    """The A100 SXM family's shipped runtime reserve (calibration.toml), for ``reserve-pcie-as-sxm``."""
    from codesign.model.hardware import calibration_for

    return calibration_for("a100-sxm-80gb").runtime_reserve_GiB


#: the reserve every rank holds whatever the TP degree in ``reserve-over-tp`` (GiB)
RESERVE_R0_GiB = 1.0


def _reserve_less(delta_GiB: float, applies: Callable[[V.Row], bool]) -> Callable[[V.Row, float], float]:
    return lambda row, r: max(r - delta_GiB, 0.0) if applies(row) else r


def _reserve_over_tp(applies: Callable[[V.Row], bool]) -> Callable[[V.Row, float], float]:
    return lambda row, r: RESERVE_R0_GiB + (r - RESERVE_R0_GiB) / row.tp if applies(row) and r > RESERVE_R0_GiB else r


@dataclass(frozen=True)
class Probe:
    """What a probe changes: the row's terms (in place), the runtime reserve of the memory rule
    (row, fitted reserve GiB -> the reserve the row gets), or the step's form (``gemm-roofline``)."""

    terms: Callable[[V.Row, V.RowTerms], None] | None = None
    reserve: Callable[[V.Row, float], float] | None = None
    gemm_roofline: bool = False
    #: the row's largest batch (the engine's maximum), or None where the probe sets none
    batch_cap: Callable[[V.Row], int | None] | None = None
    #: the row's engine's tokens per iteration in place of its own (``Row.engine_max_tokens``; None:
    #: no budget), charged by the model's own rule (eq. 4.19, fix 19)
    tokens: Callable[[V.Row], int | None] | None = None


#: trtllm-bench's bytes per element by quantisation (``tuning.BYTES_PER_ELEM``; anything else: 2):
#: the engine's own table, NVFP4 at 0.5 without its scales (the model's fp4 counts 0.5625)
TRTLLM_BYTES_PER_ELEM = {"fp8": 1.0, "fp4": 0.5}
#: ``finetune_setting``'s rounding: (below this, round up to a multiple of this), the last open-ended
BATCH_TIERS = ((256, 32), (1024, 128), (math.inf, 256))
TOKEN_TIERS = ((4096, 256), (8192, 512), (math.inf, 1024))


def _round_up(x: float, tiers: tuple[tuple[float, int], ...]) -> int:
    quantum = next(q for limit, q in tiers if x < limit)
    return quantum * math.ceil(x / quantum)


def engine_limits(row: V.Row) -> tuple[float, int, int]:
    """trtllm-bench's estimate of the requests the KV cache holds, and the engine's maximum batch
    and tokens per iteration it builds from it (see the module docstring)."""
    from codesign import catalog
    from codesign.model.workload import load_workload, param_counts

    w = load_workload(row.model)
    weight_B = TRTLLM_BYTES_PER_ELEM.get(row.precision, 2.0)
    kv_B = TRTLLM_BYTES_PER_ELEM.get(row.kv_cache_precision, 2.0)
    gib_per_token = 2 * w.num_layers * max(row.tp, w.num_kv_heads) * w.head_dim * kv_B / 2**30
    gpus = row.tp * row.pp
    free_gib = catalog.load_chip(row.gpu).memory_capacity_GiB * gpus - param_counts(w).total * weight_B / 2**30
    requests = free_gib * 0.95 / gib_per_token / (row.isl + row.osl)
    raw_bs = min(requests, 4096) / row.pp
    raw_tokens = min(raw_bs * (1 + row.isl / row.osl), 32768)
    max_bs = max(64, _round_up(raw_bs, BATCH_TIERS))  # the floor of 64 binds in the first tier only
    max_tokens = max(2048, _round_up(raw_tokens, TOKEN_TIERS))
    return requests, max_bs, max_tokens


def engine_limits_report(csv: str) -> dict[str, Any]:
    rows = [r for r in V.read_rows(csv)[0] if V.skip_reason(r) is None and r.concurrency is None]
    out: dict[str, Any] = {}
    for r in rows:
        requests, max_bs, max_tokens = engine_limits(r)
        batch = V.max_batch(r).batch
        out[r.id] = {"model_batch": batch, "estimated_requests": round(requests, 1), "max_batch_size": max_bs,
                     "max_num_tokens": max_tokens, "caps_the_batch": max_bs < batch}
    return out


#: probe name -> how it changes a row's calibration-free terms (in place); "model" changes nothing
PROBES: dict[str, Callable[[V.Row, V.RowTerms], None] | None] = {
    "model": None,
    "moe-compute-1.3": _moe_compute(1.3),
    "moe-compute-1.15": _moe_compute(1.15),
    "prefill-activations-0.5": _prefill_activations,
    "prefill-links-0.5": _prefill_links,
    "in-switch-2-steps": _in_switch_two_steps,
    "fp8-compute-1.15": _fp8_compute,
}

#: §6.7's probes of the step's form and of the reserve (run by name; not in the default set)
FORM_PROBES: dict[str, Probe] = {
    "gemm-roofline": Probe(gemm_roofline=True),
    "reserve-over-tp": Probe(reserve=_reserve_over_tp(lambda r: True)),
    "reserve-over-tp-hopper": Probe(reserve=_reserve_over_tp(_hopper)),
    # the A100 PCIe card is the A100 SXM's die and 80 GB under the same engine: its reserve held at
    # the SXM family's shipped 2.25 GiB instead of fitted (its own fit puts it at 6.75)
    "reserve-pcie-as-sxm": Probe(reserve=lambda row, r: _a100_sxm_reserve_GiB() if row.gpu == "a100-pcie-80gb" else r),
    # §6.8: a step's whole-tensor activations kept in L2 where they fit (a term change, run by name)
    "replicated-activations-in-l2": Probe(terms=_replicated_activations_in_l2),
    # §6.9: the engine limits of trtllm-bench's per-model table (engine_table_limits): its maximum batch,
    # its tokens per iteration (the round's extra iterations paying each step's fixed cost), both
    "engine-table-batch": Probe(batch_cap=_engine_table_batch),
    "engine-table-tokens": Probe(tokens=_engine_table_tokens),
    "engine-table": Probe(tokens=_engine_table_tokens, batch_cap=_engine_table_batch),
    "engine-heuristic-tokens": Probe(tokens=_engine_heuristic_tokens),
}


@contextmanager
def probing(change: Callable[[V.Row, V.RowTerms], None] | Probe | None) -> Iterator[None]:
    """The validator with a probe applied: a term change to every row's terms where they are
    computed (``validate.row_terms``, which the fit's term cache calls once per row and batch), a
    reserve and an engine's batch maximum to the batch rule (``validate.batch_from``, with the
    fitted memory fields; ``validate.max_batch``, which walks past its first call, does not see
    the maximum: the fit and the never-fitted check build through ``RowStack`` and do), the
    ``gemm-roofline`` form to the step time (``validate.step_time``). Everything is restored on exit."""
    p = change if isinstance(change, Probe) else Probe(terms=change)
    originals = {"row_terms": V.row_terms, "batch_from": V.batch_from, "step_time": V.step_time,
                 "STEP_TERMS": V.STEP_TERMS}

    def row_terms(row: V.Row, batch: int, variant: V.Variant = V.MODEL) -> V.RowTerms:
        if p.tokens is not None:
            row = dataclasses.replace(row, engine_max_tokens=p.tokens(row))
        t = originals["row_terms"](row, batch, variant)
        if p.gemm_roofline:
            _weights_term(row, t)
        if p.terms is not None:
            p.terms(row, t)
        return t

    def batch_from(row: V.Row, fp: V.Footprint, mem: dict[str, float] | None, cap: int | None, **kw: Any) -> int:
        if mem is not None and p.reserve is not None:
            mem = {**mem, "runtime_reserve_GiB": p.reserve(row, mem["runtime_reserve_GiB"])}
        batch = originals["batch_from"](row, fp, mem, cap, **kw)
        engine_max = p.batch_cap(row) if p.batch_cap is not None else None
        return batch if engine_max is None else min(batch, engine_max)

    V.row_terms, V.batch_from = row_terms, batch_from
    if p.gemm_roofline:
        V.step_time, V.STEP_TERMS = _gemm_roofline(originals["step_time"]), (*V.STEP_TERMS, "weights")
    try:
        yield
    finally:
        for k, v in originals.items():
            setattr(V, k, v)


def never_fitted_mape(res: dict[str, Any], errors: dict[str, tuple[V.Row, float]] | None = None,
                      ) -> tuple[float, dict[str, float]]:
    """MAPE of ``validate.NEVER_FITTED``'s rows, overall and per (model, chip), each row predicted
    with its family's calibration from ``res`` (a fit_calibration result;
    ``validate.never_fitted_errors``, or its result ``errors`` if already computed). Call it inside
    the probe's ``probing`` block, so the rows' terms carry the probe's change."""
    errors = V.never_fitted_errors(res) if errors is None else errors
    groups: dict[str, list[float]] = {}
    for r, e in errors.values():
        groups.setdefault(r.key(("model", "gpu")), []).append(e)
    return V.mape(e for _, e in errors.values()), {g: V.mape(x) for g, x in groups.items()}


def probe(name: str) -> Callable[[V.Row, V.RowTerms], None] | Probe | None:
    """A probe by name: one of PROBES or FORM_PROBES, or one with its number in the name
    (``moe-compute-<factor>``, ``kv-read-<factor>``, ``reserve-16bit-<GiB>``, ``reserve-tp2-<GiB>``)."""
    if name in PROBES:
        return PROBES[name]
    if name in FORM_PROBES:
        return FORM_PROBES[name]
    makers: dict[str, Callable[[float], Callable[[V.Row, V.RowTerms], None] | Probe]] = {
        "moe-compute-": _moe_compute,
        "kv-read-": _kv_read,
        "replicated-activations-": lambda f: _replicated_activations(f, ("prefill", "decode")),
        "prefill-replicated-activations-": lambda f: _replicated_activations(f, ("prefill",)),
        "decode-replicated-activations-": lambda f: _replicated_activations(f, ("decode",)),
        "reserve-16bit-": lambda g: Probe(reserve=_reserve_less(g, lambda r: _hopper(r) and r.precision in ("fp16", "bf16"))),
        "reserve-tp2-": lambda g: Probe(reserve=_reserve_less(g, lambda r: _hopper(r) and r.tp >= 2)),
    }
    for prefix, make in makers.items():
        if name.startswith(prefix):
            try:
                return make(float(name.removeprefix(prefix)))
            except ValueError:
                break
    raise SystemExit(f"unknown probe {name!r}; expected one of {[*PROBES, *FORM_PROBES, 'engine-limits']} "
                     f"or {', '.join(p + '<number>' for p in makers)}")


def run_probe(csv: str, split: str, name: str) -> dict[str, Any]:
    start = time.perf_counter()
    with probing(probe(name)):
        res = V.fit_calibration(csv, split, pooled=False)
        unseen = V.never_fitted_errors(res)
        other, other_groups = never_fitted_mape(res, unseen)
        # each held-out row's error at the probe's calibration (the fit's own re-composition)
        labels = V.read_split(split)
        held = {i: round(e, 3) for i, (_, e) in sorted(V.never_fitted_errors(res, path=csv).items())
                if labels.get(i) == "held-out"}
    return {
        "held_out_mape_pct": V.rows_weighted_mape(res, "held_out"),
        "fit_mape_pct": V.rows_weighted_mape(res, "fit"),
        "never_fitted_mape_pct": other,
        "never_fitted_groups_mape_pct": other_groups,
        "held_out_row_errors_pct": held,
        "never_fitted_row_errors_pct": {i: round(e, 3) for i, (_, e) in sorted(unseen.items())},
        "families": {f: {"fit_mape_pct": r["fit_mape_pct"], "held_out_mape_pct": r["held_out_mape_pct"],
                         "params": r["params"]} for f, r in res.items()},
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(V.DEFAULT_MEASUREMENTS))
    ap.add_argument("--split", default=str(V.DEFAULT_SPLIT))
    ap.add_argument("--probes", default=",".join([*PROBES, "engine-limits"]),
                    help="comma-separated: " + ", ".join([*PROBES, "engine-limits", *FORM_PROBES])
                    + ", moe-compute-<factor>, kv-read-<factor>, replicated-activations-<factor>, "
                    "prefill-replicated-activations-<factor>, decode-replicated-activations-<factor>, "
                    "reserve-16bit-<GiB>, reserve-tp2-<GiB>")
    args = ap.parse_args()
    names = [p for p in args.probes.split(",") if p]
    for name in names:
        if name != "engine-limits":
            probe(name)  # an unknown name stops here, before any fit
    out = results_to_extend(OUT, {"csv": Path(args.csv).name, "split": Path(args.split).name}, "probes")
    if "engine-limits" in names:
        names.remove("engine-limits")
        out["engine_limits"] = limits = engine_limits_report(args.csv)
        capped = {i: x for i, x in limits.items() if x["caps_the_batch"]}
        print(f"engine limits: {len(capped)} of {len(limits)} rows capped by the engine's maximum batch: "
              + ", ".join(f"{i} {x['model_batch']} -> {x['max_batch_size']}" for i, x in capped.items()), flush=True)
    for name in names:
        out["probes"][name] = r = run_probe(args.csv, args.split, name)
        print(f"{name:26s} held-out {r['held_out_mape_pct']:.2f} %  fit {r['fit_mape_pct']:.2f} %  "
              f"never fitted {r['never_fitted_mape_pct']:.2f} %  "
              + "  ".join(f"{f} {v['held_out_mape_pct']:.2f}" for f, v in r["families"].items())
              + f"  ({r['seconds']:.0f} s)", flush=True)
        write_json_atomic(OUT, out)  # each probe as it ends: an interrupted run keeps the rest
    write_json_atomic(OUT, out)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
