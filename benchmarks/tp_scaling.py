"""How a GPU's cost per output token grows with the tensor-parallel degree, measured against the
model (VALIDATION.md §6.8).

For each scenario (model, chip, precision, ISL/OSL) measured at several TP degrees on one node
(PP 1, no attention DP, devices = TP, offline throughput rows), the GPU-seconds per output token
c(n) = n / throughput at TP n, and its growth from one TP degree to the next, g = c(2n) / c(n) - 1:
0 where a layout scales perfectly, the cost of the collectives and of the work every rank repeats
where it does not. Read on prefill-heavy scenarios (ISL >= 10 x OSL) the batch hardly matters (a
prompt token costs the same in any batch), so g is the parallel overhead alone; on decode-heavy
ones the batch the KV cache holds grows with TP and g mixes the two.

Also, per prefill-heavy row, what a prompt token costs beyond its GEMMs: the model's prefill step
at the shipped calibration less its compute stream, per prompt token, and the same with the
measured throughput, all of the row's error put on the prefill (the decode steps as modelled,
the compute at the fitted efficiency): the time of the collectives, of the activations every rank
moves, of the KV writes and of the step's one read of the weights, measured against modelled.
(Where a family's fitted stream overlap is above 0, ampere 0.29 and ada 1, part of that memory
time runs under the GEMMs, so "beyond its GEMMs" is the step less its compute stream, not a sum of
the other streams.)

Writes validation/tp_scaling.json (per scenario: c(n) measured and predicted, the growths, the
overhead per prompt token; per (model, chip family, TP step): the median growth of the
prefill-heavy scenarios; per (model, chip family, TP): their median overhead).

    python benchmarks/tp_scaling.py [--csv ../shared/validation/measurements.csv] [--split validation/split.json]

Seconds (one validation run at the shipped calibration).
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from codesign import validate as V
from codesign.jsonio import write_json_atomic

OUT = V.REPO_ROOT / "validation" / "tp_scaling.json"
#: a scenario is prefill-heavy when its prompt is at least this many times its output
PREFILL_HEAVY_RATIO = 10


def gpu_seconds_per_token(throughput: float, gpus: int) -> float:
    """GPU-seconds per output token of a run of ``gpus`` devices at ``throughput`` tokens/s."""
    return gpus / throughput


def growths(costs: dict[int, float]) -> dict[str, float]:
    """``{"2->4": c(4)/c(2) - 1, ...}`` for each TP degree n of ``costs`` whose double is there too."""
    return {f"{n}->{2 * n}": costs[2 * n] / costs[n] - 1.0 for n in sorted(costs) if 2 * n in costs}


def counted(r: dict[str, Any], attention_dp_ids: frozenset[str] = frozenset()) -> bool:
    """Whether a report row enters the comparison: offline output throughput, PP 1, all its devices
    in the TP group (no data parallelism), not attention DP (``attention_dp_ids``), and a positive
    measurement and prediction (a row that does not fit in memory is predicted 0)."""
    return (r["metric"] == "output_tokens_per_s" and r.get("concurrency") is None and r["pp"] == 1
            and r["num_gpus"] == r["tp"] and r["id"] not in attention_dp_ids
            and r["measured"] > 0 and r["predicted"] > 0)


def scenarios(rows: Iterable[dict[str, Any]], attention_dp_ids: frozenset[str] = frozenset(),
              ) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Per (model, gpu, precision, ISL, OSL): c(n) measured and predicted at each TP degree of the
    report ``rows`` (``ValidationReport.rows``) that are ``counted``, and their growths; only
    scenarios with two TP degrees a factor 2 apart."""
    by: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        if counted(r, attention_dp_ids):
            by[(r["model"], r["gpu"], r["precision"], r["isl"], r["osl"])][r["tp"]] = r
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, at in sorted(by.items()):
        measured = {n: gpu_seconds_per_token(r["measured"], n) for n, r in at.items()}
        predicted = {n: gpu_seconds_per_token(r["predicted"], n) for n, r in at.items()}
        g_meas = growths(measured)
        if not g_meas:
            continue
        out[key] = {
            "family": V.family_of(key[1]),
            "prefill_heavy": key[3] >= PREFILL_HEAVY_RATIO * key[4],
            "gpu_s_per_token_measured": {str(n): c for n, c in sorted(measured.items())},
            "gpu_s_per_token_predicted": {str(n): c for n, c in sorted(predicted.items())},
            "batch": {str(n): at[n]["batch"] for n in sorted(at)},
            "growth_measured": g_meas,
            "growth_predicted": growths(predicted),
        }
    return out


def prefill_overhead_us(row: V.Row, result: dict[str, Any]) -> tuple[float, float]:
    """(modelled, measured) microseconds per prompt token of ``row``'s prefill step beyond its
    compute stream, at the calibration in use; ``result`` is the row's report entry (its batch, its
    predicted and measured throughput). Measured: the model's round scaled by predicted / measured,
    less the modelled decode steps (all of the error on the prefill)."""
    from codesign.model.hardware import calibration_for

    t = V.row_terms(row, result["batch"])
    cal = calibration_for(row.gpu).model_dump()
    compute = float(t.prefill["compute"] / V.compute_efficiency(t.prefill, cal))
    prefill = float(V.step_time(t.prefill, cal))
    decode = float(V.step_time(t.decode, cal)) * (row.osl - 1)
    measured_prefill = (prefill + decode) * result["predicted"] / result["measured"] - decode
    tokens = result["batch"] * row.isl
    return 1e6 * (prefill - compute) / tokens, 1e6 * (measured_prefill - compute) / tokens


def overheads(rows: list[V.Row], report_rows: list[dict[str, Any]],
              scen: dict[tuple[Any, ...], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Adds ``prefill_overhead_us`` per TP degree (modelled, measured) to each prefill-heavy
    scenario of ``scen`` (in place) and returns per "model|family|tp" their medians."""
    by_id = {r["id"]: r for r in report_rows}
    no_adp = frozenset(r.id for r in rows if r.attention_dp_on)
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"model": [], "measured": []})
    for row in rows:
        key = (row.model, row.gpu, row.precision, row.isl, row.osl)
        if (key not in scen or not scen[key]["prefill_heavy"] or row.id not in by_id
                or not counted(by_id[row.id], no_adp)):
            continue
        model_us, measured_us = prefill_overhead_us(row, by_id[row.id])
        scen[key].setdefault("prefill_overhead_us", {})[str(row.tp)] = {"model": model_us, "measured": measured_us}
        a = acc[f"{row.model}|{scen[key]['family']}|{row.tp}"]
        a["model"].append(model_us)
        a["measured"].append(measured_us)
    return {k: {"n": len(v["model"]), "median_model_us": statistics.median(v["model"]),
                "median_measured_us": statistics.median(v["measured"])} for k, v in sorted(acc.items())}


def medians(scen: dict[tuple[Any, ...], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per "model|family|step" over the prefill-heavy scenarios: the median growth, measured and
    predicted, and how many scenarios."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"measured": [], "predicted": []})
    for key, s in scen.items():
        if not s["prefill_heavy"]:
            continue
        for step, g in s["growth_measured"].items():
            a = acc[f"{key[0]}|{s['family']}|{step}"]
            a["measured"].append(g)
            a["predicted"].append(s["growth_predicted"][step])
    return {k: {"n": len(v["measured"]), "median_measured": statistics.median(v["measured"]),
                "median_predicted": statistics.median(v["predicted"])} for k, v in sorted(acc.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(V.DEFAULT_MEASUREMENTS))
    ap.add_argument("--split", default=str(V.DEFAULT_SPLIT))
    args = ap.parse_args()
    report = V.run_validation(args.csv, split_file=args.split)
    rows, _ = V.read_rows(args.csv)
    scen = scenarios(report.rows, frozenset(r.id for r in rows if r.attention_dp_on))
    summary = medians(scen)
    over = overheads(rows, report.rows, scen)
    print(f"{'model|family|TP step':40s} {'n':>3s}  growth of a GPU's cost per output token, prefill-heavy:"
          " measured / model (median)")
    for k, v in summary.items():
        print(f"{k:40s} {v['n']:3d}  {100 * v['median_measured']:+6.1f} % / {100 * v['median_predicted']:+6.1f} %")
    print(f"\n{'model|family|TP':40s} {'n':>3s}  prefill beyond its GEMMs, µs per prompt token: measured / model (median)")
    for k, v in over.items():
        print(f"{k:40s} {v['n']:3d}  {v['median_measured_us']:7.1f} / {v['median_model_us']:7.1f}")
    write_json_atomic(OUT, {
        "csv": Path(args.csv).name, "split": Path(args.split).name,
        "prefill_heavy_ratio": PREFILL_HEAVY_RATIO, "medians_prefill_heavy": summary,
        "prefill_overhead_medians_us": over,
        "scenarios": {"|".join(str(x) for x in k): v for k, v in scen.items()},
    })
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
