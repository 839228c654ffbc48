"""`codesign calibrate --fit-overlap` (VALIDATION.md §5.17): the stream overlap is held at 0 unless
asked for; asked, it is fitted per family and written to the family's tables."""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from codesign import validate as V
from codesign.cli import app
from codesign.model import hardware
from codesign.model.hardware import CalibrationFile
from codesign.schema import load_toml

OVERLAP = 0.5


@pytest.fixture
def overlapping_calibration(tmp_path, monkeypatch):
    """The shipped calibration with hopper's streams overlapping by OVERLAP, in use."""
    text = hardware.shipped_calibration_path().read_text()
    for chip in ("h100-sxm", "h200-sxm"):
        head = f"[chips.{chip}]\n"
        start = text.index(head)
        end = text.index("stream_overlap = 0.0\n", start)
        text = text[:end] + f"stream_overlap = {OVERLAP}\n" + text[end + len("stream_overlap = 0.0\n"):]
    path = tmp_path / "overlap.toml"
    path.write_text(text)
    monkeypatch.setenv(hardware.CALIBRATION_ENV, str(path))
    hardware.forget_calibration()
    assert hardware.calibration_for("h100-sxm").stream_overlap == OVERLAP
    yield path
    monkeypatch.delenv(hardware.CALIBRATION_ENV)
    hardware.forget_calibration()


def _rows_csv(path) -> list[str]:
    """'Measurements' that are the model's own predictions under the calibration in use: Llama 8B
    on one H100 at scenarios from prefill-heavy to decode-heavy, FP8 and FP16."""
    rows = []
    for prec in ("fp8", "fp16"):
        for i, (isl, osl) in enumerate([(2048, 128), (5000, 500), (128, 128), (1000, 1000), (128, 2048)]):
            r = V.Row(f"{prec}-{i}", "llama-3.1-8b", "h100-sxm", 1, 1, 1, 1, 1, prec, isl, osl, None,
                      "output_tokens_per_s", 1.0)
            rows.append({"id": r.id, "model": r.model, "gpu": r.gpu, "num_gpus": 1, "tp": 1, "pp": 1, "ep": 1,
                         "attention_dp": 1, "precision": prec, "isl": isl, "osl": osl, "concurrency": "",
                         "metric": r.metric, "value": V.predict_row(r)["predicted"], "unit": "1/s", "source": "test"})
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return [r["id"] for r in rows]


def test_calibrate_holds_the_overlap_at_0_unless_asked(overlapping_calibration, tmp_path):
    """Rows made by the model with hopper's streams overlapping by 0.5. The default fit writes
    0 into the hopper tables and fits them worse; `--fit-overlap` writes its fitted overlap, above
    0, and fits them better. A family the rows do not measure keeps the calibration in use."""
    path = tmp_path / "m.csv"
    split = tmp_path / "all.json"
    split.write_text(json.dumps({"fit": _rows_csv(path), "held_out": []}))
    runner = CliRunner()
    fits, tables = {}, {}
    for flag in (None, "--fit-overlap"):
        out = tmp_path / f"cal{flag or ''}.toml"
        got = runner.invoke(app, ["calibrate", str(path), "--split", str(split), "--out", str(out), "--json",
                                  *([flag] if flag else [])])
        assert got.exit_code == 0, got.output
        fits[flag] = json.loads(got.stdout)["hopper"]
        tables[flag] = CalibrationFile.model_validate(load_toml(out)).chips
    assert tables[None]["h100-sxm"]["stream_overlap"] == 0.0 == tables[None]["h200-sxm"]["stream_overlap"]
    fitted = fits["--fit-overlap"]["params"]["stream_overlap"]
    assert fitted > 0.1
    assert tables["--fit-overlap"]["h100-sxm"]["stream_overlap"] == fitted
    assert fits["--fit-overlap"]["fit_mape_pct"] < fits[None]["fit_mape_pct"]
    assert tables[None]["l40s"]["stream_overlap"] == hardware.calibration_for("l40s").stream_overlap
