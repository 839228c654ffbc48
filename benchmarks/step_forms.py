"""Per-kernel-class overlap forms of the stage step, tried and not kept (VALIDATION.md §5.11).

The model overlaps a step's three streams by one fraction o (eq. 5.3), fitted per family when
these forms were measured (fix 14's model) and held at 0 since fix 17 (VALIDATION.md §5.17, where
``act-serial`` is the model itself; these scripts fit every field as ``validate`` fits them):

    o max(c, m, p) + (1 - o)(c + m + p)            c compute, m local memory, p pooled memory

Real kernels differ: the GEMMs stream weights (and KV) while they compute, the elementwise kernels
between them (norms, activations, residual adds, permutations) only move activations. Each form
below splits the local-memory stream into weights + KV (m_wkv) and activations (m_act, the traffic
eq. 2.15h adds; read off the model as the difference with the activation-free ablation) and
composes them differently; every family is then re-fitted on its fit rows by the validation's own
search (``validate.fit_calibration``) and the pooled held-out MAPE reported next to the model's:

* ``act-serial``: the elementwise kernels never overlap anything, o applies to c, m_wkv, p only;
  o max(c, m_wkv, p) + (1 - o)(c + m_wkv + p) + m_act;
* ``prefill-roofline``: prefill is one roofline, max(c, m, p), whatever o (decode keeps o);
* ``act-overlap``: activations are hidden under everything else (fused epilogues), the step is
  max(o max(c, m_wkv, p) + (1 - o)(c + m_wkv + p), m_act).

Writes validation/step_forms.json.

    python benchmarks/step_forms.py [--csv ../shared/validation/measurements.csv] [--forms a,b]

About 2.5 minutes per form on two cores.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from codesign import validate as V
from codesign.jsonio import write_json_atomic
from codesign.model.hardware import achieved_memory_fraction

OUT = V.REPO_ROOT / "validation" / "step_forms.json"
NO_ACTIVATIONS = V.Variant("no-activations", no_activation_traffic=True)
EXTRA_TERMS = ("memory_act", "memory_wkv", "is_prefill")
FORMS = ("model", "act-serial", "prefill-roofline", "act-overlap")


def _streams(form: str, t: dict[str, Any], cal: dict[str, Any]) -> Any:
    o = cal["stream_overlap"]
    eff = achieved_memory_fraction(cal["memory_efficiency"], cal.get(V.CAP_FIELD), t["memory_peak_GBps"])
    c, p = t["compute"] / V.compute_efficiency(t, cal), t["memory_pool"]
    mw, ma = t["memory_wkv"] / eff, t["memory_act"] / eff
    if form == "act-serial":
        return o * np.maximum(np.maximum(c, mw), p) + (1 - o) * (c + mw + p) + ma
    m = mw + ma
    mixed = o * np.maximum(np.maximum(c, m), p) + (1 - o) * (c + m + p)
    if form == "prefill-roofline":
        return np.where(t["is_prefill"] > 0, np.maximum(np.maximum(c, m), p), mixed)
    if form == "act-overlap":
        return np.maximum(o * np.maximum(np.maximum(c, mw), p) + (1 - o) * (c + mw + p), ma)
    raise ValueError(form)


@contextmanager
def patched(form: str) -> Iterator[None]:
    """The validator with the step composed by ``form``; restored on exit."""
    original_terms, original_step, original_keys = V.row_terms, V.step_time, V.STEP_TERMS
    if form == "model":
        yield
        return

    def terms(row: V.Row, batch: int, variant: V.Variant = V.MODEL) -> V.RowTerms:
        t = original_terms(row, batch, variant)
        bare = original_terms(row, batch, NO_ACTIVATIONS)
        for phase in ("prefill", "decode"):
            full, without = getattr(t, phase), getattr(bare, phase)
            full["memory_act"] = full["memory_local"] - without["memory_local"]
            full["memory_wkv"] = without["memory_local"]
            full["is_prefill"] = float(phase == "prefill")
        return t

    def step(t: dict[str, Any], cal: dict[str, Any]) -> Any:
        without_streams = {**t, "compute": 0.0, "memory_local": 0.0, "memory_pool": 0.0}
        return _streams(form, t, cal) + original_step(without_streams, {**cal, "stream_overlap": 0.0})

    V.row_terms, V.step_time, V.STEP_TERMS = terms, step, original_keys + EXTRA_TERMS
    try:
        yield
    finally:
        V.row_terms, V.step_time, V.STEP_TERMS = original_terms, original_step, original_keys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=V.DEFAULT_MEASUREMENTS)
    ap.add_argument("--forms", default=",".join(FORMS))
    ap.add_argument("--families", default=None, help="comma-separated families (default: every family)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.perf_counter()
    result: dict[str, dict] = {}
    for form in args.forms.split(","):
        with patched(form):
            fits = V.fit_calibration(args.csv, V.DEFAULT_SPLIT, pooled=False,
                                    families=args.families.split(",") if args.families else None)
        fams = {k: {f: v[f] for f in ("params", "fit_mape_pct", "held_out_mape_pct", "n_held_out")}
                for k, v in fits.items()}
        pooled = V.rows_weighted_mape(fams, "held_out")
        result[form] = {"held_out_mape_pct": pooled, "n_held_out": sum(v["n_held_out"] for v in fams.values()),
                        "families": fams}
        print(f"{form:18s} held-out {pooled:.2f} %  " + "  ".join(
            f"{k} {v['held_out_mape_pct']:.2f}" for k, v in sorted(fams.items())), flush=True)
    write_json_atomic(args.out, {"csv": str(args.csv), "split": str(V.DEFAULT_SPLIT), "forms": result,
                                 "seconds": time.perf_counter() - t0})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
