"""The 8-bit tensor rate's own efficiency (model.md eq. 3.20c, VALIDATION.md §5.15).

Hand-derived figures: the H100 SXM's datasheet dense peaks are 989.4 TFLOP/s at BF16/FP16 and
1,978.9 at FP8; the A100 SXM 80GB has no FP8 rate (BF16 312), so an FP8 workload runs there at
BF16 and takes the 16-bit efficiency. The shipped calibration fits hopper's own 8-bit efficiency
(fix 18) and the A100s have none; the tests that need a known one use a calibration file of their
own with 0.6 for the hopper chips.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from codesign import validate as V
from codesign.kinds.grid.spec import Instance, InstanceFile
from codesign.model import hardware
from codesign.model.hardware import Calibration, calibration_for, hardware_table

E8 = 0.6
#: set for the A100 too, which has no 8-bit rate: its FP8 runs at BF16 and must not take it
E8_A100 = 0.3
#: and in [default], which the 3D families take
E8_DEFAULT = 0.5


@pytest.fixture
def eight_bit_calibration(tmp_path, monkeypatch):
    """The shipped calibration with compute_efficiency_8bit = E8 in the hopper chips' tables,
    E8_A100 in the A100 SXM's and E8_DEFAULT in [default], in use."""
    text = hardware.shipped_calibration_path().read_text()
    for chip, e8 in (("h100-sxm", E8), ("h200-sxm", E8), ("a100-sxm-80gb", E8_A100)):
        # the chip's own line, if the shipped table has one (hopper's since fix 18), gives way
        head = f"[chips.{chip}]\n"
        start = text.index(head)
        end = text.find("\n[", start + 1)
        table = "".join(line for line in text[start:end].splitlines(keepends=True)
                        if not line.startswith("compute_efficiency_8bit"))
        text = text[:start] + table + text[end:]
        text = text.replace(head, f"{head}compute_efficiency_8bit = {e8}\n", 1)
    text = text.replace("[default]\n", f"[default]\ncompute_efficiency_8bit = {E8_DEFAULT}\n", 1)
    path = tmp_path / "eight-bit.toml"
    path.write_text(text)
    monkeypatch.setenv(hardware.CALIBRATION_ENV, str(path))
    hardware.forget_calibration()
    yield path
    monkeypatch.delenv(hardware.CALIBRATION_ENV)
    hardware.forget_calibration()


def _cal(**kw) -> Calibration:
    base = calibration_for("h100-sxm").model_dump() | {"compute_efficiency": 0.75, "compute_efficiency_8bit": None}
    return Calibration.model_validate(base | kw)


def test_the_8_bit_formats_take_their_own_efficiency_and_the_others_do_not():
    cal = _cal(compute_efficiency_8bit=0.6)
    assert [cal.compute_efficiency_at(f) for f in ("fp8", "int8", "bf16", "fp16", "fp4", "tf32")] == [
        0.6, 0.6, 0.75, 0.75, 0.75, 0.75]
    unset = _cal()
    assert [unset.compute_efficiency_at(f) for f in ("fp8", "bf16")] == [0.75, 0.75]


def _instance(chips: list[str], precision: str, batches=(16, 64, 256)) -> Instance:
    raw = {
        "name": "eight-bit", "description": "t",
        "system": {"devices": 8, "scale_up_domain": 8},
        "hardware": {"family": "catalog", "chip": chips[0], "decisions": {"chip": chips}},
        "workloads": [{"name": "main", "workload": "llama-3.1-70b", "precision": precision, "input_tokens": 2048,
                       "output_tokens": 128, "decisions": {"tp": [8], "pp": [1], "batch": list(batches)}}],
    }
    return Instance(InstanceFile.model_validate(raw), source=None, raw=raw)


def _s_per_flop(chip: str, precision: str) -> float:
    hw = hardware_table(_instance([chip], precision))
    col = np.asarray(hw.features[f"s_per_flop@{precision}"])
    assert np.all(col == col[0])
    return float(col[0])


def test_the_shipped_calibration_runs_fp8_at_the_16_bit_efficiency():
    """Fix 18 withdrawn with fix 19 (VALIDATION.md §5.15): the shipped calibration states no 8-bit
    efficiency of its own, so hopper's FP8 GEMMs run at its one compute efficiency times the doubled
    FP8 peak, and the A100 (no FP8 rate) at its BF16 peak."""
    h = calibration_for("h100-sxm")
    assert h.compute_efficiency_8bit is None
    assert _s_per_flop("h100-sxm", "fp8") == pytest.approx(1.0 / (1978.9e12 * h.compute_efficiency), rel=1e-12, abs=0)
    assert _s_per_flop("h100-sxm", "bf16") == pytest.approx(1.0 / (989.4e12 * h.compute_efficiency), rel=1e-12, abs=0)
    a = calibration_for("a100-sxm-80gb")
    assert a.compute_efficiency_8bit is None
    assert _s_per_flop("a100-sxm-80gb", "fp8") == pytest.approx(1.0 / (312e12 * a.compute_efficiency), rel=1e-12, abs=0)


def test_the_hardware_column_of_an_fp8_workload_by_hand(eight_bit_calibration):
    """H100 FP8: 1 / (1,978.9e12 x 0.6); H100 BF16: 1 / (989.4e12 x e); A100 'FP8' runs at BF16:
    1 / (312e12 x e_ampere) (its calibration has no 8-bit efficiency of its own to take)."""
    h = calibration_for("h100-sxm")
    assert h.compute_efficiency_8bit == E8 != h.compute_efficiency
    assert _s_per_flop("h100-sxm", "fp8") == pytest.approx(1.0 / (1978.9e12 * E8), rel=1e-12, abs=0)
    assert _s_per_flop("h100-sxm", "bf16") == pytest.approx(1.0 / (989.4e12 * h.compute_efficiency), rel=1e-12, abs=0)
    a = calibration_for("a100-sxm-80gb")
    assert a.compute_efficiency_8bit == E8_A100
    assert _s_per_flop("a100-sxm-80gb", "fp8") == pytest.approx(1.0 / (312e12 * a.compute_efficiency), rel=1e-12, abs=0)


def test_the_3d_mapping_and_placement_models_take_it_too(eight_bit_calibration):
    """The stacked family's column (tiny-3d-llama8b, FP8, [default]'s 0.5: 1 / (F_peak x 0.5)), a
    mapping instance's devices and a placement instance's (H100, FP8: 1 / (1,978.9e12 x 0.6))."""
    from codesign.kinds.grid.spec import load_instance
    from codesign.kinds.mapping.spec import load_mapping
    from codesign.kinds.placement.spec import load_placement
    from codesign.model import mapping, placement

    hw = hardware_table(load_instance("tiny-3d-llama8b"))
    peak = np.asarray(hw.features["peak_flops@fp8"])
    assert np.asarray(hw.features["s_per_flop@fp8"]) == pytest.approx(1.0 / (peak * E8_DEFAULT), rel=1e-12, abs=0)
    devices = mapping.build_problem(load_mapping("tiny-pf-mapping")).devices
    assert [d.s_per_flop for d in devices] == pytest.approx([1.0 / (1978.9e12 * E8)] * len(devices), rel=1e-12, abs=0)
    pb = placement.build_problem(load_placement("tiny-placement-mixtral"))
    assert pb.s_per_flop == pytest.approx(1.0 / (1978.9e12 * E8), rel=1e-12, abs=0)


def test_a_fit_that_leaves_it_unset_says_so_over_a_default_that_sets_it(eight_bit_calibration, tmp_path, monkeypatch):
    """Chip tables merge over [default] field by field: a family fitted without its own 8-bit
    efficiency (or die cap) must not take [default]'s. The written table states the 16-bit one
    for FP8 and an infinite cap."""
    from codesign.model.hardware import achieved_memory_Bps

    text = eight_bit_calibration.read_text().replace("[default]\n", "[default]\nmemory_bandwidth_cap_GBps = 1000.0\n", 1)
    base = tmp_path / "base.toml"
    base.write_text(text)
    params = {"compute_efficiency": 0.7, "memory_efficiency": 0.8, "network_efficiency": 0.6,
              "layer_overhead_us": 1.0, "stream_overlap": 0.0, "collective_step_latency_us": 5.0,
              "usable_memory_fraction": 1.0, "runtime_reserve_GiB": 2.0}
    out = tmp_path / "mine.toml"
    fitted = {"chips": ["a100-sxm-80gb"], "params": params, "n_fit": 1, "fit_mape_pct": 0.0, "n_held_out": 0,
              "held_out_mape_pct": float("nan")}
    V.write_calibration({"ampere": fitted}, out, base=base)
    assert "memory_bandwidth_cap_GBps = inf" in out.read_text()
    monkeypatch.setenv(hardware.CALIBRATION_ENV, str(out))
    hardware.forget_calibration()
    cal = calibration_for("a100-sxm-80gb")
    assert cal.compute_efficiency_at("fp8") == cal.compute_efficiency == 0.7
    assert achieved_memory_Bps(2039e9, cal) == pytest.approx(0.8 * 2039e9, rel=1e-12)


def test_brute_force_equals_both_solvers_with_an_8_bit_efficiency(eight_bit_calibration, solvers_match_brute_force):
    """The 8-bit efficiency is a hardware column like the 16-bit one, so the MIP stays exact: an
    FP8 Llama 70B on H100 or A100 (prefill-heavy 2048/128, compute matters) has brute force = HiGHS
    = CP-SAT."""
    solvers_match_brute_force(_instance(["h100-sxm", "a100-sxm-80gb"], "fp8"))


def _row(rid: str, gpu: str, precision: str, isl: int, osl: int, tp: int = 1) -> V.Row:
    return V.Row(rid, "llama-3.1-8b", gpu, tp, tp, 1, 1, 1, precision, isl, osl, None, "output_tokens_per_s", 1.0)


def test_row_terms_flag_the_rows_at_the_8_bit_rate():
    """H100 FP8: at the 8-bit rate; H100 FP16 and A100 'FP8' (no FP8 rate, runs at BF16): not."""
    flags = {}
    for rid, gpu, prec in (("a", "h100-sxm", "fp8"), ("b", "h100-sxm", "fp16"), ("c", "a100-sxm-80gb", "fp8")):
        t = V.row_terms(_row(rid, gpu, prec, 1000, 1000), 8)
        flags[rid] = (t.prefill["eight_bit"], t.decode["eight_bit"])
    assert flags == {"a": (1.0, 1.0), "b": (0.0, 0.0), "c": (0.0, 0.0)}


def test_step_time_divides_the_8_bit_rows_by_their_own_efficiency():
    t = {"compute": np.array([1.0, 1.0]), "memory_local": np.array([0.0, 0.0]), "memory_pool": 0.0, "net_bw": 0.0,
         "net_latency": 0.0, "layers": 0.0, "collective_steps": 0.0, "eight_bit": np.array([1.0, 0.0])}
    cal = {"compute_efficiency": 0.8, "memory_efficiency": 0.9, "network_efficiency": 0.5, "layer_overhead_us": 0.0,
           "collective_step_latency_us": 0.0, "stream_overlap": 0.0}
    assert V.step_time(t, cal | {V.EIGHT_BIT_FIELD: 0.5}) == pytest.approx([2.0, 1.25])
    assert V.step_time(t, cal | {V.EIGHT_BIT_FIELD: None}) == pytest.approx([1.25, 1.25])


def _model_rows_csv(path) -> dict[str, list[str]]:
    """'Measurements' that are the model's own predictions under the calibration in use: compute-
    heavy Llama 8B rows on one H100 (prefill-heavy, large batches) at FP8 and FP16, written to
    ``path``. Returns the row ids by precision."""
    rows, ids = [], {"fp8": [], "fp16": []}
    for prec in ("fp8", "fp16"):
        for i, (isl, osl) in enumerate([(2048, 128), (5000, 500), (128, 128), (1000, 1000)]):
            r = _row(f"{prec}-{i}", "h100-sxm", prec, isl, osl)
            rows.append({"id": r.id, "model": r.model, "gpu": r.gpu, "num_gpus": 1, "tp": 1, "pp": 1, "ep": 1,
                         "attention_dp": 1, "precision": prec, "isl": isl, "osl": osl, "concurrency": "",
                         "metric": r.metric, "value": V.predict_row(r)["predicted"], "unit": "1/s", "source": "test"})
            ids[prec].append(r.id)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return ids


def test_the_fit_recovers_both_efficiencies_on_request_and_only_with_both_precisions(eight_bit_calibration, tmp_path):
    """'Measurements' = the model's predictions at a hopper calibration with its own 8-bit
    efficiency (0.6) on compute-heavy Llama 8B rows (prefill-heavy, large batches) at FP8 and FP16.
    With the fields other than the two compute efficiencies held, the fit asked for it
    (``fit_8bit``) recovers both; with FP8 rows alone the 8-bit efficiency is not fitted (it could
    not be told from the 16-bit one) and the one efficiency lands on 0.6; turned off
    (``fit_8bit=False``, the model before fix 18), it is not fitted and the fit is worse."""
    cal = calibration_for("h100-sxm")
    path = tmp_path / "m.csv"
    ids = _model_rows_csv(path)
    held = tuple((k, getattr(cal, k)) for k in ("memory_efficiency", "network_efficiency", "layer_overhead_us",
                                                 "stream_overlap", "collective_step_latency_us", V.CAP_FIELD))
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"fit": ids["fp8"] + ids["fp16"], "held_out": []}))
    asked = V.Variant("held", fixed=held, fit_8bit=True)
    fit_both = V.fit_calibration(path, both, fit_memory=False, pooled=False, variant=asked)
    params = fit_both["hopper"]["params"]
    assert params["compute_efficiency"] == pytest.approx(cal.compute_efficiency, rel=2e-3)
    assert params[V.EIGHT_BIT_FIELD] == pytest.approx(E8, rel=2e-3)
    one = tmp_path / "fp8.json"
    one.write_text(json.dumps({"fit": ids["fp8"], "held_out": ids["fp16"]}))
    res = V.fit_calibration(path, one, fit_memory=False, pooled=False, variant=asked)
    assert V.EIGHT_BIT_FIELD not in res["hopper"]["params"]
    assert res["hopper"]["params"]["compute_efficiency"] == pytest.approx(E8, rel=2e-3)
    one = V.fit_calibration(path, both, fit_memory=False, pooled=False,
                            variant=V.Variant("held", fixed=held, fit_8bit=False))
    assert V.EIGHT_BIT_FIELD not in one["hopper"]["params"]
    assert one["hopper"]["fit_mape_pct"] > fit_both["hopper"]["fit_mape_pct"] + 0.1


def test_calibrate_fit_8bit_writes_the_field_and_validate_reads_it(eight_bit_calibration, tmp_path, monkeypatch):
    """`codesign calibrate --fit-8bit --out FILE` on rows at both precisions writes an 8-bit
    efficiency into the hopper tables (and no other family's); `codesign --calibration FILE
    validate` predicts with it; with --no-fit-8bit the written tables state none of their own."""
    from typer.testing import CliRunner

    from codesign.cli import app
    from codesign.model.hardware import CalibrationFile
    from codesign.schema import load_toml

    path = tmp_path / "m.csv"
    ids = _model_rows_csv(path)
    split = tmp_path / "all.json"
    split.write_text(json.dumps({"fit": ids["fp8"] + ids["fp16"], "held_out": []}))
    runner = CliRunner()
    tables = {}
    for flag in ("--fit-8bit", "--no-fit-8bit"):
        out = tmp_path / f"cal{flag or ''}.toml"
        got = runner.invoke(app, ["calibrate", str(path), "--split", str(split), "--out", str(out), "--json",
                                  *([flag] if flag else [])])
        assert got.exit_code == 0, got.output
        tables[flag] = CalibrationFile.model_validate(load_toml(out)).chips
        if flag == "--fit-8bit":
            fitted = json.loads(got.stdout)["hopper"]["params"]
            assert tables[flag]["h100-sxm"][V.EIGHT_BIT_FIELD] == fitted[V.EIGHT_BIT_FIELD]
            assert tables[flag]["h200-sxm"][V.EIGHT_BIT_FIELD] == fitted[V.EIGHT_BIT_FIELD]
            assert tables[flag]["a100-sxm-80gb"][V.EIGHT_BIT_FIELD] == E8_A100  # not fitted: as in use
            monkeypatch.setenv(hardware.CALIBRATION_ENV, str(out))
            hardware.forget_calibration()
            rep = runner.invoke(app, ["validate", str(path), "--split", str(split), "--json"])
            assert rep.exit_code == 0, rep.output
            report = json.loads(rep.stdout)
            assert report["calibration"]["h100-sxm"][V.EIGHT_BIT_FIELD] == fitted[V.EIGHT_BIT_FIELD]
            assert report["mape_pct"] < 1.0  # the rows are the model's own at an 8-bit efficiency of 0.6
            monkeypatch.setenv(hardware.CALIBRATION_ENV, str(eight_bit_calibration))
            hardware.forget_calibration()
    # with --no-fit-8bit the hopper tables state the 16-bit efficiency for 8 bit too ([default] sets one)
    plain = tables["--no-fit-8bit"]["h100-sxm"]
    assert plain[V.EIGHT_BIT_FIELD] == plain["compute_efficiency"]


def test_the_pooled_fit_never_fits_an_8_bit_efficiency():
    """Across families the 8-bit rows of one chip against the wider rows of another would measure
    the chips, not the format (VALIDATION.md §5.15): rows of two families, both precisions present,
    do not free the field; rows of one family (H100 and H200, one die) do, when asked (``fit_8bit``,
    off in the shipped model since fix 19); the shipped pooled table has none of its own."""

    class Stand:
        def __init__(self, gpus, flags):
            self.rows = [_row(f"r{i}", g, "fp8" if f else "fp16", 1000, 1000)
                         for i, (g, f) in enumerate(zip(gpus, flags, strict=True))]
            self.dec = {"eight_bit": np.asarray(flags, dtype=float)}
            self.fits = np.ones(len(flags), dtype=bool)

    asked = V.Variant(fit_8bit=True)
    assert V.eight_bit_is_fitted(Stand(["h100-sxm", "h200-sxm"], [1, 0]), asked)
    assert not V.eight_bit_is_fitted(Stand(["h100-sxm", "a100-sxm-80gb"], [1, 0]), asked)
    assert not V.eight_bit_is_fitted(Stand(["h100-sxm", "h100-sxm"], [1, 1]), asked)
    assert not V.eight_bit_is_fitted(Stand(["h100-sxm", "h200-sxm"], [1, 0]), V.MODEL)
    assert calibration_for("b200").compute_efficiency_8bit is None
