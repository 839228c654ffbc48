"""codesign.cli.problems: ``instances``, ``show``, ``evaluate``, ``metrics`` and ``generate`` —
their JSON (the same record keys on every kind), what people read, and bad input (exit 2, a
message naming the file, key and value, no traceback)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = "tiny-3d-llama8b"
KINDS = {"grid": TINY, "mapping": "tiny-pf-mapping", "placement": "tiny-placement-mixtral", "training": "tiny-pf-train"}
#: the keys every evaluation record carries (issue 28 item 3)
RECORD_KEYS = {"design", "metrics", "objective", "feasible", "lints", "violations", "audit", "instance", "kind",
               "instance_hash", "instance_data", "objective_metric", "sense", "calibration"}
NOT_UTF8 = b"\x89PNG\x00\xff\xfe"


# --------------------------------------------------------------------------------------------------
# instances / show / metrics
# --------------------------------------------------------------------------------------------------


def test_instances_lists_every_kind_with_exact_sizes(cli_json):
    rows = cli_json("instances")
    by_name = {r["name"]: r for r in rows}
    assert len(rows) >= 22 and {r["kind"] for r in rows} >= {"grid", "mapping", "placement", "training"}
    assert all(isinstance(r["space_size"], int) for r in rows)
    assert by_name[TINY]["space_size"] == 432
    # exact integers survive JSON even past 2**53
    assert by_name["deepstack-multi-workload"]["space_size"] == 208_042_343_792_640_000
    assert by_name["tiny-placement-mixtral"]["space_size"] == 4**8 * 6
    assert by_name["tiny-pf-mapping"]["kind"] == "mapping" and by_name["tiny-pf-mapping"]["objective"] == "tokens_per_s"


def test_instances_say_which_decision_groups_each_decides(cli_json):
    by_name = {r["name"]: r["decision_groups"] for r in cli_json("instances")}
    # tiny-3d: six hardware knobs and tp/batch free, both tiers fixed to "local"
    assert by_name[TINY] == ["hardware", "parallelism"]
    # the appliance instances choose where weights and KV live as well
    assert by_name["pf-llama405b-paper"] == ["hardware", "parallelism", "mapping"]
    # a mapping: layers to stages, tiers per layer, port attachment
    assert by_name["tiny-pf-mapping"] == ["mapping", "placement"]
    assert by_name["tiny-placement-mixtral"] == ["placement"]
    # a joint mapping: module count and ports per GPU decided with the mapping
    assert by_name["pf-llama405b-joint"] == by_name["pf-dense1t-joint"] == ["hardware", "mapping", "placement"]
    # ... and a chip per pair of stages
    assert by_name["hetero-pipeline-405b-joint"] == ["hardware", "mapping", "placement"]
    shown = cli_json("show", TINY)
    assert shown["decision_groups"] == ["hardware", "parallelism"]
    groups = {d["name"]: d["group"] for d in shown["decisions"]}
    assert groups["dram_layers"] == "hardware" and groups["tp"] == "parallelism" and groups["kv_tier"] == "mapping"


def test_instances_for_people(cli):
    r = cli("instances")
    assert r.exit_code == 0 and TINY in r.stdout and "tiny-pf-mapping" in r.stdout


def test_show_json_has_decisions_baseline_and_lints(cli_json):
    data = cli_json("show", TINY)
    decisions = {d["name"]: d["domain"] for d in data["decisions"]}
    assert decisions["dram_layers"] == [2, 4, 8] and decisions["tp"] == [1, 2, 4]
    assert data["baseline"]["tp"] == 4 and data["baseline"]["dram_layers"] == 4
    assert set(data["baseline"]) == set(decisions)
    assert data["lints"] == [] and data["space_size"] == 432
    assert data["kind"] == "grid" and data["objective"] == {"metric": "tokens_per_s", "sense": "max"}


def test_show_json_reports_the_paper_lints(cli_json):
    data = cli_json("show", "pf-llama405b-paper")
    codes = {x["code"] for x in data["lints"]}
    assert {"pooled-bandwidth-exceeds-ports", "pooled-bandwidth-exceeds-switch"} <= codes
    switch = next(x for x in data["lints"] if x["code"] == "pooled-bandwidth-exceeds-switch")
    assert switch["numbers"]["total_GBps"] == 214_400 and switch["numbers"]["switch_GBps"] == 14_375


@pytest.mark.parametrize("kind", ["mapping", "placement"])
def test_show_a_mapping_or_placement_instance(kind, cli, cli_json):
    data = cli_json("show", KINDS[kind])
    assert data["kind"] == kind and data["decisions"] and data["baseline"] and data["baseline_description"]
    r = cli("show", KINDS[kind])
    assert r.exit_code == 0 and KINDS[kind] in r.stdout and "baseline" in r.stdout


def test_show_prints_a_joint_instances_hardware_baseline(cli):
    """The joint baseline nests its hardware ({"hardware": {"modules": 16, "pool_ports": {"h100": 1}}},
    instances/mapping/pf-llama405b-joint.toml); the table shows each hardware decision's value."""
    r = cli("show", "pf-llama405b-joint")
    rows = {line.split("│")[1].strip(): line.split("│")[4].strip() for line in r.stdout.splitlines()
            if line.count("│") == 5 and line.split("│")[1].strip()}
    assert rows["modules"] == "16" and rows["pool_ports[h100]"] == "1"
    r = cli("show", "hetero-pipeline-405b-joint")
    assert r.exit_code == 0, r.stderr  # the summary shows a group's chips as a list
    assert "h100-sxm | h200-sxm | b200" in r.stdout
    shown = r.stdout.splitlines()
    rows = {line.split("│")[1].strip(): (line.split("│")[2].strip(), line.split("│")[4].strip()) for line in shown
            if line.count("│") == 5 and line.split("│")[1].strip()}
    assert rows["chip[s01]"] == rows["chip[s23]"] == ("hardware", "h200-sxm")
    assert rows["chip[s45]"] == rows["chip[s67]"] == ("hardware", "h100-sxm")  # hetero-pipeline-405b's hardware


def test_show_for_people(cli):
    r = cli("show", "pf-dense1t-paper")
    assert r.exit_code == 0 and "pooled-bandwidth-exceeds-switch" in r.stdout


def test_metrics_json(cli_json):
    rows = cli_json("metrics")
    assert {"power_W", "tpot_s", "tokens_per_s"} <= {r["name"] for r in rows}
    assert all({"name", "scope", "unit", "description"} <= set(r) for r in rows)


# --------------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_evaluate_json_has_the_same_keys_on_every_kind(kind, cli_json, named):
    data = cli_json("evaluate", KINDS[kind])
    p = named(KINDS[kind])
    assert set(data) >= RECORD_KEYS
    assert data["kind"] == kind and data["feasible"] is True and data["lints"] == []
    assert data["design"] == p.baseline()
    assert data["objective"] == pytest.approx(data["metrics"][p.metric], rel=1e-12)
    assert data["instance_hash"] == p.content_hash


def test_evaluate_set_changes_the_design(cli_json):
    base = cli_json("evaluate", TINY)
    data = cli_json("evaluate", TINY, "--set", "tp=2", "--set", "batch=128")
    assert data["design"]["tp"] == 2 and data["design"]["batch"] == 128
    assert data["metrics"]["tp"] == 2 and data["metrics"]["dp"] == 2  # 4 devices / TP 2
    assert data["objective"] != base["objective"]


def test_evaluate_design_files_json_and_toml(cli_json, tmp_path):
    as_json = tmp_path / "d.json"
    as_json.write_text(json.dumps({"tp": 1, "batch": 8, "clock_GHz": 1.2}))
    as_toml = tmp_path / "d.toml"
    as_toml.write_text("tp = 1\nbatch = 8\nclock_GHz = 1.2\n")
    a = cli_json("evaluate", TINY, "--design", as_json)
    b = cli_json("evaluate", TINY, "--design", as_toml)
    assert a["design"] == b["design"] and a["objective"] == b["objective"]
    assert (a["design"]["tp"], a["design"]["batch"], a["design"]["clock_GHz"]) == (1, 8, 1.2)
    c = cli_json("evaluate", TINY, "--design", as_json, "--set", "tp=4")  # --set overrides the file
    assert c["design"]["tp"] == 4 and c["design"]["batch"] == 8


def test_evaluate_a_multi_workload_design_file_with_tables(cli_json, tmp_path):
    path = tmp_path / "d.toml"
    path.write_text("dram_layers = 12\n[llama8b]\ntp = 4\nbatch = 128\n")
    data = cli_json("evaluate", "deepstack-multi-workload", "--design", path)
    assert data["design"]["dram_layers"] == 12
    assert data["design"]["llama8b.tp"] == 4 and data["design"]["llama8b.batch"] == 128
    workloads = {"llama70b", "llama8b", "qwen30b", "llama70b_rag", "mixtral", "gptoss120b"}
    assert {k.split(".")[0] for k in data["metrics"] if k.endswith(".tokens_per_s")} == workloads


@pytest.mark.parametrize("kind", ["mapping", "placement"])
def test_evaluate_takes_a_solution_record_as_its_design(kind, cli_json, tmp_path):
    sol = cli_json("solve", KINDS[kind], "--save", "--out-dir", tmp_path)
    data = cli_json("evaluate", KINDS[kind], "--design", tmp_path / f"{KINDS[kind]}.json")
    assert data["design"] == sol["design"]
    assert data["objective"] == pytest.approx(sol["objective"], rel=1e-12)


def test_evaluate_summary_first_and_everything_with_all(cli):
    r = cli("evaluate", TINY, "--set", "tp=2")
    assert r.exit_code == 0
    first = r.stdout.splitlines()[0]
    assert first.startswith("feasible max tokens_per_s = ")
    for label in ("tokens/s", "TTFT", "TPOT", "energy/token", "power"):
        assert label in r.stdout
    assert "decode_step.compute_s" not in r.stdout  # the full table only under --all
    r = cli("evaluate", TINY, "--set", "tp=2", "--all")
    assert "decode_step.compute_s" in r.stdout and "memory-capacity-local[main]" in r.stdout


@pytest.mark.parametrize("kind", ["mapping", "placement"])
def test_evaluate_for_people_on_other_kinds(kind, cli):
    r = cli("evaluate", KINDS[kind])
    assert r.exit_code == 0 and r.stdout.startswith("feasible max tokens_per_s = ")


def test_an_instance_given_by_path(cli_json, tmp_path):
    named = cli_json("evaluate", TINY)
    by_path = cli_json("evaluate", REPO / "instances" / f"{TINY}.toml")
    assert by_path["objective"] == named["objective"]
    child = tmp_path / "child.toml"
    child.write_text('extends = "tiny-3d-llama8b"\nname = "child"\n[budgets]\narea_mm2 = 50.0\n')
    data = cli_json("evaluate", child)
    assert data["instance"] == "child" and data["feasible"] is False  # the baseline tile is 75.17 mm2
    area = next(a for a in data["audit"] if a["name"] == "budget-area")
    assert area["limit"] == 50.0 and area["ok"] is False


def test_evaluate_with_a_budget_audits_it(cli_json):
    data = cli_json("evaluate", TINY, "--budget", "power_W <= 1")
    (a,) = [a for a in data["audit"] if a["name"] == "budget[cli-1]"]
    assert a["limit"] == 1.0 and a["ok"] is False and data["feasible"] is False


# --- bad input ---------------------------------------------------------------------------------------


def test_a_set_value_outside_the_domain(cli, input_error):
    input_error(cli("evaluate", TINY, "--set", "tp=3"), "tp", "3", "[1, 2, 4]")


def test_a_set_value_that_is_not_a_number(cli, input_error):
    input_error(cli("evaluate", TINY, "--set", "tp=abc"), "tp", "'abc'", "not a number")


def test_an_unknown_decision_and_a_missing_equals_sign(cli, input_error):
    input_error(cli("evaluate", TINY, "--set", "tpp=2"), "tpp", "did you mean 'tp'?")
    input_error(cli("evaluate", TINY, "--set", "tp"), "key=value")


def test_bad_design_files(cli, input_error, tmp_path):
    bad = tmp_path / "d.json"
    bad.write_text("{not json")
    input_error(cli("evaluate", TINY, "--design", bad), str(bad), "not valid JSON")
    input_error(cli("evaluate", TINY, "--design", tmp_path / "missing.json"), "not found")
    out_of_domain = tmp_path / "e.toml"
    out_of_domain.write_text("dram_layers = 3\n")
    input_error(cli("evaluate", TINY, "--design", out_of_domain), str(out_of_domain), "dram_layers")
    yaml = tmp_path / "d.yaml"
    yaml.write_text("tp: 4\n")
    input_error(cli("evaluate", TINY, "--design", yaml), "d.yaml", "a JSON design file, or TOML")


def test_a_bad_mapping_design_names_the_tier(cli, input_error, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"layers_per_stage": [2, 2], "weights": ["local"] * 4,
                               "kv": ["local", "locale", "local", "local"], "attach": [[], []]}))
    input_error(cli("evaluate", "tiny-pf-mapping", "--design", bad), "locale", "did you mean 'local'")


def test_files_that_are_not_utf8_text(cli, input_error, tmp_path):
    for name in ("i.toml", "d.json"):
        (tmp_path / name).write_bytes(NOT_UTF8)
    input_error(cli("evaluate", tmp_path / "i.toml"), "i.toml", "UTF-8")
    input_error(cli("evaluate", TINY, "--design", tmp_path / "d.json"), "d.json", "JSON")


def test_an_unknown_instance_suggests_the_closest(cli, input_error):
    for args in (("evaluate", "tiny-3d-llama8"), ("show", "tiny-3d-llama8")):
        input_error(cli(*args), "tiny-3d-llama8", "did you mean 'tiny-3d-llama8b'?")


def test_a_directory_or_a_non_toml_file(cli, input_error, tmp_path):
    input_error(cli("show", tmp_path), "a directory, not an instance file")
    f = tmp_path / "inst.txt"
    f.write_text("name = 'x'\n")
    input_error(cli("show", f), "suffix .toml")


def test_a_malformed_instance_file(cli, input_error, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('extends = "tiny-3d-llama8b"\nname = "bad"\n[system]\ndevices = "four"\n')
    input_error(cli("show", path), str(path), "system.devices", "'four'")


def test_every_chip_of_an_instance_is_checked_and_named_by_its_key(cli, input_error, tmp_path):
    src = (REPO / "instances" / "dgx-llama70b-chip-choice.toml").read_text()
    hw = tmp_path / "hw.toml"
    hw.write_text(src.replace('chip = "h100-sxm"\n', 'chip = "h100sxm"\n', 1))
    input_error(cli("evaluate", hw), "hardware.chip", "h100sxm", "did you mean 'h100-sxm'")
    dom = tmp_path / "dom.toml"
    dom.write_text(src.replace('"h200-sxm", "b200"]', '"h200sxm", "b200"]'))
    input_error(cli("evaluate", dom), "hardware.decisions.chip", "h200sxm")


def test_a_misspelt_instance_kind(cli, input_error, tmp_path):
    f = tmp_path / "m.toml"
    f.write_text((REPO / "instances" / "mapping" / "tiny-pf-mapping.toml").read_text()
                 .replace('kind = "mapping"', 'kind = "maping"'))
    input_error(cli("solve", f), "kind", "maping", "did you mean 'mapping'")


def test_budgets_and_objectives_of_placements_are_in_their_files(cli, input_error):
    input_error(cli("evaluate", KINDS["placement"], "--budget", "power_W <= 1"), "--budget", "does not apply")
    input_error(cli("solve", KINDS["placement"], "--objective", "energy_per_token_J"), "--objective", "does not apply")


def test_a_mapping_takes_budgets_on_its_own_metrics(cli, input_error):
    input_error(cli("evaluate", KINDS["mapping"], "--budget", "power_W <= 1"), "--budget", "no metric of a mapping")
    input_error(cli("solve", KINDS["mapping"], "--objective", "tpot_s"), "--objective", "not an objective")
    r = cli("solve", KINDS["mapping"], "--objective", "energy_per_token_J", "--budget", "tokens_per_s >= 7000", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["status"] == "optimal" and d["metrics"]["tokens_per_s"] >= 7000 * (1 - 1e-9)


# --------------------------------------------------------------------------------------------------
# generate
# --------------------------------------------------------------------------------------------------


def test_generate_a_mapping_instance(cli, cli_json, input_error, tmp_path):
    out = tmp_path / "gen.toml"
    r = cli("generate", "mapping", "-o", out, "--set", "devices=3", "--set", "modules=2", "--set", "layers=6",
            "--set", "chips=h200-sxm,h100-sxm")
    assert r.exit_code == 0, r.stderr
    data = tomllib.loads(out.read_text())
    assert [g["chip"] for g in data["devices"]] == ["h200-sxm", "h100-sxm"]
    assert sum(g["count"] for g in data["devices"]) == 3 and data["workload"]["layers"] == 6
    assert cli_json("evaluate", out)["kind"] == "mapping"
    input_error(cli("generate", "mapping", "-o", out, "--set", "devics=3"), "did you mean 'devices'")


def test_generate_a_placement_instance_and_speak_json(cli, cli_json, input_error, tmp_path):
    out = tmp_path / "p.toml"
    rec = cli_json("generate", "placement", "-o", out, "--set", "devices=4", "--set", "experts=8", "--set", "layers=4")
    assert rec["kind"] == "placement" and rec["parameters"] == {"devices": 4, "experts": 8, "layers": 4}
    assert cli_json("show", out)["kind"] == "placement"
    bad = tmp_path / "bad.toml"
    input_error(cli("generate", "placement", "-o", bad, "--set", "devices=-4"), "devices=-4", "no valid placement instance")
    assert not bad.exists()


def test_generate_a_grid_instance(cli, cli_json, tmp_path):
    out = tmp_path / "g.toml"
    assert cli("generate", "grid", "-o", out, "--set", "workloads=2").exit_code == 0
    assert cli_json("evaluate", out)["kind"] == "grid"
    assert len(tomllib.loads(out.read_text())["workloads"]) == 2


def test_generate_checks_each_parameter(cli, input_error, tmp_path):
    out = tmp_path / "g.toml"
    input_error(cli("generate", "mapping", "-o", out, "--set", "devices=abc"), "--set devices", "abc", "int")
    input_error(cli("generate", "mappng", "-o", out), "did you mean 'mapping'")
    input_error(cli("generate", "mapping", "-o", tmp_path / "g.json"), "must be a .toml file")
    r = cli("generate", "placement", "-o", out, "--set", "help=1")
    assert r.exit_code == 0 and "devices" in r.stdout and not out.exists()


def test_generator_values_by_their_annotation():
    from codesign.cli.problems import generator_value

    assert generator_value("devices", "16", "int") == 16
    assert generator_value("name", "123", "str | None") == "123"  # a name that reads like a number
    assert generator_value("chips", "h100-sxm", "tuple[str, ...]") == ("h100-sxm",)
    assert generator_value("chips", "a,b", "tuple[str, ...]") == ("a", "b")
    assert generator_value("experts", "null", "int | None") is None
    assert generator_value("fragmented", "true", "bool") is True
