"""The box branch-and-bound over the hardware knobs (codesign/kinds/grid/boxes.py,
formulations/factored.md §6): its range extremes and interval bounds checked against brute force
over whole boxes, and its proven optimum equal to brute force's."""

from __future__ import annotations

import numpy as np
import pytest

from codesign.errors import InputError
from codesign.kinds.grid import boxes
from codesign.kinds.grid import boxes_bound as bb
from codesign.kinds.grid import factored_columns as fc
from codesign.kinds.grid.problem import Grid
from codesign.kinds.grid.space import Tables, brute_force, hardware_values
from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.model.evaluate import constraints
from codesign.model.hardware import hardware_table
from codesign.model.schedule import schedule_table
from codesign.proof.tolerances import AGREEMENT_RTOL

from .test_factored import _small_generated


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= AGREEMENT_RTOL * max(abs(a), abs(b))


def test_range_extremes_are_the_least_and_largest_value_of_each_range():
    rng = np.random.default_rng(0)
    f = rng.random(37)
    ext = bb.Extremes(f)
    lo = rng.integers(0, 37, 500)
    hi = np.minimum(lo + rng.integers(0, 37, 500), 36)
    mn, mx = ext.query(lo, hi)
    assert np.array_equal(mn, [f[a : b + 1].min() for a, b in zip(lo, hi, strict=True)])
    assert np.array_equal(mx, [f[a : b + 1].max() for a, b in zip(lo, hi, strict=True)])


def _bounder(inst):
    cols = fc.stacked_columns(inst)
    scheds = {w.name: schedule_table(inst, w.name) for w in inst.workloads}
    cons = constraints(inst, fc._table(inst, fc.check_points(cols.knobs, 8)), scheds)
    return boxes.Bounder(inst, cols, scheds, cons), scheds, cons


def _enumerate_box(inst, b, scheds, cons, lo, hi) -> np.ndarray:
    """The model's internal objective (inf: infeasible) of every design of the box."""
    mesh = np.meshgrid(*[np.arange(a, c + 1) for a, c in zip(lo, hi, strict=True)], indexing="ij")
    doms = {d.name: np.asarray(d.domain) for d in inst.hardware_decisions}
    designs = {k: doms[k][m.ravel()] for k, m in zip(b.knobs, mesh, strict=True)}
    return hardware_values(inst, Tables(hardware_table(inst, designs), scheds), cons=cons).total


def test_box_bounds_are_below_every_design_of_the_box_and_exact_on_one_design():
    """Random boxes of small-3d-llama8b's grid: the bound is at most the least model objective of
    the box's feasible designs (inf only when none is feasible), and equals it on one design."""
    inst = load_instance("small-3d-llama8b")
    b, scheds, cons = _bounder(inst)
    sizes = np.array([len(b.cols.knobs[k]) for k in b.knobs])
    rng = np.random.default_rng(1)
    lo = rng.integers(0, sizes, (60, len(sizes)))
    hi = np.minimum(lo + rng.integers(0, sizes, (60, len(sizes))), sizes - 1)
    bound = b.bound(lo, hi)
    for i in range(len(lo)):
        best = _enumerate_box(inst, b, scheds, cons, lo[i], hi[i]).min()
        assert bound[i] <= best * (1 + 1e-9)
    one = b.bound(lo, lo)
    for i in range(len(lo)):
        exact = _enumerate_box(inst, b, scheds, cons, lo[i], lo[i])[0]
        if np.isfinite(one[i]) and np.isfinite(exact):
            assert np.isclose(one[i], exact, rtol=1e-9)
        elif np.isfinite(exact):  # a bound may only call a design infeasible that is
            raise AssertionError(f"box {lo[i]}: bound {one[i]} but the model says {exact}")


@pytest.mark.parametrize("name", ["tiny-3d-llama8b", "small-3d-llama8b", "deepstack-llama70b-decode"])
@pytest.mark.parametrize("branching", boxes.BRANCHING)
def test_box_optimum_equals_brute_force(name, branching):
    inst = load_instance(name)
    bf = brute_force(inst)
    sol = boxes.solve(Grid(inst), branching=branching)
    assert sol.status == "optimal" and sol.gap == 0.0
    assert _same(sol.objective, bf.objective) and _same(sol.bound, bf.objective)
    assert sol.mip["formulation"] == "boxes" and sol.solver == "boxes"


@pytest.mark.parametrize("objective,seed", [
    ("tokens_per_s", 0),  # infeasible
    ("tokens_per_s", 1),
    ("energy_per_token_J", 2),
    ("tpot_s", 3),
    ("tokens_per_s", 5),
])
def test_random_generated_instances_agree_with_brute_force(objective, seed):
    """Random cuts of a generated two-workload instance (power and area budgets, SLOs)."""
    inst = _small_generated(objective, workloads=2, seed=seed)
    bf = brute_force(inst)
    sol = boxes.solve(Grid(inst))
    if not bf.feasible:
        assert sol.status == "infeasible" and sol.objective is None
        return
    assert sol.status == "optimal"
    assert _same(sol.objective, bf.objective)


def test_budget_that_no_design_meets_is_infeasible():
    grid = Grid(load_instance("tiny-3d-llama8b")).with_budgets(["power_W <= 1"])
    assert boxes.solve(grid).status == "infeasible"


def test_a_time_limit_keeps_a_verified_design_and_a_valid_bound():
    inst = load_instance("small-3d-llama8b")
    bf = brute_force(inst)
    r = boxes.search(inst, time_limit=0.0)  # one round
    assert r.rounds == 1 and not r.complete
    # internal objective (s/token, minimised): the bound is below the optimum, any incumbent above
    assert r.bound <= bf.internal * (1 + 1e-9)
    assert r.design is None or r.internal >= bf.internal * (1 - 1e-9)
    sol = boxes.solve(Grid(inst), time_limit=0.0)
    assert sol.status in ("feasible", "no_solution")


def test_what_the_factored_columns_cannot_bound_is_refused():
    """A budget term with a negative coefficient (its lower bound would need an upper one)."""
    grid = Grid(load_instance("tiny-3d-llama8b")).with_budgets(["area_mm2 - power_W <= 100"])
    with pytest.raises(InputError, match="box search cannot solve"):
        boxes.solve(grid)


def test_two_batch_overlap_branches_agree_with_brute_force():
    """The overlap decision gives max groups whose branches are sums of products (eq. 5.3a)."""
    data = load_instance("small-3d-llama8b").spec.model_dump(mode="json")
    data["workloads"][0]["decisions"]["overlap"] = ["none", "two-batch"]
    data.pop("baseline", None)
    data.pop("extends", None)
    inst = instance_from_data(data, source="<test>")
    bf = brute_force(inst)
    sol = boxes.solve(Grid(inst))
    assert sol.status == "optimal" and _same(sol.objective, bf.objective)


# --- through the solve driver (`--formulation boxes`, and `auto` above the enumeration limit) ---

def _refined(inst_name: str, decisions: dict) -> Grid:
    data = load_instance(inst_name).spec.model_dump(mode="json")
    data["name"] = f"{inst_name}-refined"
    data["hardware"]["decisions"] = decisions
    data.pop("baseline", None)
    data.pop("extends", None)
    return Grid(instance_from_data(data, source="<test refined grid>"))


def test_formulation_boxes_answers_solve_with_the_mip_optimum():
    from codesign.proof.driver import solve

    grid = Grid(load_instance("small-3d-llama8b"))
    by_boxes = solve(grid.with_formulation("boxes"))
    by_mip = solve(grid.with_formulation("enumerated"), solver="highs")
    assert (by_boxes.solver, by_boxes.status, by_mip.status) == ("boxes", "optimal", "optimal")
    assert by_boxes.objective == pytest.approx(by_mip.objective, rel=AGREEMENT_RTOL)


def test_auto_takes_the_box_search_only_above_the_enumeration_limit():
    from codesign.proof.driver import solve

    # 16 x 64 x 6 x 101 x 29 x 8 = 1.4e8 hardware designs (> 1e7: the factored side of `auto`)
    steps = lambda lo, n, d: [round(lo + i * d, 4) for i in range(n)]  # noqa: E731
    big = _refined("small-3d-llama8b", {
        "dram_layers": list(range(1, 17)), "tsv_count": list(range(1024, 65537, 1024)),
        "tsv_pitch_um": [9.0, 12.0, 15.0, 20.0, 30.0, 40.0], "compute_area_mm2": steps(40, 101, 2),
        "clock_GHz": steps(0.8, 29, 0.05), "sram_MiB": steps(0.25, 8, 0.25)})
    rec = big.own_search("auto", time_limit=None)
    assert rec is not None and rec.solver == "boxes" and rec.status == "optimal" and rec.gap == 0
    # the refined grid holds small-3d-llama8b's own (benchmarks/factored.py: the grids nest)
    coarse = Grid(load_instance("small-3d-llama8b"))
    assert all(set(d.domain) <= set(big.inst.decision_index[d.name].domain) for d in coarse.inst.decisions)
    assert rec.objective >= solve(coarse, solver="highs").objective * (1 - AGREEMENT_RTOL)
    assert big.own_search("highs", time_limit=0.0) is None  # a named MIP solver gets the MIP
    assert big.with_formulation("factored").own_search("auto", time_limit=0.0) is None
    assert Grid(load_instance("small-3d-llama8b")).own_search("auto", time_limit=0.0) is None  # 8,400 designs


def test_formulation_boxes_on_catalog_chips_is_an_input_error(cli):
    r = cli("solve", "dgx-llama70b-chip-choice", "--formulation", "boxes")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert "box search" in r.stderr


# --- the coarse sub-grid's optimum as the first incumbent (search(coarse=...)) ---

def test_coarse_sub_grid_is_every_fourth_kept_value_and_the_last():
    m = np.array([False, True, True, True, True, True, True, True, True, True, True, False] + [True] * 30)
    sub = boxes._coarse({"k": m, "few": np.array([True, False, True])}, step=4)
    kept = np.flatnonzero(m)  # 40 kept values (> COARSE_KEEP = 32): positions 1..10 and 12..41
    assert list(np.flatnonzero(sub["k"])) == [int(kept[i]) for i in (0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 39)]
    assert list(sub["few"]) == [True, False, True]  # at most 32 values: not coarsened


def _refined_grid():
    """small-3d-llama8b with 40 TSV counts and 41 compute areas (16 x 40 x 3 x 41 x 4 x 2 = 629,760
    designs; its knobs of at most 32 values are not coarsened)."""
    steps = lambda lo, n, d: [round(lo + i * d, 4) for i in range(n)]  # noqa: E731
    base = load_instance("small-3d-llama8b").spec.model_dump(mode="json")["hardware"]["decisions"]
    return _refined("small-3d-llama8b", {**base, "dram_layers": list(range(1, 17)),
                                         "tsv_count": list(range(1024, 40 * 1024 + 1, 1024)),
                                         "compute_area_mm2": steps(40, 41, 4)})


def test_coarse_seeded_search_is_exact_and_starts_no_worse_than_the_coarse_optimum():
    grid = _refined_grid()
    inst = grid.inst
    bf = brute_force(inst)
    plain = boxes.search(inst, coarse=float("inf"))
    seeded = boxes.search(inst, coarse=1e4)  # (recursively: coarse grids above 1e4 designs too)
    assert plain.coarse == [] and len(seeded.coarse) >= 1
    for r in (plain, seeded):
        assert r.complete and _same(r.internal, bf.internal)
    sizes = [c["designs"] for c in seeded.coarse]
    assert sizes == sorted(sizes) and sizes[-1] < 629_760  # coarsest first, each a sub-grid
    top = seeded.coarse[-1]
    # the coarse optimum is a design of the grid the model finds feasible, valued as the search says
    assert all(top["design"][d.name] in d.domain for d in inst.hardware_decisions)
    ours = grid.assess(top["design"])
    assert ours.feasible and _same(ours.internal, top["internal"])
    # a subset of the grid: never better than the grid's optimum; the search starts from it
    assert top["internal"] >= bf.internal * (1 - 1e-9)
    assert seeded.trace[0][1] <= top["internal"]


def test_solve_records_the_coarse_solves():
    sol = boxes.solve(_refined_grid())
    assert sol.status == "optimal" and sol.mip["coarse_solves"] == []  # 629,760 <= COARSE_MIN_DESIGNS
