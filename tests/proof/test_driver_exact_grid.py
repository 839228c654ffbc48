"""codesign.proof.driver on hardware/schedule grids: the whole pipeline is exact.

Brute force (every design evaluated with the model) = HiGHS = CP-SAT, each answer verified by the
model, on every named grid instance, hypothesis-drawn small grids (infeasible draws included),
budgets, SLOs and memory limits that bind, limits exactly at the optimum, a plain enumeration of
tiny-3d-llama8b that is not codesign's brute force, and the fuzzed grids on which a solver once
answered wrongly (``tests/data/fuzz``)."""

from __future__ import annotations

import copy
import itertools
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codesign.errors import ModelError
from codesign.kinds.base import Assessment
from codesign.kinds.grid.generate import scaled_instance
from codesign.kinds.grid.problem import Grid
from codesign.proof.driver import cross_check, solve

from .exactness import RTOL, SOLVERS, better, check_exact, check_solution_against, fuzz

GRID_NAMED = [
    "tiny-3d-llama8b",
    "small-3d-llama8b",
    "deepstack-llama70b-decode",
    "deepstack-deepseek-v3-ep",
    "deepstack-qwen3-235b",
    "deepstack-multi-workload",  # 2e17 points: brute force decomposes by hardware design
    "dgx-llama70b-chip-choice",
    "dgx-qwen3-235b-attention-dp",
    "pf-llama405b-consistent",
    "pf-llama405b-paper",
    "pf-dense1t-consistent",
    "pf-dense1t-paper",
]


# --------------------------------------------------------------------------------------------------
# every enumerable named instance
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", GRID_NAMED)
def test_named_grid_instance_brute_force_equals_both_solvers(name, named, brute):
    p = named(name)
    bf = brute(p)
    assert bf.best is not None and bf.best.feasible
    highs, cpsat = check_exact(p, bf.best)
    assert cross_check(highs, cpsat)["agree"] is True


# --------------------------------------------------------------------------------------------------
# hardware/schedule grids: random instances, binding families, budgets
# --------------------------------------------------------------------------------------------------


@st.composite
def random_grid(draw) -> dict:
    layers = draw(st.lists(st.sampled_from([1, 2, 4, 8, 12, 16]), min_size=1, max_size=3, unique=True))
    tsv = draw(st.lists(st.sampled_from([4096, 16384, 65536]), min_size=1, max_size=2, unique=True))
    area = draw(st.lists(st.sampled_from([40.0, 80.0, 160.0]), min_size=1, max_size=2, unique=True))
    clock = draw(st.lists(st.sampled_from([0.8, 1.2, 1.75, 2.2]), min_size=1, max_size=2, unique=True))
    sram = draw(st.lists(st.sampled_from([0.25, 1.0, 4.0]), min_size=1, max_size=2, unique=True))
    workload = draw(st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b"]))
    devices = draw(st.sampled_from([4, 8]))
    decisions = {
        "tp": draw(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=3, unique=True)),
        "pp": draw(st.lists(st.sampled_from([1, 2]), min_size=1, max_size=2, unique=True)),
        "batch": draw(st.lists(st.sampled_from([2, 8, 32, 128]), min_size=1, max_size=3, unique=True)),
    }
    if workload != "llama-3.1-8b":
        decisions["ep"] = draw(st.lists(st.sampled_from([1, 2]), min_size=1, max_size=2, unique=True))
    w = {
        "name": "w", "workload": workload, "precision": draw(st.sampled_from(["fp8", "bf16"])),
        "phase": draw(st.sampled_from(["decode", "both", "prefill"])),
        "input_tokens": draw(st.sampled_from([128, 1024])), "output_tokens": draw(st.sampled_from([64, 512])),
        "decisions": decisions,
    }
    if draw(st.booleans()):
        w["tpot_slo_ms"] = draw(st.sampled_from([5.0, 20.0, 100.0]))
    budgets = {}
    if draw(st.booleans()):
        budgets["power_W"] = draw(st.sampled_from([40.0, 80.0, 160.0]))
    if draw(st.booleans()):
        budgets["area_mm2"] = draw(st.sampled_from([100.0, 200.0]))
    return {
        "name": "random", "description": "hypothesis-generated",
        "system": {"devices": devices, "scale_up_domain": devices},
        "hardware": {"family": "stacked-3d", "decisions": {
            "dram_layers": layers, "tsv_count": tsv, "tsv_pitch_um": [20.0], "compute_area_mm2": area,
            "clock_GHz": clock, "sram_MiB": sram}},
        "workloads": [w], "budgets": budgets,
        "objective": {"metric": draw(st.sampled_from(["tokens_per_s", "energy_per_token_J", "tpot_s", "ttft_s"]))},
    }


@settings(max_examples=int(os.environ.get("CODESIGN_HYPOTHESIS_EXAMPLES", "12")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_grid())
def test_random_small_grid_brute_force_equals_both_solvers(raw):
    """Feasible or not: all three agree."""
    p = Grid.from_data(raw, source="random")
    check_exact(p, p.brute_force().best)


def test_an_area_budget_below_the_fixed_logic_leaves_no_design(named):
    p = named("tiny-3d-llama8b")
    raw = copy.deepcopy(p.data)
    raw["budgets"]["area_mm2"] = 10.0
    bad = Grid.from_data(raw, source="test")
    assert bad.brute_force().best is None
    for solver in SOLVERS:
        sol = solve(bad, solver=solver)
        assert sol.status == "infeasible" and sol.design is None and sol.termination


@pytest.mark.parametrize("family", ["memory-capacity-local", "slo-tpot"])
def test_a_per_workload_family_that_binds_moves_the_optimum_exactly(family, named, brute):
    """A tight limit removes exactly the designs brute force removes (same optimum, not the
    unconstrained one); an impossible one leaves no design."""
    base = named("tiny-3d-llama8b")
    raw = copy.deepcopy(base.data)
    w = raw["workloads"][0]
    if family == "slo-tpot":
        w["tpot_slo_ms"] = 3.0  # binds: the unconstrained optimum has TPOT ~ 6 ms
        tight = Grid.from_data(raw, source="tight")
        w["tpot_slo_ms"] = 1e-3
        impossible = Grid.from_data(raw, source="impossible")
    else:
        w["input_tokens"] = 32768  # long context: large batches no longer fit
        tight = Grid.from_data(raw, source="tight")
        w["decisions"]["batch"] = [128]
        w["decisions"]["tp"] = [1]
        w["input_tokens"] = 131072
        raw["baseline"] = {**raw["baseline"], "batch": 128, "tp": 1}
        impossible = Grid.from_data(raw, source="impossible")
    bf = tight.brute_force()
    assert bf.best is not None and not math.isclose(bf.best.objective, brute(base).best.objective)
    check_exact(tight, bf.best)
    assert impossible.brute_force().best is None
    check_exact(impossible, None)


def _budget_exact(base, budgets: list[str], base_best: Assessment, binds: bool) -> None:
    """Budgets enter the MIP exactly: the optimum under them is brute force's, and where they
    bind it is worse than the unconstrained one, which then violates exactly these budgets."""
    p = base.with_budgets(budgets)
    bf = p.brute_force()
    assert bf.best is not None
    if binds:
        assert better(p.sense, base_best.objective, bf.best.objective, 1e-6), (bf.best.objective, base_best.objective)
        a = p.assess(base_best.design)
        assert not a.feasible
        assert [r.name for r in a.audit if not r.ok] == [f"budget[cli-{i + 1}]" for i in range(len(budgets))]
    else:
        assert bf.best.objective == pytest.approx(base_best.objective, rel=RTOL)
    for sol in check_exact(p, bf.best):
        names = [r.name for r in p.assess(sol.design).audit]
        assert all(f"budget[cli-{i + 1}]" in names for i in range(len(budgets)))


SMALL_BUDGETS = [
    (["power_W <= 60"], True),
    (["dram_layers*10 + power_W <= 120"], True),
    (["2*power_W + dram_layers*15 <= 250"], True),
    (["clock_GHz >= 1.5"], True),
    (["temperature_C <= 80"], True),
    (["system_power_W <= 500"], True),
    (["memory_used_B <= 2e10"], True),
]


@pytest.mark.parametrize(("budgets", "binds"), SMALL_BUDGETS, ids=[c[0][0] for c in SMALL_BUDGETS])
def test_hardware_budgets_enter_the_mip_exactly(budgets, binds, named, brute):
    p = named("small-3d-llama8b")
    _budget_exact(p, budgets, brute(p).best, binds)


def test_a_throughput_floor_just_below_the_optimum_does_not_bind(named, brute):
    p = named("small-3d-llama8b")
    best = brute(p).best
    _budget_exact(p, [f"tokens_per_s >= {best.objective * 0.999!r}"], best, binds=False)


def test_a_throughput_floor_at_the_optimum_is_sharp(named, brute):
    """At the optimum exactly: feasible; 1e-6 above it: infeasible (brute force and both MIPs)."""
    p = named("small-3d-llama8b")
    best = brute(p).best
    at = p.with_budgets([f"tokens_per_s >= {best.objective!r}"])
    assert at.brute_force().best is not None
    assert solve(at, solver="highs").objective == pytest.approx(best.objective, rel=RTOL)
    above = p.with_budgets([f"tokens_per_s >= {best.objective * (1 + 1e-6)!r}"])
    assert above.brute_force().best is None
    check_exact(above, None)


TINY_BUDGETS = [
    # an upper budget on energy per token between its minimum and its value at the tokens/s optimum
    (None, ["energy_per_token_J <= 0.0051430"], True),  # min 0.00514249, at the optimum 0.00514336
    # a LOWER budget on tpot above the optimum's TPOT (0.02126 s; the largest any design reaches is
    # below 0.0214 s): needs the exact max encoding
    (None, ["tpot_s >= 0.0213"], True),
    (None, ["-tpot_s <= -0.0213"], True),
    (None, ["power_W <= 60"], True),
    (None, ["dram_layers*10 + power_W <= 120"], True),
    # minimise energy per token with a lower limit on tokens/s that binds
    # (the energy optimum runs 24,010 tok/s, the tokens/s optimum 24,079)
    ("energy_per_token_J", ["tokens_per_s >= 24050"], True),
    ("energy_per_token_J", ["power_W <= 60"], True),
    ("energy_per_token_J", ["tokens_per_s >= 20000"], False),
]


@pytest.mark.parametrize(("objective", "budgets", "binds"), TINY_BUDGETS,
                         ids=[f"{c[0] or 'tokens_per_s'}:{c[1][0]}" for c in TINY_BUDGETS])
def test_workload_budgets_enter_the_mip_exactly(objective, budgets, binds, named, brute):
    """Energy budgets and lower limits on tpot (tiny-3d-llama8b: on small-3d-llama8b HiGHS needs
    15-50 s for them, CP-SAT minutes)."""
    p = named("tiny-3d-llama8b").with_objective(objective)
    _budget_exact(p, budgets, brute(p).best, binds)


def test_an_energy_budget_below_the_least_energy_leaves_no_design(named):
    p = named("tiny-3d-llama8b").with_budgets(["energy_per_token_J <= 0.0048"])
    assert p.brute_force().best is None
    check_exact(p, None)


@pytest.mark.parametrize("objective", ["tokens_per_s", "energy_per_token_J"])
def test_generated_two_workload_instance_presolve_keeps_the_optimum(objective):
    """The decomposed bound presolve prunes hardware designs (a generated 2-workload instance on a
    smaller grid) and both solvers still reach brute force's optimum."""
    raw = scaled_instance(2, 0, objective=objective)
    hw = raw["hardware"]["decisions"]
    hw.update(tsv_count=[8192, 65536], tsv_pitch_um=[9.0, 40.0], sram_MiB=[1.0, 4.0], clock_GHz=[1.2, 1.75, 2.2])
    raw["baseline"].update(tsv_count=8192, tsv_pitch_um=40.0, sram_MiB=1.0, clock_GHz=1.2)
    p = Grid.from_data(raw, source="generated")
    bf = p.brute_force()
    assert bf.best is not None
    for sol in check_exact(p, bf.best):
        assert sol.mip["pruned"]["hardware-bound"] > 0


# --------------------------------------------------------------------------------------------------
# an independent enumeration of the tiny grid (not codesign's brute force)
# --------------------------------------------------------------------------------------------------


def test_the_tiny_grid_optimum_by_plain_enumeration(named):
    """Every one of tiny-3d-llama8b's 432 designs assessed one by one (no vectorised brute force,
    no presolve): the driver's optimum is the best feasible value, with both solvers."""
    p = named("tiny-3d-llama8b")
    names = [d.name for d in p.decisions()]
    values = []
    for combo in itertools.product(*(d.domain for d in p.decisions())):
        a = p.assess(dict(zip(names, combo, strict=True)))
        if a.feasible:
            values.append(a.objective)
    assert values and p.space_size() == 48 * 9  # 48 hardware designs x 9 layouts (by hand)
    for solver in SOLVERS:
        assert solve(p, solver=solver).objective == pytest.approx(max(values), rel=RTOL)


# --------------------------------------------------------------------------------------------------
# instances on which a solver once answered wrongly (a fuzzing of 5,077 random small grids)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2])
def test_a_workload_without_a_valid_layout_makes_the_instance_infeasible(n):
    """Two workloads, one with no layout the divisibility rules allow, a tpot/ttft objective: the
    bound presolve read an empty schedule table and crashed."""
    p = fuzz(n)
    assert p.brute_force().best is None
    for solver in SOLVERS:
        assert solve(p, solver=solver).status == "infeasible"


@pytest.mark.parametrize("n", [3, 4, 14, 18])
def test_a_near_tie_is_not_taken_for_the_optimum(n):
    """Multi-workload throughput mixes on which HiGHS called a design 1e-6 to 2e-5 worse optimal
    with gap 0: the driver asks for a design better than the best verified one by more than
    CONFIRM_RTOL before it calls it optimal."""
    p = fuzz(n)
    check_exact(p, p.brute_force().best)


def test_a_cpsat_infeasible_verdict_is_checked_by_highs():
    """CP-SAT called this feasible instance (an appliance, a chip domain, two loose budgets)
    infeasible: HiGHS checks any CP-SAT 'infeasible', and a disagreement is a ModelError."""
    p = fuzz(5)
    best = p.brute_force().best
    assert best is not None
    check_solution_against(p, solve(p, solver="highs"), best, RTOL)
    try:
        sol = solve(p, solver="cpsat")
    except ModelError as exc:  # CP-SAT's wrong answer, caught
        assert "HiGHS finds" in str(exc)
    else:  # or, once CP-SAT answers right, its optimum
        check_solution_against(p, sol, best, RTOL)
