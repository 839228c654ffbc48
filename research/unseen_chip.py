"""How well does the calibration carry to a chip family the fit never saw?

Leave one chip family out: fit one pooled calibration (the fields and reserve grid of
``codesign calibrate``) on the fit rows of the other families, and predict every row of the
left-out family with it. Compared with the calibration file's ``[default]`` table and with the
family's own fit. This is why GPUs without measurements take ``[pooled]`` (VALIDATION.md).
Writes research/results/unseen_chip.json.

    python research/unseen_chip.py [--csv validation/measurements.csv]

About 5 minutes on two cores.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

from codesign.calibration.engine import ENGINE_MAX_BATCH, MEMORY_FIELDS, skip_reason
from codesign.calibration.fit import FitOptions, family_of, fit_calibration, fit_group, memory_base
from codesign.calibration.report import DEFAULT_SPLIT
from codesign.calibration.rows import Row, read_rows, read_split
from codesign.calibration.terms import RowStack, TermCache
from codesign.jsonio import write_json_atomic
from codesign.model.calibration import shipped

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "research" / "results" / "unseen_chip.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=REPO / "validation" / "measurements.csv")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows, _ = read_rows(args.csv)
    labels = read_split(DEFAULT_SPLIT)
    by_fam: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if skip_reason(r) is None and r.id in labels:
            by_fam[family_of(r.gpu)].append(r)
    calibration = shipped()
    cache = TermCache(calibration)
    default = calibration.default.model_dump()
    base = {**default, **memory_base(calibration)}
    own = fit_calibration(args.csv, DEFAULT_SPLIT, pooled=False)
    out: dict[str, dict] = {}
    for fam in sorted(by_fam):
        train = [r for f, rs in by_fam.items() if f != fam for r in rs if labels[r.id] == "fit"]
        test = by_fam[fam]
        # the pooled fit of the other families, reported on every row of this one
        pooled = fit_group(train, test, default, cache, FitOptions(), True, ENGINE_MAX_BATCH)

        def mape_at(cal: dict[str, float], rows: list[Row] = test) -> float:
            mem = {k: cal[k] for k in MEMORY_FIELDS}
            return RowStack.build(rows, cache, mem, ENGINE_MAX_BATCH).mape(cal)

        out[fam] = {
            "rows": len(test),
            "pooled_calibration_of_the_others": pooled["params"],
            "pooled_fit_rows_mape_pct": pooled["fit_mape_pct"],
            "mape_pct_with_pooled_calibration": pooled["held_out_mape_pct"],
            "mape_pct_with_default_table": mape_at(default),
            "mape_pct_with_own_fit": mape_at({**base, **own[fam]["params"]}),
        }
        print(f"{fam:12s} {len(test):4d} rows: pooled from the others {out[fam]['mape_pct_with_pooled_calibration']:6.2f} %"
              f"  [default] {out[fam]['mape_pct_with_default_table']:6.2f} %  own fit {out[fam]['mape_pct_with_own_fit']:6.2f} %",
              flush=True)
    n = sum(v["rows"] for v in out.values())
    weighted = {k: sum(v[k] * v["rows"] for v in out.values()) / n
                for k in ("mape_pct_with_pooled_calibration", "mape_pct_with_default_table", "mape_pct_with_own_fit")}
    print(f"{'all':12s} {n:4d} rows: pooled from the others {weighted['mape_pct_with_pooled_calibration']:6.2f} %"
          f"  [default] {weighted['mape_pct_with_default_table']:6.2f} %  own fit {weighted['mape_pct_with_own_fit']:6.2f} %")
    write_json_atomic(args.out, {"csv": args.csv.name, "split": DEFAULT_SPLIT.name, "families": out,
                                 "rows_weighted": weighted, "seconds": time.perf_counter() - t0})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
