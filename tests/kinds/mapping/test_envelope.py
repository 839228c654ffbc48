"""codesign.kinds.mapping.envelope: the least dynamic energy of a stage per layer count, and its
lower convex hull. By hand (the splits, the hull, one all-local layer) and against an enumeration of
every design of a one-device instance evaluated by the model."""

from __future__ import annotations

import itertools

import pytest

from codesign.kinds.mapping import envelope
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.problem import Mapping
from codesign.model.mapping import FEASIBILITY_RTOL, MappingDesign, evaluate_mapping


def test_splits_by_hand():
    assert envelope.splits(2, (True, False, True)).tolist() == [[0, 0, 2], [1, 0, 1], [2, 0, 0]]
    assert len(envelope.splits(3, (True, True, True))) == 10  # C(5, 2)


def test_the_hull_lies_below_every_point_and_touches_its_vertices():
    g = [1.0, 3.0, 4.0, 8.0]  # (2, 3) is above the chord from (1, 1) to (3, 4)
    lines = envelope.hull(g)
    assert lines == [pytest.approx((-0.5, 1.5), rel=1e-8), pytest.approx((-8.0, 4.0), rel=1e-8)]
    for n, v in enumerate(g, start=1):
        assert max(a + b * n for a, b in lines) <= v
    assert envelope.hull([2.0]) == [pytest.approx((2.0, 0.0), rel=1e-8)]


def one_device(tpot_s: float | None) -> Mapping:
    raw = generate_mapping(devices=1, modules=1, layers=3, ports=1, host_GiB=64, weights=("local", "host", "pool"),
                           kv=("local", "host", "pool"), objective="energy_per_token_J", tpot_s=tpot_s, name="one")
    return Mapping.from_data(raw, source="one")


def test_one_all_local_layer_by_hand():
    p = one_device(None).model
    dev, lay = p.devices[0], p.layer
    g = envelope.floor_energies(p, dev, False, False, t_ub_s=1.0, max_layers=1)
    assert g is None  # more than one layer fits in a second
    g = envelope.floor_energies(p, dev, False, False, t_ub_s=1.0, max_layers=3)
    assert g is None
    # a cap that fits one layer only, read all from local memory: FLOPs + activations + bytes read locally
    one = lay.flops * dev.s_per_flop + dev.s_per_layer + (lay.w_read_B + lay.kv_read_B + lay.act_B) * dev.s_per_B_local
    g = envelope.floor_energies(p, dev, False, False, t_ub_s=one * 1.5, max_layers=3)
    assert g is not None and len(g) == 1
    by_hand = lay.flops * dev.J_per_flop + (lay.act_B + lay.w_read_B + lay.kv_read_B) * dev.J_per_B_local
    assert g[0] == pytest.approx(by_hand, rel=1e-12)


@pytest.mark.parametrize("tpot_s", [0.005, 0.0065])
def test_the_floor_is_the_least_dynamic_energy_of_every_design(tpot_s):
    """One device holds all 3 layers: every design (3 tiers for each layer's weights and KV cache,
    attached or not) evaluated by the model; its dynamic energy of a period is energy per token x m
    minus static power x period, less the fixed first/last-stage terms."""
    prob = one_device(tpot_s)
    p = prob.model
    dev = p.devices[0]
    g = envelope.floor_energies(p, dev, True, True, t_ub_s=tpot_s * (1 + FEASIBILITY_RTOL))
    assert g is not None and len(g) >= 3
    labels = [t.label for t in p.tiers]
    fixed = p.last_flops * dev.J_per_flop + (p.first_read_B + p.last_read_B) * dev.J_per_B_local
    least = None
    for w, k, attach in itertools.product(itertools.product(labels, repeat=3), itertools.product(labels, repeat=3),
                                          [(), (0,)]):
        ev = evaluate_mapping(p, MappingDesign((3,), w, k, (attach,)))
        if not ev.feasible:
            continue
        dynamic = ev.energy_per_token_J * p.micro_batch - (dev.static_W + p.hardware_static_W) * ev.period_s - fixed
        least = dynamic if least is None else min(least, dynamic)
    assert least is not None
    assert g[2] <= least * (1 + 1e-12)
    assert g[2] == pytest.approx(least, rel=1e-9)  # one device, one module: the relaxation is exact here
