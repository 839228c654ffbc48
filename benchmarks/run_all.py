"""One command for issue 7: measure every series, then draw every figure and write the tables.

    python benchmarks/run_all.py            # full run (~60 min on 2 shared cores)
    python benchmarks/run_all.py --quick    # smoke run with small budgets (~5 min)
    python benchmarks/run_all.py --plots-only   # figures and tables from the stored JSON

Figures go to benchmarks/figures/*.png, tables to benchmarks/results/tables.md (pasted into
BENCHMARKS.md). A mapping series (issue 4) is measured too once ``compare.SERIES["mapping"]``
is implemented (it is skipped while it raises NotImplementedError).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--plots-only", action="store_true")
    ap.add_argument("--series", default="named,scaling,mapping")
    args = ap.parse_args()
    if not args.plots_only:
        for series in args.series.split(","):
            cmd = [sys.executable, str(HERE / "compare.py"), "--series", series] + (["--quick"] if args.quick else [])
            r = subprocess.run(cmd)
            if r.returncode and series == "mapping":
                print("mapping series not available yet (issue 4); skipped")
            elif r.returncode:
                sys.exit(r.returncode)
        if not args.quick:
            # Optuna TPE with a 10x longer budget on three named instances (~10 min)
            subprocess.run([sys.executable, str(HERE / "compare.py"), "--series", "named", "--methods", "decomposed,tpe",
                            "--optuna-budget", "60", "--trials", "5000", "--instances",
                            "small-3d-llama8b,deepstack-llama70b-decode,deepstack-qwen3-235b",
                            "--out", str(HERE / "results" / "compare_named_tpe60.json")], check=True)
    subprocess.run([sys.executable, str(HERE / "plots.py")] + (["--quick"] if args.quick else []), check=True)


if __name__ == "__main__":
    main()
