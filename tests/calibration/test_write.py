"""codesign.calibration.write: a fitted calibration file keeps what the fit did not touch and says
what it was fitted on."""

from __future__ import annotations

import json

import pytest

from codesign.calibration.fit import POOLED, fit_calibration
from codesign.calibration.report import fitted_on_by_hash, predict_row
from codesign.calibration.rows import SPLIT_METHOD, file_sha256, is_hash_split, make_split, split_of
from codesign.calibration.write import _without_table, write_calibration
from codesign.model.calibration import (
    CalibrationFile,
    load_calibration,
    shipped,
    shipped_path,
)
from codesign.model.hardware import achieved_memory_Bps
from codesign.schema import load_toml

from .helpers import csv_row, row, write_csv

PARAMS = {"compute_efficiency": 0.5, "memory_efficiency": 0.6, "network_efficiency": 0.4, "layer_overhead_us": 3.0,
          "stream_overlap": 0.0, "usable_memory_fraction": 1.0, "runtime_reserve_GiB": 4.5}


def fitted(chips: list[str], params: dict, n_fit: int = 1) -> dict:
    return {"chips": chips, "params": params, "n_fit": n_fit, "fit_mape_pct": 10.0, "n_held_out": 1,
            "held_out_mape_pct": 11.0}


def test_write_calibration_updates_only_the_fitted_chips(tmp_path):
    target = tmp_path / "calibration.toml"
    target.write_text(shipped_path().read_text())
    write_calibration({"ada": fitted(["l40s"], PARAMS)}, target)
    cal = CalibrationFile.model_validate(load_toml(target))
    assert cal.chips["l40s"] == PARAMS
    before = shipped().file
    assert cal.default == before.default
    assert {k: v for k, v in cal.chips.items() if k != "l40s"} == {k: v for k, v in before.chips.items() if k != "l40s"}
    assert "# kernel launches" in target.read_text()  # comments of [default] are kept
    assert load_calibration(target).for_chip("l40s").memory_efficiency == 0.6  # read again: rewritten


def test_gpus_without_measurements_get_the_pooled_calibration_not_the_3d_default(tmp_path):
    """The pooled fit goes to the catalog GPUs without measurements, with its own comment, and to
    [pooled] for chips of such families added later (one table however often the file is
    re-written); [default], which the 3D families use, is untouched."""
    target = tmp_path / "calibration.toml"
    target.write_text(shipped_path().read_text())
    chips = ["b200", "gb200", "mi300x", "rtx-pro-6000"]
    result = {POOLED: fitted(chips, PARAMS, n_fit=190)}
    write_calibration(result, target)
    cal = CalibrationFile.model_validate(load_toml(target))
    for chip in chips:
        assert cal.chips[chip] == PARAMS
    assert "# no measurements: all measured families pooled: fit MAPE 10.0 % on 190 rows" in target.read_text()
    assert cal.pooled == PARAMS
    write_calibration(result, target)
    assert [line.strip() for line in target.read_text().splitlines()].count("[pooled]") == 1
    assert CalibrationFile.model_validate(load_toml(target)).pooled == PARAMS
    assert cal.default == shipped().file.default
    assert "deepstack-3d" not in cal.chips


def test_a_fit_that_leaves_a_field_unset_says_so_over_a_default_that_sets_it(tmp_path):
    """Chip tables merge over [default] field by field: a family fitted without its own 8-bit
    efficiency or die cap must not take [default]'s. The written table states the 16-bit
    efficiency for 8 bit and an infinite cap."""
    text = shipped_path().read_text().replace(
        "[default]\n", "[default]\nmemory_bandwidth_cap_GBps = 1000.0\ncompute_efficiency_8bit = 0.5\n", 1)
    base = tmp_path / "base.toml"
    base.write_text(text)
    params = {**PARAMS, "compute_efficiency": 0.7, "memory_efficiency": 0.8}
    out = tmp_path / "mine.toml"
    write_calibration({"ampere": fitted(["a100-sxm-80gb"], params)}, out, base=base)
    assert "memory_bandwidth_cap_GBps = inf" in out.read_text()
    cal = load_calibration(out).for_chip("a100-sxm-80gb")
    assert cal.compute_efficiency_at("fp8") == cal.compute_efficiency == 0.7
    assert achieved_memory_Bps(2039e9, cal) == pytest.approx(0.8 * 2039e9, rel=1e-12)


def test_an_old_fitted_on_table_is_stripped_whatever_its_spacing():
    lines = ["source = 'x'", "", "# what the [chips.*] values were fitted on", "[ fitted_on ]  # old",
             'csv = "a.csv"', "", "# the engine's defaults", "[default]", "compute_efficiency = 0.7"]
    assert _without_table(lines, "fitted_on") == ["source = 'x'", "", "# the engine's defaults", "[default]",
                                                  "compute_efficiency = 0.7"]


def test_a_calibration_fitted_on_a_split_of_ones_own_does_not_claim_the_hash_rule(tmp_path):
    """`validate` relabels rows by the id-hash rule only when the calibration says it was fitted
    by it: a split that labels rows otherwise (here the inverse of the rule) is recorded as the
    user's own, and the rows are not relabelled."""
    rows = [row(id=f"s{i}", gpu="l40s", isl=isl, osl=osl)
            for i, (isl, osl) in enumerate([(128, 2048), (500, 2000), (1000, 1000), (2048, 2048), (128, 4096),
                                            (20000, 2000)])]
    path = write_csv(tmp_path / "m.csv", [csv_row(r.id, gpu="l40s", isl=r.isl, osl=r.osl,
                                                  value=predict_row(r)["predicted"]) for r in rows])
    ids = [r.id for r in rows]
    inverse = tmp_path / "inverse.json"
    inverse.write_text(json.dumps({"fit": [i for i in ids if split_of(i) == "held-out"],
                                   "held_out": [i for i in ids if split_of(i) == "fit"]}))
    hashed = tmp_path / "hashed.json"
    make_split(path, hashed)
    assert is_hash_split(hashed) and not is_hash_split(inverse)
    mine = tmp_path / "mine.toml"
    write_calibration(fit_calibration(path, inverse, fit_memory=False, pooled=False), mine, csv_path=path,
                      split_file=inverse, base=shipped())
    source = load_toml(mine)["source"]
    assert SPLIT_METHOD not in source and "a split of the user's own" in source
    assert "every chip not fitted keeps" in source
    assert load_toml(mine)["fitted_on"] == {"csv": "m.csv", "csv_sha256": file_sha256(path),
                                            "split": "inverse.json", "split_rule": "own"}
    assert not fitted_on_by_hash(path, load_calibration(mine))
    # fitted again into the same file by the rule: one [fitted_on] table, which now claims it
    write_calibration(fit_calibration(path, hashed, fit_memory=False, pooled=False), mine, csv_path=path,
                      split_file=hashed)
    assert mine.read_text().count("[fitted_on]") == 1
    assert load_toml(mine)["fitted_on"]["split_rule"] == "id-hash"
    assert fitted_on_by_hash(path, load_calibration(mine))
    # the table decides: "own" in it is not overridden by a source line that names the rule
    text = mine.read_text()
    mine.write_text(text.replace('split_rule = "id-hash"', 'split_rule = "own"'))
    assert SPLIT_METHOD in load_toml(mine)["source"] and not fitted_on_by_hash(path, load_calibration(mine))
    # a file written before the table existed (no [fitted_on]) is read by its source line
    mine.write_text(text[:text.index("# what the [chips.*]")] + text[text.index("\n[chips.") + 1:])
    assert "fitted_on" not in load_toml(mine) and fitted_on_by_hash(path, load_calibration(mine))
