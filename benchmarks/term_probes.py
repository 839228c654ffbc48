"""Three probes of the open errors of VALIDATION.md §5.2 and §5.4, each a calibration-free term of
the model scaled on a class of rows with every family re-fitted (VALIDATION.md §6.5). They are
questions, not mechanisms: a probe that helped would point at a term to look for in the engine.

* ``moe-compute-1.3``: Mixtral's compute stream (both phases) 1.3x, as if its grouped expert GEMMs
  ran at 1/1.3 of the dense GEMMs' efficiency. Mixtral at TP 2 is over-predicted on prefill-heavy
  rows on hopper (+13 to +19 %) where Llama 70B at TP 8 is under-predicted (-17 to -22 %).
* ``prefill-activations-0.5``: the prefill step's local-memory stream (activations between
  kernels; weights are read once per step) halved, as if an engine fused half of the kernel
  boundaries or kept a chunk's tensors in L2. Llama 70B at TP 8, prefill-heavy, is predicted too
  slow, and its prefill activations do not shrink with TP (§5.7).
* ``prefill-links-0.5``: the prefill step's link bytes halved, as if its all-reduces ran at twice
  the fitted efficiency (large NCCL messages).

Writes validation/term_probes.json (per probe: held-out and fit MAPE, per family, the fitted
parameters).

    python benchmarks/term_probes.py [--csv ../shared/validation/measurements.csv] [--probes a,b]

About 11 minutes on two cores (one full re-fit per probe and one of the model).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from codesign import validate as V
from codesign.jsonio import write_json_atomic

OUT = V.REPO_ROOT / "validation" / "term_probes.json"


def _moe_compute(row: V.Row, t: V.RowTerms) -> None:
    if row.model.startswith("mixtral"):
        t.prefill["compute"] *= 1.3
        t.decode["compute"] *= 1.3


def _prefill_activations(row: V.Row, t: V.RowTerms) -> None:
    t.prefill["memory_local"] *= 0.5


def _prefill_links(row: V.Row, t: V.RowTerms) -> None:
    t.prefill["net_bw"] *= 0.5


#: probe name -> how it changes a row's calibration-free terms (in place); "model" changes nothing
PROBES: dict[str, Callable[[V.Row, V.RowTerms], None] | None] = {
    "model": None,
    "moe-compute-1.3": _moe_compute,
    "prefill-activations-0.5": _prefill_activations,
    "prefill-links-0.5": _prefill_links,
}


@contextmanager
def probing(change: Callable[[V.Row, V.RowTerms], None] | None) -> Iterator[None]:
    """The validator with ``change`` applied to every row's terms as the fit reads them."""
    original = V._TermCache.at

    def at(self: V._TermCache, row: V.Row, batch: int) -> V.RowTerms:
        key = (row.id, batch)
        fresh = key not in self.terms
        t = original(self, row, batch)
        if fresh and change is not None:  # once per cached entry
            change(row, t)
        return t

    V._TermCache.at = at
    try:
        yield
    finally:
        V._TermCache.at = original


def run_probe(csv: str, split: str, name: str) -> dict[str, Any]:
    start = time.perf_counter()
    with probing(PROBES[name]):
        res = V.fit_calibration(csv, split, pooled=False)
    n_held = sum(r["n_held_out"] for r in res.values())
    n_fit = sum(r["n_fit"] for r in res.values())
    return {
        "held_out_mape_pct": sum(r["held_out_mape_pct"] * r["n_held_out"] for r in res.values()) / n_held,
        "fit_mape_pct": sum(r["fit_mape_pct"] * r["n_fit"] for r in res.values()) / n_fit,
        "families": {f: {"fit_mape_pct": r["fit_mape_pct"], "held_out_mape_pct": r["held_out_mape_pct"],
                         "params": r["params"]} for f, r in res.items()},
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(V.DEFAULT_MEASUREMENTS))
    ap.add_argument("--split", default=str(V.DEFAULT_SPLIT))
    ap.add_argument("--probes", default=",".join(PROBES), help="comma-separated: " + ", ".join(PROBES))
    args = ap.parse_args()
    names = [p for p in args.probes.split(",") if p]
    unknown = sorted(set(names) - set(PROBES))
    if unknown:
        raise SystemExit(f"unknown probe(s) {unknown}; expected some of {list(PROBES)}")
    out: dict[str, Any] = {"csv": Path(args.csv).name, "split": Path(args.split).name, "probes": {}}
    for name in names:
        out["probes"][name] = r = run_probe(args.csv, args.split, name)
        print(f"{name:26s} held-out {r['held_out_mape_pct']:.2f} %  fit {r['fit_mape_pct']:.2f} %  "
              + "  ".join(f"{f} {v['held_out_mape_pct']:.2f}" for f, v in r["families"].items())
              + f"  ({r['seconds']:.0f} s)", flush=True)
    write_json_atomic(OUT, out)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
