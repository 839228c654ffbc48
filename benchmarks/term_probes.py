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
parameters, the never-fitted rows' MAPE overall and per (model, chip); the engine limits per row).

    python benchmarks/term_probes.py [--csv ../shared/validation/measurements.csv] [--probes a,b]

``--probes`` also takes ``moe-compute-<factor>`` for any factor (the scan of VALIDATION.md §6.5).
About 9 minutes (one full re-fit per probe and one of the model, about a minute each).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from codesign import validate as V
from codesign.jsonio import write_json_atomic

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


@contextmanager
def probing(change: Callable[[V.Row, V.RowTerms], None] | None) -> Iterator[None]:
    """The validator with ``change`` applied to every row's terms where they are computed
    (``validate.row_terms``, which the fit's term cache calls once per row and batch)."""
    original = V.row_terms

    def row_terms(row: V.Row, batch: int, variant: V.Variant = V.MODEL) -> V.RowTerms:
        t = original(row, batch, variant)
        if change is not None:
            change(row, t)
        return t

    V.row_terms = row_terms
    try:
        yield
    finally:
        V.row_terms = original


def never_fitted_mape(res: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """MAPE of ``validate.NEVER_FITTED``'s rows, overall and per (model, chip), each row predicted
    with its family's calibration from ``res`` (a fit_calibration result;
    ``validate.never_fitted_errors``). Call it inside the probe's ``probing`` block, so the rows'
    terms carry the probe's change."""
    errors = V.never_fitted_errors(res)
    groups: dict[str, list[float]] = {}
    for r, e in errors.values():
        groups.setdefault(r.key(("model", "gpu")), []).append(e)
    return V.mape(e for _, e in errors.values()), {g: V.mape(x) for g, x in groups.items()}


def probe(name: str) -> Callable[[V.Row, V.RowTerms], None] | None:
    """A probe by name: one of PROBES, or ``moe-compute-<factor>``."""
    if name in PROBES:
        return PROBES[name]
    if name.startswith("moe-compute-"):
        try:
            return _moe_compute(float(name.removeprefix("moe-compute-")))
        except ValueError:
            pass
    raise SystemExit(f"unknown probe {name!r}; expected one of {[*PROBES, 'engine-limits']} or moe-compute-<factor>")


def run_probe(csv: str, split: str, name: str) -> dict[str, Any]:
    start = time.perf_counter()
    with probing(probe(name)):
        res = V.fit_calibration(csv, split, pooled=False)
        other, other_groups = never_fitted_mape(res)
    n_held = sum(r["n_held_out"] for r in res.values())
    n_fit = sum(r["n_fit"] for r in res.values())
    return {
        "held_out_mape_pct": sum(r["held_out_mape_pct"] * r["n_held_out"] for r in res.values()) / n_held,
        "fit_mape_pct": sum(r["fit_mape_pct"] * r["n_fit"] for r in res.values()) / n_fit,
        "never_fitted_mape_pct": other,
        "never_fitted_groups_mape_pct": other_groups,
        "families": {f: {"fit_mape_pct": r["fit_mape_pct"], "held_out_mape_pct": r["held_out_mape_pct"],
                         "params": r["params"]} for f, r in res.items()},
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(V.DEFAULT_MEASUREMENTS))
    ap.add_argument("--split", default=str(V.DEFAULT_SPLIT))
    ap.add_argument("--probes", default=",".join([*PROBES, "engine-limits"]),
                    help="comma-separated: " + ", ".join([*PROBES, "engine-limits"]))
    args = ap.parse_args()
    names = [p for p in args.probes.split(",") if p]
    for name in names:
        if name != "engine-limits":
            probe(name)  # an unknown name stops here, before any fit
    out: dict[str, Any] = {"csv": Path(args.csv).name, "split": Path(args.split).name, "probes": {}}
    if OUT.exists():  # keep what this run does not re-measure
        kept = json.loads(OUT.read_text())
        if (kept.get("csv"), kept.get("split")) == (out["csv"], out["split"]):
            out = {**kept, "probes": dict(kept.get("probes", {}))}
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
    write_json_atomic(OUT, out)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
