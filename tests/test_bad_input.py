"""Bad input to ``validate`` (exit code 2, a message naming the file and the column, no
traceback). These are command-line tests of codesign/cli/calibration.py, kept here until they move
to the calibration command's own tests; every other bad-input case is in tests/cli/."""

from __future__ import annotations

import json
from pathlib import Path

NOT_UTF8 = b"\x89PNG\x00\xff\xfe"


def test_a_measurements_file_that_is_not_utf8(cli, input_error, tmp_path: Path) -> None:
    (tmp_path / "m.csv").write_bytes(NOT_UTF8)
    input_error(cli("validate", tmp_path / "m.csv"), "m.csv", "UTF-8")


def test_validate_files_without_a_predictable_row(cli, input_error, tmp_path: Path) -> None:
    header = "id,model,gpu,num_gpus,tp,isl,osl,metric,value\n"
    (tmp_path / "h.csv").write_text(header)
    input_error(cli("validate", str(tmp_path / "h.csv")), "the file has no rows")
    (tmp_path / "m.csv").write_text(header + "a,llama-3.1-8b,h100-sxm,1,1,100,100,tokens_per_sec,1\n")
    input_error(cli("validate", str(tmp_path / "m.csv")), "no row of the file could be predicted", "tokens_per_sec")
    (tmp_path / "c.csv").write_text("id,model,gpu\n")
    input_error(cli("validate", str(tmp_path / "c.csv")), "lacks the column(s) num_gpus, tp, isl, osl, metric, value")


def test_validate_names_the_column_and_skips_repeated_ids(cli, tmp_path: Path) -> None:
    header = "id,model,gpu,num_gpus,tp,precision,isl,osl,metric,value\n"
    row = "a,llama-3.1-8b,h100-sxm,1,1,fp8,1000,1000,output_tokens_per_s,{}\n"
    (tmp_path / "m.csv").write_text(header + row.format("fast") + row.format(14108).replace("a,", "b,", 1))
    rec = json.loads(cli("validate", str(tmp_path / "m.csv"), "--json").stdout)
    assert [(s["id"], s["reason"]) for s in rec["skipped"]] == [("a", "malformed row: column value: 'fast' is not a number")]
    assert [r["id"] for r in rec["rows"]] == ["b"]
    (tmp_path / "d.csv").write_text(header + row.format(14108) + row.format(14000))
    rec = json.loads(cli("validate", str(tmp_path / "d.csv"), "--json").stdout)
    assert [s["reason"] for s in rec["skipped"]] == ["duplicate id: line 3 repeats the id of line 2"]
    assert [r["measured"] for r in rec["rows"]] == [14108.0]
