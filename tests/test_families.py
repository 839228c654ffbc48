"""Calibration families are data: each catalog chip names its ``family`` (VALIDATION.md §4), the
validator fits per family, and a chip without a calibration table of its own takes its family's."""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest

from codesign import catalog
from codesign import validate as V
from codesign.errors import InputError
from codesign.model import hardware


def test_every_catalog_chip_names_its_family():
    assert {c: catalog.load_chip(c).family for c in catalog.list_ids("chips")} == {
        "a10": "ampere-gddr",  # GA102 on GDDR6: not the GA100 of the A100s
        "a100-pcie-80gb": "ampere-pcie",  # 300 W, TP over PCIe: apart from the SXM module (§5.4)
        "a100-sxm-40gb": "ampere",  # the 80 GB module's die, power and NVLink on HBM2
        "a100-sxm-80gb": "ampere",
        "a10g": "ampere-gddr",
        "b200": "blackwell",
        "gb200": "blackwell",
        "gh200": "hopper",  # GH100 on HBM3 with NVLink 4; higher (shared) power
        "h100-nvl": "hopper-pcie",
        "h100-pcie": "hopper-pcie",  # GH100 on a 350-400 W PCIe card, like ampere-pcie
        "h100-sxm": "hopper",
        "h20": "hopper",  # GH100 on HBM3 with NVLink 4; cut-down compute at 400 W
        "h200-sxm": "hopper",  # the H100's die on other memory (§5.10)
        "l4": "ada",
        "l40s": "ada",
        "mi300x": "cdna3",
        "mi325x": "cdna3",  # the MI300X's chiplets on HBM3E at 1000 W
        "rtx-pro-6000": "blackwell-workstation",
    }
    assert V.chip_families()["hopper"] == ("gh200", "h100-sxm", "h20", "h200-sxm")
    assert V.chip_families()["hopper-pcie"] == ("h100-nvl", "h100-pcie")
    assert V.family_of("b200") == V.family_of("gb200") == "blackwell"
    assert V.family_of("not-a-chip") == "not-a-chip"


def test_an_empty_family_is_bad_input(tmp_path):
    text = (catalog.catalog_dir("chips") / "l40s.toml").read_text()
    bad = tmp_path / "l40s.toml"
    bad.write_text(text.replace('family = "ada"', 'family = ""'))
    with pytest.raises(InputError, match="family"):
        catalog.load_chip(bad)


def _calibration_without(tmp_path, *chips: str, pooled: dict[str, float] | None = None):
    """The shipped calibration file without the ``[chips.<id>]`` tables of ``chips`` and with
    ``pooled`` as its ``[pooled]`` table (none if None)."""
    out, skip = [], False
    for line in hardware.shipped_calibration_path().read_text().splitlines():
        if line.startswith("["):
            skip = line.strip() in {f"[chips.{c}]" for c in chips} | {"[pooled]"}
        if not skip:
            out.append(line)
    if pooled is not None:
        out += ["", "[pooled]", *[f"{k} = {v!r}" for k, v in pooled.items()]]
    path = tmp_path / "cal.toml"
    path.write_text("\n".join(out) + "\n")
    return path


@contextmanager
def _in_use(path):
    """The calibration at ``path`` in use inside the block ($CODESIGN_CALIBRATION), the shipped one after."""
    old = os.environ.get(hardware.CALIBRATION_ENV)
    os.environ[hardware.CALIBRATION_ENV] = str(path)
    hardware.forget_calibration()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(hardware.CALIBRATION_ENV, None)
        else:
            os.environ[hardware.CALIBRATION_ENV] = old
        hardware.forget_calibration()


def test_a_chip_without_its_own_table_takes_its_familys(tmp_path):
    shipped_h100 = hardware.calibration_for("h100-sxm")
    shipped_default = hardware.calibration_file().default
    with _in_use(_calibration_without(tmp_path, "h200-sxm", "a100-pcie-80gb")):
        assert "h200-sxm" not in hardware.calibration_file().chips
        # the H200 has no table: it takes the H100's (the hopper family's), die cap included
        assert hardware.calibration_for("h200-sxm") == shipped_h100
        assert hardware.calibration_for("h200-sxm").memory_bandwidth_cap_GBps is not None
        # the A100 PCIe is alone in its family (ampere-pcie) and this file has no [pooled]: [default] alone
        assert hardware.calibration_for("a100-pcie-80gb").model_dump() == shipped_default.model_dump()


def test_a_chip_of_a_family_without_a_table_takes_the_pooled_fit(tmp_path):
    """A chip with no table of its own or of its family (here the A100 PCIe, alone in
    "ampere-pcie", with its table removed) takes [pooled] when the file has one, [default] when
    it has none; a 3D family keeps [default] either way (the hardware table's own path is checked
    by tests/test_model_units.py's worked example), and a chip with a table keeps it."""
    pooled = {"compute_efficiency": 0.61, "memory_efficiency": 0.77, "network_efficiency": 0.55,
              "layer_overhead_us": 3.0, "runtime_reserve_GiB": 4.5, "usable_memory_fraction": 1.0}
    shipped_h100 = hardware.calibration_for("h100-sxm")
    default = hardware.calibration_file().default.model_dump()
    for table in (None, pooled):
        with _in_use(_calibration_without(tmp_path, "a100-pcie-80gb", pooled=table)):
            assert hardware.calibration_file().pooled == table
            assert hardware.calibration_for("a100-pcie-80gb").model_dump() == {**default, **(table or {})}
            assert hardware.calibration_for("deepstack-3d", stacked=True).model_dump() == default
            assert hardware.calibration_for("h100-sxm") == shipped_h100


def test_the_pooled_table_cannot_set_an_engine_setting(tmp_path):
    bad = _calibration_without(tmp_path, pooled={"kv_cache_free_fraction": 0.95})
    with _in_use(bad), pytest.raises(InputError, match="engine setting"):
        hardware.calibration_file()


def test_a_calibration_table_with_an_unknown_key_is_bad_input(tmp_path):
    for table in ({"compute_eficiency": 0.6}, None):
        path = _calibration_without(tmp_path, pooled=table)
        if table is None:  # a chip table with a typo
            path.write_text(path.read_text().replace("[chips.l40s]\n", "[chips.l40s]\nmemory_eficiency = 0.7\n"))
        with _in_use(path), pytest.raises(InputError, match="not calibration fields"):
            hardware.calibration_file()


def test_a_pooled_table_after_the_chip_tables_survives_a_rewrite(tmp_path):
    """TOML tables may come in any order: a [pooled] written after the [chips.*] tables of the file
    a calibration starts from is carried over when the fit has no pooled family."""
    from codesign import validate as V
    from codesign.model.hardware import CalibrationFile
    from codesign.schema import load_toml

    pooled = {"compute_efficiency": 0.61, "memory_efficiency": 0.77}
    base = _calibration_without(tmp_path, pooled=pooled)  # [pooled] appended at the end
    assert base.read_text().rstrip().endswith("memory_efficiency = 0.77")
    out = tmp_path / "out.toml"
    fitted = {"ada": {"chips": ["l40s"], "params": {"compute_efficiency": 0.5}, "n_fit": 1, "fit_mape_pct": 1.0,
                      "n_held_out": 1, "held_out_mape_pct": 1.0}}
    V.write_calibration(fitted, out, base=base)
    written = CalibrationFile.model_validate(load_toml(out))
    assert written.pooled == pooled and written.chips["l40s"] == {"compute_efficiency": 0.5}
    assert [line.strip() for line in out.read_text().splitlines()].count("[pooled]") == 1
