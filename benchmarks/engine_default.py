"""How much fix 16 rests on its one assumption: the engines of the layouts trtllm-bench's public
table lacks (VALIDATION.md §5.16).

The 0.14 overview's rows of Mixtral 8x7B at TP 8, and the never-fitted Llama 3.1 405B and Mixtral
8x22B, ran engines whose ``max_batch_size`` the public table does not give. The shipped
``benchmark_engines.toml`` assumes TensorRT-LLM's BuildConfig default (2,048). This script refits
every family with each alternative for those rows only and reports the held-out and never-fitted
MAPE and the groups within 12 %:

- ``default-2048``: the shipped assumption;
- ``unknown``: no engine rule for them (the heuristic's cap of 4,096; each sequence's own slot
  state, as for any row whose engine is unknown, model.md eq. 4.14b);
- ``heuristic``: trtllm-bench's tuning heuristic's max batch (``term_probes.engine_limits``);
- ``tokens-unknown``: the shipped 2,048 slots but no token budget per iteration for them (fix 19,
  §5.18, assumes the same BuildConfig default's 8,192 tokens).

    python benchmarks/engine_default.py      # about 4 minutes; writes validation/engine_default.json
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from codesign import validate as V

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import term_probes  # noqa: E402

OUT = HERE.parent / "validation" / "engine_default.json"
MODES = ("default-2048", "unknown", "heuristic", "tokens-unknown")


def engine_for(row: V.Row, mode: str) -> tuple[int | None, int | None]:
    """The (``max_batch_size``, ``max_num_tokens``) a row of a layout the table lacks gets under ``mode``."""
    if mode == "unknown":
        return None, None
    if mode == "heuristic":
        return term_probes.engine_limits(row)[1], row.engine_max_tokens
    if mode == "tokens-unknown":
        return row.engine_max_batch, None
    return row.engine_max_batch, row.engine_max_tokens


def _with_engine(row: V.Row, max_batch: int | None, max_tokens: int | None) -> V.Row:
    return dataclasses.replace(row, engine_max_batch=max_batch, engine_max_tokens=max_tokens)


def lacking_layouts_as(mode: str, rows: list[V.Row]) -> list[V.Row]:
    """``rows`` with those whose layout the shipped table lacks (but whose source it lists) given
    ``mode``'s engine."""
    listed = {k for b in V.read_benchmark_engines() for k in b.engines}
    return [_with_engine(r, *engine_for(r, mode)) if r.engine_max_batch is not None and (r.model, r.tp) not in listed
            else r for r in rows]


def run(mode: str) -> dict[str, Any]:
    start = time.perf_counter()
    rows = lacking_layouts_as(mode, V.read_rows(V.DEFAULT_MEASUREMENTS)[0])
    res = V.fit_calibration(str(V.DEFAULT_MEASUREMENTS), str(V.DEFAULT_SPLIT), pooled=False, rows=rows)
    labels = V.read_split(str(V.DEFAULT_SPLIT))
    errors = V.never_fitted_errors(res, path=str(V.DEFAULT_MEASUREMENTS), rows=rows)
    other = V.mape(e for _, e in V.never_fitted_errors(
        res, rows=lacking_layouts_as(mode, V.read_rows(V.NEVER_FITTED)[0])).values())
    groups: dict[str, list[float]] = defaultdict(list)
    for i, (r, e) in errors.items():
        if labels.get(i) == "held-out":
            groups[r.key(("model", "gpu"))].append(e)
    by_group = {g: V.mape(e) for g, e in sorted(groups.items())}
    return {
        "held_out_mape_pct": V.rows_weighted_mape(res, "held_out"),
        "fit_mape_pct": V.rows_weighted_mape(res, "fit"),
        "never_fitted_mape_pct": other,
        "groups_within_12_pct": sum(m <= 12.0 for m in by_group.values()),
        "groups_over_12_pct": {g: round(m, 2) for g, m in by_group.items() if m > 12.0},
        "reserves_GiB": {f: r["params"]["runtime_reserve_GiB"] for f, r in res.items()},
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    out = {"csv": V.DEFAULT_MEASUREMENTS.name, "modes": {}}
    for mode in MODES:
        out["modes"][mode] = r = run(mode)
        print(f"{mode:13s} held-out {r['held_out_mape_pct']:.2f} %  fit {r['fit_mape_pct']:.2f} %  never fitted "
              f"{r['never_fitted_mape_pct']:.2f} %  groups within 12 %: {r['groups_within_12_pct']} of 15 "
              f"{r['groups_over_12_pct']}", flush=True)
    from codesign.jsonio import write_json_atomic

    write_json_atomic(OUT, out)
    print(f"wrote {OUT.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
