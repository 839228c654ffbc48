"""`codesign calibrate` and `codesign validate`, and `--calibration FILE` on the command line
(before or after the command's name)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from codesign.calibration.fit import fit_calibration
from codesign.calibration.report import predict_row
from codesign.calibration.rows import split_of
from codesign.calibration.terms import EIGHT_BIT_FIELD, HOST_FIELD
from codesign.calibration.write import write_calibration
from codesign.cli import app
from codesign.model.calibration import CalibrationFile, load_calibration, shipped, shipped_path
from codesign.schema import load_toml

from .helpers import MEASUREMENTS, csv_row, row, write_csv

runner = CliRunner()


def l40s_rows(tmp_path, scale: float = 1.0):
    """Decode-heavy L40S 'measurements': the model's predictions times ``scale``."""
    rows = []
    for i, (isl, osl) in enumerate([(128, 2048), (500, 2000), (1000, 1000), (2048, 2048), (128, 4096), (20000, 2000)]):
        r = row(id=f"s{i}", gpu="l40s", isl=isl, osl=osl)
        rows.append(csv_row(r.id, gpu="l40s", isl=isl, osl=osl, value=scale * predict_row(r)["predicted"]))
    return write_csv(tmp_path / "m.csv", rows), [r["id"] for r in rows]


def test_validate_prints_the_documented_figures():
    got = runner.invoke(app, ["validate", str(MEASUREMENTS)])
    assert got.exit_code == 0, got.output
    assert got.stdout.splitlines()[0] == "rows 367  skipped 0  MAPE 5.90 %  held-out 6.44 %  fit 5.40 %"


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_users_calibration_file_is_used_by_the_cli(tmp_path, where):
    """A calibration fitted on 20 % slower 'measurements' predicts them (MAPE < 1 %) when given by
    `--calibration FILE`, before or after the command's name; a missing file is bad input (exit 2)."""
    path, ids = l40s_rows(tmp_path, scale=0.8)
    (tmp_path / "all.json").write_text(json.dumps({"fit": ids, "held_out": []}))
    mine = tmp_path / "mine.toml"
    res = fit_calibration(path, tmp_path / "all.json", fit_memory=False)
    write_calibration(res, mine, csv_path=path, split_file=tmp_path / "all.json", base=shipped())
    option = ["--calibration", str(mine)]
    args = [*option, "validate", str(path), "--json"] if where == "before" else ["validate", str(path), "--json", *option]
    got = runner.invoke(app, args)
    assert got.exit_code == 0, got.output
    report = json.loads(got.stdout)
    assert report["calibration"]["l40s"]["memory_efficiency"] == res["ada"]["params"]["memory_efficiency"]
    assert report["calibration_file"] == str(mine.resolve())
    assert report["mape_pct"] < 1.0
    missing = runner.invoke(app, ["validate", str(path), "--calibration", str(tmp_path / "nope.toml")])
    assert missing.exit_code == 2 and "calibration file not found" in missing.output


def test_calibrate_out_fits_only_the_families_measured_and_keeps_every_other_chip(tmp_path):
    """`calibrate CSV --out FILE` on rows of two families (L40S, H100) writes the split beside FILE,
    fits those two families and no pooled calibration: the A100s, B200 and the rest keep the
    calibration in use; the shipped file is untouched; `validate` under FILE labels the rows as the
    fit saw them; a file with nothing to fit is bad input (exit 2, no file)."""
    before = shipped_path().read_bytes()
    rows = []
    for i, (gpu, isl, osl) in enumerate([("l40s", 128, 2048), ("l40s", 1000, 1000), ("l40s", 2048, 2048),
                                         ("h100-sxm", 128, 2048), ("h100-sxm", 1000, 1000), ("h100-sxm", 2048, 2048)]):
        r = row(id=f"s{i}", gpu=gpu, isl=isl, osl=osl)
        rows.append(csv_row(f"s{i}", gpu=gpu, isl=isl, osl=osl, value=0.9 * predict_row(r)["predicted"]))
    path = write_csv(tmp_path / "m.csv", rows)
    mine = tmp_path / "mine.toml"
    got = runner.invoke(app, ["calibrate", str(path), "--out", str(mine), "--fit-host", "--json"])
    assert got.exit_code == 0, got.output
    fitted = json.loads(got.stdout)
    assert set(fitted) <= {"ada", "hopper"} and fitted  # no "pooled"
    assert (tmp_path / "mine.split.json").exists()
    assert shipped_path().read_bytes() == before
    written = CalibrationFile.model_validate(load_toml(mine))
    for chip in ("a100-sxm-80gb", "a100-pcie-80gb", "b200", "gb200", "mi300x", "rtx-pro-6000"):
        assert written.chips[chip] == shipped().file.chips[chip], chip
    assert written.pooled == shipped().file.pooled  # no pooled fit here: the file's own [pooled] is kept
    for res in fitted.values():
        for chip in res["chips"]:
            assert written.chips[chip]["memory_efficiency"] == res["params"]["memory_efficiency"]
            # --fit-host: the host time is fitted and written where the fit puts it above 0
            assert written.chips[chip].get(HOST_FIELD) == res["params"].get(HOST_FIELD)
    got = runner.invoke(app, ["--calibration", str(mine), "validate", str(path), "--json"])
    assert got.exit_code == 0, got.output
    labelled = {r["id"]: r["split"] for r in json.loads(got.stdout)["rows"]}
    assert labelled == {r["id"]: split_of(r["id"]) for r in rows}
    missing = runner.invoke(app, ["validate", str(path), "--split", str(tmp_path / "none.json")])
    assert missing.exit_code == 2 and "split file not found" in missing.output
    nothing = write_csv(tmp_path / "bad.csv", [csv_row("z", model="llama-9-1t")])
    empty = tmp_path / "empty.toml"
    got = runner.invoke(app, ["calibrate", str(nothing), "--out", str(empty)])
    assert got.exit_code == 2 and "no row can be fitted" in got.output
    assert not empty.exists() and not (tmp_path / "empty.split.json").exists()
    both = runner.invoke(app, ["calibrate", str(path), "--write", "--out", str(mine)])
    assert both.exit_code == 2 and "exclusive" in both.output
    shipped_out = runner.invoke(app, ["calibrate", str(path), "--out", str(shipped_path())])
    assert shipped_out.exit_code == 2 and "shipped calibration" in shipped_out.output


def test_calibrate_fit_8bit_writes_the_field_and_validate_reads_it(tmp_path):
    """`calibrate --fit-8bit --out FILE` on hopper rows at both precisions, made with an 8-bit
    efficiency of 0.6, writes a fitted one into the hopper tables (and no other family's);
    `validate --calibration FILE` predicts with it; with --no-fit-8bit the written tables state
    none of their own (the 16-bit one where [default] sets one)."""
    text = shipped_path().read_text().replace("[default]\n", "[default]\ncompute_efficiency_8bit = 0.5\n", 1)
    for chip in ("h100-sxm", "h200-sxm"):
        text = text.replace(f"[chips.{chip}]\n", f"[chips.{chip}]\ncompute_efficiency_8bit = 0.6\n", 1)
    (tmp_path / "base.toml").write_text(text)
    base = load_calibration(tmp_path / "base.toml")
    rows = [row(id=f"{p}-{i}", precision=p, isl=isl, osl=osl) for p in ("fp8", "fp16")
            for i, (isl, osl) in enumerate([(2048, 128), (5000, 500), (128, 128), (1000, 1000)])]
    path = write_csv(tmp_path / "m.csv", [
        csv_row(r.id, precision=r.precision, isl=r.isl, osl=r.osl, value=predict_row(r, calibration=base)["predicted"])
        for r in rows])
    split = tmp_path / "all.json"
    split.write_text(json.dumps({"fit": [r.id for r in rows], "held_out": []}))
    tables = {}
    for flag in ("--fit-8bit", "--no-fit-8bit"):
        out = tmp_path / f"cal{flag}.toml"
        got = runner.invoke(app, ["calibrate", str(path), "--split", str(split), "--out", str(out), "--json", flag,
                                  "--calibration", str(tmp_path / "base.toml")])
        assert got.exit_code == 0, got.output
        tables[flag] = CalibrationFile.model_validate(load_toml(out)).chips
        if flag == "--fit-8bit":
            fitted = json.loads(got.stdout)["hopper"]["params"]
            assert tables[flag]["h100-sxm"][EIGHT_BIT_FIELD] == fitted[EIGHT_BIT_FIELD]
            assert tables[flag]["h200-sxm"][EIGHT_BIT_FIELD] == fitted[EIGHT_BIT_FIELD]
            assert EIGHT_BIT_FIELD not in tables[flag]["a100-sxm-80gb"]  # not fitted: as in use
            rep = runner.invoke(app, ["validate", str(path), "--split", str(split), "--json", "--calibration", str(out)])
            assert rep.exit_code == 0, rep.output
            report = json.loads(rep.stdout)
            assert report["calibration"]["h100-sxm"][EIGHT_BIT_FIELD] == fitted[EIGHT_BIT_FIELD]
            assert report["mape_pct"] < 1.0
    plain = tables["--no-fit-8bit"]["h100-sxm"]
    assert plain[EIGHT_BIT_FIELD] == plain["compute_efficiency"]


def test_mapping_and_placement_say_they_leave_out_a_fitted_host_term(tmp_path):
    """A calibration with a host time per sequence (``calibrate --fit-host``) is charged by the
    design model only (eq. 5.3); `show` of a mapping or placement instance warns that its model
    kind leaves it out, and says nothing when the term is 0 (the shipped calibration)."""
    for name in ("tiny-pf-mapping", "tiny-placement-mixtral"):
        got = runner.invoke(app, ["show", name, "--json"])
        assert got.exit_code == 0, got.output
        assert json.loads(got.stdout)["lints"] == []
    table = "[chips.h100-sxm]\n"
    mine = tmp_path / "host.toml"
    mine.write_text(shipped_path().read_text().replace(table, table + "host_us_per_sequence = 12.5\n"))
    for name in ("tiny-pf-mapping", "tiny-placement-mixtral"):
        got = runner.invoke(app, ["show", name, "--json", "--calibration", str(mine)])
        assert got.exit_code == 0, got.output
        (lint,) = json.loads(got.stdout)["lints"]
        assert lint["code"] == "host-term-not-modelled" and "h100-sxm" in lint["message"]
        assert "12.5 µs" in lint["message"]
