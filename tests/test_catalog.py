"""Catalog: every shipped file loads, references resolve, hand-derived figures hold, bad files fail clearly.

Hand-derived figures checked here:
    HBM3 per stack          1024 pins x 6.4 Gb/s / 8          = 819.2 GB/s
    Photonic Fabric port    7.2 Tbit/s x 1000 / 8             = 900 GB/s
    Photonic Fabric switch  115 Tbit/s x 1000 / 8             = 14,375 GB/s
    16 ports                16 x 900                          = 14,400 GB/s
    one-switch path         electrical 65 + 35 + 65 = 165, photonic 5 + 25 + 5 = 35 pJ/bit (-78.8 %)
    intra-tray              electrical 50 -> photonic 10 pJ/bit (-80 %)
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codesign import catalog
from codesign.catalog import (
    check_references,
    intra_tray_energy_pJ_per_bit,
    list_ids,
    load_appliance,
    load_chip,
    load_interconnect,
    load_memory,
    path_energy_pJ_per_bit,
)
from codesign.errors import InputError
from codesign.paths import catalog_dir

REQUIRED = {
    "chips": {
        "a100-sxm-80gb",
        "a100-pcie-80gb",
        "h100-sxm",
        "h200-sxm",
        "b200",
        "gb200",
        "l40s",
        "mi300x",
        "rtx-pro-6000",
        "h100-pcie",
        "h100-nvl",
        "gh200",
        "h20",
        "l4",
        "a10g",
        "a10",
        "a100-sxm-40gb",
        "mi325x",
    },
    "memory": {"hbm3", "hbm3e", "hbm4", "ddr5", "gddr6", "gddr7", "hybrid-bonded-3d-dram"},
    "interconnects": {
        "nvlink4",
        "nvlink5",
        "infinity-fabric",
        "pcie-gen4-x16",
        "pcie-gen5-x16",
        "infiniband-ndr-400g",
        "ethernet-400g",
        "ucie-2d",
        "ucie-2.5d",
        "hybrid-bond-3d",
        "nvlink-c2c",
        "serdes-112g",
        "photonic-fabric-link",
    },
    "appliances": {"photonic-fabric-appliance"},
}
LOADERS = {
    "chips": load_chip,
    "memory": load_memory,
    "interconnects": load_interconnect,
    "appliances": load_appliance,
}


# ---- shipped files ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", catalog.KINDS)
def test_required_entries_are_shipped(kind: str) -> None:
    assert REQUIRED[kind] <= set(list_ids(kind))


@pytest.mark.parametrize(("kind", "entry_id"), [(k, i) for k in catalog.KINDS for i in list_ids(k)])
def test_every_file_loads_with_matching_id_and_a_source(kind: str, entry_id: str) -> None:
    entry = LOADERS[kind](entry_id)
    assert entry.id == entry_id
    assert entry.sources and all(s.strip() for s in entry.sources)


def test_cross_references_resolve() -> None:
    check_references()


def test_loading_is_cached() -> None:
    assert load_chip("h100-sxm") is load_chip("h100-sxm")


def test_load_by_path_equals_load_by_id() -> None:
    path = catalog_dir("chips") / "h100-sxm.toml"
    assert load_chip(path) == load_chip("h100-sxm")
    assert load_chip(str(path)) == load_chip("h100-sxm")


def test_unknown_die_area_is_an_explicit_assumption() -> None:
    for chip_id in list_ids("chips"):
        chip = load_chip(chip_id)
        if chip.die_area_mm2 == 0:
            assert any(a.startswith("die_area_mm2:") for a in chip.assumptions), chip_id


# ---- hand-derived figures -----------------------------------------------------------------------
def test_hbm3_bandwidth_per_stack() -> None:
    """1024 pins x 6.4 Gb/s / 8 bit/B = 819.2 GB/s."""
    hbm3 = load_memory("hbm3")
    assert hbm3.bandwidth_per_stack_GBps == pytest.approx(819.2, rel=1e-12)
    assert hbm3.bandwidth_per_stack_Bps == pytest.approx(819.2e9, rel=1e-12)


def test_h100_bf16_peak() -> None:
    h100 = load_chip("h100-sxm")
    assert h100.peak_dense_TFLOPS["bf16"] == 989.4
    assert h100.peak_dense_FLOPS("bf16") == pytest.approx(989.4e12, rel=1e-12)
    assert h100.memory_capacity_B == 80 * 2**30  # 5 stacks x 16 GiB
    assert h100.scale_up_bandwidth_GBps_per_direction * 2 == 900  # NVLink4 "900 GB/s"


def test_missing_precision_is_an_input_error() -> None:
    with pytest.raises(InputError) as exc:
        load_chip("h100-sxm").peak_dense_FLOPS("fp4")
    assert exc.value.key == "peak_dense_TFLOPS"
    assert exc.value.value == "fp4"


def test_photonic_fabric_port_and_switch_bandwidth() -> None:
    """7.2 Tbit/s = 900 GB/s per port; 115 Tbit/s = 14,375 GB/s; 16 x 900 = 14,400 GB/s."""
    pfa = load_appliance("photonic-fabric-appliance")
    assert pfa.port_bandwidth_GBps == pytest.approx(900.0, rel=1e-12)
    assert pfa.switching_capacity_GBps == pytest.approx(14_375.0, rel=1e-12)
    assert pfa.total_port_bandwidth_GBps == pytest.approx(14_400.0, rel=1e-12)
    assert sum(t.capacity_TB for t in pfa.tiers) == pytest.approx(pfa.pooled_capacity_TB)


def test_one_switch_path_energy() -> None:
    """E = 2 E_adapter + 1 E_switch: electrical 165, photonic 35 pJ/bit, a 78.8 % reduction."""
    pfa = load_appliance("photonic-fabric-appliance")
    electrical = path_energy_pJ_per_bit(pfa, "electrical", switches=1)
    photonic = path_energy_pJ_per_bit(pfa, "photonic", switches=1)
    assert electrical == 165
    assert photonic == 35
    assert round(100 * (1 - photonic / electrical), 1) == 78.8


def test_intra_tray_energy() -> None:
    """Intra-tray: electrical (NVLink) 50 -> photonic 10 pJ/bit, an 80 % reduction."""
    pfa = load_appliance("photonic-fabric-appliance")
    electrical = intra_tray_energy_pJ_per_bit(pfa, "electrical")
    photonic = intra_tray_energy_pJ_per_bit(pfa, "photonic")
    assert (electrical, photonic) == (50, 10)
    assert 1 - photonic / electrical == pytest.approx(0.80)


@pytest.mark.parametrize(("switches", "expected"), [(0, 130), (1, 165), (2, 200), (3, 235)])
def test_path_energy_is_linear_in_switches(switches: int, expected: float) -> None:
    pfa = load_appliance("photonic-fabric-appliance")
    assert path_energy_pJ_per_bit(pfa, "electrical", switches) == expected


@pytest.mark.parametrize("switches", [-1, 1.5, True])
def test_path_energy_rejects_bad_switch_count(switches: object) -> None:
    pfa = load_appliance("photonic-fabric-appliance")
    with pytest.raises(InputError):
        path_energy_pJ_per_bit(pfa, "photonic", switches)  # type: ignore[arg-type]


def test_path_energy_rejects_unknown_medium() -> None:
    pfa = load_appliance("photonic-fabric-appliance")
    with pytest.raises(InputError) as exc:
        path_energy_pJ_per_bit(pfa, "photonik", 1)  # type: ignore[arg-type]
    assert exc.value.suggestion == "did you mean 'photonic'?"


# ---- unknown ids --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("loader", "typo", "meant"),
    [
        (load_chip, "h100-sxn", "h100-sxm"),
        (load_memory, "hbm3-e", "hbm3e"),
        (load_interconnect, "nvlink-4", "nvlink4"),
        (load_appliance, "photonic-fabric-appliances", "photonic-fabric-appliance"),
    ],
)
def test_unknown_id_suggests_the_closest(loader, typo: str, meant: str) -> None:
    with pytest.raises(InputError) as exc:
        loader(typo)
    assert exc.value.value == typo
    assert exc.value.suggestion == f"did you mean {meant!r}?"
    assert meant in (exc.value.expected or "")


def test_unknown_kind_suggests_the_closest() -> None:
    with pytest.raises(InputError) as exc:
        list_ids("chip")
    assert exc.value.suggestion == "did you mean 'chips'?"


# ---- malformed files ----------------------------------------------------------------------------
def _variant(tmp_path: Path, kind: str, entry_id: str, old: str, new: str) -> Path:
    """A copy of a shipped file with one line changed, written under tmp_path/<entry_id>.toml."""
    text = (catalog_dir(kind) / f"{entry_id}.toml").read_text()
    assert old in text, f"{old!r} not found in {entry_id}"
    path = tmp_path / f"{entry_id}.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "key", "value"),
    [
        # unknown key (a misspelt optional key)
        ("notes = ", "note = ", "note", None),
        # negative bandwidth
        (
            "memory_bandwidth_GBps = 3350",
            "memory_bandwidth_GBps = -3350",
            "memory_bandwidth_GBps",
            -3350,
        ),
        # wrong type: a quoted number is not coerced
        (
            "memory_bandwidth_GBps = 3350",
            'memory_bandwidth_GBps = "3350"',
            "memory_bandwidth_GBps",
            "3350",
        ),
        # wrong type inside an inline table
        ("bf16 = 989.4", 'bf16 = "fast"', "peak_dense_TFLOPS.bf16", "fast"),
        # wrong type for an integer field
        ("scale_up_domain_size = 8", "scale_up_domain_size = 8.5", "scale_up_domain_size", 8.5),
    ],
)
def test_malformed_chip_names_the_key(
    tmp_path: Path, old: str, new: str, key: str, value: object
) -> None:
    path = _variant(tmp_path, "chips", "h100-sxm", old, new)
    with pytest.raises(InputError) as exc:
        load_chip(path)
    assert exc.value.key == key
    assert exc.value.file == str(path.resolve())
    if value is not None:
        assert exc.value.value == value


def test_misspelt_key_gets_a_suggestion(tmp_path: Path) -> None:
    path = _variant(tmp_path, "chips", "h100-sxm", "notes = ", "note = ")
    with pytest.raises(InputError) as exc:
        load_chip(path)
    assert exc.value.suggestion == "did you mean 'notes'?"


def test_misspelt_required_key_names_one_of_the_two(tmp_path: Path) -> None:
    """A misspelt required key is both missing and unknown; either report names the key."""
    path = _variant(
        tmp_path, "chips", "h100-sxm", "memory_bandwidth_GBps = 3350", "memory_bandwidth_GBs = 3350"
    )
    with pytest.raises(InputError) as exc:
        load_chip(path)
    assert exc.value.key in {"memory_bandwidth_GBps", "memory_bandwidth_GBs"}


def test_unknown_precision_is_rejected(tmp_path: Path) -> None:
    path = _variant(tmp_path, "chips", "h100-sxm", "fp8 = 1978.9", "fp6 = 1978.9")
    with pytest.raises(InputError) as exc:
        load_chip(path)
    assert exc.value.key == "peak_dense_TFLOPS"
    assert "fp6" in exc.value.message


def test_zero_die_area_needs_an_assumption(tmp_path: Path) -> None:
    path = _variant(tmp_path, "chips", "h100-sxm", "die_area_mm2 = 814", "die_area_mm2 = 0")
    with pytest.raises(InputError) as exc:
        load_chip(path)
    assert exc.value.key == "assumptions"
    assert "die_area_mm2" in exc.value.message


def test_assumption_must_name_a_key(tmp_path: Path) -> None:
    path = _variant(
        tmp_path, "chips", "h200-sxm", '"memory_capacity_GiB: NVIDIA', '"memory_size: NVIDIA'
    )
    with pytest.raises(InputError) as exc:
        load_chip(path)
    assert exc.value.key == "assumptions"
    assert "memory_size" in exc.value.message


def test_nested_appliance_error_names_the_key_path(tmp_path: Path) -> None:
    path = _variant(
        tmp_path, "appliances", "photonic-fabric-appliance", "adapter = 5 ", "adapter = -5 "
    )
    with pytest.raises(InputError) as exc:
        load_appliance(path)
    assert exc.value.key == "energy_pJ_per_bit.photonic.adapter"
    assert exc.value.value == -5


def test_appliance_tiers_must_add_up(tmp_path: Path) -> None:
    path = _variant(
        tmp_path,
        "appliances",
        "photonic-fabric-appliance",
        "capacity_TB = 30.848",
        "capacity_TB = 20",
    )
    with pytest.raises(InputError) as exc:
        load_appliance(path)
    assert exc.value.key == "tiers"


def test_stacked_memory_needs_tsv_pitch(tmp_path: Path) -> None:
    path = _variant(tmp_path, "memory", "hbm3", "tsv_pitch_um = 30\n", "")
    with pytest.raises(InputError) as exc:
        load_memory(path)
    assert exc.value.key == "tsv_pitch_um"


def test_toml_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('id = "broken"\nname = \n')
    with pytest.raises(InputError) as exc:
        load_chip(path)
    assert "not valid TOML" in exc.value.message


# ---- broken cross-references --------------------------------------------------------------------
@pytest.fixture
def tmp_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped catalog under tmp_path, which the catalog module then reads."""
    for kind in catalog.KINDS:
        (tmp_path / kind).mkdir()
        for src in catalog_dir(kind).glob("*.toml"):
            (tmp_path / kind / src.name).write_text(src.read_text())
    monkeypatch.setattr(catalog, "catalog_dir", lambda kind: tmp_path / kind)
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_missing_memory_reference(tmp_catalog: Path) -> None:
    _edit(
        tmp_catalog / "chips" / "h100-sxm.toml",
        'memory_technology = "hbm3"',
        'memory_technology = "hbm-3"',
    )
    with pytest.raises(InputError) as exc:
        check_references()
    assert exc.value.key == "memory_technology"
    assert exc.value.suggestion == "did you mean 'hbm3'?"


def test_scale_up_kind_must_fit_domain(tmp_catalog: Path) -> None:
    # the RTX PRO 6000 workstation card has a scale-up domain of 1 (the L40S may get a PCIe
    # server's domain one day, so it is not the fixture)
    _edit(
        tmp_catalog / "chips" / "rtx-pro-6000.toml",
        'scale_up_interconnect = "pcie-gen5-x16"',
        'scale_up_interconnect = "nvlink4"',
    )
    with pytest.raises(InputError) as exc:
        check_references()
    assert exc.value.key == "scale_up_interconnect"


def test_missing_tier_memory_reference(tmp_catalog: Path) -> None:
    _edit(
        tmp_catalog / "appliances" / "photonic-fabric-appliance.toml",
        'memory_technology = "ddr5"',
        'memory_technology = "ddr6"',
    )
    with pytest.raises(InputError) as exc:
        check_references()
    assert exc.value.key == "tiers[1].memory_technology"


def test_file_id_must_match_its_name(tmp_catalog: Path) -> None:
    _edit(tmp_catalog / "chips" / "l40s.toml", 'id = "l40s"', 'id = "l40"')
    with pytest.raises(InputError) as exc:
        load_chip("l40s")
    assert exc.value.key == "id"


# --- entries given by path: bad input a fuzzer tries (issue 34, part 3) ------------------------------


def test_a_chip_path_that_is_a_symlink_loop_fifo_or_device_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "loop.toml").symlink_to(tmp_path / "loop.toml")  # Path.resolve raised RuntimeError
    with pytest.raises(InputError, match="cannot read the TOML file"):
        load_chip(str(tmp_path / "loop.toml"))
    os.mkfifo(tmp_path / "fifo.toml")  # would wait for a writer
    with pytest.raises(InputError, match="FIFO"):
        load_chip(str(tmp_path / "fifo.toml"))
    (tmp_path / "zero.toml").symlink_to("/dev/zero")  # would never end
    with pytest.raises(InputError, match="character device"):
        load_memory(str(tmp_path / "zero.toml"))


@pytest.mark.parametrize("field", ["memory_bandwidth_GBps", "tdp_W"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_non_finite_figure_in_a_chip_file_is_refused(tmp_path: Path, field: str, value: str) -> None:
    text = (catalog_dir("chips") / "h100-sxm.toml").read_text()
    path = tmp_path / "chip.toml"
    path.write_text("\n".join(f"{field} = {value}" if line.startswith(f"{field} =") else line
                              for line in text.splitlines()))
    with pytest.raises(InputError, match="finite") as exc:
        load_chip(str(path))
    assert exc.value.key == field


def test_the_family_of_a_name_no_file_can_have_is_its_own() -> None:
    assert catalog.chip_family("x" * 300) == "x" * 300  # Path.is_file raised "File name too long"
    assert catalog.chip_family("a\x00b") == "a\x00b"
    assert catalog.chip_family("h100-sxm") == "hopper"


def test_a_chip_peak_out_of_its_physical_range_is_refused(tmp_path: Path) -> None:
    # a subnormal peak made an infinite time per FLOP: an IndexError building the MIP
    text = (catalog_dir("chips") / "h100-sxm.toml").read_text().replace("fp8 = 1978.9", "fp8 = 5e-324")
    (tmp_path / "chip.toml").write_text(text)
    with pytest.raises(InputError, match="1 GFLOP/s to 1 EFLOP/s") as exc:
        load_chip(str(tmp_path / "chip.toml"))
    assert exc.value.key == "peak_dense_TFLOPS"
