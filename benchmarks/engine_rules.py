"""Four rules of the measured engine (TensorRT-LLM 0.14, TensorRT backend), tried and not kept
(VALIDATION.md §6.4).

Each is a documented rule of the engine's source, adds no fitted number, and is measured the way
every proposal of §6 is: the calibration re-fitted on the fit rows, the error reported on the
held-out rows.

* ``runtime-batch-table``: the executor's dynamic batch-size tuner
  (``DynamicBatchConfig::kDefaultBatchSizeTable``, ``DynamicBatchTuner::getRuntimeBatchSize``)
  lowers the batch the KV cache holds to a table value (``validate.runtime_batch``);
* ``replicated-embedding``: the TensorRT flow's ``use_parallel_embedding`` is False by default
  (``split_embedding`` returns the whole table), so every TP rank holds the whole embedding
  table; the LM head stays split (``schedule.REPLICATED_EMBEDDING``);
* ``network-efficiency-nccl``: hopper's network efficiency held at the bus bandwidth NCCL's ring
  reaches on large messages on 8 H100s (0.82 of 450 GB/s; NVIDIA/nccl-tests issue 212) and at a
  value between that and the fit (0.70), the rest of hopper's calibration re-fitted; each also
  judged on the never-fitted files (NEVER_FITTED_FILES: hopper's rows at that calibration, the
  other families' at the shipped one). The prefill all-reduces of the TP 8 rows are large NCCL
  messages.
* ``nccl-above-threshold``: on NVLink, TensorRT-LLM's AllreducePlugin runs its own one-shot /
  two-shot kernels for messages up to 8 MB (16 MB at TP 2) and NCCL above
  (``AllreducePlugin::selectImplementation``). Prefill chunks (at least 2,048 tokens) are always
  above; a decode step's message is its micro-batch x hidden x 2 B. The link bytes of NCCL-sized
  steps run at NCCL's measured large-message efficiency (0.82 on NVLink 4, 0.77 on NVLink 3:
  ~230 GB/s bus bandwidth of 300 on 8 A100s), the custom kernels' at the fitted one; hopper and
  ampere re-fitted (the PCIe cards always run NCCL and keep one fitted efficiency).

Writes validation/engine_rules.json.

    python benchmarks/engine_rules.py [--csv ../shared/validation/measurements.csv]

About 14 minutes on two cores (three full re-fits, three of hopper, two of hopper and ampere);
``--parts`` measures some of them and keeps the others' results.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from codesign import validate as V
from codesign.jsonio import write_json_atomic

OUT = V.REPO_ROOT / "validation" / "engine_rules.json"
VARIANTS = (
    V.MODEL,
    V.Variant("runtime-batch-table", runtime_batch_table=True),
    V.Variant("replicated-embedding", replicated_embedding=True),
)
#: hopper's network efficiency held at these values (NCCL's large-message ring: 0.82)
HOPPER_NETWORK_EFFICIENCIES = (0.82, 0.70)
#: NCCL's large-message ring efficiency per NVLink family (nccl-tests all_reduce bus bandwidth on
#: 8 H100: ~370 of 450 GB/s; on 8 A100: ~230 of 300 GB/s)
NCCL_EFFICIENCY = {"hopper": 0.82, "ampere": 0.77}
#: the largest message TensorRT-LLM's own all-reduce kernels take (B): 16 MB at TP 2, 8 MB above
CUSTOM_ALLREDUCE_MAX_B = {2: 16e6}
CUSTOM_ALLREDUCE_MAX_B_DEFAULT = 8e6
PARTS = ("variants", "hopper-network", "nccl-above-threshold")
#: never-fitted files each hopper network efficiency is also judged on (VALIDATION.md §6.2, §5.8, §5.9)
NEVER_FITTED_FILES = {
    "other_models": V.NEVER_FITTED,
    "repeat_table": V.REPO_ROOT / "validation" / "repeat-llama3-70b.csv",
    "nim": V.REPO_ROOT / "validation" / "nim-llama3.3-70b-h100.csv",
}


def never_fitted_with(hopper: dict[str, Any]) -> dict[str, float]:
    """MAPE of each NEVER_FITTED_FILES file with ``hopper`` (a fit_calibration group) for hopper's
    rows and the shipped calibration for every other family's."""
    from codesign.model.hardware import calibration_for

    fitted: dict[str, Any] = {"hopper": hopper}
    out: dict[str, float] = {}
    for key, path in NEVER_FITTED_FILES.items():
        for r in V.read_rows(path)[0]:
            fam = V.family_of(r.gpu)
            fitted.setdefault(fam, {"params": calibration_for(r.gpu).model_dump()})
        out[key] = V.mape(e for _, e in V.never_fitted_errors(fitted, path=path).values())
    return out


@contextmanager
def nccl_above_threshold() -> Iterator[None]:
    """The validator with the link bytes of NCCL-sized all-reduce steps on NVLink families at
    NCCL_EFFICIENCY (a separate term, ``net_bw_nccl``) instead of the fitted efficiency."""
    from codesign.model.workload import load_workload

    saved = (V.TermCache.at, V.step_time, V.STEP_TERMS)
    original_at, original_step = V.TermCache.at, V.step_time

    def at(self: V.TermCache, row: V.Row, batch: int) -> V.RowTerms:
        t = original_at(self, row, batch)
        pre = {**t.prefill, "net_bw_nccl": 0.0}
        dec = {**t.decode, "net_bw_nccl": 0.0}
        eta = NCCL_EFFICIENCY.get(V.family_of(row.gpu))
        if eta is not None and row.tp > 1:
            pre["net_bw_nccl"], pre["net_bw"] = pre["net_bw"] / eta, 0.0
            message_B = batch / row.pp * load_workload(row.model).hidden_size * 2
            if message_B > CUSTOM_ALLREDUCE_MAX_B.get(row.tp, CUSTOM_ALLREDUCE_MAX_B_DEFAULT):
                dec["net_bw_nccl"], dec["net_bw"] = dec["net_bw"] / eta, 0.0
        return replace(t, prefill=pre, decode=dec)

    def step_time(t: dict[str, Any], cal: dict[str, Any]) -> Any:
        return original_step(t, cal) + t.get("net_bw_nccl", 0.0)

    V.TermCache.at, V.step_time, V.STEP_TERMS = at, step_time, (*V.STEP_TERMS, "net_bw_nccl")
    try:
        yield
    finally:
        V.TermCache.at, V.step_time, V.STEP_TERMS = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(V.REPO_ROOT.parent / "shared" / "validation" / "measurements.csv"))
    ap.add_argument("--split", default=str(V.REPO_ROOT / "validation" / "split.json"))
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"comma-separated parts to measure ({', '.join(PARTS)}); the others keep "
                         "their results from --out if it exists")
    args = ap.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; expected some of {', '.join(PARTS)}")
    t0 = time.perf_counter()
    out_path = Path(args.out)
    out: dict[str, Any] = json.loads(out_path.read_text()) if out_path.exists() else {}
    inputs = {"csv": args.csv, "csv_sha256": V.file_sha256(args.csv), "split": args.split,
              "split_sha256": V.file_sha256(args.split)}
    if any(out.get(k) not in (None, inputs[k]) for k in ("csv_sha256", "split_sha256")):
        out = {}  # results of another file or split: start afresh
    out.update(inputs)
    seconds = {k: v for k, v in out.get("seconds", {}).items() if k in PARTS} if isinstance(out.get("seconds"), dict) else {}
    fields = ("fit_mape_pct", "held_out_mape_pct", "params")
    if "variants" in parts:
        t = time.perf_counter()
        out["variants"] = {}
        for name, res in V.proposals(args.csv, args.split, VARIANTS).items():
            out["variants"][name] = {k: res[k] for k in (
                "held_out_mape_pct", "fit_mape_pct", "all_mape_pct", "worst_held_out_group_pct",
                "held_out_groups_mape_pct", "params")}
            print(f"{name:24s} held-out {res['held_out_mape_pct']:.2f} %  fit {res['fit_mape_pct']:.2f} %  "
                  f"worst group {res['worst_held_out_group_pct']:.2f} %", flush=True)
        seconds["variants"] = round(time.perf_counter() - t, 1)
    if "hopper-network" in parts:
        t = time.perf_counter()
        out["hopper"] = {}
        for eta in (None, *HOPPER_NETWORK_EFFICIENCIES):
            v = V.MODEL if eta is None else V.Variant(f"hopper-network-{eta}", fixed=(("network_efficiency", eta),))
            fam = V.fit_calibration(args.csv, args.split, families=["hopper"], pooled=False, variant=v)["hopper"]
            key = "fitted" if eta is None else f"{eta:.2f}"
            never = never_fitted_with(fam)
            out["hopper"][key] = {**{k: fam[k] for k in fields}, "never_fitted_mape_pct": never}
            print(f"hopper network efficiency {key:6s} held-out {fam['held_out_mape_pct']:.2f} %  "
                  f"fit {fam['fit_mape_pct']:.2f} %  never fitted "
                  + ", ".join(f"{k} {v:.2f} %" for k, v in never.items()), flush=True)
        seconds["hopper-network"] = round(time.perf_counter() - t, 1)
    if "nccl-above-threshold" in parts:
        t = time.perf_counter()
        families = sorted(NCCL_EFFICIENCY)
        out["nccl_above_threshold"] = {"model": {}, "rule": {}}
        for key, ctx in (("model", nullcontext()), ("rule", nccl_above_threshold())):
            with ctx:
                fitted = V.fit_calibration(args.csv, args.split, families=families, pooled=False)
            for fam in families:
                out["nccl_above_threshold"][key][fam] = {k: fitted[fam][k] for k in fields}
                print(f"nccl-above-threshold {key:5s} {fam:7s} held-out {fitted[fam]['held_out_mape_pct']:.2f} %  "
                      f"fit {fitted[fam]['fit_mape_pct']:.2f} %", flush=True)
        seconds["nccl-above-threshold"] = round(time.perf_counter() - t, 1)
    out["seconds"] = seconds  # per part, as last measured
    write_json_atomic(out_path, out)
    print(f"wrote {args.out} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
