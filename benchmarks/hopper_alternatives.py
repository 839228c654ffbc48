"""Mechanisms tried on the hopper family and not kept (VALIDATION.md §5.10).

Each alternative changes the calibration-free step terms (or the batch) of the model before the
hopper family (H100 + H200, the die's cap included) is re-fitted on its fit rows by the
validation's own search (``validate.fit_calibration``); the held-out MAPE of its rows and the
fitted parameters are reported next to the model's. None of them is in the model:

* ``ring``: every all-reduce in a ring, as the model before its in-switch all-reduce
  (model.md eq. 3.17a, VALIDATION.md §5.10: NVLink SHARP from 5 ranks on at NCCL's measured speed);
* ``per-call``: a latency per collective call (two all-reduces per layer and the logits gather)
  on top of the latency per ring step;
* ``log2-steps``: log2(n) latency steps per collective instead of the ring's n - 1 per pass;
* ``activations``: the activation traffic between kernels scaled by k (interpolated between the
  model with and without it, which is linear in the bytes);
* ``no-request-cap``: the batch not capped at the run's requests per replica (``Row.request_limit``;
  the model caps it since VALIDATION.md §5.8's fix 12).

Each fitted alternative also predicts the hopper rows of validation/other-models.csv (Llama 3.1
405B and Mixtral 8x22B, models the fit never saw; VALIDATION.md §6.2).

Writes validation/hopper_alternatives.json.

    python benchmarks/hopper_alternatives.py [--csv ../shared/validation/measurements.csv]

About 8 minutes on two cores.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from codesign import validate as V
from codesign.jsonio import write_json_atomic

OUT = V.REPO_ROOT / "validation" / "hopper_alternatives.json"
#: Llama 3.1 405B and Mixtral 8x22B from the same overview, never fitted (VALIDATION.md §6.2)
CHECK = V.REPO_ROOT / "validation" / "other-models.csv"
FAMILY = "hopper"
NO_ACTIVATIONS = V.Variant("no-activations", no_activation_traffic=True)


def _per_call(latency_us: float) -> Callable[[V.Row, int, V.RowTerms], None]:
    def change(row: V.Row, batch: int, t: V.RowTerms) -> None:
        if row.tp > 1:
            for terms in (t.prefill, t.decode):
                terms["net_latency"] += (2 * terms["layers"] + 1) * latency_us * 1e-6
    return change


def _log2_steps(row: V.Row, batch: int, t: V.RowTerms) -> None:
    if row.tp > 1:
        for terms in (t.prefill, t.decode):
            terms["collective_steps"] *= math.log2(row.tp) / (row.tp - 1)


def _activations(k: float) -> Callable[[V.Row, int, V.RowTerms], None]:
    def change(row: V.Row, batch: int, t: V.RowTerms) -> None:
        without = _ORIGINAL_TERMS(row, batch, NO_ACTIVATIONS)
        for terms, bare in ((t.prefill, without.prefill), (t.decode, without.decode)):
            terms["memory_local"] = bare["memory_local"] + k * (terms["memory_local"] - bare["memory_local"])
    return change


_ORIGINAL_TERMS = V.row_terms


@contextmanager
def patched(change: Callable[[V.Row, int, V.RowTerms], None] | None) -> Iterator[None]:
    """The validator with ``change`` applied to every row's terms; restored on exit."""
    def terms(row: V.Row, batch: int, variant: V.Variant = V.MODEL) -> V.RowTerms:
        t = _ORIGINAL_TERMS(row, batch, variant)
        if change is not None:
            change(row, batch, t)
        return t

    V.row_terms = terms
    try:
        yield
    finally:
        V.row_terms = _ORIGINAL_TERMS


class Alternative(NamedTuple):
    #: a change to every row's calibration-free terms
    change: Callable[[V.Row, int, V.RowTerms], None] | None = None
    #: the validation's own ablation switches (``ring_allreduce``, ``no_request_cap``)
    variant: V.Variant = V.MODEL


ALTERNATIVES: dict[str, Alternative] = {
    "model": Alternative(),
    "ring": Alternative(variant=V.Variant("ring", ring_allreduce=True)),
    **{f"per-call-{us}us": Alternative(_per_call(us)) for us in (10, 20, 40)},
    "log2-steps": Alternative(_log2_steps),
    **{f"activations-x{k}": Alternative(_activations(k)) for k in (0.5, 0.75)},
    "no-request-cap": Alternative(variant=V.Variant("no-request-cap", no_request_cap=True)),
}


def check_mape(rows: list[V.Row], footprints: list[V.Footprint], params: dict[str, float],
               variant: V.Variant = V.MODEL) -> tuple[float, float]:
    """(MAPE, bias) in % of ``rows`` (hopper chips, never fitted; ``footprints`` theirs) predicted
    with the fitted ``params``, through the validator as currently patched and ``variant``: the
    batch by the engine rule at the fitted reserve (``batch_from``), the step terms (``row_terms``)
    re-composed at ``params``."""
    from codesign.model.hardware import calibration_for, kv_cache_free_fraction

    mem = {"usable_memory_fraction": params["usable_memory_fraction"],
           "runtime_reserve_GiB": params["runtime_reserve_GiB"], "kv_cache_free_fraction": kv_cache_free_fraction()}
    errors = []
    for r, fp in zip(rows, footprints, strict=True):
        cal = {**calibration_for(r.gpu).model_dump(), **params}
        b = V.batch_from(r, fp, mem, V.ENGINE_MAX_BATCH, requests=not variant.no_request_cap)
        errors.append(100.0 * (V.recompose(V.row_terms(r, b, variant), cal) / r.value - 1.0))
    return V.mape(errors), sum(errors) / len(errors)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=V.DEFAULT_MEASUREMENTS)
    ap.add_argument("--check", type=Path, default=CHECK,
                    help="rows of models the fit never saw; its hopper rows are predicted by every alternative")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.perf_counter()
    check_rows = [r for r in V.read_rows(args.check)[0] if V.family_of(r.gpu) == FAMILY]
    check_footprints = [V.footprint(r) for r in check_rows]  # the same under every alternative
    result: dict[str, dict] = {}
    for name, alt in ALTERNATIVES.items():
        with patched(alt.change):
            fit = V.fit_calibration(args.csv, V.DEFAULT_SPLIT, families=[FAMILY], pooled=False,
                                    variant=alt.variant)[FAMILY]
            check, bias = check_mape(check_rows, check_footprints, fit["params"], alt.variant)
        result[name] = {k: fit[k] for k in ("params", "fit_mape_pct", "held_out_mape_pct", "n_held_out")}
        result[name].update({"check_mape_pct": check, "check_bias_pct": bias, "n_check": len(check_rows)})
        print(f"{name:22s} held-out {fit['held_out_mape_pct']:.2f} %  fit {fit['fit_mape_pct']:.2f} %  "
              f"network eff. {fit['params']['network_efficiency']:.3f}  unseen models {check:.2f} % "
              f"(bias {bias:+.2f} %)", flush=True)
    write_json_atomic(args.out, {"csv": str(args.csv), "split": str(V.DEFAULT_SPLIT), "family": FAMILY,
                                 "check": str(args.check), "alternatives": result,
                                 "seconds": time.perf_counter() - t0})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
