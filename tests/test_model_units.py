"""Hand-derived numbers for the model's building blocks (compute, memory, thermal, network).

Every expected value below is worked out by hand in the test's docstring (and written as a literal
or a literal expression); none is produced by the code under test. Units follow the function names:
``_Bps`` bytes per second, ``_GBps`` 1e9 B/s, ``_mm2`` square millimetres, ``_C`` degrees Celsius.

Reference figures:
    HBM3 stack           1024 pins x 6.4 Gb/s / 8                        = 819.2 GB/s
    vertical limit       8192 connections x 3.2 Gb/s / 8                 = 3276.8 GB/s
    TSV area             8192 x (20 um)^2 x 1.5 keep-out                 = 4.9152 mm2
    Little's law         1 MiB / (90 + 1.5 x 4) ns                       = 10.92 TB/s
    thermal              45 C + 50 W x (0.56 + 0.01 x 8) C/W             = 77 C
    ring all-reduce      2 (n - 1) / n x M
    one-switch path      photonic 5 + 25 + 5 = 35, electrical 65 + 35 + 65 = 165 pJ/bit (-78.8 %)
    intra-tray           electrical 50 -> photonic 10 pJ/bit (-80 %)
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from codesign import catalog
from codesign.kinds.grid.spec import load_instance
from codesign.model import compute, memory, network, thermal
from codesign.model.hardware import hardware_table

GB = 1e9
TERA = 1e12
MiB = 2**20
GiB = 2**30
REL = 1e-12


def close(value: float, expected: float, rel: float = REL) -> bool:
    return value == pytest.approx(expected, rel=rel, abs=0.0)


# --------------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------------


def test_hbm3_stack_bandwidth_by_hand() -> None:
    """HBM3 (JESD238): 1024 data pins x 6.4 Gb/s = 6553.6 Gb/s; / 8 bits per byte = 819.2 GB/s."""
    assert close(memory.hbm_stack_bandwidth_GBps(1024, 6.4), 819.2)
    hbm3 = catalog.load_memory("hbm3")
    assert hbm3.io_width_bits == 1024
    assert hbm3.pin_rate_Gbps == pytest.approx(6.4)
    assert close(memory.hbm_stack_bandwidth_GBps(hbm3.io_width_bits, hbm3.pin_rate_Gbps), 819.2)


def test_vertical_bandwidth_is_count_times_rate_over_8() -> None:
    """8192 x 3.2 Gb/s = 26,214.4 Gb/s = 3276.8 GB/s; 4096 -> 1638.4 GB/s; 32768 -> 13,107.2 GB/s."""
    assert close(float(memory.vertical_bandwidth_Bps(8192, 3.2)), 3276.8 * GB)
    got = memory.vertical_bandwidth_Bps(np.array([4096, 32768]), 3.2)
    assert np.allclose(got, [1638.4 * GB, 13107.2 * GB], rtol=REL, atol=0.0)


def test_tsv_area_is_count_times_pitch_squared_times_keep_out() -> None:
    """8192 x 20^2 um2 = 3,276,800 um2; x 1.5 keep-out = 4,915,200 um2 = 4.9152 mm2.

    65536 x 9^2 = 5,308,416 um2; x 1.5 = 7,962,624 um2 = 7.962624 mm2.
    """
    assert close(float(memory.tsv_area_mm2(8192, 20.0, 1.5)), 4.9152)
    assert close(float(memory.tsv_area_mm2(65536, 9.0, 1.5)), 7.962624)
    # no keep-out: the bare pitch^2 footprint, 8192 x 400 um2 = 3.2768 mm2
    assert close(float(memory.tsv_area_mm2(8192, 20.0, 1.0)), 3.2768)


def test_littles_law_limit_is_buffer_over_latency() -> None:
    """Latency with 4 layers = 90 + 1.5 x 4 = 96 ns; 1 MiB = 1,048,576 B in flight.

    bandwidth <= 1,048,576 B / 96e-9 s = 1.0922666...e13 B/s (10.92 TB/s); twice the buffer, twice
    the limit; 16 layers -> 90 + 24 = 114 ns.
    """
    lat = float(memory.access_latency_s(4, 90.0, 1.5))
    assert close(lat, 96e-9)
    assert close(float(memory.access_latency_s(16, 90.0, 1.5)), 114e-9)
    assert close(float(memory.littles_law_bandwidth_Bps(1 * MiB, 96e-9)), 1_048_576 / 96e-9)
    assert close(float(memory.littles_law_bandwidth_Bps(2 * MiB, 96e-9)), 2_097_152 / 96e-9)
    assert close(1_048_576 / 96e-9, 10_922_666_666_666.666)


def test_bank_activation_limit() -> None:
    """4 layers x 100 mm2 x 1 bank/mm2 = 400 banks; x 512 B = 204,800 B per tRC of 48 ns
    = 4.2666...e12 B/s; x 0.25 active fraction = 1.0666...e12 B/s."""
    got = float(memory.bank_bandwidth_Bps(4, 100.0, 1.0, 512, 48.0, 0.25))
    assert close(got, 204_800 / 48e-9 * 0.25)
    assert close(got, 1_066_666_666_666.6666)


def test_stack_capacity_and_energy() -> None:
    """Capacity: 8 layers x 100 mm2 x 0.0248 GiB/mm2 = 19.84 GiB.

    Energy per byte at 4 layers, 18 um pitch: array 1.2 + vertical 0.05 x 18/9 = 0.1 + per-layer
    0.02 x 4/2 = 0.04 -> 1.34 pJ/bit = 10.72 pJ/B.
    """
    assert close(float(memory.stack_capacity_B(8, 100.0, 0.0248)), 19.84 * GiB)
    assert close(float(memory.stacked_energy_J_per_B(4, 18.0, 1.2, 0.02, 0.05, 9.0)), 10.72e-12)


def test_pooled_bandwidth_is_min_of_ports_and_switch_share() -> None:
    """One 900 GB/s port vs the 14,375 GB/s switch shared by 8 devices (1796.875 GB/s each):
    1 port -> 900 GB/s; 2 ports -> min(1800, 1796.875) = 1796.875 GB/s."""
    got = memory.pooled_bandwidth_Bps(np.array([1, 2]), 900 * GB, 14_375 * GB, 8)
    assert np.allclose(got, [900 * GB, 1796.875 * GB], rtol=REL, atol=0.0)


# --------------------------------------------------------------------------------------------------
# Compute
# --------------------------------------------------------------------------------------------------


def test_peak_flops_scales_with_area_and_clock() -> None:
    """40 mm2 x 4.4 TFLOPS/mm2 = 176 TFLOP/s at the 1.75 GHz reference; at 1.2 GHz
    176 x 1.2 / 1.75 = 120.6857142... TFLOP/s."""
    assert close(float(compute.peak_flops(40.0, 1.75, 4.4, 1.75)), 176 * TERA)
    assert close(float(compute.peak_flops(40.0, 1.2, 4.4, 1.75)), 176 * TERA * 1.2 / 1.75)


def test_voltage_energy_and_leakage() -> None:
    """V-f curve (0.8 GHz, 0.60 V) - (1.2 GHz, 0.68 V): at 1.0 GHz V = 0.60 + 0.5 x 0.08 = 0.64 V.

    Energy per FLOP scales with V^2: 0.2 pJ x (0.64 / 0.8)^2 = 0.2 x 0.64 = 0.128 pJ.
    Leakage scales with V: 100 mm2 x 0.04 W/mm2 x 0.64 / 0.8 = 3.2 W.
    """
    curve_f, curve_v = [0.8, 1.2, 1.5, 1.75], [0.60, 0.68, 0.75, 0.80]
    v = float(compute.voltage_V(1.0, curve_f, curve_v))
    assert close(v, 0.64)
    assert close(float(compute.energy_per_flop_J(0.2, v, 0.8)), 0.128e-12)
    assert close(float(compute.static_power_W(100.0, 0.04, v, 0.8)), 3.2)


# --------------------------------------------------------------------------------------------------
# Thermal
# --------------------------------------------------------------------------------------------------


def test_thermal_resistance_and_junction_temperature() -> None:
    """DeepStack: R = 0.56 + 0.01 x layers. 8 layers: R = 0.64 C/W; 50 W at 45 C ambient:
    T = 45 + 50 x 0.64 = 77 C. 16 layers: R = 0.72, T = 45 + 36 = 81 C. The 95 C limit allows
    (95 - 45) / 0.64 = 78.125 W at 8 layers."""
    r8 = float(thermal.thermal_resistance_C_per_W(8, 0.56, 0.01))
    assert close(r8, 0.64)
    assert close(float(thermal.junction_temperature_C(50.0, r8, 45.0)), 77.0)
    r = thermal.thermal_resistance_C_per_W(np.array([0, 8, 16]), 0.56, 0.01)
    assert np.allclose(r, [0.56, 0.64, 0.72], rtol=REL, atol=0.0)
    t = thermal.junction_temperature_C(50.0, r, 45.0)
    assert np.allclose(t, [73.0, 77.0, 81.0], rtol=REL, atol=0.0)
    assert close(float(thermal.max_power_W(r8, 45.0, 95.0)), 78.125)


# --------------------------------------------------------------------------------------------------
# Collectives
# --------------------------------------------------------------------------------------------------


def test_ring_collectives() -> None:
    """All-reduce of M = 1e6 B over n = 8: 2 x 7/8 x 1e6 = 1.75e6 B in 2 x 7 = 14 steps; n = 1
    moves nothing. All-gather / all-to-all over 4: 3/4 x 1e6 = 7.5e5 B in 3 steps."""
    b, s = network.ring_allreduce(8, 1e6)
    assert close(float(b), 1.75e6) and float(s) == 14.0
    b, s = network.ring_allreduce(1, 1e6)
    assert float(b) == 0.0 and float(s) == 0.0
    b, s = network.ring_allgather(4, 1e6)
    assert close(float(b), 7.5e5) and float(s) == 3.0
    b, s = network.all_to_all(4, 1e6)
    assert close(float(b), 7.5e5) and float(s) == 3.0


def test_hierarchical_allreduce_splits_above_the_domain() -> None:
    """M = 1600 B, scale-up domain d = 8.

    n = 4 <= d: one ring on scale-up, 2 x 3/4 x 1600 = 2400 B, 6 steps; nothing on scale-out.
    n = 16 = 2 domains: inside 2 x 7/8 x 1600 = 2800 B, 14 steps; across the 2 domains an
    all-reduce of the M/d = 200 B shard, 2 x 1/2 x 200 = 200 B, 2 steps.
    n = 64 = 8 domains: inside 2800 B / 14 steps; across 2 x 7/8 x 200 = 350 B, 14 steps.
    """
    tr = network.hierarchical_allreduce(np.array([4.0, 16.0, 64.0]), 8, 1600.0)
    assert np.allclose(tr.scale_up_B, [2400.0, 2800.0, 2800.0], rtol=REL, atol=0.0)
    assert np.allclose(tr.scale_up_steps, [6.0, 14.0, 14.0], rtol=REL, atol=0.0)
    assert np.allclose(tr.scale_out_B, [0.0, 200.0, 350.0], rtol=REL, atol=1e-12)
    assert np.allclose(tr.scale_out_steps, [0.0, 2.0, 14.0], rtol=REL, atol=1e-12)


def test_in_switch_allreduce_from_five_ranks_inside_one_domain() -> None:
    """M = 1e6 B, domain d = 8 (eq. 3.17a). n = 8: the switch reduces; the devices send M and their
    reduced shard M/8, 9/8 x 1e6 = 1.125e6 B per direction, at NCCL's measured 0.61 of the link
    against the ring's 0.82: 0.82 / 0.61 x 1e6 = 1,344,262.3 ring-equivalent bytes (the ring:
    1.75e6). n = 4 < 5 and n = 16 > d: the ring of eq. 3.17 (4: 2 x 3/4 x 1e6 = 1.5e6; 16: its
    scale-up part, 2 x 7/8 x 1e6 = 1.75e6)."""
    timed, moved = network.in_switch_allreduce(np.array([4.0, 8.0, 16.0]), 8, 1e6)
    assert np.allclose(timed, [1.5e6, 1_344_262.295, 1.75e6], rtol=1e-9, atol=0.0)
    assert np.allclose(moved, [1.5e6, 1.125e6, 1.75e6], rtol=REL, atol=0.0)


def test_only_switches_that_reduce_run_the_all_reduce_in_the_network() -> None:
    """NVLink 4 and 5 (NVSwitch with SHARP) reduce in the switch; NVLink 3, PCIe and the 3D
    families' links reduce in a ring: the hardware columns that pick one of the two step terms."""
    assert catalog.load_interconnect("nvlink4").in_switch_reduction
    assert catalog.load_interconnect("nvlink5").in_switch_reduction
    assert not catalog.load_interconnect("nvlink3").in_switch_reduction
    assert not catalog.load_interconnect("pcie-gen4-x16").in_switch_reduction
    for name, switch in (("dgx-llama70b-chip-choice", 1.0), ("tiny-3d-llama8b", 0.0)):
        hw = hardware_table(load_instance(name))
        assert set(hw.features["reduce_in_switch"].tolist()) == {switch}
        assert set(hw.features["reduce_ring"].tolist()) == {1.0 - switch}


def test_hierarchical_allgather_splits_above_the_domain() -> None:
    """A 1600 B result gathered over n devices, scale-up domain d = 8.

    n = 4 <= d: one ring on scale-up, 3/4 x 1600 = 1200 B, 3 steps; nothing on scale-out.
    n = 16 = 2 domains: across the 2 domains the M/d = 200 B block, 1/2 x 200 = 100 B, 1 step;
    inside 7/8 x 1600 = 1400 B, 7 steps.
    """
    tr = network.hierarchical_allgather(np.array([4.0, 16.0]), 8, 1600.0)
    assert np.allclose(tr.scale_up_B, [1200.0, 1400.0], rtol=REL, atol=0.0)
    assert np.allclose(tr.scale_up_steps, [3.0, 7.0], rtol=REL, atol=0.0)
    assert np.allclose(tr.scale_out_B, [0.0, 100.0], rtol=REL, atol=1e-12)
    assert np.allclose(tr.scale_out_steps, [0.0, 1.0], rtol=REL, atol=1e-12)


def test_point_to_point_uses_scale_up_only_inside_a_domain() -> None:
    """One 1000 B message: inside a domain 1000 B / 1 step on scale-up; across, on scale-out."""
    tr = network.point_to_point(np.array([True, False]), 1000.0)
    assert list(tr.scale_up_B) == [1000.0, 0.0]
    assert list(tr.scale_up_steps) == [1.0, 0.0]
    assert list(tr.scale_out_B) == [0.0, 1000.0]
    assert list(tr.scale_out_steps) == [0.0, 1.0]


# --------------------------------------------------------------------------------------------------
# Topologies and path energy
# --------------------------------------------------------------------------------------------------


def test_appliance_path_energy_photonic_vs_electrical() -> None:
    """Photonic Fabric paper (arXiv 2507.14000), one switch between a GPU and a memory module:
    photonic 5 + 25 + 5 = 35 pJ/bit, electrical 65 + 35 + 65 = 165 pJ/bit;
    saving (165 - 35) / 165 = 130 / 165 = 78.79 %. Intra-tray 50 -> 10 pJ/bit: 40 / 50 = 80 %."""
    app = catalog.load_appliance("photonic-fabric-appliance")
    ph, el = app.energy_pJ_per_bit.photonic, app.energy_pJ_per_bit.electrical
    assert (ph.adapter, ph.switch, ph.intra_tray) == (5, 25, 10)
    assert (el.adapter, el.switch, el.intra_tray) == (65, 35, 50)

    def system(e: catalog.PathEnergy) -> nx.Graph:
        return network.appliance_system(
            8, app.modules, adapter_pJ_per_bit=e.adapter, switch_pJ_per_bit=e.switch
        )

    photonic = network.path_energy_pJ_per_bit(system(ph), "dev3", "mod11")
    electrical = network.path_energy_pJ_per_bit(system(el), "dev3", "mod11")
    assert photonic == 35.0
    assert electrical == 165.0
    assert (electrical - photonic) / electrical == pytest.approx(130 / 165, rel=REL)
    assert round(100 * (electrical - photonic) / electrical, 1) == 78.8
    # device to device through the same switch: the same three pieces
    assert network.path_energy_pJ_per_bit(system(ph), "dev0", "dev7") == 35.0
    assert network.hops(system(ph), "dev3", "mod11") == 2

    tray_el = catalog.intra_tray_energy_pJ_per_bit(app, "electrical")
    tray_ph = catalog.intra_tray_energy_pJ_per_bit(app, "photonic")
    assert (tray_el, tray_ph) == (50, 10)
    assert (tray_el - tray_ph) / tray_el == pytest.approx(0.80, rel=REL)


def test_switched_system_path_energy_and_hops() -> None:
    """16 devices in domains of 8, adapters 1, domain switches 2, spine 7 pJ/bit.

    dev0 -> dev1 (same domain): dev0, sw0, dev1 = 1 + 2 + 1 = 4 pJ/bit, 2 hops.
    dev0 -> dev9 (other domain): dev0, sw0, spine, sw1, dev9 = 1 + 2 + 7 + 2 + 1 = 13, 4 hops.
    """
    g = network.switched_system(
        16, 8, adapter_pJ_per_bit=1.0, switch_pJ_per_bit=2.0, scale_out_switch_pJ_per_bit=7.0
    )
    assert network.path_energy_pJ_per_bit(g, "dev0", "dev1") == 4.0
    assert network.hops(g, "dev0", "dev1") == 2
    assert network.path_energy_pJ_per_bit(g, "dev0", "dev9") == 13.0
    assert network.hops(g, "dev0", "dev9") == 4


def test_torus_2d_hop_count_uses_wraparound() -> None:
    """4 x 4 torus, device r*4 + c at (r, c). dev0 (0,0) -> dev10 (2,2): 2 + 2 = 4 hops (2 is
    the farthest in a ring of 4). dev0 -> dev15 (3,3): 1 + 1 = 2 hops through the wrap links (a
    mesh would need 6). dev0 -> dev5 (1,1): 2. Path energy dev0 -> dev15 with adapters 1 and
    forwarding 0.5 pJ/bit: 1 + 0.5 (one intermediate device) + 1 = 2.5."""
    g = network.torus_2d(4, 4, adapter_pJ_per_bit=1.0, hop_pJ_per_bit=0.5)
    assert g.number_of_nodes() == 16
    assert g.number_of_edges() == 32  # 4 neighbours per node, 16 x 4 / 2
    assert network.hops(g, "dev0", "dev10") == 4
    assert network.hops(g, "dev0", "dev15") == 2
    assert network.hops(g, "dev0", "dev5") == 2
    assert network.path_energy_pJ_per_bit(g, "dev0", "dev15") == 2.5


def test_ring_hop_count() -> None:
    """A bidirectional ring of 6: dev0 -> dev3 is 3 hops either way, dev0 -> dev5 is 1."""
    g = network.ring_system(6, adapter_pJ_per_bit=1.0, hop_pJ_per_bit=0.5)
    assert network.hops(g, "dev0", "dev3") == 3
    assert network.hops(g, "dev0", "dev5") == 1
    assert network.path_energy_pJ_per_bit(g, "dev0", "dev3") == 1 + 0.5 + 0.5 + 1


# --------------------------------------------------------------------------------------------------
# A whole 3D tile by hand: tiny-3d-llama8b's baseline
# --------------------------------------------------------------------------------------------------


def test_tiny_baseline_tile_by_hand() -> None:
    """tiny-3d-llama8b baseline: 4 DRAM layers, 8192 connections at 20 um, 40 mm2 compute at
    1.75 GHz (the reference clock, 0.80 V), 0.5 MiB buffer; deepstack-3d family figures.

    area      = 40 compute + 0.5 / 2 MiB/mm2 = 0.25 SRAM + 8192 x 400 x 1.5 / 1e6 = 4.9152 TSV
                + 30 fixed = 75.1652 mm2
    limits    vertical 8192 x 3.2 / 8 = 3276.8 GB/s;
              bank 4 x 75.1652 x 1 x 512 B / 48 ns x 0.25 = 801.7621333 GB/s;
              Little 524,288 B / (90 + 6) ns = 5461.333 GB/s; logic 40 x 40 = 1600 GB/s
              -> bandwidth = bank limit = 801.7621333 GB/s
    power     compute 40 x 2.2 TFLOPS/mm2 (bf16) x 0.40 pJ = 35.2 W;
              leakage 75.1652 x 0.04 = 3.006608 W + refresh 4 x 0.4 = 1.6 W;
              DRAM 801.7621333e9 B/s x 8 x (1.2 + 0.05 x 20/9 + 0.02 x 2) pJ = 8.6661578 W;
              I/O 5 W -> 53.4727658 W
    thermal   45 + 53.4727658 x (0.56 + 0.04) = 77.0836595 C
    capacity  4 x 75.1652 x 0.0248 GiB = 7.45639 GiB raw; x 0.9 usable
    """
    inst = load_instance("tiny-3d-llama8b")
    base = inst.baseline()
    designs = {d.name: np.array([base[d.name]]) for d in inst.hardware_decisions}
    row = hardware_table(inst, designs).row(0)

    area = 40 + 0.25 + 4.9152 + 30
    assert close(area, 75.1652)
    assert close(row["area_mm2"], area)
    assert close(row["tsv_area_mm2"], 4.9152)
    bank = 4 * area * 512 / 48e-9 * 0.25
    assert close(row["bw_vertical_Bps"], 3276.8 * GB)
    assert close(row["bw_bank_Bps"], bank)
    assert close(row["bw_littles_law_Bps"], 524_288 / 96e-9)
    assert close(row["bw_logic_Bps"], 1600 * GB)
    assert close(row["bandwidth_Bps"], bank)
    assert close(bank, 801_762_133_333.3333)

    e_bit = 1.2 + 0.05 * 20 / 9 + 0.02 * 2
    power = 35.2 + area * 0.04 + 4 * 0.4 + bank * 8 * e_bit * 1e-12 + 5.0
    assert close(row["power_compute_W"], 35.2)
    assert close(row["power_static_W"], area * 0.04 + 1.6)
    assert close(row["power_W"], power)
    assert power == pytest.approx(53.4727658, rel=1e-8)
    assert close(row["temperature_C"], 45 + power * 0.60)
    assert row["temperature_C"] == pytest.approx(77.0836595, rel=1e-8)
    assert close(row["raw_capacity_B"], 4 * area * 0.0248 * GiB)
    assert close(row["capacity_B"], 0.9 * 4 * area * 0.0248 * GiB)
