"""codesign.model.calibration: calibration files as explicit objects. Calibration families are
data: each catalog chip names its ``family``, the fit is per family, and a chip without a table of
its own takes its family's, else ``[pooled]``, else ``[default]``."""

from __future__ import annotations

import math
import os

import pytest
import tomli_w

from codesign import catalog
from codesign.calibration.fit import chip_families, family_of
from codesign.calibration.write import write_calibration
from codesign.errors import InputError
from codesign.kinds.grid.spec import load_instance, with_budgets, with_objective
from codesign.kinds.mapping.spec import load_mapping
from codesign.kinds.placement.spec import load_placement
from codesign.model.calibration import CalibrationFile, load_calibration, shipped, shipped_path
from codesign.schema import load_toml


def test_every_catalog_chip_names_its_family():
    assert {c: catalog.load_chip(c).family for c in catalog.list_ids("chips")} == {
        "a10": "ampere-gddr",  # GA102 on GDDR6: not the GA100 of the A100s
        "a100-pcie-80gb": "ampere-pcie",  # 300 W, TP over PCIe: apart from the SXM module
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
        "h200-sxm": "hopper",  # the H100's die on other memory
        "l4": "ada",
        "l40s": "ada",
        "mi300x": "cdna3",
        "mi325x": "cdna3",  # the MI300X's chiplets on HBM3E at 1000 W
        "rtx-pro-6000": "blackwell-workstation",
    }
    assert chip_families()["hopper"] == ("gh200", "h100-sxm", "h20", "h200-sxm")
    assert chip_families()["hopper-pcie"] == ("h100-nvl", "h100-pcie")
    assert family_of("b200") == family_of("gb200") == "blackwell"
    assert family_of("not-a-chip") == "not-a-chip"


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
    for line in shipped_path().read_text().splitlines():
        if line.startswith("["):
            skip = line.strip() in {f"[chips.{c}]" for c in chips} | {"[pooled]"}
        if not skip:
            out.append(line)
    if pooled is not None:
        out += ["", "[pooled]", *[f"{k} = {v!r}" for k, v in pooled.items()]]
    path = tmp_path / "cal.toml"
    path.write_text("\n".join(out) + "\n")
    return path


def test_the_shipped_calibration_is_named_and_hashed():
    cal = shipped()
    assert cal.shipped and cal.name == "shipped" and cal.path == shipped_path().resolve()
    assert len(cal.sha256) == 64 and cal is load_calibration(shipped_path())
    assert cal.kv_cache_free_fraction == cal.file.default.kv_cache_free_fraction == 0.9


def test_a_file_of_ones_own_is_named_by_its_path_and_read_again_when_rewritten(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(shipped_path().read_text())
    mine = load_calibration(path)
    assert not mine.shipped and mine.name == str(path.resolve()) and mine.sha256 == shipped().sha256
    path.write_text(shipped_path().read_text().replace("[chips.l40s]\n", "[chips.l40s]\nhost_us_per_sequence = 3.0\n"))
    again = load_calibration(path)
    assert again.sha256 != mine.sha256 and again.for_chip("l40s").host_us_per_sequence == 3.0
    assert mine.for_chip("l40s").host_us_per_sequence == 0.0  # the object read before is unchanged


def test_a_missing_or_invalid_file_is_bad_input_naming_it(tmp_path):
    with pytest.raises(InputError, match="calibration file not found") as exc:
        load_calibration(tmp_path / "nope.toml")
    assert "nope.toml" in str(exc.value)
    bad = tmp_path / "bad.toml"
    bad.write_text("[default]\ncompute_efficiency = 2.0\n")
    with pytest.raises(InputError) as exc:
        load_calibration(bad)
    assert exc.value.file == str(bad.resolve())
    with pytest.raises(InputError, match="directory"):
        load_calibration(tmp_path)


def test_instances_carry_the_calibration_they_are_evaluated_under(tmp_path):
    """Every loader takes ``calibration=`` (the shipped one by default), and an instance derived
    from another keeps it."""
    path = tmp_path / "mine.toml"
    path.write_text(shipped_path().read_text() + "\n")
    mine = load_calibration(path)
    inst = load_instance("tiny-3d-llama8b")
    assert inst.calibration is shipped()
    inst = load_instance("tiny-3d-llama8b", calibration=mine)
    assert inst.calibration is mine
    assert with_budgets(inst, ["tokens_per_s >= 1"]).calibration is mine
    assert with_objective(inst, "energy_per_token_J").calibration is mine
    assert load_mapping("tiny-pf-mapping", calibration=mine).calibration is mine
    assert load_mapping("tiny-pf-mapping").calibration is shipped()
    assert load_placement("tiny-placement-mixtral", calibration=mine).calibration is mine


def test_a_chip_without_its_own_table_takes_its_familys(tmp_path):
    cal = load_calibration(_calibration_without(tmp_path, "h200-sxm", "a100-pcie-80gb"))
    assert "h200-sxm" not in cal.file.chips
    # the H200 has no table: it takes the H100's (the hopper family's), die cap included
    assert cal.for_chip("h200-sxm") == shipped().for_chip("h100-sxm")
    assert cal.for_chip("h200-sxm").memory_bandwidth_cap_GBps is not None
    # the A100 PCIe is alone in its family (ampere-pcie) and this file has no [pooled]: [default] alone
    assert cal.for_chip("a100-pcie-80gb").model_dump() == shipped().default.model_dump()


def test_a_chip_of_a_family_without_a_table_takes_the_pooled_fit(tmp_path):
    """A chip with no table of its own or of its family (here the A100 PCIe, alone in
    "ampere-pcie", with its table removed) takes [pooled] when the file has one, [default] when
    it has none; a 3D family keeps [default] either way, and a chip with a table keeps it."""
    pooled = {"compute_efficiency": 0.61, "memory_efficiency": 0.77, "network_efficiency": 0.55,
              "layer_overhead_us": 3.0, "runtime_reserve_GiB": 4.5, "usable_memory_fraction": 1.0}
    default = shipped().default.model_dump()
    for table in (None, pooled):
        cal = load_calibration(_calibration_without(tmp_path, "a100-pcie-80gb", pooled=table))
        assert cal.file.pooled == table
        assert cal.for_chip("a100-pcie-80gb").model_dump() == {**default, **(table or {})}
        assert cal.for_chip("deepstack-3d", stacked=True).model_dump() == default
        assert cal.for_chip("h100-sxm") == shipped().for_chip("h100-sxm")


def test_the_engine_fraction_is_one_setting_for_every_chip(tmp_path):
    data = load_toml(shipped_path())
    data["chips"]["l40s"] = {**data["chips"].get("l40s", {}), "kv_cache_free_fraction": 0.95}
    with pytest.raises(ValueError, match="engine setting"):
        CalibrationFile.model_validate(data)
    with pytest.raises(InputError, match="engine setting"):
        load_calibration(_calibration_without(tmp_path, pooled={"kv_cache_free_fraction": 0.95}))


def test_a_calibration_table_with_an_unknown_key_or_chip_is_bad_input(tmp_path):
    for table in ({"compute_eficiency": 0.6}, None):
        path = _calibration_without(tmp_path, pooled=table)
        if table is None:  # a chip table with a typo
            path.write_text(path.read_text().replace("[chips.l40s]\n", "[chips.l40s]\nmemory_eficiency = 0.7\n"))
        with pytest.raises(InputError, match="not calibration fields"):
            load_calibration(path)
    path = _calibration_without(tmp_path)
    path.write_text(path.read_text().replace("[chips.l40s]\n", "[chips.l40z]\n"))
    with pytest.raises(InputError, match="names no catalog chip") as exc:
        load_calibration(path)
    assert exc.value.key == "chips.l40z" and "l40s" in (exc.value.suggestion or "")


def test_a_pooled_table_after_the_chip_tables_survives_a_rewrite(tmp_path):
    """TOML tables may come in any order: a [pooled] written after the [chips.*] tables of the file
    a calibration starts from is carried over when the fit has no pooled family."""
    pooled = {"compute_efficiency": 0.61, "memory_efficiency": 0.77}
    base = _calibration_without(tmp_path, pooled=pooled)  # [pooled] appended at the end
    assert base.read_text().rstrip().endswith("memory_efficiency = 0.77")
    out = tmp_path / "out.toml"
    fitted = {"ada": {"chips": ["l40s"], "params": {"compute_efficiency": 0.5}, "n_fit": 1, "fit_mape_pct": 1.0,
                      "n_held_out": 1, "held_out_mape_pct": 1.0}}
    write_calibration(fitted, out, base=base)
    written = CalibrationFile.model_validate(load_toml(out))
    assert written.pooled == pooled and written.chips["l40s"] == {"compute_efficiency": 0.5}
    assert [line.strip() for line in out.read_text().splitlines()].count("[pooled]") == 1


# --- bad input a fuzzer tries (issue 34, part 3) ------------------------------------------------------


def _shipped_with(tmp_path, table: tuple[str, ...], key: str, value: float):
    data = load_toml(shipped_path())
    node = data
    for part in table:
        node = node[part]
    node[key] = value
    path = tmp_path / "cal.toml"
    path.write_text(tomli_w.dumps(data))
    return path


@pytest.mark.parametrize(("table", "key", "value"), [(("chips", "h100-sxm"), "compute_efficiency", 5.0),
                                                     (("chips", "l40s"), "memory_efficiency", -0.5),
                                                     (("pooled",), "stream_overlap", 2.0)])
def test_a_chip_table_out_of_range_is_refused_at_load_not_when_a_chip_takes_it(tmp_path, table, key, value):
    # once a pydantic traceback at the first evaluation of that chip
    path = _shipped_with(tmp_path, table, key, value)
    with pytest.raises(InputError) as exc:
        load_calibration(path)
    assert exc.value.key == ".".join((*table, key)) and exc.value.file == str(path.resolve())


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_calibration_value_is_refused(tmp_path, value):
    path = _shipped_with(tmp_path, ("chips", "h100-sxm"), "layer_overhead_us", value)
    with pytest.raises(InputError, match="finite") as exc:
        load_calibration(path)
    assert exc.value.key == "chips.h100-sxm.layer_overhead_us"


def test_a_calibration_that_is_not_a_regular_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo.toml")  # read_bytes would wait for a writer
    with pytest.raises(InputError, match="FIFO") as exc:
        load_calibration(tmp_path / "fifo.toml")
    assert exc.value.key == "--calibration"
    (tmp_path / "zero.toml").symlink_to("/dev/zero")  # would never end
    with pytest.raises(InputError, match="character device"):
        load_calibration(tmp_path / "zero.toml")
    (tmp_path / "loop.toml").symlink_to(tmp_path / "loop.toml")  # Path.resolve raised RuntimeError
    with pytest.raises(InputError, match="cannot read the calibration file"):
        load_calibration(tmp_path / "loop.toml")


def test_an_infinite_cap_is_no_cap_and_the_only_infinity_a_calibration_holds(tmp_path):
    # codesign calibrate writes memory_bandwidth_cap_GBps = inf over a [default] that sets a cap
    path = _shipped_with(tmp_path, ("chips", "h100-sxm"), "memory_bandwidth_cap_GBps", math.inf)
    assert load_calibration(path).for_chip("h100-sxm").memory_bandwidth_cap_GBps == math.inf
    for key, value in (("memory_bandwidth_cap_GBps", math.nan), ("memory_bandwidth_cap_GBps", -math.inf),
                       ("compute_efficiency", math.inf)):
        with pytest.raises(InputError) as exc:
            load_calibration(_shipped_with(tmp_path, ("chips", "h100-sxm"), key, value))
        assert exc.value.key == f"chips.h100-sxm.{key}"
