"""What every benchmark script shares: the machine it ran on, repeated solves through the one
driver (:func:`codesign.proof.driver.solve`), and the stored optimum of a named instance.

Times are wall-clock; the 1-minute load average is recorded beside them, since other jobs share
the cores. Nothing here asserts a time.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from codesign.kinds.base import Problem
from codesign.proof.driver import solve
from codesign.proof.tolerances import AGREEMENT_RTOL

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
SOLUTIONS = REPO / "solutions"


def load() -> float:
    """The 1-minute load average now."""
    return os.getloadavg()[0]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


#: what a benchmark's figures depend on: the package, its instances and catalog, the validation
#: tables the calibration reads, and the benchmark scripts (not their results/ and figures/)
RUN_INPUTS = ("codesign", "instances", "validation", "benchmarks/*.py")


def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=REPO).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def commit() -> str | None:
    """HEAD now, ``+dirty`` when the run's inputs (:data:`RUN_INPUTS`, untracked files included)
    differ from it; None outside a git checkout."""
    head = _sh(["git", "rev-parse", "--short", "HEAD"]).strip()
    if not head:
        return None
    dirty = _sh(["git", "status", "--porcelain", "--untracked-files=normal", "--", *RUN_INPUTS]).strip()
    return head + ("+dirty" if dirty else "")


#: the commit of the code this process runs, taken when the script starts (it imports this module
#: right after the package, before it measures anything), not when it writes its results: in a
#: work tree others commit to, HEAD moves during a long run (results/joint_scaling.json, written
#: after a 952 s run, named 8b64605, a commit made while it ran)
STARTED_AT = commit()


def machine() -> dict[str, Any]:
    """CPU, cores, versions and the commit the run started from (``+dirty`` when its inputs
    differed from it); ``git_at_write`` as well when the tree has changed since the start."""
    lscpu = {ln.split(":", 1)[0].strip(): ln.split(":", 1)[1].strip() for ln in _sh(["lscpu"]).splitlines() if ":" in ln}
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gib = None
    out = {
        "cpu": lscpu.get("Model name"), "hypervisor": lscpu.get("Hypervisor vendor"), "cores": os.cpu_count(),
        "memory_GiB": None if mem_gib is None else round(mem_gib),
        "platform": platform.platform(), "python": platform.python_version(),
        "numpy": _version("numpy"), "highspy": _version("highspy"), "ortools": _version("ortools"),
        "optuna": _version("optuna"), "codesign": _version("codesign"),
        "git": STARTED_AT,
        "date": time.strftime("%Y-%m-%d"),
    }
    now = commit()
    if now != STARTED_AT:
        out["git_at_write"] = now
    return out


def solve_runs(problem: Problem, solver: str, repeats: int, *, time_limit: float | None = None,
               threads: int | None = None) -> dict[str, Any]:
    """``repeats`` solves of ``problem`` by the driver, summarised: per-run statuses and times
    (``total_s`` is the record's ``time_s``: build, every round, decode, the model's check, the
    confirming solve), their medians, and the first run's objective, bound, gap, proof and MIP."""
    sols = []
    loads = []
    for _ in range(repeats):
        loads.append(load())
        sols.append(solve(problem, solver=solver, time_limit=time_limit, threads=threads))
    s0 = sols[0]
    return {
        "status": [s.status for s in sols],
        "objective": s0.objective, "bound": s0.bound, "gap": s0.gap,
        "objectives": [s.objective for s in sols], "bounds": [s.bound for s in sols], "gaps": [s.gap for s in sols],
        "internal": s0.proof.get("internal_objective"),
        "build_s": [s.build_s for s in sols], "solve_s": [s.solve_s for s in sols], "total_s": [s.time_s for s in sols],
        "median_total_s": statistics.median(s.time_s for s in sols),
        "median_build_s": statistics.median(s.build_s for s in sols),
        "median_solve_s": statistics.median(s.solve_s for s in sols),
        "rounds": [s.proof.get("rounds") for s in sols], "nodes": [s.proof.get("nodes") for s in sols],
        "termination": [s.termination for s in sols],
        "mip": s0.mip, "solver_version": s0.solver_version,
        "threads": threads, "time_limit": time_limit, "loadavg_at_start": loads,
    }


def stored_optimum(problem: Problem) -> dict[str, Any] | None:
    """The optimum ``solutions/<name>.json`` records for this very instance (same content hash
    and calibration), or None."""
    p = SOLUTIONS / f"{problem.name}.json"
    if not p.exists():
        return None
    rec = json.loads(p.read_text())
    if rec.get("instance_hash") != problem.content_hash or rec.get("status") != "optimal":
        return None
    return {"objective": rec["objective"], "solver": rec.get("solver"), "file": str(p.relative_to(REPO))}


def same(a: float | None, b: float | None, rtol: float = AGREEMENT_RTOL) -> bool:
    """Two optima agree (``AGREEMENT_RTOL``, the cross-check's tolerance)."""
    return a is not None and b is not None and abs(a - b) <= rtol * max(abs(a), abs(b), 1e-300)
