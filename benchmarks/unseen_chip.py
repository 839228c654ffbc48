"""How well does the calibration carry to a chip family the fit never saw? (VALIDATION.md §6.1)

Leave one chip family out: fit one pooled calibration (the seven numbers of §4, the reserve by
grid search) on the fit rows of the other three families, and predict every row of the left-out
family with it. Compared with what such a chip gets today, the file's `[default]` table, and with
the family's own fit. Writes validation/unseen_chip.json.

    python benchmarks/unseen_chip.py [--csv ../shared/validation/measurements.csv]

About 6 minutes on two cores.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

from codesign import validate as V
from codesign.jsonio import write_json_atomic
from codesign.model.hardware import calibration_file

OUT = V.REPO_ROOT / "validation" / "unseen_chip.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=V.DEFAULT_MEASUREMENTS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows, _ = V.read_rows(args.csv)
    labels = V.read_split(V.DEFAULT_SPLIT)
    usable = [r for r in rows if V.skip_reason(r) is None and r.id in labels]
    by_fam: dict[str, list[V.Row]] = defaultdict(list)
    for r in usable:
        by_fam[V.family_of(r.gpu)].append(r)
    cache = V.TermCache(V.MODEL)
    default = calibration_file().default.model_dump()
    base = {**default, **V.memory_base(V.MODEL)}
    own = V.fit_calibration(args.csv, V.DEFAULT_SPLIT, pooled=False)
    out: dict[str, dict] = {}
    for fam in sorted(by_fam):
        train = [r for f, rs in by_fam.items() if f != fam for r in rs if labels[r.id] == "fit"]
        test = by_fam[fam]
        # the pooled fit of the other families, reported on every row of this one
        pooled = V.fit_group(train, test, default, cache, V.MODEL, True, V.ENGINE_MAX_BATCH)

        def mape_at(cal: dict[str, float], rows: list[V.Row] = test) -> float:
            mem = {k: cal[k] for k in V.MEMORY_FIELDS}
            return V.RowStack.build(rows, cache, mem, V.ENGINE_MAX_BATCH).mape(cal)

        own_cal = {**base, **own[fam]["params"]}
        out[fam] = {
            "rows": len(test),
            "pooled_calibration_of_the_others": pooled["params"],
            "pooled_fit_rows_mape_pct": pooled["fit_mape_pct"],
            "mape_pct_with_pooled_calibration": pooled["held_out_mape_pct"],
            "mape_pct_with_default_table": mape_at(default),
            "mape_pct_with_own_fit": mape_at(own_cal),
        }
        print(f"{fam:12s} {len(test):4d} rows: pooled from the others {out[fam]['mape_pct_with_pooled_calibration']:6.2f} %"
              f"  [default] {out[fam]['mape_pct_with_default_table']:6.2f} %  own fit {out[fam]['mape_pct_with_own_fit']:6.2f} %",
              flush=True)
    write_json_atomic(args.out, {"csv": str(args.csv), "split": str(V.DEFAULT_SPLIT), "families": out,
                                 "seconds": time.perf_counter() - t0})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
