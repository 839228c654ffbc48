"""The coupled box bound (codesign/kinds/grid/boxes_bound.py, formulations/factored.md §6): the
bandwidth cap and sectioned shaving are valid (never above a design of the box that the model
calls feasible; shaving never drops a design better than the cut), and the search with them
proves brute force's optimum on random instances where the thermal, power and area budgets bind."""

from __future__ import annotations

import numpy as np
import pytest

from codesign.kinds.grid import boxes
from codesign.kinds.grid import boxes_bound as bb
from codesign.kinds.grid import factored_columns as fc
from codesign.kinds.grid.problem import Grid
from codesign.kinds.grid.space import Tables, brute_force, hardware_values
from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.model.evaluate import constraints
from codesign.model.hardware import hardware_table, load_family
from codesign.model.schedule import schedule_table
from codesign.proof.tolerances import AGREEMENT_RTOL

#: a grid finer than small-3d-llama8b's (the benchmark's 1e10 ranges), which random instances cut
FINE = {"dram_layers": list(range(1, 17)), "tsv_count": list(range(4096, 131073, 4096)),
        "tsv_pitch_um": [9.0, 12.0, 15.0, 20.0, 30.0, 40.0], "compute_area_mm2": list(range(40, 441, 20)),
        "clock_GHz": [0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2], "sram_MiB": [0.25, 0.5, 1.0, 2.0, 4.0]}


def _variant(seed: int | None = None, ambient_C: float | None = None, power_W: float | None = None,
             hardware: dict | None = None):
    """small-3d-llama8b with another ambient, power budget or knob grid; ``seed``: 3–6 values of
    each FINE knob drawn at random, ambient 45–70 °C, an area budget of 150–300 mm² and half the
    time a power budget of 60–200 W."""
    data = load_instance("small-3d-llama8b").spec.model_dump(mode="json")
    data["name"] = "small-3d-llama8b-variant"
    data.pop("baseline", None)
    data.pop("extends", None)
    if seed is not None:
        rng = np.random.default_rng(seed)
        hardware = {k: sorted(rng.choice(v, size=min(len(v), int(rng.integers(3, 7))), replace=False).tolist()) for k, v in FINE.items()}
        ambient_C = float(rng.uniform(45, 70))
        data["budgets"]["area_mm2"] = float(rng.uniform(150, 300))
        power_W = float(rng.uniform(60, 200)) if rng.random() < 0.5 else None
    if hardware is not None:
        data["hardware"]["decisions"] = hardware
    if ambient_C is not None:
        data["system"]["ambient_C"] = ambient_C
    if power_W is not None:
        data["budgets"]["power_W"] = power_W
    return instance_from_data(data, source="<test variant>")


def _bounder(inst, cap: bool = True):
    cols = fc.stacked_columns(inst)
    scheds = {w.name: schedule_table(inst, w.name) for w in inst.workloads}
    cons = constraints(inst, fc._table(inst, fc.check_points(cols.knobs, 8)), scheds)
    b = boxes.Bounder(inst, cols, scheds, cons)
    if cap:
        b.cap = bb.bandwidth_cap(inst, cols, cons)
        assert b.cap is not None
    return b, scheds, cons


def _values(inst, b, scheds, cons, at: np.ndarray) -> np.ndarray:
    """The model's internal objective (inf: infeasible) at designs given by value indices."""
    doms = {d.name: np.asarray(d.domain) for d in inst.hardware_decisions}
    designs = {k: doms[k][at[:, j]] for j, k in enumerate(b.knobs)}
    return hardware_values(inst, Tables(hardware_table(inst, designs), scheds), cons=cons).total


def _designs(lo, hi) -> np.ndarray:
    mesh = np.meshgrid(*[np.arange(a, c + 1) for a, c in zip(lo, hi, strict=True)], indexing="ij")
    return np.column_stack([m.ravel() for m in mesh])


def _random_boxes(b, n: int, seed: int):
    sizes = np.array([len(b.cols.knobs[k]) for k in b.knobs])
    rng = np.random.default_rng(seed)
    lo = rng.integers(0, sizes, (n, len(sizes)))
    hi = np.minimum(lo + rng.integers(0, 4, (n, len(sizes))), sizes - 1)
    return lo, hi


def test_the_cap_reads_the_calibrated_memory_efficiency_and_overlap():
    """s_per_B_local >= 1/(e·B) with e the calibration's memory efficiency, split by the stream
    overlap o into o/e (overlapped) and (1 − o)/e (sequential)."""
    inst = load_instance("small-3d-llama8b")
    b, _, _ = _bounder(inst)
    cal = inst.calibration.for_chip(load_family(inst.hardware.stack).id, stacked=True)
    e, o = cal.memory_efficiency, cal.stream_overlap
    assert b.cap.per_B == pytest.approx({"s_per_B_local": 1 / e, "s_per_B_local_ovl": o / e,
                                         "s_per_B_local_seq": (1 - o) / e}, rel=1e-15)
    assert [lim[0] for lim in b.cap.limits] == ["temperature_C"]  # the junction limit; no power budget
    b2, _, _ = _bounder(_variant(power_W=80.0))
    assert sorted(lim[0] for lim in b2.cap.limits) == ["power_W", "temperature_C"]


def test_a_design_at_its_own_junction_limit_is_capped_at_its_own_bandwidth():
    """B_cap = ((R − ambient)/r_th − P_rest)/J; with R the design's own temperature,
    R − ambient = r_th·(P_rest + J·B) (model.md), so B_cap = B: the design stays feasible and its
    time per byte is not raised. Half a degree lower and it is infeasible."""
    inst = load_instance("small-3d-llama8b")
    b, _, _ = _bounder(inst)
    at = np.zeros((1, len(b.knobs)), dtype=np.int64) + np.array([4, 3, 0, 4, 4, 3])  # 8 layers, 2 GHz, ...
    t = hardware_table(inst, {k: np.asarray(b.cols.knobs[k])[at[:, j]] for j, k in enumerate(b.knobs)})
    low, up = b.tables(at, at)
    s_before = low.column("s_per_B_local_seq").copy()
    up.features["junction_max_C"] = t.column("temperature_C").copy()
    assert not b.cap.apply(b, low, up, at, at, b._fp, boxes.PRUNE_RTOL).any()
    assert low.column("s_per_B_local_seq") == pytest.approx(s_before, rel=1e-12)
    up.features["junction_max_C"] = t.column("temperature_C") - 0.5
    assert b.cap.apply(b, low, up, at, at, b._fp, boxes.PRUNE_RTOL).all()


@pytest.mark.parametrize("ambient_C", [45.0, 65.0, 80.0])
def test_capped_bounds_are_below_every_feasible_design_of_the_box(ambient_C):
    """Random boxes (up to 4 values per knob) of a fine grid: the capped bound is at most the
    least model objective of the box's designs, equals it on single designs, and is at least
    the interval bound (it only tightens)."""
    inst = _variant(ambient_C=ambient_C, hardware=FINE)
    b, scheds, cons = _bounder(inst)
    plain, _, _ = _bounder(inst, cap=False)
    lo, hi = _random_boxes(b, 40, seed=int(ambient_C))
    bound, loose = b.bound(lo, hi), plain.bound(lo, hi)
    assert (bound >= loose).all()
    for i in range(len(lo)):
        assert bound[i] <= _values(inst, b, scheds, cons, _designs(lo[i], hi[i])).min() * (1 + 1e-9)
    one = b.bound(lo, lo)
    exact = _values(inst, b, scheds, cons, lo)
    assert np.array_equal(np.isfinite(one), np.isfinite(exact))
    assert np.allclose(one[np.isfinite(one)], exact[np.isfinite(exact)], rtol=1e-9)


def test_sliced_bounds_equal_plain_bounds():
    """Boxes given as parents narrowed on one knob (the shaving batch) bound as the same boxes
    given whole."""
    inst = _variant(hardware=FINE)
    b, _, _ = _bounder(inst)
    plo, phi = _random_boxes(b, 20, seed=3)
    rng = np.random.default_rng(4)
    parent = rng.integers(0, 20, 200)
    knob = rng.integers(0, len(b.knobs), 200)
    lo, hi = plo[parent].copy(), phi[parent].copy()
    r = np.arange(200)
    lo[r, knob] = rng.integers(plo[parent, knob], phi[parent, knob] + 1)
    hi[r, knob] = np.maximum(lo[r, knob], phi[parent, knob])
    assert np.array_equal(b.bound(lo, hi, sliced=(parent, plo, phi, knob)), b.bound(lo, hi))


@pytest.mark.parametrize("sections", [2, 4, 8])
def test_shaving_keeps_every_design_better_than_the_cut_and_bounds_stay_valid(sections):
    inst = _variant(ambient_C=55.0, hardware=FINE)
    b, scheds, cons = _bounder(inst)
    sizes = np.array([len(b.cols.knobs[k]) for k in b.knobs])
    rng = np.random.default_rng(sections)
    at = rng.integers(0, sizes, (4000, len(sizes)))
    centre = at[np.isfinite(_values(inst, b, scheds, cons, at))][:30]  # boxes around feasible designs
    lo = np.maximum(centre - rng.integers(0, 3, centre.shape), 0)
    hi = np.minimum(centre + rng.integers(0, 3, centre.shape), sizes - 1)
    vals = [_values(inst, b, scheds, cons, _designs(lo[i], hi[i])) for i in range(len(lo))]
    finite = np.concatenate([v[np.isfinite(v)] for v in vals])
    assert finite.size > 100  # (enough feasible designs for the cut to fall among them)
    cut = float(np.quantile(finite, 0.3))
    clo, chi, cb, _ = boxes._shave(b, lo, hi, b.bound(lo, hi), cut, sections)
    for i in range(len(lo)):
        d = _designs(lo[i], hi[i])
        good = d[vals[i] < cut]
        inside = ((good[:, None, :] >= clo[None]) & (good[:, None, :] <= chi[None])).all(axis=2)
        assert inside.any(axis=1).all(), f"box {i}: a design better than the cut was dropped"
    for j in range(len(clo)):
        assert cb[j] <= _values(inst, b, scheds, cons, _designs(clo[j], chi[j])).min() * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("bound", list(boxes.BOUNDS))
def test_random_budget_bound_instances_agree_with_brute_force(seed, bound):
    """3–6 values per knob, ambient 45–70 °C, area 150–300 mm², sometimes a power budget."""
    inst = _variant(seed=seed)
    bf = brute_force(inst)
    sol = boxes.solve(Grid(inst), bound=bound)
    if not bf.feasible:
        assert sol.status == "infeasible"
        return
    assert sol.mip["bandwidth_cap"] == (bound == "coupled") and sol.mip["box_bound"] == bound
    assert sol.status == "optimal" and sol.gap == 0.0
    assert abs(sol.objective - bf.objective) <= AGREEMENT_RTOL * abs(bf.objective)


@pytest.mark.parametrize("ambient_C,power_W", [(45.0, None), (65.0, None), (50.0, 90.0)])
def test_budget_tightening_removes_only_designs_the_model_calls_infeasible(ambient_C, power_W):
    inst = _variant(ambient_C=ambient_C, power_W=power_W, hardware=FINE)
    b, scheds, cons = _bounder(inst)
    b.budgets = bb.budgets(b.cols, cons)
    assert sorted(len(r[0].base) for r in b.budgets.rows)  # area, temperature (and power) rows
    lo, hi = _random_boxes(b, 60, seed=7)
    hi = np.minimum(hi + 3, np.array([len(b.cols.knobs[k]) for k in b.knobs]) - 1)
    tlo, thi = b.budgets.tighten(b, lo, hi, boxes.PRUNE_RTOL)
    assert (tlo >= lo).all() and (thi <= hi).all()
    cut = 0
    for i in range(len(lo)):
        d = _designs(lo[i], hi[i])
        out = ~((d >= tlo[i]) & (d <= thi[i])).all(axis=1)
        cut += int(out.sum())
        assert not np.isfinite(_values(inst, b, scheds, cons, d[out])).any()
    assert cut > 0  # (the test would prove nothing if nothing were cut)


def test_the_area_budget_caps_compute_area_at_what_the_rest_of_the_footprint_leaves():
    """One design's footprint is compute + SRAM/density + TSV count × TSV area + fixed logic;
    with every other knob at one value, the largest compute area kept is the last grid value
    <= 250 mm² − (footprint − compute area) (the area budget of small-3d-llama8b)."""
    inst = _variant(hardware=FINE)
    b, _, cons = _bounder(inst)
    every = bb.budgets(b.cols, cons)
    b.budgets = bb.Budgets([r for r in every.rows if r[0] is b.cols.cols["area_mm2"]], every.rising)
    assert len(b.budgets.rows) == 1
    area = np.asarray(b.cols.knobs["compute_area_mm2"])
    k = b.knobs.index("compute_area_mm2")
    lo = np.array([[0, 7, 3, 0, 0, 4]])  # 1 layer, 32,768 TSVs at 20 um, 4 MiB SRAM, 0.8 GHz
    hi = lo.copy()
    hi[0, k] = len(area) - 1
    t = hardware_table(inst, {n: np.asarray(b.cols.knobs[n])[lo[0, j]][None] for j, n in enumerate(b.knobs)})
    rest = float(t.column("area_mm2")[0]) - area[0]
    _, thi = b.budgets.tighten(b, lo, hi, boxes.PRUNE_RTOL)
    assert area[thi[0, k]] == area[area <= 250.0 - rest].max()
