"""The factored hardware formulation (codesign/kinds/grid/factored.py, formulations/factored.md):
its columns equal the model's on whole grids, and its proven optimum equals the enumerated
formulation's and brute force with both solvers."""

from __future__ import annotations

import numpy as np
import pytest

from codesign.errors import InputError
from codesign.kinds.grid import factored
from codesign.kinds.grid import factored_columns as fc
from codesign.kinds.grid.generate import scaled_instance
from codesign.kinds.grid.problem import Grid
from codesign.kinds.grid.space import brute_force
from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.proof.driver import solve
from codesign.proof.tolerances import AGREEMENT_RTOL


def _grid(inst) -> dict[str, np.ndarray]:
    """Value indices of every design of the instance's hardware grid."""
    names = [d.name for d in inst.hardware_decisions]
    mesh = np.meshgrid(*[np.arange(len(d.domain)) for d in inst.hardware_decisions], indexing="ij")
    return {n: m.ravel() for n, m in zip(names, mesh, strict=True)}


@pytest.mark.parametrize("name", ["tiny-3d-llama8b", "small-3d-llama8b"])
def test_every_factored_column_equals_the_model_on_the_whole_grid(name):
    inst = load_instance(name)
    cols = fc.stacked_columns(inst)
    fc.verify_columns(inst, cols, set(cols.cols), at=_grid(inst))
    # products the forms use too
    fc.verify_columns(inst, cols, {"static_W*s_per_flop_seq@fp8", "static_W*s_per_B_local_seq"}, at=_grid(inst))


def test_a_wrong_column_is_a_model_error():
    inst = load_instance("tiny-3d-llama8b")
    cols = fc.stacked_columns(inst)
    cols.cols["area_mm2"] = fc.Col(cols.footprint[:-1])  # the fixed logic area left out
    with pytest.raises(Exception, match="area_mm2 disagrees with the model"):
        fc.verify_columns(inst, cols, {"area_mm2"})


def _small_generated(objective: str, workloads: int = 1, seed: int = 0):
    """A generated instance (power and area budgets, SLOs) cut to a few values per decision,
    drawn at random (a brute force of it takes well under a second)."""
    rng = np.random.default_rng(seed)
    data = scaled_instance(workloads=workloads, hw_level=0, objective=objective)

    def cut(decisions: dict, k: int) -> dict:
        return {n: sorted(rng.choice(v, size=min(k, len(v)), replace=False).tolist()) for n, v in decisions.items()}

    data["hardware"]["decisions"] = cut(data["hardware"]["decisions"], 2)
    for w in data["workloads"]:
        w["decisions"] = cut(w["decisions"], 3)
    data.pop("baseline", None)
    return instance_from_data(data, source="<test>")


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= AGREEMENT_RTOL * max(abs(a), abs(b))


CASES = [
    ("tiny-3d-llama8b", "highs"),
    ("tiny-3d-llama8b", "cpsat"),
    ("small-3d-llama8b", "highs"),
    ("small-3d-llama8b", "cpsat"),
]


@pytest.mark.parametrize("name,solver", CASES)
def test_factored_optimum_equals_enumerated_and_brute_force(name, solver):
    inst = load_instance(name)
    grid = Grid(inst)
    bf = brute_force(inst)
    fac = solve(grid.with_formulation("factored"), solver=solver)
    enum = solve(grid.with_formulation("enumerated"), solver=solver)
    assert fac.status == enum.status == "optimal"
    assert _same(fac.objective, bf.objective) and _same(enum.objective, bf.objective)
    assert fac.mip["formulation"] == "factored" and "formulation" not in enum.mip


@pytest.mark.parametrize("objective,seed,solver", [
    ("tokens_per_s", 0, "highs"),  # infeasible
    ("tokens_per_s", 1, "highs"),
    ("energy_per_token_J", 2, "highs"),
    ("tpot_s", 3, "highs"),
    ("tokens_per_s", 5, "cpsat"),
])
def test_random_generated_instances_agree_with_brute_force(objective, seed, solver):
    """Random cuts of a generated two-workload instance (power and area budgets, SLOs)."""
    inst = _small_generated(objective, workloads=2, seed=seed)
    bf = brute_force(inst)
    fac = solve(Grid(inst).with_formulation("factored"), solver=solver)
    if not bf.feasible:
        assert fac.status == "infeasible"
        return
    assert fac.status == "optimal"
    assert _same(fac.objective, bf.objective)


def test_infeasible_budget_is_infeasible_in_both():
    inst = load_instance("tiny-3d-llama8b")
    grid = Grid(inst).with_budgets(["power_W <= 1"])
    fac = solve(grid.with_formulation("factored"), solver="highs")
    enum = solve(grid.with_formulation("enumerated"), solver="highs")
    assert fac.status == enum.status == "infeasible"


def test_formulation_option():
    grid = Grid(load_instance("tiny-3d-llama8b"))
    assert grid.formulation == "auto"
    assert not factored.chosen(grid.inst, "auto")  # 48 hardware designs: enumeration
    assert factored.chosen(grid.inst, "factored")
    assert grid.with_formulation("factored").with_budgets(["area_mm2 <= 150"]).formulation == "factored"
    with pytest.raises(InputError):
        grid.with_formulation("clever")
    assert factored.unsupported_reason(load_instance("dgx-llama70b-chip-choice")) is not None
    data = grid.inst.spec.model_dump(mode="json")
    data["hardware"]["decisions"]["tsv_count"] = list(range(1024, 1024 * 257, 1024))
    data["hardware"]["decisions"]["compute_area_mm2"] = [float(a) for a in range(40, 440)]
    data["hardware"]["decisions"]["clock_GHz"] = [round(0.8 + 0.05 * i, 2) for i in range(29)]
    data.pop("baseline")
    big = instance_from_data(data, source="<test>")
    assert factored.hardware_designs(big) > factored.AUTO_FACTORED_MIN_DESIGNS
    assert factored.chosen(big, "auto") and not factored.chosen(big, "enumerated")


def test_factored_model_grows_with_the_sum_of_the_domains():
    """Refining one knob adds variables in proportion to its domain, not to the product."""
    base = load_instance("small-3d-llama8b")
    data = base.spec.model_dump(mode="json")
    data["hardware"]["decisions"]["clock_GHz"] = [round(0.8 + 0.05 * i, 2) for i in range(29)]
    fine = instance_from_data(data, source="<test>")
    a = factored.build_factored(base, check=False).mip.stats()
    b = factored.build_factored(fine, check=False).mip.stats()
    assert factored.hardware_designs(fine) == factored.hardware_designs(base) * 29 // 5
    # Σ|dom| grows by 24 values; each compiled product disaggregates over the clock at most once
    # per distinct schedule expression: far below the 5.8x of the enumeration
    assert b["variables"] < 2 * a["variables"]


def test_domain_presolve_removes_only_infeasible_values():
    """An area budget that no design with 80 mm² of compute meets: the value is removed, and the
    optimum is still brute force's."""
    grid = Grid(load_instance("tiny-3d-llama8b")).with_budgets(["area_mm2 <= 100"])
    comp = factored.build_factored(grid.inst)
    kept = {k: [grid.inst.decision_index[k].domain[i] for i in v] for k, v in comp.kept.items()}
    assert kept["compute_area_mm2"] == [40.0]
    assert kept["dram_layers"] == [2, 4, 8]
    bf = brute_force(grid.inst)
    fac = solve(grid.with_formulation("factored"), solver="highs")
    assert fac.status == "optimal" and _same(fac.objective, bf.objective)
