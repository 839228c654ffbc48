"""A row's prediction re-composed from calibration-free terms, so that the fit can try thousands
of calibrations without evaluating the model again.

:func:`row_terms` evaluates a row once and divides the calibration out of every term of its
prefill and decode steps (compute, local memory, link bytes at efficiency 1; pooled memory and
link latency as modelled; layers, ring steps of the TP collectives and sequences as counts).
:func:`step_time` and :func:`metric_from_steps` put them back together at any calibration with
the model's own formulas (model.md eq. 5.3 and §5), so :func:`recompose` at the calibration the
row was evaluated with is the model's prediction (tested). :class:`RowStack` does the same for a
set of rows at once, as arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from codesign import catalog
from codesign.calibration.engine import (
    Footprint,
    batch_from,
    evaluate_row,
    footprint,
    row_instance,
    row_rules,
)
from codesign.calibration.rows import Row
from codesign.model.calibration import EIGHT_BIT_FORMATS, CalibrationSet, shipped
from codesign.model.hardware import achieved_memory_fraction, attention_precision, math_format

#: calibration fields of the step form that are optional (None or 0 unless fitted)
CAP_FIELD = "memory_bandwidth_cap_GBps"
EIGHT_BIT_FIELD = "compute_efficiency_8bit"
HOST_FIELD = "host_us_per_sequence"

#: the per-row quantities a stage step is re-composed from (``step_time``): times at efficiency 1,
#: modelled times, counts, and one chip constant, the peak local-memory bandwidth the die's cap is
#: a fraction of (eq. 3.21a). They travel together so that a family's rows re-compose as arrays.
STEP_TERMS = ("compute", "memory_local", "memory_pool", "net_bw", "net_latency", "layers", "collective_steps",
              "sequences", "engine_host", "memory_peak_GBps", "eight_bit", "attention", "attention_eight_bit",
              "exponentials")

THROUGHPUT_METRICS = ("output_tokens_per_s", "output_tokens_per_s_per_gpu")


@dataclass
class RowTerms:
    """Calibration-free stage-step terms of one evaluated row: seconds at efficiency 1 (compute,
    local memory, link bytes), seconds as modelled (pooled memory, link latency, the engine's host
    time), layers per stage, ring steps of the step's TP collectives, sequences per step."""

    batch: int
    dp: float
    pp: float
    osl: int
    devices: int
    metric: str
    prefill: dict[str, float]
    decode: dict[str, float]
    #: the evaluation's own metrics at the calibration it ran with, each step's local weight,
    #: KV-cache and whole-tensor activation bytes per device (``<phase>_step.bytes_weights_local``,
    #: ``..._kv_local``, ``..._act_replicated_local``) and, under a token budget, the round's extra
    #: iterations (``<phase>_step.extra_iterations``)
    evaluated: dict[str, float]


def row_terms(row: Row, batch: int, *, calibration: CalibrationSet | None = None) -> RowTerms:
    """Evaluate ``row`` at ``batch`` and divide the calibration out of every step term."""
    calibration = shipped() if calibration is None else calibration
    ev = evaluate_row(row, batch, calibration=calibration)
    m = ev.workload_metrics["main"]
    cal = calibration.for_chip(row.gpu)
    engine_host_us = row_rules(row).host_us_per_sequence
    chip = catalog.load_chip(row.gpu)
    peak_GBps = chip.memory_bandwidth_GBps
    fmt = math_format(chip.peak_dense_TFLOPS, row.precision, f"chip {row.gpu} peak_dense_TFLOPS")  # as the columns
    inst = row_instance(row, batch, calibration=calibration)
    attn_fmt = math_format(chip.peak_dense_TFLOPS, attention_precision(inst, inst.workloads[0]),
                           f"chip {row.gpu} peak_dense_TFLOPS")
    mem_eff = float(achieved_memory_fraction(cal.memory_efficiency, cal.memory_bandwidth_cap_GBps, peak_GBps))
    phases: dict[str, dict[str, float]] = {}
    for ph in ("prefill", "decode"):
        def g(k: str, ph: str = ph) -> float:
            return float(m[f"{ph}_step.{k}_s"])

        def h(k: str, ph: str = ph) -> float:  # a term the step may not have (the attention's)
            return float(m.get(f"{ph}_step.{k}_s", 0.0))

        phases[ph] = {  # each stream: its serial and its overlapped part (eq. 5.3)
            "compute": (g("compute") + g("compute_overlapped")) * cal.compute_efficiency_at(fmt),
            # 1 where the compute runs at the 8-bit tensor rate (its own efficiency, eq. 3.20c)
            "eight_bit": float(fmt in EIGHT_BIT_FORMATS),
            # the attention priced apart (eq. 2.15m): its FLOPs at its own format's efficiency, the
            # exponentials at the compute efficiency (0 where the model does not price them apart)
            "attention": (h("attention") + h("attention_overlapped")) * cal.compute_efficiency_at(attn_fmt),
            "attention_eight_bit": float(attn_fmt in EIGHT_BIT_FORMATS),
            "exponentials": (h("exponentials") + h("exponentials_overlapped")) * cal.compute_efficiency,
            "memory_local": (g("memory_local") + g("memory_local_overlapped")) * mem_eff,
            "memory_pool": g("memory_pool") + g("memory_pool_overlapped"),
            "net_bw": (g("scale_up_bw") + g("scale_up_bw_in_switch") + g("scale_up_bw_cross") + g("scale_out_bw"))
                      * cal.network_efficiency,
            "net_latency": g("scale_up_latency") + g("scale_out_latency"),
            # counts read off the model: layers of the stage, ring steps of its TP collectives (eq. 4.10a)
            "layers": float(m[f"{ph}_step.layers"]),
            "collective_steps": float(m[f"{ph}_step.collective_steps"]),
            "memory_peak_GBps": peak_GBps,  # the chip's, for the die's cap (eq. 3.21a)
            "sequences": float(m[f"{ph}_step.sequences"]),
            # the host time the row's engine adds (its profile's, not the calibration's: eq. 5.3)
            "engine_host": float(m[f"{ph}_step.sequences"]) * engine_host_us * 1e-6,
        }
    evaluated = {k: float(m[k]) for k in ("tokens_per_s", "tokens_per_s_per_device", "tpot_s", "ttft_s",
                                          *(f"{ph}_step.bytes_{part}_local" for ph in ("prefill", "decode")
                                            for part in ("weights", "kv", "act_replicated")))}
    # the iterations the engine's token budget adds (eq. 4.19), where the row has one
    evaluated |= {k: float(m[k]) for k in ("prefill_step.extra_iterations", "decode_step.extra_iterations") if k in m}
    return RowTerms(batch, float(m["dp"]), float(m["pp"]), row.osl, row.num_gpus, row.metric,
                    phases["prefill"], phases["decode"], evaluated)


def compute_efficiency(t: dict[str, Any], cal: dict[str, Any], flag: str = "eight_bit") -> Any:
    """The compute efficiency of each row of ``t``: ``compute_efficiency_8bit`` where the row's
    compute (or, with ``flag`` = "attention_eight_bit", its attention) runs at the 8-bit tensor
    rate and the calibration sets it, else ``compute_efficiency`` (eq. 3.20c)."""
    e8 = cal.get(EIGHT_BIT_FIELD)
    if e8 is None:
        return cal["compute_efficiency"]
    return np.where(np.asarray(t.get(flag, 0.0)) > 0, e8, cal["compute_efficiency"])


def step_time(t: dict[str, Any], cal: dict[str, Any]) -> Any:
    """One stage step from calibration-free terms, the model's form (eq. 5.3) with
    o = ``cal["stream_overlap"]``, c = compute / ce (``compute_efficiency``: the 8-bit one on 8-bit
    rows, eq. 3.20c), m = memory / min(me, cap / peak) (eq. 3.21a), p = pool:

        o max(c, m, p) + (1 - o)(c + m + p) + link_bytes / ne + link_latency + layers x overhead
          + collective steps x collective step latency + sequences x host time
          + the engine's host time (its profile's time per sequence x sequences, as modelled)
    """
    o = cal["stream_overlap"]
    # compute = the other FLOPs + the attention, the larger of its FLOPs and its exponentials (eq. 2.15m)
    attention = np.maximum(t.get("attention", 0.0) / compute_efficiency(t, cal, "attention_eight_bit"),
                           t.get("exponentials", 0.0) / cal["compute_efficiency"])
    c = t["compute"] / compute_efficiency(t, cal) + attention
    m = t["memory_local"] / achieved_memory_fraction(cal["memory_efficiency"], cal.get(CAP_FIELD),
                                                     t.get("memory_peak_GBps"))
    p = t["memory_pool"]
    streams = o * np.maximum(np.maximum(c, m), p) + (1.0 - o) * (c + m + p)
    return (
        streams
        + t["net_bw"] / cal["network_efficiency"]
        + t["net_latency"]
        + t["layers"] * cal["layer_overhead_us"] * 1e-6
        + t["collective_steps"] * cal["collective_step_latency_us"] * 1e-6
        + t.get("sequences", 0.0) * cal.get(HOST_FIELD, 0.0) * 1e-6
        + t.get("engine_host", 0.0)
    )


def metric_from_steps(metric: str, t_pre: Any, t_dec: Any, batch: Any, dp: Any, pp: Any, osl: Any, devices: Any) -> Any:
    """A row metric from its prefill and decode stage steps (the model's scale factors, model.md §5):
    output tokens/s = batch x dp x osl / (pp x t_prefill + pp x (osl - 1) x t_decode);
    TTFT = (2 pp - 1) t_prefill; ITL = TPOT = pp x t_decode; e2e = TTFT + (osl - 1) TPOT."""
    if metric in THROUGHPUT_METRICS:
        tps = batch * dp * osl / (pp * t_pre + pp * np.maximum(osl - 1, 0) * t_dec)
        return tps if metric == "output_tokens_per_s" else tps / devices
    ttft = (2 * pp - 1) * t_pre
    tpot = pp * t_dec
    if metric == "ttft_s":
        return ttft
    if metric == "itl_s":
        return tpot
    if metric == "e2e_latency_s":
        return ttft + np.maximum(osl - 1, 0) * tpot
    raise KeyError(metric)


def recompose(terms: RowTerms, cal: dict[str, float]) -> float:
    """The row's metric at calibration ``cal`` (exactly the model's formulas)."""
    t_pre = step_time(terms.prefill, cal)
    t_dec = step_time(terms.decode, cal)
    return float(metric_from_steps(terms.metric, t_pre, t_dec, terms.batch, terms.dp, terms.pp, terms.osl, terms.devices))


class TermCache:
    """Evaluations of rows at batches under one calibration, memoised: the calibration-free terms
    of each (row, batch) (``row_terms``) and each row's memory footprint. Fitting evaluates every
    row at the few batches its candidate memory fields give."""

    def __init__(self, calibration: CalibrationSet | None = None):
        self.calibration = shipped() if calibration is None else calibration
        self.terms: dict[tuple[str, int], RowTerms] = {}
        self.fps: dict[str, Footprint] = {}

    def footprint(self, row: Row) -> Footprint:
        if row.id not in self.fps:
            self.fps[row.id] = footprint(row, calibration=self.calibration)
        return self.fps[row.id]

    def at(self, row: Row, batch: int) -> RowTerms:
        key = (row.id, batch)
        if key not in self.terms:
            self.terms[key] = row_terms(row, batch, calibration=self.calibration)
        return self.terms[key]


@dataclass
class RowStack:
    """The terms of a set of rows at one set of memory fields, as arrays: ``predict(cal)`` re-composes
    every row's metric at a calibration at once (``step_time``, ``metric_from_steps``), ``mape`` is
    what the fit minimises. Built from a ``TermCache`` with ``RowStack.build``."""

    rows: list[Row]
    batch: np.ndarray
    dp: np.ndarray
    pp: np.ndarray
    osl: np.ndarray
    devices: np.ndarray
    measured: np.ndarray
    pre: dict[str, np.ndarray]
    dec: dict[str, np.ndarray]
    fits: np.ndarray  # batch >= 1

    @classmethod
    def build(cls, rows: list[Row], cache: TermCache, mem: dict[str, float] | None, cap: int | None) -> RowStack:
        """The rows' terms at the batch the memory fields ``mem`` (None: the cache's calibration's)
        and the engine's maximum batch ``cap`` give each (``engine.batch_from``)."""
        batches = [batch_from(r, cache.footprint(r), mem, cap) for r in rows]
        zero = {k: 0.0 for k in STEP_TERMS} | {"compute": 1.0, "memory_peak_GBps": 1.0}
        terms = [cache.at(r, b) if b >= 1 else None for r, b in zip(rows, batches, strict=True)]

        def arr(phase: str) -> dict[str, np.ndarray]:
            return {k: np.array([getattr(t, phase)[k] if t else zero[k] for t in terms]) for k in STEP_TERMS}

        return cls(
            rows=rows,
            batch=np.array([max(b, 1) for b in batches], dtype=float),
            dp=np.array([r.dp for r in rows], dtype=float),
            pp=np.array([r.pp for r in rows], dtype=float),
            osl=np.array([r.osl for r in rows], dtype=float),
            devices=np.array([r.num_gpus for r in rows], dtype=float),
            measured=np.array([r.value for r in rows]),
            pre=arr("prefill"),
            dec=arr("decode"),
            fits=np.array([b >= 1 for b in batches]),
        )

    def predict(self, cal: dict[str, float]) -> np.ndarray:
        t_pre = step_time(self.pre, cal)
        t_dec = step_time(self.dec, cal)
        out = np.empty(len(self.rows))
        for metric in {r.metric for r in self.rows}:
            sel = np.array([r.metric == metric for r in self.rows])
            out[sel] = metric_from_steps(metric, t_pre[sel], t_dec[sel], self.batch[sel], self.dp[sel],
                                         self.pp[sel], self.osl[sel], self.devices[sel])
        return np.where(self.fits, out, 0.0)

    def mape(self, cal: dict[str, float]) -> float:
        return float(np.mean(np.abs(self.predict(cal) / self.measured - 1.0)) * 100.0)
