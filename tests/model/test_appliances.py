"""codesign.model.appliances: several Photonic Fabric appliances (issue 33, item 3).

Hand-derived figures (catalog: 16 ports of 7.2 Tbps = 900 GB/s, 115 Tbps = 14,375 GB/s switching,
32 TB pooled; photonic 5 pJ/bit adapter, 25 pJ/bit switch):

- 128 GPUs x 1 port = 128 ports = 8 appliances of 16; x 2 ports = 16 appliances; 4 appliances
  would need 32 ports each;
- pool capacity at N appliances = N x 32 TB (16: 512 TB); replicated weights: N copies, shared: 1;
- shared layout, 128 GPUs on 16 appliances (k = 8), 1 port, 1 uplink: r = 15/16 of a device's
  pooled bytes are remote; its port 900 GB/s, its switch 14,375 / (8 x 31/16) = 927.4 GB/s, its
  appliance's uplink 900 / (8 x 15/16) = 120 GB/s, the tier-2 switch 14,375 / (128 x 15/16) =
  119.79 GB/s: 119.79 GB/s; ports 8 + 1 = 9 per appliance and 16 x 1 = 16 on the tier-2 switch;
- a path crossing two appliances: 5 + 25 + 25 + 25 + 5 = 85 pJ/bit (electrical 65 + 3 x 35 + 65 =
  235); on one appliance 35 (165); mean at r = 15/16: 35/16 + 85 x 15/16 = 81.875 pJ/bit.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from codesign.errors import InputError
from codesign.kinds.grid.lints import lint
from codesign.kinds.grid.problem import Grid
from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.model import appliances
from codesign.model.evaluate import evaluate
from codesign.model.hardware import hardware_table
from codesign.model.units import PICO, TB, GBps
from codesign.proof.driver import solve

PORT, SWITCH = 900 * GBps, 14_375 * GBps


def test_ports_needed_for_128_gpus() -> None:
    used = appliances.ports_used(128, np.array([4, 8, 16]), 1, False, 1)
    assert used.tolist() == [32, 16, 8]
    assert appliances.ports_used(128, 16, 2, False, 1) == 16
    # shared: 8 devices + 1 uplink per appliance, 16 uplinks on the tier-2 switch
    assert appliances.ports_used(128, 16, 1, True, 1) == 16
    assert appliances.ports_used(128, 16, 1, True, 2) == 32  # tier-2: 16 x 2


def test_remote_share_and_bandwidth_of_the_shared_layout() -> None:
    assert appliances.remote_share(16, True) == pytest.approx(15 / 16)
    assert appliances.remote_share(16, False) == 0.0
    assert appliances.remote_share(1, True) == 0.0
    bw = appliances.device_bandwidth_Bps(128, 16, 1, True, 1, PORT, SWITCH)
    assert bw / GBps == pytest.approx(14_375 / 120)  # the tier-2 switch binds: 119.79 GB/s
    # replicated: no remote byte; the port (900) binds before the switch share (14,375 / 8)
    assert appliances.device_bandwidth_Bps(128, 16, 1, False, 1, PORT, SWITCH) / GBps == pytest.approx(900)
    # one appliance is eq. 3.10: min(p x 900, 14,375 / D)
    assert appliances.device_bandwidth_Bps(8, 1, 2, True, 1, PORT, SWITCH) / GBps == pytest.approx(14_375 / 8)


def test_per_bit_energy_of_a_path_crossing_two_appliances() -> None:
    assert appliances.path_energies_pJ_per_bit(5, 25) == (35, 85)
    assert appliances.path_energies_pJ_per_bit(65, 35) == (165, 235)


def _inst(devices: int, **decisions) -> dict:
    raw = copy.deepcopy(load_instance("pf-llama405b-consistent").raw)
    raw["name"] = "pf-multi-test"
    raw["system"]["devices"] = devices
    raw["hardware"]["decisions"].update(decisions)
    raw["baseline"] = {"tp": 8, "pp": 1, "batch": 32}
    return raw


def test_capacity_copies_energy_and_ports_in_the_hardware_table() -> None:
    inst = instance_from_data(_inst(128, pool_ports=[1], appliances=[8, 16], pool_layout=["replicated", "shared"]))
    t = hardware_table(inst)
    row = {(int(n), lay): i for i, (n, lay) in enumerate(zip(t.decisions["appliances"], t.decisions["pool_layout"], strict=True))}
    f = t.features
    i, j = row[16, "replicated"], row[16, "shared"]
    assert f["pool_capacity_B"][i] == f["pool_capacity_B"][j] == 16 * 32 * TB
    assert (f["pool_copies"][i], f["pool_copies"][j]) == (16, 1)
    assert f["J_per_B_pool"][i] == pytest.approx(35 * 8 * PICO)
    assert f["J_per_B_pool"][j] == pytest.approx((35 / 16 + 85 * 15 / 16) * 8 * PICO)
    assert f["pool_ports_used"][row[8, "replicated"]] == 16 and f["pool_ports_available"][i] == 16


def test_replicated_weights_count_once_per_appliance() -> None:
    """memory_pool_B = copies x pooled weights + pooled KV cache: the same design's pooled memory
    at 16 replicated appliances exceeds the shared one's by 15 copies of the weights."""
    inst = instance_from_data(_inst(128, pool_ports=[1], appliances=[16], pool_layout=["replicated", "shared"]))
    design = {"tp": 1, "pp": 1, "batch": 64, "weights_tier": "pooled", "kv_tier": "local"}
    rep = evaluate(inst, {**inst.baseline(), **design, "pool_layout": "replicated"})
    sh = evaluate(inst, {**inst.baseline(), **design, "pool_layout": "shared"})
    weights = sh.metrics["memory_pool_B"]
    assert weights > 4e11  # 405 B parameters at 1 B, embedding and head at 2 B
    assert rep.metrics["memory_pool_B"] == pytest.approx(16 * weights)
    assert rep.metrics["tokens_per_s"] > sh.metrics["tokens_per_s"]


def test_the_64_device_case_needs_4_appliances() -> None:
    """The issue's 64 devices stop at one appliance's 16 ports; with >= 4 appliances they fit."""
    one = {x.code: x for x in lint(instance_from_data(_inst(64, pool_ports=[1])))}
    assert one["appliance-ports-exhausted"].numbers["appliances_needed"] == 4
    assert "at least 4 appliances" in one["appliance-ports-exhausted"].message
    four = instance_from_data(_inst(64, pool_ports=[1], appliances=[4, 8]))
    assert [x for x in lint(four) if x.severity == "error"] == []
    sol = solve(Grid(four), solver="highs")
    assert sol.status == "optimal" and sol.design["appliances"] in (4, 8)


def test_bad_appliance_decisions_are_input_errors() -> None:
    with pytest.raises(InputError, match="do not split"):
        instance_from_data(_inst(128, appliances=[3]))
    with pytest.raises(InputError, match="not a pooled-data layout"):
        instance_from_data(_inst(128, appliances=[16], pool_layout=["striped"]))
    raw = _inst(8, appliances=[1])
    del raw["system"]["appliance"]
    raw["workloads"][0]["decisions"]["weights_tier"] = ["local"]
    raw["workloads"][0]["decisions"]["kv_tier"] = ["local"]
    raw["hardware"]["decisions"] = {"appliances": [1]}
    with pytest.raises(InputError, match=r"needs `system\.appliance`"):
        instance_from_data(raw)


def _small() -> Grid:
    raw = _inst(16, pool_ports=[1, 2], appliances=[1, 2, 4], pool_layout=["replicated", "shared"], uplink_ports=[1, 2])
    raw["workloads"][0]["workload"] = "llama-3.1-8b"
    raw["workloads"][0]["decisions"].update(tp=[1, 2, 8], pp=[1, 2], batch=[16, 128])
    raw["baseline"] = {"tp": 8, "pp": 1, "batch": 16, "pool_ports": 1, "appliances": 4}
    return Grid.from_data(raw, source="<test>")


@pytest.mark.parametrize("objective", ["tokens_per_s", "energy_per_token_J"])
def test_brute_force_equals_both_solvers_on_a_small_multi_appliance_instance(objective: str, brute) -> None:
    p = _small().with_objective(objective)
    best = brute(p).best
    for solver in ("highs", "cpsat"):
        sol = solve(p, solver=solver)
        assert sol.status == "optimal"
        assert sol.objective == pytest.approx(best.objective, rel=1e-6)


def test_brute_force_equals_the_mip_under_an_appliance_budget(brute) -> None:
    p = _small().with_budgets(["appliances <= 2"])
    best = brute(p).best
    sol = solve(p, solver="highs")
    assert sol.design["appliances"] <= 2
    assert sol.objective == pytest.approx(best.objective, rel=1e-6)


def test_the_128_gpu_instance_is_at_least_16_pods_of_the_8_gpu_optimum(named) -> None:
    """16 appliances x 8 GPUs (2 ports, replicated) is the 8-GPU pod of pf-llama405b-consistent 16
    times over (same bandwidth min(1,800, 14,375/8), no cross-appliance byte), so the 128-GPU optimum
    is at least 16 x the pod's; both solvers prove the same optimum; the GPU-only optimum (nothing
    pooled) is the best baseline."""
    pod = solve(named("pf-llama405b-consistent"), solver="highs").objective
    p = named("pf-llama405b-128gpu")
    highs, cpsat = solve(p, solver="highs"), solve(p, solver="cpsat")
    assert highs.status == cpsat.status == "optimal"
    assert highs.objective == pytest.approx(cpsat.objective, rel=1e-6)
    assert highs.objective >= 16 * pod * (1 - 1e-9)
    gpu_only = solve(p.with_budgets(["memory_pool_B <= 0"]), solver="highs")
    assert gpu_only.objective < highs.objective
    assert gpu_only.design["weights_tier"] == gpu_only.design["kv_tier"] == "local"
