"""The Python API: the same pipeline the command line runs, for scripts and notebooks.

    import codesign

    p = codesign.load("tiny-3d-llama8b")          # a named instance, or a path to a .toml
    base = codesign.evaluate(p)                     # the baseline design, by the model
    best = codesign.solve(p, solver="highs")        # the proven optimum (a Solution record)
    cert = codesign.certify(p, {"tp": 2})           # how far a design is from the best
    why = codesign.explain(p.with_budgets(["tokens_per_s >= 1e6"]))

Every result is a record (:mod:`codesign.proof.records`): ``.design``, ``.metrics``,
``.objective``, ``.feasible``, ``.lints``, and for solves ``.status``, ``.bound``, ``.gap``;
``.as_dict()`` is what ``--json`` prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codesign.kinds.base import Problem
from codesign.kinds.registry import load as _load
from codesign.kinds.registry import named_paths
from codesign.model.calibration import CalibrationSet, load_calibration
from codesign.proof import records
from codesign.proof.certify import certify as _certify
from codesign.proof.driver import AUTO, Progress
from codesign.proof.driver import solve as _solve


def load(name_or_path: str | Path, *, calibration: str | Path | CalibrationSet | None = None) -> Problem:
    """An instance of any kind by name (``codesign.named()``) or path, evaluated under
    ``calibration`` (a calibration TOML or a loaded set; None: the shipped one)."""
    cal = calibration if isinstance(calibration, CalibrationSet) or calibration is None else load_calibration(calibration)
    return _load(name_or_path, calibration=cal)


def named() -> list[str]:
    """The names of the shipped (or ``$CODESIGN_INSTANCES``) instances."""
    return sorted(named_paths())


def evaluate(problem: Problem, design: dict[str, Any] | None = None) -> records.Evaluation:
    """The model's evaluation of ``design`` (a possibly partial design; None: the baseline)."""
    full = problem.parse_design(problem.baseline() if design is None else design)
    return records.evaluation(problem, problem.assess(full))


def solve(problem: Problem, *, solver: str = AUTO, time_limit: float | None = None, threads: int | None = None,
          progress: Progress | None = None) -> records.Solution:
    """The proven optimum (or, within ``time_limit``, the best design found and its bound)."""
    return _solve(problem, solver=solver, time_limit=time_limit, threads=threads, progress=progress)


def certify(problem: Problem, design: dict[str, Any] | None = None, *, solver: str = AUTO,
            time_limit: float | None = None, solutions: str | Path | None = None) -> records.Certificate:
    """How far ``design`` (None: the baseline) can be from the best: the bound from a stored
    solution in ``solutions`` (same instance content) or from a solve."""
    return _certify(problem, problem.baseline() if design is None else design, solver=solver, time_limit=time_limit,
                    solutions=None if solutions is None else Path(solutions))


def explain(problem: Problem, *, solver: str = AUTO, time_limit: float | None = None) -> dict[str, Any]:
    """Why no design is feasible: the conflicting constraints and how far to relax each."""
    return problem.explain(solver=solver, time_limit=time_limit)
