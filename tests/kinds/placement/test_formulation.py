"""codesign.kinds.placement.formulation: the placement MIP; the design it decodes is evaluated by
the model to the MIP's objective."""

from __future__ import annotations

import copy

import pytest

from codesign.backends import solve as backend
from codesign.kinds.placement.formulation import build_placement, to_user
from codesign.kinds.placement.spec import load_placement, placement_from_data
from codesign.kinds.registry import named_paths
from codesign.model.placement import evaluate_placement
from codesign.model.placement_build import build_problem
from codesign.proof.tolerances import OBJECTIVE_RTOL

TINY = str(named_paths()["tiny-placement-mixtral"])


@pytest.mark.parametrize("objective", ["tokens_per_s", "energy_per_token_J"])
def test_the_mip_objective_of_a_decoded_design_is_the_models(objective):
    raw = copy.deepcopy(load_placement(TINY).spec.model_dump(mode="json", exclude_none=True))
    raw["objective"] = {"metric": objective}
    pb = build_problem(placement_from_data(raw))
    pm = build_placement(pb)
    res = backend(pm.mip, "highs", mip_rel_gap=0.0, mip_abs_gap=0.0)
    assert res.status == "optimal"
    ev = evaluate_placement(pb, pm.decode(res.x))
    assert ev.feasible
    assert to_user(pb, res.objective, pm.objective_unit) == pytest.approx(ev.objective, rel=OBJECTIVE_RTOL)


def test_a_decoded_design_places_every_expert_and_partitions_the_devices():
    pb = build_problem(load_placement(TINY))
    pm = build_placement(pb)
    d = pm.decode(backend(pm.mip, "highs").x)
    assert len(d.experts) == pb.experts and all(0 <= x < pb.devices for x in d.experts)
    assert sorted(x for g in d.groups for x in g) == list(range(pb.devices))
    assert all(len(g) == pb.tp for g in d.groups)
