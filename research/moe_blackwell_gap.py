"""The host time per sequence of TensorRT-LLM 1.x, and vLLM's small-batch floor (issue 32).

For every offline row of the TensorRT-LLM 1.x overviews (`validation/trtllm-1.0-overview.csv`,
`validation/trtllm-1.x-overview.csv`), of `validation/measurements.csv` (the 0.14 engine, the
control) and of `validation/deepstack-vllm-b200.csv` (vLLM) this script evaluates the model once,
with the shipped calibration, at the batch `codesign validate` predicts the row at, and keeps the
row's calibration-free step terms (`codesign.calibration.terms.row_terms`). A prediction at any
host time per sequence h is then the model's own re-composition (eq. 5.3, `terms.step_time`,
`terms.metric_from_steps`) with the engine's host term set to h x the step's sequences (prefill and
decode steps), the batch unchanged (the host time takes no memory). The records do not depend on
the engine profile's own value: the engine's part is set, not added.

`--report` fits h (least MAPE on a 0.25 us grid) on the FIT half (id hash,
`codesign.calibration.rows.split_of`) of the rows of both 1.x tables, all chips, and reports the
held-out half first: per table, per chip class and dense/MoE; the fit on one 1.x table checked
on the other table's held-out half; the fit per chip class; the 0.14 control. The figure it fits is
the `trtllm-1.x` profile's `host_us_per_sequence` (instances/catalog/engines/trtllm-1.x.toml).

For vLLM it fits, on the fit half of the DeepStack rows, the same per-sequence term and a fixed time
per step (not a term of the model: an additive constant on every step, the candidate of a
small-batch floor), and reports each on the held-out half.

    python research/moe_blackwell_gap.py            # ~3 min: evaluate every row, write the JSON
    python research/moe_blackwell_gap.py --report   # the analysis of research/results/moe_blackwell_gap.json
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np

from codesign.calibration.engine import skip_reason
from codesign.calibration.report import predict_row
from codesign.calibration.rows import read_rows, split_of
from codesign.calibration.terms import metric_from_steps, row_terms, step_time
from codesign.model.calibration import shipped
from codesign.model.workload import load_workload

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "research" / "results" / "moe_blackwell_gap.json"
V1_TABLES = ("trtllm-1.0-overview.csv", "trtllm-1.x-overview.csv")
CONTROL = "measurements.csv"
VLLM = "deepstack-vllm-b200.csv"
TABLES = (*V1_TABLES, CONTROL, VLLM)
CLASSES = {"b200": "blackwell", "gb200": "blackwell", "rtx-pro-6000": "rtx", "h100-sxm": "hopper",
           "h200-sxm": "hopper"}
#: the grid h is fitted on (us)
GRID_US = np.arange(0.0, 60.25, 0.25)


def collect() -> list[dict]:
    """One record per predictable offline row: its step terms, calibration and metadata."""
    out = []
    cal = shipped()
    for table in TABLES:
        rows, _ = read_rows(REPO / "validation" / table)
        for r in rows:
            if skip_reason(r) is not None or r.concurrency is not None:
                continue
            p = predict_row(r)
            if p["batch"] < 1 or not p.get("predicted"):
                continue
            t = row_terms(r, p["batch"])
            out.append({
                "table": table, "id": r.id, "split": split_of(r.id), "model": r.model, "gpu": r.gpu,
                "engine": r.engine, "moe": load_workload(r.model).moe is not None, "precision": r.precision,
                "tp": r.tp, "pp": r.pp, "ep": r.ep, "isl": r.isl, "osl": r.osl, "metric": r.metric,
                "measured": r.value, "predicted": p["predicted"], "batch": t.batch, "dp": t.dp,
                "devices": t.devices, "prefill": t.prefill, "decode": t.decode,
                "calibration": cal.for_chip(r.gpu).model_dump(),
            })
        print(table, len(out), file=sys.stderr)
    return out


def predict(rec: dict, host_us: float, step_s: float = 0.0) -> float:
    """The row's metric with the engine's host time ``host_us`` per sequence of a step and
    ``step_s`` more on every step (the model's re-composition, eq. 5.3)."""
    steps = []
    for phase in ("prefill", "decode"):
        t = dict(rec[phase], engine_host=rec[phase]["sequences"] * host_us * 1e-6)
        steps.append(step_time(t, rec["calibration"]) + step_s)
    return float(metric_from_steps(rec["metric"], *steps, rec["batch"], rec["dp"], rec["pp"], rec["osl"],
                                   rec["devices"]))


def mape(recs: list[dict], host_us: float, step_s: float = 0.0) -> float:
    if not recs:
        return float("nan")
    return float(np.mean([abs(predict(r, host_us, step_s) / r["measured"] - 1) for r in recs]) * 100)


def fit(recs: list[dict], grid: np.ndarray = GRID_US, **kw: float) -> float:
    """The grid value of least MAPE on ``recs`` (the first of equals)."""
    errs = [mape(recs, float(h), **kw) for h in grid]
    return float(grid[int(np.argmin(errs))])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    if not a.report:
        OUT.write_text(json.dumps(collect(), indent=1))
        return
    report(json.loads(OUT.read_text()))


def _line(recs: list[dict], h: float) -> str:
    held = [r for r in recs if r["split"] != "fit"]
    fitted = [r for r in recs if r["split"] == "fit"]
    return (f"held-out {len(held)} rows {mape(held, 0):.2f} -> {mape(held, h):.2f} %, "
            f"fit {len(fitted)} rows {mape(fitted, 0):.2f} -> {mape(fitted, h):.2f} %, "
            f"all {mape(recs, 0):.2f} -> {mape(recs, h):.2f} %")


def report(recs: list[dict]) -> None:
    by_table = {t: [r for r in recs if r["table"] == t] for t in TABLES}
    v1 = [r for t in V1_TABLES for r in by_table[t]]
    h = fit([r for r in v1 if r["split"] == "fit"])
    n_fit = sum(r["split"] == "fit" for r in v1)
    print(f"trtllm-1.x host time per sequence, fitted on the {n_fit} fit-half rows of both 1.x tables: {h:.2f} us")
    for t in V1_TABLES:
        print(f"  {t}: {_line(by_table[t], h)}")
        groups = collections.defaultdict(list)
        for r in by_table[t]:
            if r["split"] != "fit":
                groups[(CLASSES.get(r["gpu"], "other"), "moe" if r["moe"] else "dense")].append(r)
        print("    held-out by class: " + ", ".join(f"{c}/{k} ({len(v)}) {mape(v, 0):.1f} -> {mape(v, h):.1f}"
                                                for (c, k), v in sorted(groups.items())))
    print("  the fit on one table, the other table's held-out half:")
    for a, b in (V1_TABLES, V1_TABLES[::-1]):
        ha = fit([r for r in by_table[a] if r["split"] == "fit"])
        held = [r for r in by_table[b] if r["split"] != "fit"]
        print(f"    fit on {a}: {ha:.2f} us; {b} held-out {mape(held, 0):.2f} -> {mape(held, ha):.2f} %")
    print("  fitted per chip class (fit half of both tables), for the record:")
    for c in ("blackwell", "hopper", "rtx"):
        rs = [r for r in v1 if CLASSES.get(r["gpu"]) == c]
        hc = fit([r for r in rs if r["split"] == "fit"])
        held = [r for r in rs if r["split"] != "fit"]
        print(f"    {c}: {hc:.2f} us; its held-out {mape(held, 0):.2f} -> {mape(held, hc):.2f} % "
              f"(the one figure: {mape(held, h):.2f} %)")
    ctl = by_table[CONTROL]
    print(f"  control {CONTROL} (trtllm-0.14, no host term): {mape(ctl, 0):.2f} %; "
          f"were the figure applied to it: {mape(ctl, h):.2f} %")
    vllm = by_table[VLLM]
    vfit = [r for r in vllm if r["split"] == "fit"]
    hv = fit(vfit)
    step_grid_ms = np.arange(0.0, 10.05, 0.1)
    cv = float(step_grid_ms[int(np.argmin([mape(vfit, 0.0, c * 1e-3) for c in step_grid_ms]))])
    print(f"vllm ({VLLM}, {len(vllm)} rows): per-sequence host time fitted {hv:.2f} us: {_line(vllm, hv)}")
    held = [r for r in vllm if r["split"] != "fit"]
    print(f"  a fixed time per step fitted {cv:.1f} ms: held-out {len(held)} rows {mape(held, 0):.2f} -> "
          f"{mape(held, 0, cv * 1e-3):.2f} %, fit {len(vfit)} rows {mape(vfit, 0):.2f} -> {mape(vfit, 0, cv * 1e-3):.2f} %")
    for model in sorted({r["model"] for r in vllm}):
        rs = sorted((r for r in vllm if r["model"] == model), key=lambda r: r["batch"])
        print(f"    {model}: " + " ".join(f"b{r['batch']} {(r['measured'] - predict(r, 0)) * 1e3:+.1f}" for r in rs)
              + " ms per token missing")


if __name__ == "__main__":
    main()
