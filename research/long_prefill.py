"""Why long prompts miss on B200/GB200 (issue 32): candidate causes tested against the rows.

`research/moe_blackwell_gap.py` found that on the TensorRT-LLM 1.x overviews the B200/GB200 rows
with ISL >= 5,000 tokens stay over-predicted once a host time per sequence is in: read as a prefill
error, their prefill would be 1.3-3.2x the model's. For every row of the TensorRT-LLM tables
(`validation/trtllm-1.0-overview.csv`, `trtllm-1.x-overview.csv`, `measurements.csv` (0.14,
Hopper/Ampere/Ada) and `other-models.csv`) this script takes the shipped model's prediction
(`codesign.calibration.report.predict_row`) and its step terms (`calibration.engine.evaluate_row`),
and re-prices the round under each candidate, every other term unchanged.

The model now prices the attention apart (model.md eq. 2.15m, the outcome of this study): its
score FLOPs (QK^T and PV, causal triangle halved) at the KV cache's precision (never narrower than
the weights'; trtllm-bench builds FP8 context FMHA for FP8 and NVFP4 checkpoints,
tensorrt_llm/bench/build/build.py; no engine runs an FP4 FMHA), against the softmax's exponentials,
one per (query, key) pair and query head, at the chip's ``sfu_exp_G_per_s`` (SMs x tensor clock x
16 per clock per SM, instances/catalog/chips), the attention time the larger of the two (a
FlashAttention pipeline overlaps them). The script reads the model's terms
(``prefill_step.attention_s``, ``prefill_step.exponentials_s``) and re-prices *backwards*:

* ``no_exp``: the exponentials taken out (attention FLOPs at the KV precision alone).
* ``old_attention``: the model before eq. 2.15m: the score FLOPs at the weights' precision's peak,
  no exponentials.
* ``chunk_kv``: chunked prefill's KV re-reads: a prompt cut into chunks of T tokens (the engine's
  max_num_tokens where chunking is on: the 0.14 engines; trtllm-bench 1.x turns it off and raises
  max_num_tokens to the longest ISL + max batch, tensorrt_llm/bench/benchmark/utils/general.py)
  reads the KV of every earlier chunk again: n ISL^2 / (2 T) tokens' KV bytes per step.
* ``host``: the trtllm-1.x profile's host time per sequence and decode iteration (21 us), added
  to the 1.x rows only where the profile in use does not have it yet (then "the model as it
  stands" already includes it and ``host`` changes nothing).

FlashAttention-4 (Zadouri, Dao et al., together.ai/blog/flashattention-4): "From the Hopper H100 to
the Blackwell B200 ... BF16 tensor core throughput increases from 1 to 2.25 PFLOPs, while both the
SFU count and shared memory bandwidth remains unchanged", and the forward pass's "main performance
bottleneck lies ... in the SFU units for softmax exponential"; NVIDIA, "Making Softmax More
Efficient with NVIDIA Blackwell Ultra" (developer.nvidia.com blog): Blackwell Ultra doubles SFU
(MUFU.EX2) throughput over Blackwell for this reason.

It also inverts each row for the prefill multiplier k (measured prefill / model prefill, the decode
as the model has it, with the host term) and, for decode-only rows (ISL <= 1,024, prefill < 5 % of
the round), the decode error by context length: a long-context decode miss is not a prefill cause.

    python research/long_prefill.py          # ~3 min; writes research/results/long_prefill.json
    python research/long_prefill.py --report # the tables from the JSON
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np

from codesign.calibration.engine import evaluate_row, row_instance, skip_reason
from codesign.calibration.report import predict_row
from codesign.calibration.rows import read_rows, split_of
from codesign.catalog import load_chip
from codesign.model.engines import rules_of
from codesign.model.hardware import attention_precision, math_format
from codesign.model.units import BYTES_PER_ELEMENT
from codesign.model.workload import kv_cache_bytes_per_token, load_workload

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "research" / "results" / "long_prefill.json"
TABLES = ("trtllm-1.0-overview.csv", "trtllm-1.x-overview.csv", "measurements.csv", "other-models.csv")
#: the trtllm-1.x profile's host time per sequence and decode iteration (instances/catalog/engines/
#: trtllm-1.x.toml, host_us_per_sequence, fitted by another study): added to the 1.x rows only where
#: the profile in use lacks it (``host_in_model_us`` 0), so the figures do not depend on whether it is in
HOST_S = rules_of("trtllm-1.x").host_us_per_sequence * 1e-6
def collect() -> list[dict]:
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
            chip = load_chip(r.gpu)
            peaks = {k: v * 1e12 for k, v in chip.peak_dense_TFLOPS.items()}
            inst = row_instance(r, p["batch"])
            fmt_w = math_format(chip.peak_dense_TFLOPS, r.precision, "peak")
            fmt_a = math_format(chip.peak_dense_TFLOPS, attention_precision(inst, inst.workloads[0]), "peak")

            def term(k: str, m=m) -> float:  # serial + overlapped part of a term the step may lack
                return float(m.get(f"prefill_step.{k}_s", 0.0) + m.get(f"prefill_step.{k}_overlapped_s", 0.0))

            out.append({
                "table": table, "id": r.id, "split": split_of(r.id), "model": r.model, "gpu": r.gpu,
                "precision": r.precision, "kv_precision": r.kv_precision, "tp": r.tp, "pp": r.pp, "ep": r.ep,
                "dp": r.dp, "isl": r.isl, "osl": r.osl, "batch": p["batch"], "error_pct": p["error_pct"],
                "t_prefill": m["prefill_step_s"], "t_decode": m["decode_step_s"],
                # the model's attention terms (eq. 2.15m): FLOPs at the attention's precision, exponentials
                "attn_s": term("attention"), "exp_s": term("exponentials"), "other_compute_s": term("compute"),
                "sequences": m["decode_step.sequences"], "prefill_sequences": m["prefill_step.sequences"],
                "bandwidth_Bps": ev.metrics["bandwidth_Bps"], "peak_w": peaks[fmt_w], "peak_attn": peaks[fmt_a],
                "exp_G_per_s": chip.sfu_exp_G_per_s, "engine_max_tokens": p.get("engine_max_tokens"),
                "engine": r.engine, "host_in_model_us": float(getattr(r.rules, "host_us_per_sequence", 0.0) or 0.0),
                "kv_B_per_token": float(kv_cache_bytes_per_token(load_workload(r.model),
                                                                 BYTES_PER_ELEMENT[r.kv_precision])),
                "head_dim": load_workload(r.model).head_dim,
            })
        print(table, len(out), file=sys.stderr)
    return out


# --- candidates: the extra prefill time of each, per stage step ---------------------------------------


def extra_prefill_s(r: dict, rule: str) -> float:
    """The prefill step's time under ``rule`` less the model's (negative where the rule removes time)."""
    attn_now = max(r["attn_s"], r["exp_s"])  # the model's attention (eq. 2.15m)
    if rule == "no_exp":
        return r["attn_s"] - attn_now
    if rule == "old_attention":  # the score FLOPs at the weights' peak, no exponentials
        return r["attn_s"] * r["peak_attn"] / r["peak_w"] - attn_now
    if rule == "chunk_kv":
        t = r["engine_max_tokens"]
        if not t or t >= r["isl"] or r["table"] not in ("measurements.csv", "other-models.csv"):
            return 0.0
        n, isl = r["prefill_sequences"], r["isl"]
        # KV of the earlier chunks read again by each later chunk (every TP rank its heads' share)
        reread_B = n * isl * (isl - t) / (2.0 * t) * r["kv_B_per_token"] / (r["tp"] * r["pp"])
        return reread_B / r["bandwidth_Bps"]
    return 0.0


def host_missing_s(r: dict) -> float:
    """The 1.x host time per sequence the model in use lacks for this row (0 if it has it)."""
    return HOST_S if r["engine"] == "trtllm-1.x" and not r["host_in_model_us"] else 0.0


def error_under(r: dict, rules: tuple[str, ...]) -> float:
    rm = r["pp"] * r["t_prefill"] + r["pp"] * (r["osl"] - 1) * r["t_decode"]
    extra = sum(r["pp"] * extra_prefill_s(r, x) for x in rules if x != "host")
    if "host" in rules:
        extra += r["pp"] * (r["osl"] - 1) * host_missing_s(r) * r["sequences"]
    return 100.0 * ((1.0 + r["error_pct"] / 100.0) * rm / (rm + extra) - 1.0)


CANDIDATES = ((), ("no_exp",), ("old_attention",), ("chunk_kv",), ("host",), ("host", "old_attention"),
              ("host", "chunk_kv"))


def mape(xs: list[float]) -> float:
    return float(np.mean(np.abs(xs))) if xs else float("nan")


def prefill_multiplier(r: dict) -> float:
    """k: measured prefill / model prefill, the decode as modelled (with the host term)."""
    rm = r["pp"] * r["t_prefill"] + r["pp"] * (r["osl"] - 1) * (r["t_decode"] + host_missing_s(r) * r["sequences"])
    measured = rm * (1.0 + error_under(r, ("host",)) / 100.0)
    return (measured - (rm - r["pp"] * r["t_prefill"])) / (r["pp"] * r["t_prefill"])


def summarise(recs: list[dict]) -> dict:
    cls = {"b200": "blackwell", "gb200": "blackwell", "rtx-pro-6000": "rtx-pro-6000"}
    out: dict = {"host_in_model_us": sorted({r["host_in_model_us"] for r in recs if r["engine"] == "trtllm-1.x"}),
                 "candidates": {}, "long_prompt_rows": [], "decode_by_context": {}}
    for cand in CANDIDATES:
        name = "+".join(cand) or "model as it stands"
        per: dict = {}
        for table in TABLES:
            rs = [r for r in recs if r["table"] == table]
            groups = collections.defaultdict(list)
            for r in rs:
                long = "long" if r["isl"] >= 5000 else "short"
                groups[f"{cls.get(r['gpu'], 'hopper-ampere-ada')}/{long}"].append(error_under(r, cand))
            held = [error_under(r, cand) for r in rs if r["split"] == "held-out"]
            per[table] = {"rows": len(rs), "mape_pct": round(mape([error_under(r, cand) for r in rs]), 2),
                          "heldout_mape_pct": round(mape(held), 2),
                          "groups": {k: {"rows": len(v), "mape_pct": round(mape(v), 2),
                                         "bias_pct": round(float(np.mean(v)), 2)} for k, v in sorted(groups.items())}}
        out["candidates"][name] = per
    for r in recs:
        if r["isl"] >= 5000 and r["table"].startswith("trtllm"):
            out["long_prompt_rows"].append({
                k: r[k] for k in ("table", "id", "model", "gpu", "precision", "tp", "pp", "isl", "osl", "batch")
            } | {"attn_over_other": round(max(r["attn_s"], r["exp_s"]) / r["other_compute_s"], 3)
                 if r["other_compute_s"] else 0.0, "error_pct": round(r["error_pct"], 1),
                 "host_pct": round(error_under(r, ("host",)), 1),
                 "old_attention_pct": round(error_under(r, ("old_attention",)), 1),
                 "prefill_multiplier": round(prefill_multiplier(r), 2)})
    dec = collections.defaultdict(list)
    for r in recs:
        rm = r["pp"] * r["t_prefill"] + r["pp"] * (r["osl"] - 1) * r["t_decode"]
        if r["isl"] <= 1024 and r["pp"] * r["t_prefill"] < 0.05 * rm and r["table"].startswith("trtllm"):
            ctx = r["isl"] + r["osl"] / 2
            dec[f"{cls.get(r['gpu'], 'hopper')}/ctx{'<3k' if ctx < 3000 else '3k-8k' if ctx < 8000 else '>8k'}"].append(
                error_under(r, ("host",)))
    # the rows the issue is about: B200/GB200 at ISL >= 5,000 on the 1.x tables, by split (nothing
    # here is fitted, so both halves are out of sample; the split is reported as the others are)
    bl = [r for r in recs if r["gpu"] in ("b200", "gb200") and r["isl"] >= 5000 and r["table"].startswith("trtllm")]
    out["blackwell_long"] = {
        "+".join(c) or "model as it stands": {
            half: {"rows": len(v), "mape_pct": round(mape(v), 2), "bias_pct": round(float(np.mean(v)), 2)}
            for half in ("held-out", "fit")
            for v in [[error_under(r, c) for r in bl if r["split"] == half]]}
        for c in CANDIDATES}
    # where the exponentials bind: their time over the score FLOPs' at the attention's precision
    # (> 1: exp-bound), per chip, attention peak and head_dim, from the model's own terms
    ratio = {}
    for r in recs:
        if r["exp_s"] and r["attn_s"]:
            key = f"{r['gpu']}|attention peak {r['peak_attn'] / 1e12:g} TFLOPS|head_dim {r['head_dim']}"
            ratio[key] = round(r["exp_s"] / r["attn_s"], 2)
    out["exp_over_tensor"] = dict(sorted(ratio.items()))
    out["decode_by_context"] = {k: {"rows": len(v), "bias_pct": round(float(np.mean(v)), 1), "mape_pct": round(mape(v), 1)}
                                for k, v in sorted(dec.items())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    recs = collect() if not a.report else json.loads(OUT.read_text())["rows"]
    data = {"summary": summarise(recs), "rows": recs}  # --report re-summarises the stored rows
    OUT.write_text(json.dumps(data, indent=1))
    report(data)


def report(data: dict) -> None:
    s = data["summary"]
    for name, per in s["candidates"].items():
        print(f"== {name}")
        for table, t in per.items():
            g = " ".join(f"{k} {v['mape_pct']:.1f}({v['bias_pct']:+.1f})" for k, v in t["groups"].items())
            print(f"  {table:26s} {t['mape_pct']:6.2f} % (held-out {t['heldout_mape_pct']:6.2f}) | {g}")
    print("== long-prompt rows: error shipped / +host / old attention, prefill multiplier k, attention / other compute")
    for r in s["long_prompt_rows"]:
        print(f"  {r['id']} {r['model'][:16]:16s} {r['gpu']:12s} {r['precision']:5s} tp{r['tp']} pp{r['pp']} "
              f"{r['isl']}/{r['osl']} b={r['batch']} {r['error_pct']:+6.1f} {r['host_pct']:+6.1f} "
              f"{r['old_attention_pct']:+6.1f} k={r['prefill_multiplier']:.2f} attn={r['attn_over_other']:.2f}")
    print("== B200/GB200, ISL >= 5,000, 1.x tables: held-out / fit half MAPE (bias)")
    for name, v in s["blackwell_long"].items():
        h, f = v["held-out"], v["fit"]
        print(f"  {name:28s} {h['mape_pct']:6.2f} ({h['bias_pct']:+.1f}) on {h['rows']} | {f['mape_pct']:6.2f} ({f['bias_pct']:+.1f}) on {f['rows']}")
    print("== exponential time / score-FLOP time at the attention's peak (> 1: exp-bound)")
    for k, v in s["exp_over_tensor"].items():
        print(f"  {k:60s} {v:.2f}")
    print("== decode-only rows (host term in) by mean context")
    for k, v in s["decode_by_context"].items():
        print(f"  {k:24s} {v['rows']:3d} rows bias {v['bias_pct']:+.1f} % MAPE {v['mape_pct']:.1f} %")


if __name__ == "__main__":
    main()
