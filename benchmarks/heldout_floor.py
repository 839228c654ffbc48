"""What calibration alone can reach on the held-out rows (VALIDATION.md §6.6), and the KV capacity
each memory-filled row implies.

**Floor.** Each chip family is fitted as ``codesign calibrate`` fits it (same fields, bounds,
starts and memory grid), but on the split's *held-out* rows, and its MAPE is read on those same
rows. No calibration fitted on the fit rows can do better on the held-out rows than the best one
fitted on them (up to the optimiser reaching its minimum, a local search from three starts), so
this in-sample figure bounds from below the held-out MAPE any re-fit of the model's fields can
reach; closing the rest of the gap to a target takes a change of the model's form. Also reported
per (model, chip) group, and the generalisation gap per family (shipped held-out MAPE minus floor).

**Anomalous rows.** The held-out MAPE with and without the five rows §6.6 reads as memory
anomalies (ANOMALOUS), and the points they carry.

**Implied capacity.** For each row whose batch the KV cache sets (``batch_bound`` memory), the
batch b* at which the shipped calibration's prediction equals the measurement (bisection on the
model's own step times, linear between neighbouring batch steps) and the sequences x (ISL + OSL)
it holds, against the model's batch. A row family whose b* x (ISL + OSL) is constant across
ISL/OSL while the model's batch is right on the sibling chip points at memory, not time; and
the runtime reserve that would make b* the memory batch (C - W - b* x KV per sequence / f).

Writes validation/heldout_floor.json.

    python benchmarks/heldout_floor.py [--csv ../shared/validation/measurements.csv] [--split validation/split.json]

About 2 minutes on two cores (one fit per family on the held-out rows, one bisection per row).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from codesign import validate as V
from codesign.jsonio import write_json_atomic

OUT = V.REPO_ROOT / "validation" / "heldout_floor.json"
#: the held-out rows VALIDATION.md §6.6 reads as memory anomalies (each implies about half the KV
#: capacity the model gives it): Llama 70B FP16 at 2048/2048 on two A100 SXM, Mixtral FP16 at TP 2
#: on the A100 PCIe (128/128, 128/2048, 128/4096, 20000/2000)
ANOMALOUS = ("m0547", "m0680", "m0697", "m0714", "m0731")


def anomalous_share(csv: str, split: str) -> dict[str, Any]:
    """The held-out MAPE with and without the ANOMALOUS rows, and the points they carry."""
    held = [r for r in V.run_validation(csv, split_file=split).rows if r.get("split") == "held-out"]
    errs = {r["id"]: abs(r["error_pct"]) for r in held}
    odd = sum(errs[i] for i in ANOMALOUS)
    total = sum(errs.values())
    return {"rows": list(ANOMALOUS), "n_held_out": len(errs), "held_out_mape_pct": total / len(errs),
            "points_carried": odd / len(errs),
            "mape_of_the_others_pct": (total - odd) / (len(errs) - len(ANOMALOUS))}


def floor(csv: str, split: str) -> dict[str, Any]:
    """Per family: fitted on the held-out rows, its MAPE on them; per (model, chip) group too."""
    from codesign.model.hardware import calibration_for

    rows, _ = V.read_rows(csv)
    labels = V.read_split(split)
    usable = [r for r in rows if V.skip_reason(r) is None and r.id in labels]
    by_fam: dict[str, list[V.Row]] = defaultdict(list)
    for r in usable:
        by_fam[V.family_of(r.gpu)].append(r)
    cache = V.TermCache(V.MODEL)
    fams: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    total, n = 0.0, 0
    for fam in sorted(by_fam):
        held = [r for r in by_fam[fam] if labels[r.id] == "held-out"]
        fit = [r for r in by_fam[fam] if labels[r.id] == "fit"]
        if not held:
            continue
        chip = sorted({r.gpu for r in by_fam[fam]})[0]
        shipped = calibration_for(chip).model_dump()
        mem_shipped = {k: shipped[k] for k in V.MEMORY_FIELDS}
        shipped_held = V.RowStack.build(held, cache, mem_shipped, V.ENGINE_MAX_BATCH).mape(shipped)
        res = V.fit_group(held, fit, shipped, cache, V.MODEL, True, V.ENGINE_MAX_BATCH)
        cal = {**shipped, **res["params"]}
        if V.CAP_FIELD not in res["params"]:
            cal[V.CAP_FIELD] = None
        mem = {k: cal[k] for k in V.MEMORY_FIELDS}
        fams[fam] = {"n_held_out": len(held), "floor_mape_pct": res["fit_mape_pct"],
                     "shipped_held_out_mape_pct": shipped_held,
                     "gap_points": shipped_held - res["fit_mape_pct"], "params_fitted_on_held_out": res["params"]}
        total += res["fit_mape_pct"] * len(held)
        n += len(held)
        by_group: dict[str, list[V.Row]] = defaultdict(list)
        for r in held:
            by_group[f"{r.model}|{r.gpu}"].append(r)
        for g, rs in sorted(by_group.items()):
            groups[g] = {"n_held_out": len(rs),
                         "floor_mape_pct": V.RowStack.build(rs, cache, mem, V.ENGINE_MAX_BATCH).mape(cal),
                         "shipped_mape_pct": V.RowStack.build(rs, cache, mem_shipped, V.ENGINE_MAX_BATCH).mape(shipped)}
    return {"floor_mape_pct": total / n, "n_held_out": n, "families": fams, "groups": groups}


def implied_batch(row: V.Row, cal: dict[str, Any]) -> float | None:
    """The batch at which the prediction at ``cal`` equals the measurement (None beyond 2^16)."""
    step = row.batch_step
    seen: dict[int, float] = {}

    def pred(b: int) -> float:  # one evaluation of the model per batch
        if b not in seen:
            seen[b] = V.recompose(V.row_terms(row, b), cal)
        return seen[b]

    lo, hi = step, step
    while pred(hi) < row.value:
        if hi >= 1 << 16:
            return None
        lo, hi = hi, hi * 2
    if pred(lo) >= row.value:
        return float(lo)
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        if mid <= lo:
            break
        lo, hi = (mid, hi) if pred(mid) < row.value else (lo, mid)
    p_lo, p_hi = pred(lo), pred(hi)
    return lo + (hi - lo) * (row.value - p_lo) / (p_hi - p_lo) if p_hi != p_lo else float(lo)


def implied_capacity(csv: str) -> dict[str, Any]:
    from codesign.model.hardware import GiB, calibration_for

    out: dict[str, Any] = {}
    for r in V.read_rows(csv)[0]:
        if V.skip_reason(r) is not None or r.concurrency is not None or r.metric != "output_tokens_per_s":
            continue
        choice = V.max_batch(r)
        if choice.bound != "memory":
            continue
        b = implied_batch(r, calibration_for(r.gpu).model_dump())
        seq = r.isl + r.osl
        fp = choice.footprint
        # the runtime reserve that would make b* the memory batch: C - W - b* x KV per sequence / f
        reserve = None if b is None else (fp.raw_capacity_B - fp.weights_B - b * fp.kv_per_sequence_B / fp.kv_free_fraction)
        out[r.id] = {"group": f"{r.model}|{r.gpu}", "precision": r.precision, "tp": r.tp, "isl": r.isl, "osl": r.osl,
                     "model_batch": choice.batch, "model_tokens": choice.batch * seq,
                     "implied_batch": None if b is None else round(b, 1),
                     "implied_tokens": None if b is None else round(b * seq),
                     "implied_reserve_GiB": None if reserve is None else round(reserve / GiB, 2)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(V.DEFAULT_MEASUREMENTS))
    ap.add_argument("--split", default=str(V.DEFAULT_SPLIT))
    args = ap.parse_args()
    t0 = time.perf_counter()
    out: dict[str, Any] = {"csv": Path(args.csv).name, "split": Path(args.split).name}
    out["floor"] = fl = floor(args.csv, args.split)
    print(f"held-out floor (each family fitted on its held-out rows): {fl['floor_mape_pct']:.2f} % "
          f"on {fl['n_held_out']} rows", flush=True)
    for fam, x in fl["families"].items():
        print(f"  {fam:12s} {x['n_held_out']:4d} rows  floor {x['floor_mape_pct']:6.2f} %  "
              f"shipped {x['shipped_held_out_mape_pct']:6.2f} %  gap {x['gap_points']:+.2f}")
    over = {g: x for g, x in fl["groups"].items() if x["floor_mape_pct"] > 12.0}
    print("groups over 12 % even at the floor: " + (", ".join(f"{g} {x['floor_mape_pct']:.1f} %"
                                                            for g, x in over.items()) or "none"))
    out["anomalous_rows"] = odd = anomalous_share(args.csv, args.split)
    print(f"the rows {', '.join(odd['rows'])} carry {odd['points_carried']:.2f} of the held-out "
          f"{odd['held_out_mape_pct']:.2f} %; the other {odd['n_held_out'] - len(odd['rows'])} rows "
          f"{odd['mape_of_the_others_pct']:.2f} %", flush=True)
    out["implied_capacity"] = cap = implied_capacity(args.csv)
    print(f"implied capacity of {len(cap)} memory-filled rows", flush=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    write_json_atomic(OUT, out)
    print(f"wrote {OUT.relative_to(V.REPO_ROOT)} ({out['seconds']} s)")


if __name__ == "__main__":
    main()
