"""Other ways to fit the same calibration (VALIDATION.md §6.8): a robust objective, and the engine's
fields held instead of fitted on the small families. Each re-fits every family on the split's fit
rows (``validate.fit_calibration``, pooled fit off) and reports the held-out rows by their MAPE,
the target's measure, whatever the fit minimised.

* ``capped-<pct>``: the fit minimises the mean of min(|error|, pct): a row further off than pct
  counts as pct, so the rows §6.6 reads as memory anomalies cannot bend the physical fields.
* ``log``: the mean |ln(predicted / measured)| (symmetric in over- and under-prediction).
* ``held-engine-fields``: every family fitted with the stream overlap at 0 and no per-layer
  overhead (hopper's fitted values), so the three small families (19-33 held-out rows, 7 fitted
  numbers each) fit fewer numbers.

Writes validation/fit_objectives.json.

    python benchmarks/fit_objectives.py [--csv ../shared/validation/measurements.csv] [--only a,b]

About a minute per variant on two cores.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from codesign import validate as V
from codesign.jsonio import results_to_extend, write_json_atomic

OUT = V.REPO_ROOT / "validation" / "fit_objectives.json"
VARIANTS = ("mape", "capped-25", "log", "held-engine-fields")
#: the engine fields ``held-engine-fields`` holds, at hopper's fitted values (VALIDATION.md §4)
HELD_ENGINE_FIELDS = (("stream_overlap", 0.0), ("layer_overhead_us", 0.0))


def objective(name: str) -> Callable[[np.ndarray, np.ndarray], float]:
    """The fit's objective ``f(predicted, measured)`` by name (points, like the MAPE)."""
    if name in ("mape", "held-engine-fields"):
        return lambda p, m: float(np.mean(np.abs(p / m - 1.0)) * 100.0)
    if name == "log":  # a row that does not fit in memory (predicted 0) counts as a factor 1e9 off (~2,072
        # points, where the MAPE counts it 100)
        return lambda p, m: float(np.mean(np.abs(np.log(np.maximum(p, 1e-9 * m) / m))) * 100.0)
    if name.startswith("capped-"):
        cap = float(name.removeprefix("capped-"))
        if not cap > 0:
            raise ValueError(f"capped-<pct> needs a positive cap, got {name!r}")
        return lambda p, m: float(np.mean(np.minimum(np.abs(p / m - 1.0) * 100.0, cap)))
    raise ValueError(f"unknown fit variant {name!r}; expected one of {VARIANTS} or capped-<pct>")


class _Objective:
    """A ``RowStack`` seen by ``fit_stack`` through another objective (its ``mape``)."""

    def __init__(self, stack: V.RowStack, f: Callable[[np.ndarray, np.ndarray], float]) -> None:
        self.stack, self.f, self.rows = stack, f, stack.rows

    def __getattr__(self, name: str) -> Any:  # the stack's terms (``dec``, ``fits``: the 8-bit field's test)
        return getattr(self.stack, name)

    def mape(self, cal: dict[str, float], how: V.Variant = V.MODEL) -> float:
        return self.f(self.stack.predict(cal, how), self.stack.measured)


@contextmanager
def fitting_with(name: str) -> Iterator[V.Variant]:
    """``validate.fit_stack`` minimising the named objective while inside (the held-out MAPE
    ``fit_group`` reports is the stacks' own ``mape``, untouched); yields the variant to fit with."""
    f = objective(name)
    original = V.fit_stack

    def fit_stack(stack: Any, base: dict[str, float], how: V.Variant) -> tuple[dict[str, float], float]:
        wrapped = _Objective(stack, f)
        cal, _ = original(wrapped, base, how)
        return cal, wrapped.mape(cal, how)

    if name != "mape":
        V.fit_stack = fit_stack
    try:
        yield V.Variant(name=name, fixed=HELD_ENGINE_FIELDS) if name == "held-engine-fields" else V.MODEL
    finally:
        V.fit_stack = original


def run(csv: str, split: str, name: str) -> dict[str, Any]:
    start = time.perf_counter()
    with fitting_with(name) as variant:
        res = V.fit_calibration(csv, split, pooled=False, variant=variant)
    return {
        "held_out_mape_pct": V.rows_weighted_mape(res, "held_out"),
        "families": {f: {"held_out_mape_pct": r["held_out_mape_pct"], "fit_objective": r["fit_mape_pct"],
                         "params": r["params"]} for f, r in res.items()},
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(V.DEFAULT_MEASUREMENTS))
    ap.add_argument("--split", default=str(V.DEFAULT_SPLIT))
    ap.add_argument("--only", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS)
                    + ", capped-<pct>")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n]
    for n in names:
        objective(n)  # an unknown name stops here, before any fit
    out = results_to_extend(OUT, {"csv": Path(args.csv).name, "split": Path(args.split).name}, "variants")
    for n in names:
        out["variants"][n] = r = run(args.csv, args.split, n)
        fams = "  ".join(f"{f} {v['held_out_mape_pct']:.2f}" for f, v in r["families"].items())
        print(f"{n:22s} held-out {r['held_out_mape_pct']:.2f} %  {fams}  ({r['seconds']:.0f} s)", flush=True)
        if not math.isfinite(r["held_out_mape_pct"]):
            raise SystemExit(f"{n}: no held-out MAPE")
        write_json_atomic(OUT, out)  # each variant as it ends: an interrupted run keeps the rest
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
