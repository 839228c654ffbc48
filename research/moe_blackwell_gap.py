"""Why MoE models and small models on B200/GB200 miss on the TensorRT-LLM 1.x overviews (issue 32).

For every row of `validation/trtllm-1.0-overview.csv` and `validation/trtllm-1.x-overview.csv` (and
`validation/measurements.csv` as the control) this script takes the model's prediction
(`codesign.calibration.report.predict_row`, the shipped calibration) and inverts the measured
throughput for the time of one decode iteration, with the model's own prefill step:

    round_measured = round_model x predicted / measured
    t_decode_measured = (round_measured - PP x t_prefill) / (PP x (OSL - 1))

and puts it beside the model's decode-step terms: compute, local memory (bytes of weights, KV cache,
activations), collectives, and the step's sequences. It writes one record per row to
research/results/moe_blackwell_gap.json; the analysis (`--report`) fits the missing time per
decode iteration against each candidate term on the fit half of the rows (id-hash split) and
reports it on the held-out half.

    python research/moe_blackwell_gap.py            # ~2 min: predict every row, write the JSON
    python research/moe_blackwell_gap.py --report   # the analysis of the JSON
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "research" / "results" / "moe_blackwell_gap.json"
TABLES = ("trtllm-1.0-overview.csv", "trtllm-1.x-overview.csv", "measurements.csv")


def collect() -> list[dict]:
    from codesign.calibration.engine import evaluate_row, skip_reason
    from codesign.calibration.report import predict_row
    from codesign.calibration.rows import read_rows, split_of

    out = []
    for table in TABLES:
        rows, _ = read_rows(REPO / "validation" / table)
        for r in rows:
            if skip_reason(r) is not None or r.concurrency is not None:
                continue
            p = predict_row(r)
            if p["batch"] < 1 or not p.get("predicted"):
                continue
            ev = evaluate_row(r, p["batch"])
            m = ev.workload_metrics["main"]
            pf, dec = m["prefill_step_s"], m["decode_step_s"]
            round_model = r.pp * pf + r.pp * (r.osl - 1) * dec
            round_meas = round_model * p["predicted"] / r.value
            t_dec_meas = (round_meas - r.pp * pf) / (r.pp * max(r.osl - 1, 1))
            out.append({
                "table": table, "id": r.id, "split": split_of(r.id), "model": r.model, "gpu": r.gpu,
                "precision": r.precision, "tp": r.tp, "pp": r.pp, "ep": r.ep, "dp": r.dp,
                "isl": r.isl, "osl": r.osl, "batch": p["batch"], "bound": p["batch_bound"],
                "error_pct": p["error_pct"], "t_prefill": pf, "t_decode": dec, "t_decode_measured": t_dec_meas,
                "sequences": m["decode_step.sequences"],
                "compute_s": m["decode_step.compute_s"], "memory_s": m["decode_step.memory_local_s"],
                "bytes_w": m["decode_step.bytes_weights_local"], "bytes_kv": m["decode_step.bytes_kv_local"],
                "bytes_act": m["decode_step.bytes_act_replicated_local"],
                "net_s": dec - m["decode_step.compute_s"] - m["decode_step.memory_local_s"],
                "bandwidth_Bps": ev.metrics["bandwidth_Bps"],
            })
        print(table, len(out), file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    if not a.report:
        recs = collect()
        OUT.write_text(json.dumps(recs, indent=1))
        return
    report(json.loads(OUT.read_text()))


def report(recs: list[dict]) -> None:
    """Per-sequence time each row's decode iteration lacks, fitted (least MAPE, 0.5 us grid) on
    the fit half of the dense B200/GB200 rows only, then applied, with nothing else changed, to
    every row of the three tables: per (chip class, dense or MoE) MAPE before -> after."""
    import collections

    import numpy as np

    cls = {"b200": "blackwell", "gb200": "blackwell", "rtx-pro-6000": "rtx", "h100-sxm": "hopper", "h200-sxm": "hopper"}
    moe = {"qwen3-30b-a3b", "qwen3-235b-a22b", "llama-4-scout", "llama-4-maverick", "gpt-oss-20b", "gpt-oss-120b",
           "deepseek-v3", "mixtral-8x7b", "mixtral-8x22b"}

    def err(r: dict, c: float) -> float:
        rm = r["pp"] * r["t_prefill"] + r["pp"] * (r["osl"] - 1) * r["t_decode"]
        rn = rm + r["pp"] * (r["osl"] - 1) * c * r["sequences"]
        return 100 * ((1 + r["error_pct"] / 100) * rm / rn - 1)

    def mape(rs: list[dict], c: float) -> float:
        return float(np.mean([abs(err(r, c)) for r in rs])) if rs else float("nan")

    fit = [r for r in recs if r["gpu"] in ("b200", "gb200") and r["model"] not in moe
           and r["table"] != "measurements.csv" and r["split"] == "fit"]
    c = min(np.arange(0, 60.5, 0.5) * 1e-6, key=lambda x: mape(fit, x))
    print(f"host time per sequence fitted on {len(fit)} dense B200/GB200 fit-half rows: {c * 1e6:.1f} us")
    for table in TABLES:
        rs = [r for r in recs if r["table"] == table]
        groups = collections.defaultdict(list)
        for r in rs:
            groups[(cls.get(r["gpu"], "other"), "moe" if r["model"] in moe else "dense")].append(r)
        print(f"  {table}: {mape(rs, 0):.2f} -> {mape(rs, c):.2f} % | " + " ".join(
            f"{k[0]}/{k[1]} {mape(v, 0):.1f}->{mape(v, c):.1f}" for k, v in sorted(groups.items())))


if __name__ == "__main__":
    main()
