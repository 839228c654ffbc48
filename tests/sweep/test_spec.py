"""codesign.sweep.spec: a SPEC's points (the product of the axes that apply to each instance, a
note where one does not), their ids, the substitutions, and bad SPECs as InputErrors naming file,
key and value."""

from __future__ import annotations

from pathlib import Path

import pytest

from codesign.errors import InputError
from codesign.kinds.registry import load
from codesign.sweep.spec import load_sweep


def spec(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_product_of_instances_objectives_and_budgets(tmp_path):
    s = load_sweep(spec(tmp_path, """
instances = ["tiny-3d-llama8b", "small-3d-llama8b"]
objectives = ["tokens_per_s", "energy_per_token_J"]
[grid]
"power_W <=" = [60, 80, 100]
"clock_GHz <=" = [1.2, 1.6]
"""))
    assert len(s.points) == 2 * 2 * 3 * 2
    assert s.axis_columns == ["chip", "workload", "objective", "power_W <=", "clock_GHz <="]
    first = s.points[0]
    assert first.instance == "tiny-3d-llama8b" and first.kind == "grid" and first.invalid is None
    assert first.axes == {"chip": None, "workload": None, "objective": "tokens_per_s", "power_W <=": 60,
                          "clock_GHz <=": 1.2}
    assert first.job.budgets == ("power_W <= 60", "clock_GHz <= 1.2") and first.job.objective == "tokens_per_s"
    assert first.job.calibration is None and first.job.calibration_sha256  # the shipped calibration
    assert len({p.id for p in s.points}) == len(s.points)
    # the job is the instance with the budgets and objective applied: the same content as by hand
    p = load("tiny-3d-llama8b").with_budgets(["power_W <= 60", "clock_GHz <= 1.2"]).with_objective("tokens_per_s")
    assert first.job.problem().content_hash == p.content_hash


def test_point_ids_are_stable_and_keep_unchanged_points_when_the_spec_grows(tmp_path):
    a = load_sweep(spec(tmp_path, 'instances = ["tiny-3d-llama8b"]\n[grid]\n"power_W <=" = [60, 80]\n'))
    b = load_sweep(spec(tmp_path, 'instances = ["tiny-3d-llama8b"]\n[grid]\n"power_W <=" = [80, 60, 100]\n', "b.toml"))
    assert {p.id for p in a.points} < {p.id for p in b.points}
    c = load_sweep(spec(tmp_path, 'instances = ["tiny-3d-llama8b"]\nsolver = "cpsat"\n[grid]\n"power_W <=" = [60]\n', "c.toml"))
    assert c.points[0].id not in {p.id for p in a.points}  # another solver: another point


def test_axes_that_do_not_apply_collapse_with_a_note(tmp_path):
    s = load_sweep(spec(tmp_path, """
instances = ["tiny-3d-llama8b", "dgx-llama70b-chip-choice", "tiny-pf-mapping", "tiny-placement-mixtral"]
objectives = ["tokens_per_s", "energy_per_token_J"]
[grid]
"power_W <=" = [60, 700]
"clock_GHz <=" = [1.2, 1.6]
[substitute]
chip = ["h100-sxm", "b200"]
"""))
    by = {}
    for p in s.points:
        by.setdefault(p.instance, []).append(p)
    # 3D tiles: no catalog chip -> 2 objectives x 2 powers x 2 clocks
    assert len(by["tiny-3d-llama8b"]) == 8
    assert all("chip: a stacked-3d instance has no catalog chip" in p.notes[0] for p in by["tiny-3d-llama8b"])
    # catalog chips: no clock decision -> 2 chips x 2 objectives x 2 powers; the chip decision fixed
    dgx = by["dgx-llama70b-chip-choice"]
    assert len(dgx) == 8 and {p.axes["chip"] for p in dgx} == {"h100-sxm", "b200"}
    assert all(p.axes["clock_GHz <="] is None for p in dgx)
    assert any("clock_GHz <=" in n and "axis skipped" in n for n in dgx[0].notes)
    assert "chip: the chip decision fixed to h100-sxm" in dgx[0].notes
    assert dgx[0].job.problem().decisions()[0].domain == ("h100-sxm",)
    # a mapping: both objectives, no power or clock of its own (axes skipped), the chip substituted
    pts = by["tiny-pf-mapping"]
    assert len(pts) == 4 and {p.axes["objective"] for p in pts} == {"tokens_per_s", "energy_per_token_J"}
    assert any("'power_W' is no metric of a mapping design; axis skipped" in n for n in pts[0].notes)
    assert {p.job.problem().data["devices"][0]["chip"] for p in pts} == {"h100-sxm", "b200"}
    # a placement: its own objective, no budgets, the chip substituted
    pts = by["tiny-placement-mixtral"]
    assert len(pts) == 2 and all(p.axes["objective"] == "tokens_per_s" for p in pts)
    assert any("keep their own (tokens_per_s)" in n for n in pts[0].notes)
    assert any("take no budgets" in n for n in pts[0].notes)
    assert {p.job.problem().data["devices"]["chip"] for p in pts} == {"h100-sxm", "b200"}


def test_workload_substitution(tmp_path):
    s = load_sweep(spec(tmp_path, """
instances = ["dgx-llama70b-chip-choice", "deepstack-multi-workload"]
[substitute]
workload = ["llama-3.1-8b", "qwen3-32b"]
"""))
    dgx = [p for p in s.points if p.instance == "dgx-llama70b-chip-choice"]
    assert [p.job.problem().data["workloads"][0]["workload"] for p in dgx] == ["llama-3.1-8b", "qwen3-32b"]
    multi = [p for p in s.points if p.instance == "deepstack-multi-workload"]
    assert len(multi) == 1 and "workloads, the axis names one model; axis skipped" in multi[0].notes[0]


def test_a_substitution_the_instance_refuses_makes_invalid_points(tmp_path):
    # the mixtral placement's routing profile has 8 weights: a model with 128 experts does not fit it
    s = load_sweep(spec(tmp_path, 'instances = ["tiny-placement-mixtral"]\n[substitute]\nworkload = ["mixtral-8x7b", "qwen3-30b-a3b"]\n'))
    ok, bad = s.points
    assert ok.invalid is None and ok.job is not None
    assert bad.job is None and bad.invalid.startswith("tiny-placement-mixtral with workload=qwen3-30b-a3b: ")


def test_instance_paths_are_relative_to_the_spec(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mine.toml").write_text(load("tiny-3d-llama8b").source.read_text())
    s = load_sweep(spec(tmp_path / "sub", 'instances = ["mine.toml"]\n'))
    assert len(s.points) == 1 and s.points[0].name == "tiny-3d-llama8b"


@pytest.mark.parametrize(("text", "key", "pieces"), [
    ('instances = ["tiny-3d-llama8b"]\nobjective = ["tokens_per_s"]\n', "objective", ["unknown key", "objectives"]),
    ('instances = []\n', "instances", []),
    ('instances = ["tiny-3d-lama8b"]\n', "instances[0]", ["unknown instance", "tiny-3d-llama8b"]),
    ('instances = ["tiny-3d-llama8b", "tiny-3d-llama8b"]\n', "instances[1]", ["given twice"]),
    ('instances = ["tiny-3d-llama8b"]\nobjectives = ["tokens"]\n', "objectives[0]", ["tokens_per_s"]),
    ('instances = ["tiny-3d-llama8b"]\nsolver = "gurobi"\n', "solver", ["unknown solver"]),
    ('instances = ["tiny-3d-llama8b"]\ntime_limit = -1\n', "time_limit", ["positive"]),
    ('instances = ["tiny-3d-llama8b"]\n[grid]\n"power_W" = [60]\n', "grid.power_W", ['"EXPR <="']),
    ('instances = ["tiny-3d-llama8b"]\n[grid]\n"power_W <=" = []\n', "grid.power_W <=", ["without values"]),
    ('instances = ["tiny-3d-llama8b"]\n[grid]\n"power_W <=" = ["60"]\n', "grid.power_W <=[0]", []),
    ('instances = ["tiny-3d-llama8b"]\n[grid]\n"power_W <=" = [60, 60]\n', "grid.power_W <=[1]", ["twice"]),
    ('instances = ["tiny-3d-llama8b"]\n[grid]\n"powr_W <=" = [60]\n', "grid.powr_W <=", ["no instance", "powr_W"]),
    ('instances = ["tiny-3d-llama8b"]\n[substitute]\nchip = ["h100"]\n', "substitute.chip[0]", ["h100-sxm"]),
    ('instances = ["tiny-3d-llama8b"]\n[substitute]\nworkload = ["llama-70b"]\n', "substitute.workload[0]", ["no catalog"]),
    ('instances = ["tiny-3d-llama8b"]\n[substitute]\nmodel = ["x"]\n', "substitute.model", ["unknown key"]),
])
def test_bad_specs_name_file_key_and_value(tmp_path, text, key, pieces):
    path = spec(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_sweep(path)
    exc = info.value
    assert exc.file == str(path) and exc.key == key, (exc.file, exc.key, str(exc))
    for piece in pieces:
        assert piece in str(exc), str(exc)


def test_a_budget_that_applies_to_some_instances_only_is_no_error(tmp_path):
    s = load_sweep(spec(tmp_path, 'instances = ["deepstack-multi-workload", "tiny-3d-llama8b"]\n[grid]\n"tpot_s <=" = [0.05]\n'))
    multi, tiny = s.points
    assert multi.axes["tpot_s <="] is None and "belongs to a workload" in multi.notes[0]
    assert tiny.axes["tpot_s <="] == 0.05 and tiny.job.budgets == ("tpot_s <= 0.05",)


def test_the_same_instance_by_name_and_by_path_is_one_point_twice(tmp_path):
    path = load("tiny-3d-llama8b").source
    with pytest.raises(InputError, match="same point twice"):
        load_sweep(spec(tmp_path, f'instances = ["tiny-3d-llama8b", "{path}"]\n'))


def test_threads_are_refused_by_the_drivers_rule_before_any_point_runs(tmp_path, monkeypatch):
    """threads = 2**62 passed the SPEC and failed every point (HiGHS rejected the option, exit 1):
    the SPEC's threads now meet the driver's check_limits, its file and key named (found by
    tools/fuzz_cli.py)."""
    import codesign.sweep.spec as spec_module

    def limits(time_limit: float | None, threads: int | None = None) -> None:
        if threads is not None and threads > 64:
            raise InputError("too many threads", key="--threads", value=threads, expected="0 to 64")

    monkeypatch.setattr(spec_module, "check_limits", limits)
    path = spec(tmp_path, 'instances = ["tiny-3d-llama8b"]\nthreads = 4611686018427387904\n')
    with pytest.raises(InputError) as info:
        load_sweep(path)
    assert info.value.file == str(path) and info.value.key == "threads" and "0 to 64" in str(info.value)
