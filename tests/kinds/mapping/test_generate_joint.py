"""codesign.kinds.mapping.generate.generate_joint: joint (chip per stage group) instances that
validate, and whose MIP optimum equals brute force on a tiny one."""

from __future__ import annotations

import pytest

from codesign.kinds.mapping.generate import JOINT_CHIPS, generate_joint
from codesign.kinds.mapping.problem import Mapping
from codesign.proof.driver import solve


def test_a_joint_instance_decides_a_chip_per_group_under_the_envelope():
    p = Mapping.from_data(generate_joint(devices=8, groups=4, modules=4, tiers=("local", "pool")), source="generated")
    assert p.hardware.joint and len(p.hardware.choices()) == len(JOINT_CHIPS) ** 4
    assert [g.count for g in p.inst.spec.devices] == [2, 2, 2, 2]
    assert p.inst.spec.budgets.power_W == 8 * 875.0 and p.inst.spec.appliance.port_static_power_W == 5.04


def test_more_groups_than_devices_is_refused():
    with pytest.raises(ValueError, match="groups"):
        generate_joint(devices=2, groups=3)


@pytest.mark.parametrize("solver", ["highs", "cpsat"])
def test_tiny_joint_optimum_equals_brute_force(solver):
    data = generate_joint(devices=2, groups=2, chips=("h100-sxm", "h200-sxm"), layers=3, modules=1,
                          tiers=("local", "pool"), batch_per_stage=4, power_W_per_device=None)
    p = Mapping.from_data(data, source="generated")
    bf = p.brute_force()
    assert bf.complete and bf.best is not None
    sol = solve(p, solver=solver, time_limit=60)
    assert sol.status == "optimal"
    assert sol.objective == pytest.approx(bf.best.objective, rel=1e-6)
