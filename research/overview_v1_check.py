"""The TensorRT-LLM v1.0 overview, never fitted: what moves and why (VALIDATION.md).

Four diagnostics of `validation/trtllm-1.0-overview.csv` beside `codesign validate` on it:

1. the engine's own speed-up: v1.0 throughput over the 0.14 engine's on the configurations both
   overviews measure (same chip, precision, TP, PP, ISL/OSL; Llama 3.3 70B against 3.1 70B, one
   architecture), by scenario class;
2. the time a row's decode iteration lacks in the model: (measured round - model round) / (PP x
   OSL) iterations, and that per sequence of the micro-batch, per (model, chip, layout) over the
   decode-heavy scenarios;
3. hopper's calibration re-fitted on half of the file's hopper rows (the id-hash split) and
   reported on the other half: does the model's structure carry to the new engine? Once on the
   dense models' rows, once with the MoE rows too (run with attention DP). Diagnostic only,
   nothing is written to the calibration;
4. the host time per sequence of a step (``host_us_per_sequence``, eq. 5.3) fitted with each family
   on the split's fit half of its rows (reported on the other half), against the same fit without
   it: how much of what the rows lack is host time?

    python research/overview_v1_check.py

Writes research/results/trtllm_1_0_check.json. About 4 minutes.
"""

from __future__ import annotations

import argparse
import csv
import statistics as st
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from codesign.calibration.engine import skip_reason
from codesign.calibration.fit import FitOptions, family_of, fit_calibration
from codesign.calibration.report import predict_row
from codesign.calibration.rows import Row, make_split, read_rows
from codesign.jsonio import write_json_atomic

REPO = Path(__file__).resolve().parent.parent
CSV = REPO / "validation" / "trtllm-1.0-overview.csv"
OUT = REPO / "research" / "results" / "trtllm_1_0_check.json"
#: scenarios whose round is mostly decode steps, and mostly prefill
DECODE_HEAVY = {(128, 2048), (128, 4096), (500, 2000), (1000, 1000), (1000, 2000), (2048, 2048)}
PREFILL_HEAVY = {(2048, 128), (5000, 500)}
#: the 0.14 overview's rows: the measurements and the two models it left out of them (§6.2)
OLD = (REPO / "validation" / "measurements.csv", REPO / "validation" / "other-models.csv")
SAME_ARCHITECTURE = {"llama-3.3-70b": "llama-3.1-70b"}


def _key(r: Row) -> tuple:
    return (SAME_ARCHITECTURE.get(r.model, r.model), r.gpu, r.precision, r.tp, r.pp, r.isl, r.osl)


def engine_ratios(new: list[Row]) -> dict:
    old = {_key(r): r.value for path in OLD for r in read_rows(path)[0] if r.concurrency is None}
    ratios = {(r.isl, r.osl, r.model, r.gpu): r.value / old[_key(r)] for r in new if _key(r) in old}
    out: dict = {"configurations": len(ratios)}
    for name, cls in (("decode_heavy", DECODE_HEAVY), ("prefill_heavy", PREFILL_HEAVY), ("all", None)):
        v = [x for (i, o, *_), x in ratios.items() if cls is None or (i, o) in cls]
        out[name] = {"n": len(v), "median": st.median(v), "min": min(v), "max": max(v)}
    return out


def missing_time(new: list[Row]) -> dict:
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in new:
        if skip_reason(r) is not None or (r.isl, r.osl) not in DECODE_HEAVY:
            continue
        p = predict_row(r)
        b = p["batch"]
        round_measured = b * r.dp * r.osl / r.value
        round_model = r.pp * p["prefill_step_s"] + r.pp * (r.osl - 1) * p["decode_step_s"]
        per_iteration = (round_measured - round_model) / (r.pp * r.osl)
        groups[f"{r.model}|{r.gpu}|tp{r.tp}|pp{r.pp}"].append((1e3 * per_iteration, 1e6 * per_iteration / (b / r.pp)))
    return {k: {"rows": len(v), "ms_per_iteration": [min(x for x, _ in v), max(x for x, _ in v)],
                "us_per_sequence_per_iteration": [min(y for _, y in v), max(y for _, y in v)]}
            for k, v in sorted(groups.items())}


def refit(family: str, dense_only: bool, host: bool = False) -> dict:
    """One family's calibration fitted on the split's fit rows of the file's rows of its chips
    (dense models only, or also the MoE rows, run with attention DP), with or without the host
    time per sequence (``FitOptions.fit_host``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{family}.csv"
        with CSV.open(newline="") as f, path.open("w", newline="") as g:
            reader = csv.DictReader(f)
            writer = csv.DictWriter(g, fieldnames=reader.fieldnames)
            writer.writeheader()
            for row in reader:
                if family_of(row["gpu"]) == family and (not dense_only or row["model"].startswith("llama-3")):
                    writer.writerow(row)
        split = Path(tmp) / "split.json"
        make_split(path, split)
        r = fit_calibration(path, split, families=[family], pooled=False, options=FitOptions(fit_host=host))[family]
    return {k: r[k] for k in ("params", "n_fit", "fit_mape_pct", "n_held_out", "held_out_mape_pct")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.perf_counter()
    new, bad = read_rows(CSV)
    assert not bad, bad
    out = {
        "csv": str(CSV.relative_to(REPO)),
        "engine_speedup_over_0_14": engine_ratios(new),
        "decode_iteration_time_the_model_lacks": missing_time(new),
        "hopper_refit_on_v1_0_dense_rows": refit("hopper", dense_only=True),
        "hopper_refit_on_v1_0_rows_with_moe": refit("hopper", dense_only=False),
        # the host term (eq. 5.3): does a cost per sequence and step explain what the chips lack?
        "host_term": {f"{fam}{'' if host else '_without'}_host": refit(fam, dense_only=False, host=host)
                      for fam in ("blackwell", "blackwell-workstation", "hopper") for host in (False, True)},
    }
    out["seconds"] = time.perf_counter() - t0
    write_json_atomic(args.out, out)
    e = out["engine_speedup_over_0_14"]
    print(f"v1.0 / 0.14 throughput on {e['configurations']} shared configurations: "
          + ", ".join(f"{k} median {v['median']:.2f} ({v['min']:.2f}-{v['max']:.2f}, n={v['n']})"
                      for k, v in e.items() if k != "configurations"))
    print("decode iteration time the model lacks (decode-heavy scenarios):")
    for k, v in out["decode_iteration_time_the_model_lacks"].items():
        a, b = v["ms_per_iteration"]
        c, d = v["us_per_sequence_per_iteration"]
        print(f"  {k:40s} {a:+7.1f} .. {b:+7.1f} ms/iteration  {c:+7.1f} .. {d:+7.1f} us/sequence")
    fits = {k: out[k] for k in ("hopper_refit_on_v1_0_dense_rows", "hopper_refit_on_v1_0_rows_with_moe")}
    fits.update(out["host_term"])
    for key, h in fits.items():
        print(f"{key}: fit on {h['n_fit']} rows {h['fit_mape_pct']:.1f} %, "
              f"other {h['n_held_out']} rows {h['held_out_mape_pct']:.1f} %; {h['params']}")
    print(f"wrote {args.out} ({out['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
