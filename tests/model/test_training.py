"""codesign.model.training: each closed form against a number derived by hand (the derivation in
the comment), and a whole design's bytes, memory and data-movement energy on tiny-pf-train."""

from __future__ import annotations

import pytest

from codesign.kinds.registry import load
from codesign.model.training import (
    TrainingDesign,
    bubble_fraction,
    design_problems,
    dp_passes,
    enumerate_designs,
    evaluate,
    hierarchical_bytes_per_device,
    ring_bytes_per_device,
    step_flops,
    zero_state_bytes,
)

# Llama-3.1-8B (config.json): h 4096, 32 heads x 128, 8 KV heads, FFN 14336 (SwiGLU), vocab 128256
Q_PROJ = O_PROJ = 4096 * 4096  # 16,777,216
KV = 2 * 4096 * 8 * 128  # 8,388,608
MLP = 3 * 4096 * 14336  # 176,160,768
LAYER_MM = Q_PROJ + KV + O_PROJ + MLP  # 218,103,808
NORMS = 2 * 4096
EMB = 128256 * 4096  # 525,336,576
#: tiny-pf-train trains the first 4 layers: 4 x 218,112,000 + embedding + LM head = 1,923,121,152
TINY_PARAMS = 4 * (LAYER_MM + NORMS) + 2 * EMB


@pytest.fixture(scope="module")
def tiny():
    return load("tiny-pf-train")


def design(**kw) -> TrainingDesign:
    base = {"tp": 1, "pp": 1, "zero": 0, "micro_batch": 1, "recompute": False,
            "tp_path": "electrical", "dp_path": "electrical", "pp_path": "electrical"}
    return TrainingDesign(**{**base, **kw})


def test_parameters_by_hand(tiny):
    assert LAYER_MM == 218_103_808 and TINY_PARAMS == 1_923_121_152
    assert tiny.setup.total_params == TINY_PARAMS


def test_flops_of_a_step(tiny):
    """8 sequences x 2048 tokens = 16,384 tokens; per token 6 P_mm + 12 L H S with P_mm = 4 layers'
    matrices + the LM head = 872,415,232 + 525,336,576 = 1,397,751,808 and 12 x 4 x 4096 x 2048 =
    402,653,184: 6 x 1,397,751,808 + 402,653,184 = 8,789,164,032 FLOPs per token."""
    per_token = 6 * (4 * LAYER_MM + EMB) + 12 * 4 * 4096 * 2048
    assert per_token == 8_789_164_032
    assert step_flops(tiny.setup, recompute=False) == pytest.approx(16_384 * 8_789_164_032, rel=1e-15)
    # recomputation runs every forward twice: 4 passes instead of 3
    assert step_flops(tiny.setup, recompute=True) == pytest.approx(16_384 * 8_789_164_032 * 4 / 3, rel=1e-15)


def test_ring_all_reduce_bytes():
    # 1 GB over 8 devices: 2 x 7/8 x 1e9 = 1.75e9 B sent per device; a reduce-scatter is half
    assert ring_bytes_per_device(1e9, 8) == pytest.approx(1.75e9)
    assert ring_bytes_per_device(1e9, 8, passes=1) == pytest.approx(0.875e9)
    assert ring_bytes_per_device(1e9, 1) == 0
    # hierarchical, 2 devices in each of 2 nodes: NVLink 2 x 1/2 x S, IB 2 x 1/(2 x 2) x S; together
    # the flat ring's 2 x 3/4 x S
    nvl, ib = hierarchical_bytes_per_device(1e9, 2, 2, 2)
    assert (nvl, ib) == (pytest.approx(1e9), pytest.approx(0.5e9))
    assert nvl + ib == pytest.approx(ring_bytes_per_device(1e9, 4))


def test_memory_per_device_under_zero_stages():
    # psi = 1e9 parameters over dp = 8 (ZeRO paper, section 5: 16 psi, 4 psi + 12 psi/8, 2 psi + 14 psi/8, 16 psi/8)
    assert zero_state_bytes(1e9, 0, 8) == pytest.approx(16e9)
    assert zero_state_bytes(1e9, 1, 8) == pytest.approx(5.5e9)
    assert zero_state_bytes(1e9, 2, 8) == pytest.approx(3.75e9)
    assert zero_state_bytes(1e9, 3, 8) == pytest.approx(2e9)


def test_dp_passes_per_zero_stage():
    # m = 4 micro-batches: all-reduce 2; ZeRO-2: 4 reduce-scatters + 1 all-gather; ZeRO-3: 3 x 4
    assert [dp_passes(z, 4) for z in (0, 1, 2, 3)] == [2, 2, 5, 12]
    # one micro-batch: the ZeRO paper's 2 psi, 2 psi, 2 psi, 3 psi
    assert [dp_passes(z, 1) for z in (0, 1, 2, 3)] == [2, 2, 2, 3]


def test_pipeline_bubble():
    assert bubble_fraction(4, 12) == pytest.approx(3 / 15)
    assert bubble_fraction(1, 7) == 0


def test_per_bit_path_energies(tiny):
    s = tiny.setup
    # appliance: transceiver 5 + photonic switch 25 + transceiver 5 = 35 pJ/bit = 2.8e-10 J/B
    assert s.appliance_J_per_B == pytest.approx(35e-12 * 8)
    assert s.nvlink_J_per_B == pytest.approx(50e-12 * 8)  # NVLink intra-tray
    assert s.ib_J_per_B == pytest.approx(165e-12 * 8)  # 65 + 35 + 65


def test_a_design_by_hand(tiny):
    """tp 1, pp 1, dp 4 in nodes of 2 (g 2, k 2), ZeRO-1, micro-batch 1 (m 2), no recomputation."""
    s = tiny.setup
    ev = evaluate(s, design(zero=1))
    P = TINY_PARAMS
    assert (ev.dp, ev.micro_batches) == (4, 2)
    # gradients 2P bytes; per device NVLink 2 x 1/2 x 2P = 2P, IB 2 x 1/4 x 2P = P; 4 devices
    assert ev.nvlink_B == pytest.approx(4 * 2 * P) and ev.ib_B == pytest.approx(4 * P) and ev.appliance_B == 0
    assert ev.network_J == pytest.approx(8 * P * 50e-12 * 8 + 4 * P * 165e-12 * 8)
    # memory: ZeRO-1 4P + 12P/4 = 7P; activations 1 micro-batch x 4 layers x S b h (10 + 24)
    assert ev.state_B_per_device == pytest.approx(7 * P)
    assert ev.activation_B_per_device == pytest.approx(4 * 2048 * 4096 * 34)
    # through the appliance: a flat ring, 4 x 2 x 3/4 x 2P = 12P bytes at 35 pJ/bit
    ev2 = evaluate(s, design(zero=1, dp_path="appliance"))
    assert ev2.appliance_B == pytest.approx(12 * P) and ev2.nvlink_B == ev2.ib_B == 0
    assert ev2.network_J == pytest.approx(12 * P * 35e-12 * 8)


def test_step_time_and_energy_add_up(tiny):
    s = tiny.setup
    ev = evaluate(s, design(tp=2, pp=2, micro_batch=1, recompute=True))
    assert ev.dp == 1 and ev.micro_batches == 8
    assert ev.bubble_fraction == pytest.approx(1 / 9)
    # (m + pp - 1) x per micro-batch stage time + DP (none at dp 1)
    assert ev.step_s == pytest.approx((8 + 1) / 8 * (ev.compute_s + ev.tp_comm_s + ev.pp_comm_s) + ev.dp_comm_s)
    parts = ev.compute_J + ev.static_J + ev.memory_J + ev.nvlink_J + ev.ib_J + ev.appliance_J
    assert ev.energy_per_step_J == pytest.approx(parts)
    assert ev.tokens_per_s == pytest.approx(8 * 2048 / ev.step_s)


def test_the_space_holds_only_valid_layouts(tiny):
    s = tiny.setup
    ds = enumerate_designs(s)
    assert len(ds) == len(set(ds)) == tiny.space_size()
    assert all(not design_problems(s, d) for d in ds)
    # tp 2 with pp 4 needs 8 devices; micro-batch 2 with dp 4 needs 8 | global batch 8: fine
    assert design_problems(s, design(tp=2, pp=4))
    assert design_problems(s, design(tp=4))  # 4 is not among the tp options
