"""One command for issue 7: measure every series, then draw every figure and write the tables.

    python benchmarks/run_all.py            # full run (~60 min on 2 shared cores)
    python benchmarks/run_all.py --quick    # smoke run with small budgets (~5 min)
    python benchmarks/run_all.py --plots-only   # figures and tables from the stored JSON

Figures go to benchmarks/figures/*.png, tables to benchmarks/results/tables.md (pasted into
BENCHMARKS.md). The mapping series compares generated pipeline mappings (issue 4) with their
brute force; the named mapping/placement instances' solve times (formulations/mapping.md §3)
come from benchmarks/mapping_solve.py, run here too.
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
            subprocess.run(cmd, check=True)
        subprocess.run([sys.executable, str(HERE / "mapping_solve.py")] + (["--quick", "--out", str(HERE / "results" / "mapping_solve_quick.json")] if args.quick else []), check=True)
        if not args.quick:
            # Optuna TPE with a 10x longer budget on three named instances (~10 min)
            subprocess.run([sys.executable, str(HERE / "compare.py"), "--series", "named", "--methods", "decomposed,tpe",
                            "--optuna-budget", "60", "--trials", "5000", "--instances",
                            "small-3d-llama8b,deepstack-llama70b-decode,deepstack-qwen3-235b",
                            "--out", str(HERE / "results" / "compare_named_tpe60.json")], check=True)
    subprocess.run([sys.executable, str(HERE / "plots.py")] + (["--quick"] if args.quick else []), check=True)


if __name__ == "__main__":
    main()
