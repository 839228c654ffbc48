"""codesign.backends.pyomo: the same MIP through any solver Pyomo drives (here its HiGHS
interface): hand-solved models, and the driver with ``pyomo:highs`` reaching brute force's
optimum on each instance kind, verified by the model."""

from __future__ import annotations

import pytest

from codesign.errors import InputError
from codesign.kinds.registry import from_data
from codesign.proof.driver import backend_solve, solve

from .models import knapsack


def test_a_hand_solved_knapsack():
    """models.knapsack(): optimum 15 = {b, c, d, e} (objective -15)."""
    res = backend_solve(knapsack(), "pyomo:highs")
    assert res.status == "optimal" and res.objective == pytest.approx(-15.0)
    assert [round(v) for v in res.x] == [0, 1, 1, 1, 1]
    assert res.solver == "pyomo:highs" and res.solver_version.startswith("pyomo ")
    assert res.parameters["mip_rel_gap"] == 0.0


def test_an_infeasible_model():
    from codesign.mip.program import MIP

    mip = MIP()
    b = mip.add_binary("b")
    mip.add_row("impossible", [b], [1.0], lb=2.0)
    mip.set_objective([b], [1.0])
    assert backend_solve(mip, "pyomo:highs").status == "infeasible"


def test_an_unknown_pyomo_solver_is_bad_input():
    with pytest.raises(InputError, match="Pyomo cannot find solver 'nonsense'"):
        backend_solve(knapsack(), "pyomo:nonsense")


def _tiny_mapping():
    from codesign.kinds.mapping.generate import generate_mapping

    return from_data(generate_mapping(devices=2, modules=2, layers=3, ports=1, host_GiB=16, batch_per_stage=32,
                                      weights=("local", "host", "pool"), kv=("local", "host", "pool")))


@pytest.mark.parametrize("name", ["tiny-3d-llama8b", "dgx-llama70b-chip-choice", "tiny-placement-mixtral", "a tiny mapping"])
def test_pyomo_highs_reaches_the_brute_force_optimum(name, named, brute):
    p = _tiny_mapping() if name == "a tiny mapping" else named(name)
    best = brute(p).best
    sol = solve(p, solver="pyomo:highs")
    assert sol.status == "optimal", (sol.status, sol.termination)
    assert sol.objective == pytest.approx(best.objective, rel=1e-9 if p.kind == "grid" else 1e-6)
    assert sol.gap is not None and abs(sol.gap) <= 1e-6
    assert p.assess(sol.design).feasible
    assert sol.solver == "pyomo:highs" and sol.solver_version.startswith("pyomo ")
