"""One command for every benchmark BENCHMARKS.md quotes: measure, then draw every figure, write
the tables and render BENCHMARKS.md.

    python benchmarks/run_all.py                 # everything (~80 min on 2 shared cores)
    python benchmarks/run_all.py --quick         # smoke run with small budgets (~5 min); results/*_quick.json
    python benchmarks/run_all.py --plots-only    # figures, tables and BENCHMARKS.md from the stored JSON
    python benchmarks/run_all.py --only solve_named,explain_least   # some of the steps, then the plots

Steps (each a script of this directory, writing benchmarks/results/): ``compare_<series>``
(compare.py: codesign against enumeration and black-box search; ``named``, ``scaling``,
``mapping``), ``mapping_solve`` (the full mapping/placement run), ``tpe60`` (Optuna TPE with 60 s
per seed on three named instances), ``solve_named``, ``mapping_named`` (mapping_solve.py
--quick), ``workers`` (CP-SAT's worker counts on the mapping/placement instances), ``stress``
(stress_exactness.py with the draws BENCHMARKS.md quotes), ``explain_least``. Figures go to
benchmarks/figures/*.png, tables to benchmarks/results/tables.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def steps(quick: bool) -> dict[str, list[list[str]]]:
    """Step name -> the commands it runs (arguments after the interpreter)."""
    py = lambda name, *args: [str(HERE / name), *args]  # noqa: E731
    if quick:  # small budgets, *_quick.json outputs (ignored by git)
        return {
            **{f"compare_{s}": [py("compare.py", "--series", s, "--quick")] for s in ("named", "scaling", "mapping")},
            "mapping_named": [py("mapping_solve.py", "--quick", "--out", str(RESULTS / "mapping_solve_quick.json"))],
        }
    return {
        **{f"compare_{s}": [py("compare.py", "--series", s)] for s in ("named", "scaling", "mapping")},
        "mapping_solve": [py("mapping_solve.py")],
        "tpe60": [py("compare.py", "--series", "named", "--methods", "decomposed,tpe", "--optuna-budget", "60",
                     "--trials", "5000", "--instances", "small-3d-llama8b,deepstack-llama70b-decode,deepstack-qwen3-235b",
                     "--out", str(RESULTS / "compare_named_tpe60.json"))],
        "solve_named": [py("solve_named.py")],
        "mapping_named": [py("mapping_solve.py", "--quick")],
        "workers": [py("mapping_solve.py", "--workers", "2,4,8", "--repeats", "3")],
        "stress": [py("stress_exactness.py", "--family", "both", "--draws", "200", "--seed", "0",
                      "--json", str(RESULTS / "stress_exactness.json")),
                   py("stress_exactness.py", "--family", "mapping-symmetry", "--draws", "100", "--seed", "0",
                      "--json", str(RESULTS / "stress_exactness_symmetry.json"))],
        "explain_least": [py("explain_least.py")],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--plots-only", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated step names (default: every step)")
    args = ap.parse_args()
    if not args.plots_only:
        todo = steps(args.quick)
        names = [x for x in args.only.split(",") if x] or list(todo)
        unknown = sorted(set(names) - set(todo))
        if unknown:
            ap.error(f"unknown steps {unknown}; known: {', '.join(todo)}")
        for name in names:
            for cmd in todo[name]:
                print(f"== {name}: {' '.join(cmd)}", flush=True)
                subprocess.run([sys.executable, *cmd], check=True)
    subprocess.run([sys.executable, str(HERE / "plots.py")] + (["--quick"] if args.quick else []), check=True)


if __name__ == "__main__":
    main()
