"""codesign.calibration.fit: the fit recovers a calibration the 'measurements' were made with, holds
what it must hold, and fits the die's cap and the 8-bit efficiency only where the rows tell them
apart. 'Measurements' here are the model's own predictions at a known calibration."""

from __future__ import annotations

import json

import numpy as np
import pytest

from codesign.calibration.fit import (
    FIT_BOUNDS,
    FitOptions,
    eight_bit_is_fitted,
    family_of,
    fit_calibration,
    fit_stack,
    rows_weighted_mape,
)
from codesign.calibration.report import predict_row
from codesign.calibration.terms import CAP_FIELD, EIGHT_BIT_FIELD
from codesign.model.calibration import Calibration, load_calibration, shipped, shipped_path
from codesign.model.hardware import achieved_memory_Bps

from .helpers import csv_row, row, write_csv

#: a hopper 8-bit efficiency of the tests' own (the shipped calibration has none)
E8 = 0.6


def model_rows(path, rows, calibration=None, scale: float = 1.0) -> list[str]:
    """Write ``rows`` to ``path`` with the model's prediction (times ``scale``) as the measured
    value; their ids."""
    write_csv(path, [csv_row(r.id, model=r.model, gpu=r.gpu, precision=r.precision, isl=r.isl, osl=r.osl,
                             value=scale * predict_row(r, calibration=calibration)["predicted"]) for r in rows])
    return [r.id for r in rows]


def every_row_fitted(path, ids) -> object:
    split = path.with_suffix(".split.json")
    split.write_text(json.dumps({"fit": ids, "held_out": []}))
    return split


def test_the_stream_overlap_is_held_at_0_unless_asked_or_set():
    """Every fit holds o = 0 (a field given in ``fixed`` wins) unless asked to fit it. On a stand-in
    objective whose minimum is at o = 0.3 and compute efficiency 0.6, the default fit leaves o at
    exactly 0 and finds the efficiency; asked (``fit_overlap``), it finds both."""
    assert FitOptions().fixed_values == {"stream_overlap": 0.0}
    assert FitOptions(fixed=(("network_efficiency", 0.5),)).fixed_values == {"stream_overlap": 0.0,
                                                                             "network_efficiency": 0.5}
    assert FitOptions(fixed=(("stream_overlap", 1.0),)).fixed_values == {"stream_overlap": 1.0}
    assert FitOptions(fit_overlap=True).fixed_values == {}

    class Stand:  # MAPE-like: 100 x the distance to (o, ce) = (0.3, 0.6), the other fields free and flat
        rows: tuple = ()

        def mape(self, cal):
            return 100 * (abs(cal["stream_overlap"] - 0.3) + abs(cal["compute_efficiency"] - 0.6))

    base = shipped().for_chip("h100-sxm").model_dump()
    held, _ = fit_stack(Stand(), {**base, **FitOptions().fixed_values}, FitOptions())
    assert held["stream_overlap"] == 0.0
    assert held["compute_efficiency"] == pytest.approx(0.6, abs=1e-3)
    asked = FitOptions(fit_overlap=True)
    fitted, _ = fit_stack(Stand(), {**base, **asked.fixed_values}, asked)
    assert fitted["stream_overlap"] == pytest.approx(0.3, abs=1e-3)


def test_the_shipped_calibration_holds_the_overlap_at_0_for_every_measured_family():
    for chip in ("h100-sxm", "h200-sxm", "a100-sxm-80gb", "a100-pcie-80gb", "l40s", "b200"):
        assert shipped().for_chip(chip).stream_overlap == 0.0, chip


def test_the_a100_pcie_card_is_its_own_calibration_family():
    """The 300 W PCIe card on PCIe and the 400 W SXM module on NVLink 3 are fitted apart; H100 and
    H200 (one die) are one family."""
    assert family_of("a100-pcie-80gb") == "ampere-pcie"
    assert family_of("a100-sxm-80gb") == "ampere"
    assert family_of("h100-sxm") == family_of("h200-sxm") == "hopper"


def test_fit_calibration_recovers_the_memory_bound_rows_and_writes_nothing(tmp_path):
    """Decode-heavy L40S rows made by the model: the fit reproduces them (MAPE < 1 %), keeps every
    field within its bounds, fits no cap (one chip, one memory: it could not be told from the
    efficiency) and touches no file."""
    before = shipped_path().read_bytes()
    rows = [row(id=f"s{i}", gpu="l40s", isl=isl, osl=osl)
            for i, (isl, osl) in enumerate([(128, 2048), (500, 2000), (1000, 1000), (2048, 2048), (128, 4096),
                                            (20000, 2000)])]
    path = tmp_path / "m.csv"
    ids = model_rows(path, rows)
    res = fit_calibration(path, every_row_fitted(path, ids), fit_memory=False)
    assert list(res) == ["ada"]
    assert res["ada"]["chips"] == ["l4", "l40s"]  # every catalog chip of the family
    assert res["ada"]["fit_mape_pct"] < 1.0
    for key, value in res["ada"]["params"].items():
        lo, hi = FIT_BOUNDS.get(key, (0.0, 1.0))
        assert lo <= value <= hi, key
    assert CAP_FIELD not in res["ada"]["params"]
    assert shipped_path().read_bytes() == before


def test_the_fit_finds_the_cap_of_one_die_on_two_memories(tmp_path):
    """Decode-heavy Llama 8B on one H100 and one H200 (memory-bound), made at the shipped hopper
    calibration. With the other fields held at their shipped values, the fit recovers the shipped
    memory efficiency and cap, hence the H200 / H100 ratio of achieved bandwidths. With every field
    free it still gets a cap that binds on the H200 and not on the H100."""
    rows = [row(id=f"{gpu}-{i}", gpu=gpu, isl=isl, osl=osl) for gpu in ("h100-sxm", "h200-sxm")
            for i, (isl, osl) in enumerate([(128, 2048), (500, 2000), (128, 4096), (2048, 2048)])]
    path = tmp_path / "m.csv"
    split = every_row_fitted(path, model_rows(path, rows))
    h200 = shipped().for_chip("h200-sxm")
    held = tuple((k, getattr(h200, k)) for k in ("compute_efficiency", "network_efficiency", "layer_overhead_us",
                                                  "stream_overlap", "collective_step_latency_us", EIGHT_BIT_FIELD))
    res = fit_calibration(path, split, fit_memory=False, pooled=False, options=FitOptions(fixed=held))
    params = res["hopper"]["params"]
    assert params["memory_efficiency"] == pytest.approx(h200.memory_efficiency, rel=1e-3)
    assert params[CAP_FIELD] == pytest.approx(h200.memory_bandwidth_cap_GBps, rel=1e-3)
    fitted = Calibration.model_validate(h200.model_dump() | params)
    ratio = achieved_memory_Bps(4800e9, fitted) / achieved_memory_Bps(3350e9, fitted)
    assert ratio == pytest.approx(achieved_memory_Bps(4800e9, h200) / achieved_memory_Bps(3350e9, h200), rel=1e-3)
    res = fit_calibration(path, split, fit_memory=False, pooled=False)
    assert res["hopper"]["fit_mape_pct"] < 1.0
    free = Calibration.model_validate(h200.model_dump() | res["hopper"]["params"])
    assert free.memory_efficiency * 3350 < free.memory_bandwidth_cap_GBps < free.memory_efficiency * 4800


@pytest.fixture
def eight_bit_calibration(tmp_path):
    """The shipped calibration with compute_efficiency_8bit = E8 in the hopper chips' tables."""
    text = shipped_path().read_text()
    for chip in ("h100-sxm", "h200-sxm"):
        head = f"[chips.{chip}]\n"
        text = text.replace(head, f"{head}compute_efficiency_8bit = {E8}\n", 1)
    path = tmp_path / "eight-bit.toml"
    path.write_text(text)
    return load_calibration(path)


def compute_heavy_rows() -> dict[str, list]:
    """Compute-heavy Llama 8B rows on one H100 (prefill-heavy, large batches) by precision."""
    return {prec: [row(id=f"{prec}-{i}", precision=prec, isl=isl, osl=osl)
                   for i, (isl, osl) in enumerate([(2048, 128), (5000, 500), (128, 128), (1000, 1000)])]
            for prec in ("fp8", "fp16")}


def test_the_fit_recovers_both_efficiencies_on_request_and_only_with_both_precisions(eight_bit_calibration, tmp_path):
    """'Measurements' at a hopper calibration with its own 8-bit efficiency (0.6), at FP8 and FP16.
    With the fields other than the two compute efficiencies held, the fit asked for it
    (``fit_8bit``) recovers both; with FP8 rows alone the 8-bit efficiency is not fitted (it could
    not be told from the 16-bit one) and the one efficiency lands on 0.6; not asked, it is not
    fitted and the fit is worse."""
    cal = shipped().for_chip("h100-sxm")
    rows = compute_heavy_rows()
    path = tmp_path / "m.csv"
    model_rows(path, rows["fp8"] + rows["fp16"], calibration=eight_bit_calibration)
    held = tuple((k, getattr(cal, k)) for k in ("memory_efficiency", "network_efficiency", "layer_overhead_us",
                                                 "stream_overlap", "collective_step_latency_us", CAP_FIELD))
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"fit": [r.id for r in rows["fp8"] + rows["fp16"]], "held_out": []}))
    asked = FitOptions(fixed=held, fit_8bit=True)
    fit_both = fit_calibration(path, both, fit_memory=False, pooled=False, options=asked)
    params = fit_both["hopper"]["params"]
    assert params["compute_efficiency"] == pytest.approx(cal.compute_efficiency, rel=2e-3)
    assert params[EIGHT_BIT_FIELD] == pytest.approx(E8, rel=2e-3)
    fp8 = tmp_path / "fp8.json"
    fp8.write_text(json.dumps({"fit": [r.id for r in rows["fp8"]], "held_out": [r.id for r in rows["fp16"]]}))
    res = fit_calibration(path, fp8, fit_memory=False, pooled=False, options=asked)
    assert EIGHT_BIT_FIELD not in res["hopper"]["params"]
    assert res["hopper"]["params"]["compute_efficiency"] == pytest.approx(E8, rel=2e-3)
    one = fit_calibration(path, both, fit_memory=False, pooled=False, options=FitOptions(fixed=held))
    assert EIGHT_BIT_FIELD not in one["hopper"]["params"]
    assert one["hopper"]["fit_mape_pct"] > fit_both["hopper"]["fit_mape_pct"] + 0.1


def test_the_pooled_fit_never_fits_an_8_bit_efficiency():
    """Across families the 8-bit rows of one chip against the wider rows of another would measure
    the chips, not the format: rows of two families, both precisions present, do not free the
    field; rows of one family (H100 and H200, one die) do, when asked; the shipped pooled table
    has none of its own."""

    class Stand:
        def __init__(self, gpus, flags):
            self.rows = [row(id=f"r{i}", gpu=g, precision="fp8" if f else "fp16")
                         for i, (g, f) in enumerate(zip(gpus, flags, strict=True))]
            self.dec = {"eight_bit": np.asarray(flags, dtype=float)}
            self.fits = np.ones(len(flags), dtype=bool)

    asked = FitOptions(fit_8bit=True)
    assert eight_bit_is_fitted(Stand(["h100-sxm", "h200-sxm"], [1, 0]), asked)
    assert not eight_bit_is_fitted(Stand(["h100-sxm", "a100-sxm-80gb"], [1, 0]), asked)
    assert not eight_bit_is_fitted(Stand(["h100-sxm", "h100-sxm"], [1, 1]), asked)
    assert not eight_bit_is_fitted(Stand(["h100-sxm", "h200-sxm"], [1, 0]), FitOptions())
    assert shipped().for_chip("b200").compute_efficiency_8bit is None


def test_the_overlap_is_fitted_only_when_asked(tmp_path):
    """Rows made by the model with hopper's streams overlapping by 0.5: the default fit holds 0 and
    fits them worse; ``fit_overlap`` fits an overlap above 0 and fits them better."""
    text = shipped_path().read_text()
    for chip in ("h100-sxm", "h200-sxm"):
        start = text.index(f"[chips.{chip}]\n")
        end = text.index("stream_overlap = 0.0\n", start)
        text = text[:end] + "stream_overlap = 0.5\n" + text[end + len("stream_overlap = 0.0\n"):]
    (tmp_path / "overlap.toml").write_text(text)
    overlapping = load_calibration(tmp_path / "overlap.toml")
    assert overlapping.for_chip("h100-sxm").stream_overlap == 0.5
    rows = compute_heavy_rows()
    rows = rows["fp8"] + rows["fp16"] + [row(id="d", isl=128, osl=2048)]
    path = tmp_path / "m.csv"
    split = every_row_fitted(path, model_rows(path, rows, calibration=overlapping))
    held = fit_calibration(path, split, fit_memory=False, pooled=False)["hopper"]
    free = fit_calibration(path, split, fit_memory=False, pooled=False, options=FitOptions(fit_overlap=True))["hopper"]
    assert held["params"]["stream_overlap"] == 0.0
    assert free["params"]["stream_overlap"] > 0.1
    assert free["fit_mape_pct"] < held["fit_mape_pct"]


def test_rows_weighted_mape_by_hand():
    """Groups of 2 rows at 4 % and 6 rows at 8 %: (2 x 4 + 6 x 8) / 8 = 7 %."""
    fitted = {"a": {"n_held_out": 2, "held_out_mape_pct": 4.0, "n_fit": 1, "fit_mape_pct": 1.0},
              "b": {"n_held_out": 6, "held_out_mape_pct": 8.0, "n_fit": 3, "fit_mape_pct": 3.0}}
    assert rows_weighted_mape(fitted) == pytest.approx(7.0)
    assert rows_weighted_mape(fitted, "fit") == pytest.approx(2.5)
