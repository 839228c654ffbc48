"""codesign.backends.highs: indicator rows become big-M rows whose M comes from the variables'
bounds (only the side that needs one), and export writes the MIP as built under its names."""

from __future__ import annotations

import math

import numpy as np
import pytest

from codesign.mip.program import MIP


def test_big_m_comes_from_bounds() -> None:
    """x in [0, 10], b = 1 => x <= 3 lowers to x + (10 - 3)·b <= 10 (times a power of two)."""
    from codesign.backends.highs import lower

    mip = MIP()
    x = mip.add_var("x", 0.0, 10.0)
    b = mip.add_binary("b")
    mip.add_indicator("cap", b, [x], [1.0], ub=3.0)
    model = lower(mip)
    assert model.row_names == ["cap.ub"]
    scale = model.row_scale[0]
    np.testing.assert_array_equal(model.index, [x, b])
    np.testing.assert_allclose(model.value / scale, [1.0, 7.0])
    assert model.row_upper[0] / scale == 10.0 and model.row_lower[0] == -math.inf
    assert model.big_m_max == 7.0


def test_big_m_not_needed_is_skipped() -> None:
    """x in [0, 2], b = 1 => x <= 3 always holds: no row at all."""
    from codesign.backends.highs import lower

    mip = MIP()
    x = mip.add_var("x", 0.0, 2.0)
    b = mip.add_binary("b")
    mip.add_indicator("slack", b, [x], [1.0], ub=3.0)
    assert lower(mip).num_row == 0


def test_big_m_only_for_the_needed_side() -> None:
    """x in [0, inf), b = 1 => x >= 3: only the lower side needs an M (0 - 3), which is finite."""
    from codesign.backends.highs import lower

    mip = MIP()
    x = mip.add_var("x", 0.0, math.inf)
    b = mip.add_binary("b")
    mip.add_indicator("floor", b, [x], [1.0], lb=3.0)
    model = lower(mip)
    assert model.row_names == ["floor.lb"]
    np.testing.assert_allclose(model.value / model.row_scale[0], [1.0, -3.0])



def _read_back(path) -> tuple[float, list[str]]:
    """The optimum HiGHS finds in a written file, and the file's column names."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    assert h.readModel(str(path)) == highspy.HighsStatus.kOk
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    lp = h.getLp()
    return h.getInfo().objective_function_value, list(lp.col_names_)


def test_export_names_are_what_lp_readers_take_and_unique():
    """Brackets become parentheses, other characters an LP reader rejects '_', and a name that
    would collide with an earlier one gets a suffix."""
    from codesign.backends.highs import export_names

    assert export_names(["sched[main][12]", "b-implies-row.ub", "x[hw:3] n"]) == [
        "sched(main)(12)", "b_implies_row.ub", "x(hw_3)_n"]
    a, b = export_names(["a:b", "a-b"])
    assert a == "a_b" and b != a and b.startswith("a_b")


@pytest.mark.parametrize("fmt", ["mps", "lp"])
def test_an_exported_indicator_model_reads_back_with_the_same_optimum(fmt, tmp_path):
    """models.indicator_model('range', None): optimum -11 (b = 1, x = 4); the indicator is written
    as its big-M rows, every column under its MIP name."""
    from codesign.backends.highs import export

    from .models import indicator_model

    mip, optimum = indicator_model("range", None)
    path = tmp_path / f"m.{fmt}"
    written = export(mip, path, fmt)
    assert written["columns"] == ["x", "b"]
    assert set(written["rows"]) == {"b_implies_row.lb", "b_implies_row.ub"}  # '-' is an operator in LP
    value, names = _read_back(path)
    assert value == pytest.approx(optimum, abs=1e-9)
    assert names == ["x", "b"]
    assert not [p for p in tmp_path.iterdir() if p.name != f"m.{fmt}"]  # no temporary file left


def test_an_exported_objective_is_unscaled(tmp_path):
    """Coefficients of 1e-6 s and rows in SI units are written as built (the solve path scales
    rows by powers of two; the file must not)."""
    from codesign.backends.highs import export

    from .models import si_model

    mip, optimum = si_model()
    export(mip, tmp_path / "si.mps", "mps")
    value, _ = _read_back(tmp_path / "si.mps")
    assert value == pytest.approx(optimum, rel=1e-9)


def _pick_two(constant: float = 0.0) -> MIP:
    """Binaries a, b, c with costs 3, 5, 7 (plus ``constant``), at least two chosen: the optimum is
    a + b = 8 (+ constant); the next designs are a + c = 10 and b + c = 12."""
    mip = MIP("pick-two")
    v = [mip.add_binary(n) for n in "abc"]
    mip.add_row("two", v, [1.0, 1.0, 1.0], lb=2.0)
    mip.set_objective(v, [3.0, 5.0, 7.0], constant=constant)
    return mip


@pytest.mark.parametrize("constant", [0.0, 100.0])
def test_an_objective_bound_above_the_optimum_still_finds_it(constant):
    """Bound 8.5 (+ constant) in MIP units: the optimum 8 is below it and is returned as usual
    (HiGHS is handed the bound times the objective's power-of-two scale, 1/4 here)."""
    from codesign.backends.highs import solve

    r = solve(_pick_two(constant), objective_bound=8.5 + constant)
    assert r.status == "optimal"
    assert list(r.x) == [1.0, 1.0, 0.0] and r.objective == 8.0 + constant and r.bound == 8.0 + constant
    assert r.parameters["objective_bound"] == 8.5 + constant


@pytest.mark.parametrize("constant", [0.0, 100.0])
@pytest.mark.parametrize("given", [8.0, 7.9, 2.0])
def test_an_objective_bound_at_or_below_the_optimum_is_infeasible(constant, given):
    """No design is below 8 (+ constant): "infeasible", saying so. A bound of 7.9 read in HiGHS's
    scaled units (a quarter of the MIP's) would have let the optimum 8 through."""
    from codesign.backends.highs import solve

    r = solve(_pick_two(constant), objective_bound=given + constant)
    assert r.status == "infeasible" and r.bound is None
    # HiGHS may keep a solution it met at the bound (at 8, the optimum itself): never below it
    assert r.x is None or r.objective >= given + constant
    assert r.termination.startswith(f"Infeasible: no solution has objective below the objective bound {given + constant:.12g}")


def test_a_better_design_below_the_bound_is_not_called_infeasible():
    """With a + b excluded (a + b <= 1), the best left is a + c = 10: a bound of 10.5 finds it, a
    bound of 10 (nothing strictly below) does not."""
    from codesign.backends.highs import solve

    mip = _pick_two()
    mip.add_row("not-a-and-b", [0, 1], [1.0, 1.0], ub=1.0)
    r = solve(mip, objective_bound=10.5)
    assert r.status == "optimal" and list(r.x) == [1.0, 0.0, 1.0] and r.objective == 10.0
    assert solve(mip, objective_bound=10.0).status == "infeasible"


def test_an_objective_bound_is_ignored_without_integer_columns():
    """A pure LP (min x, x >= 2): HiGHS's dual simplex would stop at the bound with no proof
    vocabulary of ours; the bound is not handed over and the LP optimum 2 comes back."""
    from codesign.backends.highs import solve

    mip = MIP("lp")
    x = mip.add_var("x", 0.0, 10.0)
    mip.add_row("floor", [x], [1.0], lb=2.0)
    mip.set_objective([x], [1.0])
    r = solve(mip, objective_bound=1.0)
    assert r.status == "optimal" and r.objective == 2.0 and "objective_bound" not in r.parameters
