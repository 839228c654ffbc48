"""Calibration families are data: each catalog chip names its ``family`` (VALIDATION.md §4), the
validator fits per family, and a chip without a calibration table of its own takes its family's."""

from __future__ import annotations

import pytest

from codesign import catalog
from codesign import validate as V
from codesign.errors import InputError
from codesign.model import hardware


def test_every_catalog_chip_names_its_family():
    assert {c: catalog.load_chip(c).family for c in catalog.list_ids("chips")} == {
        "a100-pcie-80gb": "ampere-pcie",  # 300 W, TP over PCIe: apart from the SXM module (§5.4)
        "a100-sxm-80gb": "ampere",
        "b200": "blackwell",
        "gb200": "blackwell",
        "h100-sxm": "hopper",
        "h200-sxm": "hopper",  # the H100's die on other memory (§5.10)
        "l40s": "ada",
        "mi300x": "cdna3",
        "rtx-pro-6000": "blackwell-workstation",
    }
    assert V.chip_families()["hopper"] == ("h100-sxm", "h200-sxm")
    assert V.family_of("b200") == V.family_of("gb200") == "blackwell"
    assert V.family_of("not-a-chip") == "not-a-chip"


def test_an_empty_family_is_bad_input(tmp_path):
    text = (catalog.catalog_dir("chips") / "l40s.toml").read_text()
    bad = tmp_path / "l40s.toml"
    bad.write_text(text.replace('family = "ada"', 'family = ""'))
    with pytest.raises(InputError, match="family"):
        catalog.load_chip(bad)


def _calibration_without(tmp_path, *chips: str):
    """The shipped calibration file without the ``[chips.<id>]`` tables of ``chips``."""
    out, skip = [], False
    for line in hardware.shipped_calibration_path().read_text().splitlines():
        if line.startswith("["):
            skip = line.strip() in {f"[chips.{c}]" for c in chips}
        if not skip:
            out.append(line)
    path = tmp_path / "cal.toml"
    path.write_text("\n".join(out) + "\n")
    return path


def test_a_chip_without_its_own_table_takes_its_familys(tmp_path, monkeypatch):
    shipped_h100 = hardware.calibration_for("h100-sxm")
    shipped_default = hardware.calibration_file().default
    monkeypatch.setenv(hardware.CALIBRATION_ENV, str(_calibration_without(tmp_path, "h200-sxm", "l40s")))
    hardware.forget_calibration()
    try:
        assert "h200-sxm" not in hardware.calibration_file().chips
        # the H200 has no table: it takes the H100's (the hopper family's), die cap included
        assert hardware.calibration_for("h200-sxm") == shipped_h100
        assert hardware.calibration_for("h200-sxm").memory_bandwidth_cap_GBps == pytest.approx(3298.6533)
        # the L40S's family (ada) has no other chip: [default] alone
        assert hardware.calibration_for("l40s").model_dump() == shipped_default.model_dump()
    finally:
        monkeypatch.delenv(hardware.CALIBRATION_ENV)
        hardware.forget_calibration()
