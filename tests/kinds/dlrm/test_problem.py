"""The dlrm kind: brute force = HiGHS = CP-SAT on the tiny instance; the named instances' baselines
are the best GPU-only designs of their space, proven by both solvers; both solvers prove the named
optima; bad designs are InputErrors (exit 2)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from codesign.errors import InputError
from codesign.kinds.dlrm.problem import Dlrm
from codesign.kinds.registry import load
from codesign.proof.driver import solve

TINY = Path(__file__).resolve().parents[2] / "data" / "tiny-dlrm.toml"
INSTANCES = Path(__file__).resolve().parents[3] / "instances" / "mapping"


@pytest.fixture(scope="module")
def named_optimum():
    """``named_optimum(name, solver)``: that solver's solution of the named instance, solved once
    (the baseline test and the named-optima test both need HiGHS's, 15-35 s a solve under load)."""
    cache = {}

    def get(name: str, solver: str):
        if (name, solver) not in cache:
            cache[name, solver] = solve(load(name), solver=solver)
        return cache[name, solver]

    return get


def test_brute_force_equals_both_solvers_on_the_tiny_instance(solvers_match_brute_force):
    best = solvers_match_brute_force(load(TINY))  # the reference: brute force, not a copied figure
    assert best.feasible and best.objective > 0


def test_the_energy_objective_too():
    p = load(TINY).with_objective("energy_per_sample_J")
    bf = p.brute_force()
    for solver in ("highs", "cpsat"):
        sol = solve(p, solver=solver)
        assert sol.status == "optimal" and sol.objective == pytest.approx(bf.best.objective, rel=1e-9)


@pytest.mark.parametrize("name", ["pf-dlrm-paper", "pf-dlrm-consistent"])
def test_the_baseline_is_the_best_gpu_only_design(name, named_optimum):
    p = load(name)
    data = copy.deepcopy(p.inst.raw)
    del data["appliance"], data["baseline"]
    gpu_only = Dlrm.from_data(data, source="gpu-only")
    base = p.assess(p.parse_design(p.baseline()))
    assert base.feasible
    # the figure the instance file states for its baseline (its comment), to the decimals it shows
    (stated,) = re.findall(r"solved: ([\d,]+\.\d\d)", (INSTANCES / f"{name}.toml").read_text())
    assert f"{base.objective:,.2f}" == stated
    assert base.metrics["lookup.pool_s"] == 0 and base.metrics["out.appliance_link_s"] == 0
    for solver in ("highs", "cpsat"):
        sol = solve(gpu_only, solver=solver)
        assert sol.status == "optimal", (solver, sol.termination)
        assert base.objective == pytest.approx(sol.objective, rel=1e-9), solver
    best = named_optimum(name, "highs")
    assert best.status == "optimal" and best.objective > base.objective


@pytest.mark.parametrize(("name", "optimum"), [("pf-dlrm-paper", 257_708_163.30044), ("pf-dlrm-consistent", 152_072_274.21033)])
def test_the_named_optima_with_whole_tables(name, optimum, named_optimum):
    """Whole tables on one GPU / host / module or spread (formulations/dlrm.md §4): both solvers
    prove the same optimum."""
    p = load(name)
    assert p.model.shards == (1,) and p.model.spreads
    for solver in ("highs", "cpsat"):
        sol = named_optimum(name, solver)
        assert sol.status == "optimal", (solver, sol.termination)
        assert sol.objective == pytest.approx(optimum, rel=1e-9), solver


def test_bad_designs_are_input_errors():
    p = load(TINY)
    for bad in ({"tables": {"C1": ["hbm:9"]}}, {"tables": {"C1": ["hbm:0", "hbm:1", "hbm:0"]}},
                {"tables": {"CX": ["hbm:0"]}}, {"tables": {"C1": ["hbm:*", "hbm:0"]}}, {"layers": 3}):
        with pytest.raises(InputError):
            p.parse_design(bad)


def test_cli_bad_design_exits_2(cli):
    r = cli("evaluate", str(TINY), "--set", "tables={C1=[\"hbm:7\"]}")
    assert r.exit_code == 2 and "Traceback" not in r.output
