"""Three rules of the measured engine (TensorRT-LLM 0.14, TensorRT backend), tried and not kept
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
  value between that and the fit (0.70), the rest of hopper's calibration re-fitted. The prefill
  all-reduces of the TP 8 rows are large NCCL messages; the fit's 0.60 is set mostly by decode.

Writes validation/engine_rules.json.

    python benchmarks/engine_rules.py [--csv ../shared/validation/measurements.csv]

About 10 minutes on two cores (three full re-fits, two of one family).
"""

from __future__ import annotations

import argparse
import time
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(V.REPO_ROOT.parent / "shared" / "validation" / "measurements.csv"))
    ap.add_argument("--split", default=str(V.REPO_ROOT / "validation" / "split.json"))
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    t0 = time.perf_counter()
    out: dict[str, Any] = {"csv": args.csv, "csv_sha256": V.file_sha256(args.csv), "variants": {}, "hopper": {}}
    measured = V.proposals(args.csv, args.split, VARIANTS)
    for name, res in measured.items():
        out["variants"][name] = {k: res[k] for k in (
            "held_out_mape_pct", "fit_mape_pct", "all_mape_pct", "worst_held_out_group_pct",
            "held_out_groups_mape_pct", "params")}
        print(f"{name:24s} held-out {res['held_out_mape_pct']:.2f} %  fit {res['fit_mape_pct']:.2f} %  "
              f"worst group {res['worst_held_out_group_pct']:.2f} %", flush=True)
    for eta in (None, *HOPPER_NETWORK_EFFICIENCIES):
        v = V.MODEL if eta is None else V.Variant(f"hopper-network-{eta}", fixed=(("network_efficiency", eta),))
        fam = V.fit_calibration(args.csv, args.split, families=["hopper"], pooled=False, variant=v)["hopper"]
        key = "fitted" if eta is None else f"{eta:.2f}"
        out["hopper"][key] = {k: fam[k] for k in ("fit_mape_pct", "held_out_mape_pct", "params")}
        print(f"hopper network efficiency {key:6s} held-out {fam['held_out_mape_pct']:.2f} %  "
              f"fit {fam['fit_mape_pct']:.2f} %", flush=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    write_json_atomic(Path(args.out), out)
    print(f"wrote {args.out} ({out['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
