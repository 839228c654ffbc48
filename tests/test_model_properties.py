"""Properties of the analytical model, through ``evaluate`` and the vectorised tables.

Monotonicity (what physics demands of any sane model):
    more memory bandwidth (more vertical connections, a bigger buffer) never makes TPOT longer;
    more DRAM layers never give less capacity;
    more power never gives a lower junction temperature (T = T_amb + P x R_th(layers)).
Identities (what the metric definitions demand):
    tokens/s x time per token = 1; for decode tokens/s = batch x DP / TPOT;
    the energy split (compute, DRAM, pool, scale-up, scale-out, static) sums to the total and the
    static part is static power x devices x time per token.
Consistency of the two evaluation paths: the whole-space tables equal ``evaluate`` design by
design, and brute force over a small space returns a design ``evaluate`` agrees with and that no
feasible design beats.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codesign.kinds.grid.design import parse_design
from codesign.kinds.grid.space import Tables, brute_force, build_tables, space_size
from codesign.kinds.grid.spec import Instance, load_instance
from codesign.model import thermal
from codesign.model.evaluate import constraints, eval_form, evaluate, workload_forms
from codesign.model.hardware import HardwareTable
from codesign.model.schedule import schedule_table

NAMED = [
    "tiny-3d-llama8b",
    "small-3d-llama8b",
    "deepstack-llama70b-decode",
    "deepstack-deepseek-v3-ep",
    "deepstack-qwen3-235b",
    "deepstack-multi-workload",
    "dgx-llama70b-chip-choice",
    "pf-llama405b-consistent",
    "pf-llama405b-paper",
    "pf-dense1t-consistent",
    "pf-dense1t-paper",
]
#: distinct 3D hardware spaces (the deepseek/qwen3 instances reuse deepstack-llama70b-decode's)
STACKED = ["tiny-3d-llama8b", "small-3d-llama8b", "deepstack-llama70b-decode", "deepstack-multi-workload"]
#: the instance objective -> the per-workload metric the objective sums (tokens/s is 1 / time)
INTERNAL_METRIC = {"tokens_per_s": "time_per_token_s", "energy_per_token_J": "energy_per_token_J"}
REL = 1e-12


def close(value: float, expected: float, rel: float = REL) -> bool:
    return value == pytest.approx(expected, rel=rel, abs=0.0)


@cache
def inst_of(name: str) -> Instance:
    return load_instance(name)


@cache
def tables_of(name: str) -> Tables:
    return build_tables(inst_of(name))


def _py(x: Any) -> Any:
    return x.item() if hasattr(x, "item") else x


def draw_design(data: st.DataObject, name: str) -> dict[str, Any]:
    """A random design: any hardware point, and a structurally feasible schedule per workload."""
    inst, tables = inst_of(name), tables_of(name)
    design: dict[str, Any] = {}
    for d in inst.hardware_decisions:
        design[d.name] = data.draw(st.sampled_from(d.domain), label=d.name)
    for w in inst.workloads:
        sched = tables.scheds[w.name]
        row = data.draw(st.integers(0, sched.size - 1), label=f"{w.name} schedule row")
        for d in inst.schedule_decisions(w.name):
            design[d.name] = _py(sched.decisions[d.key][row])
    return design


# --------------------------------------------------------------------------------------------------
# More bandwidth is never slower
# --------------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    name=st.sampled_from(STACKED),
    knob=st.sampled_from(["tsv_count", "sram_MiB"]),
)
def test_more_memory_bandwidth_is_never_slower(data: st.DataObject, name: str, knob: str) -> None:
    """Raising the vertical connections or the buffer never lowers the DRAM bandwidth (every one
    of the four limits is non-decreasing in both) and so never lengthens TPOT or time per token."""
    inst = inst_of(name)
    design = draw_design(data, name)
    dom = sorted(inst.decision_index[knob].domain)
    lo = data.draw(st.integers(0, len(dom) - 2), label="lower index")
    hi = data.draw(st.integers(lo + 1, len(dom) - 1), label="higher index")
    a = evaluate(inst, {**design, knob: dom[lo]})
    b = evaluate(inst, {**design, knob: dom[hi]})
    assert b.metrics["bandwidth_Bps"] >= a.metrics["bandwidth_Bps"] * (1 - REL)
    for w in inst.workloads:
        wa, wb = a.workload_metrics[w.name], b.workload_metrics[w.name]
        for key in ("decode_step.memory_local_s", "tpot_s", "time_per_token_s"):
            assert wb[key] <= wa[key] * (1 + REL), (w.name, key)


SMALL_MEMORY_BOUND = {
    "dram_layers": 16,
    "tsv_pitch_um": 9.0,
    "compute_area_mm2": 160.0,
    "clock_GHz": 1.2,
    "tp": 1,
    "pp": 1,
    "batch": 32,
}


def full(inst: Instance, **changes: Any) -> dict[str, Any]:
    """The memory-bound small-3d-llama8b point with ``changes``; other decisions from the baseline."""
    return parse_design(inst, {**SMALL_MEMORY_BOUND, **changes})


def test_vertical_limit_binding_doubling_connections_halves_memory_time() -> None:
    """small-3d-llama8b, 16 layers, 160 mm2 compute, 2 MiB buffer, TP=1, batch 32.

    Vertical limit 4096 x 3.2 / 8 = 1638.4 GB/s and 8192 -> 3276.8 GB/s; the other limits are
    larger (Little: 2 MiB / 114 ns = 18.4 TB/s; logic 160 x 40 = 6.4 TB/s; bank 16 layers x
    ~192 mm2 x 512 B / 48 ns x 0.25 ~ 8.2 TB/s). The vertical limit binds in both, so doubling the
    connections doubles the bandwidth and halves the memory time; the step is memory-bound, so
    TPOT drops strictly.
    """
    inst = inst_of("small-3d-llama8b")
    a = evaluate(inst, full(inst, tsv_count=4096, sram_MiB=2.0)).metrics
    b = evaluate(inst, full(inst, tsv_count=8192, sram_MiB=2.0)).metrics
    assert close(a["bandwidth_Bps"], 1638.4e9) and close(b["bandwidth_Bps"], 3276.8e9)
    assert a["bandwidth_Bps"] == a["bw_vertical_Bps"] and b["bandwidth_Bps"] == b["bw_vertical_Bps"]
    assert a["decode_step.memory_local_s"] > a["decode_step.compute_s"]
    assert close(b["decode_step.memory_local_s"], a["decode_step.memory_local_s"] / 2)
    assert b["tpot_s"] < a["tpot_s"]


def test_buffer_limit_binding_doubling_the_buffer_halves_memory_time() -> None:
    """Same tile with 32768 connections (13.1 TB/s vertical): the Little's-law limit binds.
    0.25 MiB / (90 + 1.5 x 16) ns = 262,144 B / 114 ns = 2.2995 TB/s; 0.5 MiB -> 4.5990 TB/s,
    both below logic 6.4 TB/s and bank ~8.3 TB/s (~194 mm2 footprint). Memory time halves, TPOT drops."""
    inst = inst_of("small-3d-llama8b")
    a = evaluate(inst, full(inst, tsv_count=32768, sram_MiB=0.25)).metrics
    b = evaluate(inst, full(inst, tsv_count=32768, sram_MiB=0.5)).metrics
    assert close(a["bandwidth_Bps"], 262_144 / 114e-9)
    assert close(b["bandwidth_Bps"], 524_288 / 114e-9)
    assert a["bandwidth_Bps"] == a["bw_littles_law_Bps"]
    assert close(b["decode_step.memory_local_s"], a["decode_step.memory_local_s"] / 2)
    assert b["tpot_s"] < a["tpot_s"]


@pytest.mark.parametrize(
    "name", ["tiny-3d-llama8b", "dgx-llama70b-chip-choice", "pf-dense1t-consistent", "pf-dense1t-paper"]
)
@pytest.mark.parametrize("feature", ["s_per_B_local", "s_per_B_pool"])
def test_cheaper_bytes_never_slower_on_the_whole_space(name: str, feature: str) -> None:
    """Scaling a memory tier's time per byte by 0.5 (twice the bandwidth) never lengthens TPOT or
    time per token, for every (hardware, schedule) pair of the space: the forms are
    non-decreasing in every hardware time column."""
    inst, tables = inst_of(name), tables_of(name)
    hw = tables.hw
    faster = HardwareTable(
        decisions=hw.decisions,
        features={**hw.features, feature: hw.features[feature] * 0.5},
        labels=hw.labels,
    )
    for w in inst.workloads:
        sched = tables.scheds[w.name]
        forms = workload_forms(sched, w.precision)
        for metric in ("tpot_s", "time_per_token_s"):
            before = eval_form(forms[metric], hw, sched)
            after = eval_form(forms[metric], faster, sched)
            finite = np.isfinite(before)
            assert np.all(after[finite] <= before[finite] * (1 + REL))


# --------------------------------------------------------------------------------------------------
# More layers never less capacity; more power never a lower temperature
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", STACKED)
def test_more_dram_layers_never_less_capacity(name: str) -> None:
    """Capacity = layers x footprint x density and the footprint does not depend on the layers:
    with every other hardware decision fixed, capacity is non-decreasing in the layers and
    capacity / layers is the same for every layer count."""
    inst, hw = inst_of(name), tables_of(name).hw
    others = [d.name for d in inst.hardware_decisions if d.name != "dram_layers"]
    groups: dict[tuple[Any, ...], list[tuple[int, float, float]]] = defaultdict(list)
    for i in range(hw.size):
        key = tuple(_py(hw.decisions[n][i]) for n in others)
        groups[key].append(
            (
                _py(hw.decisions["dram_layers"][i]),
                float(hw.features["raw_capacity_B"][i]),
                float(hw.features["capacity_B"][i]),
            )
        )
    n_layers = len(inst.decision_index["dram_layers"].domain)
    assert len(groups) * n_layers == hw.size
    for rows in groups.values():
        rows.sort()
        raw = [r[1] for r in rows]
        usable = [r[2] for r in rows]
        assert all(b > a for a, b in itertools.pairwise(raw))
        assert all(b > a for a, b in itertools.pairwise(usable))
        per_layer = [r[1] / r[0] for r in rows]
        assert max(per_layer) == pytest.approx(min(per_layer), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), name=st.sampled_from(STACKED))
def test_more_layers_never_less_capacity_through_evaluate(data: st.DataObject, name: str) -> None:
    """The same through ``evaluate``: more layers, more capacity, and a looser memory-capacity
    constraint (the audit's limit for the local tier grows with the capacity)."""
    inst = inst_of(name)
    design = draw_design(data, name)
    dom = sorted(inst.decision_index["dram_layers"].domain)
    lo = data.draw(st.integers(0, len(dom) - 2), label="fewer layers")
    hi = data.draw(st.integers(lo + 1, len(dom) - 1), label="more layers")
    a = evaluate(inst, {**design, "dram_layers": dom[lo]})
    b = evaluate(inst, {**design, "dram_layers": dom[hi]})
    assert b.metrics["capacity_B"] > a.metrics["capacity_B"]
    la = {x.name: x.limit for x in a.audit if x.name.startswith("memory-capacity-local")}
    lb = {x.name: x.limit for x in b.audit if x.name.startswith("memory-capacity-local")}
    assert la and la.keys() == lb.keys()
    assert all(lb[k] > la[k] for k in la)


@pytest.mark.parametrize("name", STACKED)
def test_more_power_never_lower_temperature_on_the_hardware_space(name: str) -> None:
    """For every pair of hardware designs a, b with layers_a <= layers_b and power_a <= power_b:
    T_a <= T_b (R_th grows with the layers and T = T_amb + P x R_th).

    Checked exhaustively: rows of each layer count sorted by power with a running maximum of the
    temperature; for every row b, the hottest a that draws no more power and has no more layers
    must not be hotter than b."""
    hw = tables_of(name).hw
    layers = hw.decisions["dram_layers"].astype(float)
    power, temp = hw.features["power_W"], hw.features["temperature_C"]
    values = sorted(set(layers.tolist()))
    for i, la in enumerate(values):
        sel = layers == la
        order = np.argsort(power[sel], kind="stable")
        pa = power[sel][order]
        hottest = np.maximum.accumulate(temp[sel][order])
        for lb in values[i:]:
            other = layers == lb
            idx = np.searchsorted(pa, power[other], side="right") - 1
            has = idx >= 0
            assert np.all(hottest[idx[has]] <= temp[other][has] + 1e-9)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), name=st.sampled_from(STACKED))
def test_higher_clock_more_power_never_cooler(data: st.DataObject, name: str) -> None:
    """A higher clock raises voltage and frequency, so power; the temperature follows."""
    inst = inst_of(name)
    design = draw_design(data, name)
    dom = sorted(inst.decision_index["clock_GHz"].domain)
    lo = data.draw(st.integers(0, len(dom) - 2), label="lower clock")
    hi = data.draw(st.integers(lo + 1, len(dom) - 1), label="higher clock")
    a = evaluate(inst, {**design, "clock_GHz": dom[lo]}).metrics
    b = evaluate(inst, {**design, "clock_GHz": dom[hi]}).metrics
    assert b["power_W"] > a["power_W"]
    assert b["temperature_C"] > a["temperature_C"]


@given(
    p1=st.floats(0.0, 1000.0),
    dp=st.floats(0.0, 1000.0),
    l1=st.integers(0, 32),
    dl=st.integers(0, 32),
    ambient=st.floats(-20.0, 60.0),
)
def test_junction_temperature_monotone_in_power_and_layers(
    p1: float, dp: float, l1: int, dl: int, ambient: float
) -> None:
    """T(P, L) = T_amb + P (0.56 + 0.01 L) is non-decreasing in P and in L for P >= 0."""
    r1 = thermal.thermal_resistance_C_per_W(l1, 0.56, 0.01)
    r2 = thermal.thermal_resistance_C_per_W(l1 + dl, 0.56, 0.01)
    t1 = float(thermal.junction_temperature_C(p1, r1, ambient))
    t2 = float(thermal.junction_temperature_C(p1 + dp, r2, ambient))
    assert t2 >= t1 - 1e-9


# --------------------------------------------------------------------------------------------------
# Metric identities
# --------------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(data=st.data(), name=st.sampled_from(NAMED))
def test_throughput_identities(data: st.DataObject, name: str) -> None:
    """Per workload: tokens/s x time per token = 1; per device = system / devices;
    DP = devices / (TP x PP); decode: tokens/s = batch x DP / TPOT (each of the DP replicas has
    `batch` sequences, each emitting one token per TPOT). Mix: Σ weights / Σ weight x time."""
    inst = inst_of(name)
    ev = evaluate(inst, draw_design(data, name))
    n = inst.system.devices
    for w in inst.workloads:
        m = ev.workload_metrics[w.name]
        assert close(m["tokens_per_s"] * m["time_per_token_s"], 1.0)
        assert close(m["tokens_per_s_per_device"] * n, m["tokens_per_s"])
        assert close(m["dp"], n / (m["tp"] * m["pp"]))
        if w.phase == "decode":
            assert close(m["tokens_per_s"], m["batch"] * m["dp"] / m["tpot_s"])
    total = sum(w.weight for w in inst.workloads)
    mix = total / sum(w.weight * ev.workload_metrics[w.name]["time_per_token_s"] for w in inst.workloads)
    assert close(ev.metrics["tokens_per_s"], mix)
    if inst.objective.metric == "tokens_per_s":
        assert close(ev.objective, mix)


@settings(max_examples=50, deadline=None)
@given(data=st.data(), name=st.sampled_from(NAMED))
def test_energy_split_sums_to_total(data: st.DataObject, name: str) -> None:
    """E = compute + DRAM + pool + scale-up + scale-out + static, every part >= 0, and the static
    part is what the devices draw while on: static_W x devices x time per token."""
    inst = inst_of(name)
    ev = evaluate(inst, draw_design(data, name))
    n = inst.system.devices
    parts = ("compute", "dram", "pool", "scale_up", "scale_out", "static")
    for w in inst.workloads:
        m = ev.workload_metrics[w.name]
        split = [m[f"energy_per_token_{p}_J"] for p in parts]
        assert close(sum(split), m["energy_per_token_J"], 1e-9)
        assert all(x >= 0 for x in split[:-1])
        static = ev.metrics["static_W"] * n * m["time_per_token_s"]
        assert close(m["energy_per_token_static_J"], static, 1e-9)
        if inst.system.appliance is None:
            assert m["energy_per_token_pool_J"] == 0.0
    total = sum(w.weight for w in inst.workloads)
    mean = sum(w.weight * ev.workload_metrics[w.name]["energy_per_token_J"] for w in inst.workloads)
    assert close(ev.metrics["energy_per_token_J"], mean / total)


# --------------------------------------------------------------------------------------------------
# Whole-space tables == evaluate, design by design
# --------------------------------------------------------------------------------------------------

TABLE_CASES = [
    "tiny-3d-llama8b",
    "small-3d-llama8b",
    "deepstack-qwen3-235b",  # energy objective, MoE
    "deepstack-multi-workload",  # six workloads, prefill + decode
    "dgx-llama70b-chip-choice",  # catalog chips
    "pf-llama405b-consistent",  # pooled tiers, ports
    "pf-dense1t-paper",  # pooled tiers at the assumed bandwidth
]


@cache
def objective_matrices(name: str) -> dict[str, np.ndarray]:
    """Per workload, the objective's metric on the whole space: shape (hardware, schedules)."""
    inst, tables = inst_of(name), tables_of(name)
    metric = INTERNAL_METRIC[inst.objective.metric]
    out = {}
    for w in inst.workloads:
        sched = tables.scheds[w.name]
        out[w.name] = eval_form(workload_forms(sched, w.precision)[metric], tables.hw, sched)
    return out


@settings(max_examples=50, deadline=None)
@given(data=st.data(), name=st.sampled_from(TABLE_CASES))
def test_tables_equal_evaluate(data: st.DataObject, name: str) -> None:
    """Σ weight x M_w[h, s_w] from the whole-space matrices equals ``evaluate``'s internal
    objective (1e-12 relative), the user objective follows (tokens/s = Σ weights / internal,
    otherwise internal / Σ weights), and every constraint's left side matches the audit."""
    inst, tables = inst_of(name), tables_of(name)
    mats = objective_matrices(name)
    h = data.draw(st.integers(0, tables.hw.size - 1), label="hardware row")
    rows = {
        w.name: data.draw(st.integers(0, tables.scheds[w.name].size - 1), label=w.name)
        for w in inst.workloads
    }
    design = {d.name: _py(tables.hw.decisions[d.name][h]) for d in inst.hardware_decisions}
    for w in inst.workloads:
        for d in inst.schedule_decisions(w.name):
            design[d.name] = _py(tables.scheds[w.name].decisions[d.key][rows[w.name]])
    ev = evaluate(inst, design)

    internal = sum(w.weight * float(mats[w.name][h, rows[w.name]]) for w in inst.workloads)
    total = sum(w.weight for w in inst.workloads)
    assert close(ev.internal_objective, internal)
    expected = total / internal if inst.objective.metric == "tokens_per_s" else internal / total
    assert close(ev.objective, expected)

    audit = {a.name: a for a in ev.audit}
    for c in constraints(inst, tables.hw, tables.scheds):
        sched = tables.scheds[c.workload] if c.workload else None
        srows = [rows[c.workload]] if c.workload else None
        lhs = float(eval_form(c.form, tables.hw, sched, hw_rows=[h], sched_rows=srows)[0, 0])
        if c.name == "budget-system-power":
            lhs *= inst.system.devices
        assert close(audit[c.name].value, lhs), c.name


# --------------------------------------------------------------------------------------------------
# Brute force
# --------------------------------------------------------------------------------------------------


def test_space_size_of_tiny_by_hand() -> None:
    """tiny-3d-llama8b: dram_layers 3 x tsv_count 2 x pitch 1 x area 2 x clock 2 x sram 2 = 48
    hardware designs; tp 3 x batch 3 (pp, ep and the tiers fixed) = 9 schedules; 48 x 9 = 432.
    Every schedule is structurally feasible (tp in {1, 2, 4} divides the 4 devices and the 32
    heads), so the tables cover all 432 points."""
    inst = inst_of("tiny-3d-llama8b")
    assert space_size(inst) == 3 * 2 * 1 * 2 * 2 * 2 * 3 * 3 == 432
    tables = tables_of("tiny-3d-llama8b")
    assert tables.hw.size == 48
    assert tables.scheds["main"].size == 9
    assert tables.structural_size == 432


def test_brute_force_tiny_matches_exhaustive_evaluate() -> None:
    """Every one of the 432 designs of tiny-3d-llama8b through ``evaluate``: the best feasible
    objective is the brute-force objective, the brute-force design attains it, and the number of
    designs within 1e-9 of it is brute force's tie count."""
    inst = inst_of("tiny-3d-llama8b")
    bf = brute_force(inst)
    assert bf.feasible and bf.points == 432
    ev = evaluate(inst, bf.design)
    assert ev.feasible
    assert close(ev.objective, bf.objective)
    assert close(ev.internal_objective, bf.internal)

    names = [d.name for d in inst.decisions]
    feasible = []
    for combo in itertools.product(*[d.domain for d in inst.decisions]):
        e = evaluate(inst, dict(zip(names, combo, strict=True)))
        if e.feasible:
            feasible.append(e.internal_objective)
    assert feasible
    best = min(feasible)
    assert close(best, bf.internal)
    assert max(1.0 / x for x in feasible) <= bf.objective * (1 + REL)
    assert sum(x <= best * (1 + 1e-9) for x in feasible) == bf.optimal_count


@cache
def small_brute_force():
    return brute_force(inst_of("small-3d-llama8b"), tables_of("small-3d-llama8b"))


def test_brute_force_small_design_evaluates_to_its_objective() -> None:
    inst = inst_of("small-3d-llama8b")
    bf = small_brute_force()
    assert bf.feasible
    assert bf.points == tables_of("small-3d-llama8b").structural_size
    ev = evaluate(inst, bf.design)
    assert ev.feasible
    assert close(ev.objective, bf.objective)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_no_sampled_feasible_design_beats_brute_force_on_small(data: st.DataObject) -> None:
    """Any point of the full product space (structurally infeasible ones included, which
    ``evaluate`` reports infeasible) is either infeasible or no better than brute force."""
    inst = inst_of("small-3d-llama8b")
    design = {d.name: data.draw(st.sampled_from(d.domain), label=d.name) for d in inst.decisions}
    ev = evaluate(inst, design)
    if ev.feasible:
        assert ev.objective <= small_brute_force().objective * (1 + REL)
    else:
        assert ev.structural or not all(a.ok for a in ev.audit) or not math.isfinite(ev.internal_objective)


# --------------------------------------------------------------------------------------------------
# A hand check of the decode step's compute time
# --------------------------------------------------------------------------------------------------


def test_tiny_baseline_activation_traffic_by_hand() -> None:
    """tiny-3d-llama8b baseline decode step (batch 32, TP 4, PP 1): activations between kernels
    (eq. 2.15h, 4.5a). Llama 3.1 8B per token: replicated 20 x 4096 x 32 + 4 x 4096 = 2,637,824
    elements; sharded (4 x 4096 + 2 x 1024) x 32 + 6 x 14336 x 32 = 3,342,336, a quarter per device.
    Per device 2 B x 32 x (2,637,824 + 835,584) = 222,298,112 B; with the logits of the 32 sequences,
    whole on every rank (32 x 128,256 x 20 B = 82,083,840 B, eq. 2.15l), they are what the step reads
    beyond its weights and KV cache. The local-memory stream reads its bytes at the tile's
    bank-limited 4 x 75.165 mm2 x 512 B / 48 ns x 0.25 = 0.80176 TB/s times the memory efficiency
    0.85: the activations add 222,298,112 / (0.80176e12 x 0.85) = 0.3262 ms to it."""
    inst = inst_of("tiny-3d-llama8b")
    base = inst.baseline()
    t = schedule_table(inst, inst.workloads[0].name)
    f = {k: float(v[t.index_of(base)]) for k, v in t.features.items()}
    act_B = 2 * 32 * (2_637_824 + 3_342_336 / 4)
    assert act_B == 222_298_112
    beyond = f["decode.bytes_local"] - f["decode.bytes_weights_local"] - f["decode.bytes_kv_local"]
    assert beyond == pytest.approx(act_B + 82_083_840, rel=1e-12)
    rate = 4 * 75.1652 * 512 / 48e-9 * 0.25 * 0.85  # A_fp = 40 + 0.25 + 8192 x 20^2 x 1.5 / 1e6 + 30
    m = evaluate(inst, base).metrics
    local_s = m["decode_step.memory_local_s"] + m["decode_step.memory_local_overlapped_s"]
    assert local_s == pytest.approx(f["decode.bytes_local"] / rate, rel=1e-6)
    assert act_B / rate == pytest.approx(0.3262e-3, rel=1e-3)


def test_tiny_baseline_decode_compute_time_by_hand() -> None:
    """tiny-3d-llama8b baseline: Llama-3.1-8B, FP8, TP=4, PP=1, batch 32, 1024 in / 256 out.

    Workload (config.json): L = 32, h = 4096, 32 heads, 8 KV heads, head_dim 128, FFN 14336,
    vocab 128256.
      matmul weights per layer: q 4096^2 = 16,777,216; k, v 2 x 4096 x 1024 = 8,388,608;
        o 16,777,216; MLP 3 x 4096 x 14336 = 176,160,768 -> 218,103,808; x 32 = 6,979,321,856
      LM head 128256 x 4096 = 525,336,576
      -> 2 x (6,979,321,856 + 525,336,576) = 15,009,316,864 FLOPs per token
      attention: mean context 1024 + 256/2 = 1152, so 1153 (query, key) pairs per layer, each
        4 x 32 heads x 128 = 16,384 FLOPs; x 32 layers -> 604,504,064 FLOPs per token
      per sequence 15,613,820,928; batch 32 / TP 4 -> 124,910,567,424 FLOPs per device
    Tile: 40 mm2 x 4.4 TFLOPS/mm2 (fp8) x 1.75 / 1.75 GHz = 176 TFLOP/s; x 0.7 = 123.2 TFLOP/s.
    compute_s = 124,910,567,424 / 123.2e12 = 1.013884476e-3 s (exact to rounding).

    The rule of thumb 2 x active params x batch + attention uses 8,030,261,248 params, which
    include the 525,336,576-entry embedding table (a gather, no matmul) and 266,240 norm weights:
    2 x 8,030,261,248 + 604,504,064 = 16,665,026,560 per token, 6.7 % above the itemised count.
    So that estimate must agree within 8 % (the embedding and norm terms), the itemised one to
    1e-12.
    """
    inst = inst_of("tiny-3d-llama8b")
    base = inst.baseline()
    assert (base["tp"], base["pp"], base["batch"], base["compute_area_mm2"], base["clock_GHz"]) == (
        4, 1, 32, 40.0, 1.75,
    )
    m = evaluate(inst, base).metrics

    per_layer = 16_777_216 + 8_388_608 + 16_777_216 + 176_160_768
    assert per_layer == 218_103_808
    matmul = 2 * (32 * per_layer + 525_336_576)
    assert matmul == 15_009_316_864
    attention = 1153 * 4 * 32 * 128 * 32
    assert attention == 604_504_064
    per_device = (matmul + attention) * 32 / 4
    assert per_device == 124_910_567_424
    achievable = 40 * 4.4e12 * 1.75 / 1.75 * 0.7
    hand = per_device / achievable
    assert close(m["decode_step.compute_s"], hand)
    assert m["decode_step.compute_s"] == pytest.approx(1.013884476e-3, rel=1e-9)

    rule_of_thumb = (2 * 8_030_261_248 + attention) * 32 / 4 / achievable
    assert m["decode_step.compute_s"] == pytest.approx(rule_of_thumb, rel=0.08)
    assert rule_of_thumb / hand - 1 == pytest.approx(0.0673, abs=5e-4)


def test_ring_and_in_switch_chips_in_one_mip_brute_force_equals_both_solvers() -> None:
    """dgx-llama70b-chip-choice at TP 8 with an A100 SXM (NVLink 3: ring all-reduce) among the
    H100 and B200 (NVSwitch that reduces in the network, model.md eq. 3.17a): the MIP reads the
    ring and in-switch byte columns through the hardware's ``reduce_*`` columns. Every one of its
    96 designs through ``evaluate``; the best feasible one is what HiGHS and CP-SAT prove optimal."""
    import tomllib

    from codesign.kinds.grid.problem import Grid
    from codesign.kinds.grid.spec import instance_from_data
    from codesign.paths import instances_dir
    from codesign.proof.driver import solve

    raw = tomllib.loads((instances_dir() / "dgx-llama70b-chip-choice.toml").read_text())
    raw["hardware"]["decisions"]["chip"] = ["a100-sxm-80gb", "h100-sxm", "b200"]
    raw["workloads"][0]["decisions"]["tp"] = [8]
    inst = instance_from_data(raw)
    names = [d.name for d in inst.decisions]
    best = None
    switch = {}
    for combo in itertools.product(*[d.domain for d in inst.decisions]):
        e = evaluate(inst, dict(zip(names, combo, strict=True)))
        chip = e.design["chip"]
        switch[chip] = e.workload_metrics["main"]["decode_step.scale_up_bw_in_switch_s"] > 0
        if e.feasible and (best is None or e.objective > best):
            best = e.objective
    assert switch == {"a100-sxm-80gb": False, "h100-sxm": True, "b200": True}
    assert best is not None
    for solver in ("highs", "cpsat"):
        sol = solve(Grid(inst), solver=solver)
        assert sol.status == "optimal"
        assert close(sol.objective, best)
