"""The 8-bit tensor rate's own efficiency (model.md eq. 3.20c).

Hand-derived figures: the H100 SXM's datasheet dense peaks are 989.4 TFLOP/s at BF16/FP16 and
1,978.9 at FP8; the A100 SXM 80GB has no FP8 rate (BF16 312), so an FP8 workload runs there at
BF16 and takes the 16-bit efficiency. The shipped calibration has no 8-bit efficiency of its own;
the tests that need one use a calibration file of their own with 0.6 for the hopper chips.
"""

from __future__ import annotations

import numpy as np
import pytest

from codesign.kinds.grid.spec import Instance, InstanceFile, load_instance
from codesign.kinds.mapping.spec import load_mapping
from codesign.kinds.placement.spec import load_placement
from codesign.model import mapping_build, placement_build
from codesign.model.calibration import (
    Calibration,
    CalibrationSet,
    load_calibration,
    shipped,
    shipped_path,
)
from codesign.model.hardware import hardware_table

E8 = 0.6
#: set for the A100 too, which has no 8-bit rate: its FP8 runs at BF16 and must not take it
E8_A100 = 0.3
#: and in [default], which the 3D families take
E8_DEFAULT = 0.5


@pytest.fixture
def eight_bit_calibration(tmp_path) -> CalibrationSet:
    """The shipped calibration with compute_efficiency_8bit = E8 in the hopper chips' tables,
    E8_A100 in the A100 SXM's and E8_DEFAULT in [default]."""
    text = shipped_path().read_text()
    for chip, e8 in (("h100-sxm", E8), ("h200-sxm", E8), ("a100-sxm-80gb", E8_A100)):
        head = f"[chips.{chip}]\n"
        text = text.replace(head, f"{head}compute_efficiency_8bit = {e8}\n", 1)
    text = text.replace("[default]\n", f"[default]\ncompute_efficiency_8bit = {E8_DEFAULT}\n", 1)
    path = tmp_path / "eight-bit.toml"
    path.write_text(text)
    return load_calibration(path)


def _cal(**kw) -> Calibration:
    base = shipped().for_chip("h100-sxm").model_dump() | {"compute_efficiency": 0.75, "compute_efficiency_8bit": None}
    return Calibration.model_validate(base | kw)


def test_the_8_bit_formats_take_their_own_efficiency_and_the_others_do_not():
    cal = _cal(compute_efficiency_8bit=0.6)
    assert [cal.compute_efficiency_at(f) for f in ("fp8", "int8", "bf16", "fp16", "fp4", "tf32")] == [
        0.6, 0.6, 0.75, 0.75, 0.75, 0.75]
    unset = _cal()
    assert [unset.compute_efficiency_at(f) for f in ("fp8", "bf16")] == [0.75, 0.75]


def _instance(chips: list[str], precision: str, batches=(16, 64, 256), calibration=None) -> Instance:
    raw = {
        "name": "eight-bit", "description": "t",
        # NCCL's all-reduce (the fitted profile): the physics' fastest needs one scale-up link for all chips
        "system": {"devices": 8, "scale_up_domain": 8, "allreduce": "nccl"},
        "hardware": {"family": "catalog", "chip": chips[0], "decisions": {"chip": chips}},
        "workloads": [{"name": "main", "workload": "llama-3.1-70b", "precision": precision, "input_tokens": 2048,
                       "output_tokens": 128, "decisions": {"tp": [8], "pp": [1], "batch": list(batches)}}],
    }
    return Instance(InstanceFile.model_validate(raw), source=None, raw=raw, calibration=calibration)


def _s_per_flop(chip: str, precision: str, calibration=None) -> float:
    hw = hardware_table(_instance([chip], precision, calibration=calibration))
    col = np.asarray(hw.features[f"s_per_flop@{precision}"])
    assert np.all(col == col[0])
    return float(col[0])


def test_the_shipped_calibration_runs_fp8_at_the_16_bit_efficiency():
    """The shipped calibration states no 8-bit efficiency of its own, so hopper's FP8 GEMMs run at
    its one compute efficiency times the doubled FP8 peak, and the A100 (no FP8 rate) at its BF16
    peak."""
    h = shipped().for_chip("h100-sxm")
    assert h.compute_efficiency_8bit is None
    assert _s_per_flop("h100-sxm", "fp8") == pytest.approx(1.0 / (1978.9e12 * h.compute_efficiency), rel=1e-12, abs=0)
    assert _s_per_flop("h100-sxm", "bf16") == pytest.approx(1.0 / (989.4e12 * h.compute_efficiency), rel=1e-12, abs=0)
    a = shipped().for_chip("a100-sxm-80gb")
    assert a.compute_efficiency_8bit is None
    assert _s_per_flop("a100-sxm-80gb", "fp8") == pytest.approx(1.0 / (312e12 * a.compute_efficiency), rel=1e-12, abs=0)


def test_the_hardware_column_of_an_fp8_workload_by_hand(eight_bit_calibration):
    """H100 FP8: 1 / (1,978.9e12 x 0.6); H100 BF16: 1 / (989.4e12 x e); A100 'FP8' runs at BF16:
    1 / (312e12 x e_ampere) (its calibration has no 8-bit efficiency of its own to take)."""
    cal = eight_bit_calibration
    h = cal.for_chip("h100-sxm")
    assert h.compute_efficiency_8bit == E8 != h.compute_efficiency
    assert _s_per_flop("h100-sxm", "fp8", cal) == pytest.approx(1.0 / (1978.9e12 * E8), rel=1e-12, abs=0)
    assert _s_per_flop("h100-sxm", "bf16", cal) == pytest.approx(1.0 / (989.4e12 * h.compute_efficiency), rel=1e-12,
                                                                 abs=0)
    a = cal.for_chip("a100-sxm-80gb")
    assert a.compute_efficiency_8bit == E8_A100
    assert _s_per_flop("a100-sxm-80gb", "fp8", cal) == pytest.approx(1.0 / (312e12 * a.compute_efficiency), rel=1e-12,
                                                                      abs=0)


def test_the_3d_mapping_and_placement_models_take_it_too(eight_bit_calibration):
    """The stacked family's column (tiny-3d-llama8b, FP8, [default]'s 0.5: 1 / (F_peak x 0.5)), a
    mapping instance's devices and a placement instance's (H100, FP8: 1 / (1,978.9e12 x 0.6)), each
    loaded under the calibration."""
    cal = eight_bit_calibration
    hw = hardware_table(load_instance("tiny-3d-llama8b", calibration=cal))
    peak = np.asarray(hw.features["peak_flops@fp8"])
    assert np.asarray(hw.features["s_per_flop@fp8"]) == pytest.approx(1.0 / (peak * E8_DEFAULT), rel=1e-12, abs=0)
    devices = mapping_build.build_problem(load_mapping("tiny-pf-mapping", calibration=cal)).devices
    assert [d.s_per_flop for d in devices] == pytest.approx([1.0 / (1978.9e12 * E8)] * len(devices), rel=1e-12, abs=0)
    pb = placement_build.build_problem(load_placement("tiny-placement-mixtral", calibration=cal))
    assert pb.s_per_flop == pytest.approx(1.0 / (1978.9e12 * E8), rel=1e-12, abs=0)
    # the shipped calibration, as before: the 16-bit efficiency
    h = shipped().for_chip("h100-sxm")
    pb = placement_build.build_problem(load_placement("tiny-placement-mixtral"))
    assert pb.s_per_flop == pytest.approx(1.0 / (1978.9e12 * h.compute_efficiency), rel=1e-12, abs=0)


def test_brute_force_equals_both_solvers_with_an_8_bit_efficiency(eight_bit_calibration, solvers_match_brute_force):
    """The 8-bit efficiency is a hardware column like the 16-bit one, so the MIP stays exact: an
    FP8 Llama 70B on H100 or A100 (prefill-heavy 2048/128, compute matters) has brute force = HiGHS
    = CP-SAT."""
    solvers_match_brute_force(_instance(["h100-sxm", "a100-sxm-80gb"], "fp8", calibration=eight_bit_calibration))
