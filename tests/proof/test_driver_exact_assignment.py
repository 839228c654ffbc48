"""codesign.proof.driver on mappings and placements: the whole pipeline is exact.

Brute force (every design evaluated with the model) = HiGHS = CP-SAT, each answer verified by the
model, on the named tiny-pf-mapping and tiny-placement-mixtral, hand-built tiny mapping and
placement variants (binding capacities, budgets, unequal domains, Zipf routing), seeded random
draws (:mod:`tests.proof.draws`), infeasible draws included, and limits on the model's 1e-9
feasibility tolerance (``tests/data/*-tolerance-edge.toml``)."""

from __future__ import annotations

import copy
import os
import tomllib

import pytest

from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.placement.spec import generate_placement
from codesign.kinds.registry import from_data
from codesign.model.calibration import shipped
from codesign.proof.driver import solve

from . import draws
from .exactness import DATA, MAPPING_RTOL, PLACEMENT_RTOL, SOLVERS, check_claims, check_exact

# --------------------------------------------------------------------------------------------------
# the named tiny mapping and placement
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "rtol"), [("tiny-pf-mapping", MAPPING_RTOL), ("tiny-placement-mixtral", PLACEMENT_RTOL)])
def test_named_tiny_mapping_and_placement_brute_force_equals_both_solvers(name, rtol, named, brute):
    p = named(name)
    bf = brute(p)
    # brute force covered the whole space (placement: TP groups as unordered partitions)
    assert bf.points == (p.space_size() if p.kind == "mapping" else p.space_size() // 2)
    assert bf.best is not None and bf.best.feasible
    check_exact(p, bf.best, rtol)


# --------------------------------------------------------------------------------------------------
# mapping and placement: hand-built tiny variants
# --------------------------------------------------------------------------------------------------

MAPPING_TINY = [
    dict(devices=2, modules=2, layers=3, ports=1, host_GiB=16, batch_per_stage=32, weights=("local", "host", "pool"), kv=("local", "host", "pool")),
    dict(devices=2, modules=2, layers=3, ports=1, host_GiB=16, objective="energy_per_token_J", weights=("local", "host", "pool"), kv=("local", "pool")),
    dict(devices=4, modules=4, layers=4, ports=1, batch_per_stage=16, weights=("local", "pool"), kv=("local",)),
    dict(devices=2, modules=2, layers=3, ports=2, chips=("h200-sxm", "a100-sxm-80gb"), weights=("local", "pool"), kv=("local", "pool"), max_devices_per_module=1),
    dict(devices=3, modules=2, layers=4, ports=1, weights=("local", "pool"), kv=("local",), tpot_s=0.0112),
    dict(devices=2, modules=2, layers=3, ports=1, weights=("local", "pool"), kv=("local", "pool"), assumed_device_bandwidth_GBps=26_800),
    # one module for three devices, at most two of them attached: the sharing limit binds
    dict(devices=3, modules=1, layers=5, ports=1, batch_per_stage=32, weights=("local", "pool"), kv=("local", "pool"), max_devices_per_module=2),
]


@pytest.mark.parametrize("kw", MAPPING_TINY, ids=[f"tiny{i}" for i in range(len(MAPPING_TINY))])
def test_tiny_mapping_brute_force_equals_both_solvers(kw):
    p = from_data(generate_mapping(**kw))
    bf = p.brute_force()
    assert bf.points == p.space_size()
    check_exact(p, bf.best, MAPPING_RTOL)


def test_a_mapping_with_nothing_that_fits_is_infeasible():
    """405B's layers with weights local only on two devices: no placement fits."""
    p = from_data(generate_mapping(devices=2, modules=0, layers=60, batch_per_stage=1, context_tokens=16,
                                   weights=("local",), kv=("local",)))
    for solver in SOLVERS:
        sol = solve(p, solver=solver)
        assert sol.status == "infeasible" and sol.design is None


def _tiny_placement(named) -> dict:
    return copy.deepcopy(named("tiny-placement-mixtral").data)


def test_tiny_placement_energy_brute_force_equals_both_solvers(named):
    raw = _tiny_placement(named)
    raw["objective"] = {"metric": "energy_per_token_J"}
    p = from_data(raw)
    check_exact(p, p.brute_force().best, PLACEMENT_RTOL)


@pytest.mark.parametrize("objective", ["tokens_per_s", "energy_per_token_J"])
def test_placement_over_unequal_domains_and_zipf_routing(objective, named):
    """Domains of 3 and 1: TP groups of 2 cannot all stay inside a domain."""
    raw = _tiny_placement(named)
    raw["devices"]["domains"] = [3, 1]
    raw["routing"] = {"profile": "zipf", "zipf_exponent": 1.2, "levels": 3}
    raw["objective"] = {"metric": objective}
    p = from_data(raw)
    check_exact(p, p.brute_force().best, PLACEMENT_RTOL)


def test_placement_with_a_binding_capacity_and_budget(named):
    raw = _tiny_placement(named)
    raw["devices"]["tp"] = 1
    raw["devices"]["domains"] = [1, 3]
    pb = from_data(raw).model
    # room for exactly 3 experts per device (usable = raw - the H100's runtime reserve)
    reserve_GiB = shipped().for_chip("h100-sxm").runtime_reserve_GiB
    raw["devices"]["memory_capacity_GiB"] = (pb.fixed_store_B + 3.5 * pb.expert_store_B + reserve_GiB * 2**30) / 2**30
    assert from_data(raw).model.max_experts_per_device == 3
    raw["objective"] = {"metric": "energy_per_token_J"}
    raw["budgets"] = {"tpot_s": 2.5e-3}
    p = from_data(raw)
    check_exact(p, p.brute_force().best, PLACEMENT_RTOL)


def test_generated_placement_brute_force_equals_both_solvers():
    d = generate_placement(4, 8, [2, 2], workload="mixtral-8x7b", tp=2, layers=2, zipf_exponent=0.8, levels=3, seed=3)
    p = from_data(d)
    check_exact(p, p.brute_force().best, PLACEMENT_RTOL)


# --------------------------------------------------------------------------------------------------
# random mapping and placement draws (tests/proof/draws.py)
# --------------------------------------------------------------------------------------------------

DRAWS = int(os.environ.get("CODESIGN_RANDOM_DRAWS", "3"))
FIRST_SEED = int(os.environ.get("CODESIGN_RANDOM_SEED", "0"))
MAX_POINTS = float(os.environ.get("CODESIGN_RANDOM_MAX_POINTS", "2e4"))


@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + DRAWS))
@pytest.mark.parametrize("family", ["mapping", "mapping-symmetry", "placement"])
def test_random_tiny_instance_brute_force_equals_solvers(family, seed):
    """``mapping-symmetry`` draws 4-5 devices of one chip and 2-3 modules, so that the MIP's
    symmetry-breaking rows (identical middle devices, identical modules) are active."""
    data = draws.instance_for(family, seed, MAX_POINTS, edges=False)
    p = from_data(data)
    bf = p.brute_force()
    assert p.space_size() <= MAX_POINTS
    if family != "placement":
        assert bf.points == p.space_size()
    check_claims(p, bf.best)


def test_draws_are_deterministic_and_cover_both_objectives():
    a = [draws.instance_for("placement", s, MAX_POINTS) for s in range(6)]
    assert a == [draws.instance_for("placement", s, MAX_POINTS) for s in range(6)]
    m = [draws.instance_for("mapping", s, MAX_POINTS) for s in range(12)]
    assert {d["objective"]["metric"] for d in m + a} == {"tokens_per_s", "energy_per_token_J"}


#: limits on the model's 1e-9 feasibility tolerance: the MIP's tpot and capacity rows once used
#: the limit exactly while the model accepts up to 1e-9 above it, so a design 5e-10 above was
#: feasible for the model and brute force but cut off by the MIP
TOLERANCE_EDGES = [
    # tpot = budget x (1 + 5e-10): HiGHS proved "infeasible", CP-SAT found no design
    ("mapping", "mapping-tpot-tolerance-edge.toml"),
    # device 0's local memory holds its layers x (1 + 5e-10): CP-SAT proved "optimal" 0.02 % worse
    ("mapping", "mapping-capacity-tolerance-edge.toml"),
    # step = budget x (1 + 5e-10): both solvers proved "infeasible"
    ("placement", "placement-tpot-tolerance-edge.toml"),
]


def resolve_edge(family: str, data: dict) -> dict:
    """A tolerance-edge file's ``[edge]`` table resolved under today's calibration and model: each
    device's usable local memory -> its capacity, the tpot factor -> an absolute budget (x the
    fastest design's tpot, by brute force); the files keep the edge itself, which a re-fitted
    calibration would otherwise move off the tolerance."""
    data = dict(data)
    edge = data.pop("edge")
    for dev, usable in zip(data["devices"], edge.get("usable_GiB", ()), strict=False):
        dev["memory_capacity_GiB"] = draws.capacity_GiB(dev["chip"], usable * 2**30)
    if "tpot_factor" in edge:
        data["budgets"] = {"tpot_factor": edge["tpot_factor"]}
        resolve = draws.resolve_mapping_budget if family == "mapping" else draws.resolve_placement_budget
        data = resolve(data)
        assert "budgets" in data  # some design is feasible without the budget
    return data


@pytest.mark.parametrize(("family", "file"), TOLERANCE_EDGES, ids=[f for _, f in TOLERANCE_EDGES])
def test_a_limit_on_the_models_tolerance_edge_keeps_its_designs(family, file):
    p = from_data(resolve_edge(family, tomllib.loads((DATA / file).read_text())))
    best = p.brute_force().best
    assert best is not None  # a design sits 5e-10 above the limit, within the model's rule
    check_claims(p, best)
