"""codesign.model.budgets: custom budgets are parsed safely (no evaluation of user text),
named in their errors, audited with hand-derived values, part of the content hash, and read from
instance files. That they enter the MIP exactly is tested against brute force in
tests/proof/test_driver_exact_grid.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codesign.errors import InputError
from codesign.kinds.grid.problem import Grid
from codesign.kinds.grid.space import brute_force
from codesign.kinds.grid.spec import load_instance, with_budgets
from codesign.model.budgets import (
    Term,
    defined_budgets,
    metric_table,
    parse_budget,
    parsed_budgets,
    undefined_reason,
)
from codesign.model.evaluate import evaluate
from codesign.proof.driver import solve

TINY = "tiny-3d-llama8b"
MULTI = "deepstack-multi-workload"
ONE = ["main"]
REL = 1e-9


def rel_diff(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def term_set(terms) -> dict[tuple[str, str | None], float]:
    return {(t.metric, t.workload): t.coef for t in terms}


@pytest.fixture(scope="module")
def tiny():
    return load_instance(TINY)


@pytest.fixture(scope="module")
def tiny_opt(tiny, brute):
    return brute(Grid(tiny)).best


@pytest.fixture(scope="module")
def multi():
    return load_instance(MULTI)

# --------------------------------------------------------------------------------------------------
# parsing: good input, checked by hand
# --------------------------------------------------------------------------------------------------

GOOD = [
    # text, {(metric, workload): coef}, rhs   (a budget is Σ coef·metric <= rhs)
    (
        "2*power_W + dram_layers*15 <= 1600",
        {("power_W", None): 2.0, ("dram_layers", None): 15.0},
        1600.0,
    ),
    ("tpot_s >= 0.01", {("tpot_s", "main"): -1.0}, -0.01),
    ("-power_W >= -60", {("power_W", None): 1.0}, 60.0),
    ("power_W/2 <= 30", {("power_W", None): 0.5}, 30.0),
    ("tokens_per_s >= 1000", {("time_per_token_s", "main"): 1.0}, 1.0 / 1000),
    ("tokens_per_s/2 >= 500", {("time_per_token_s", "main"): 1.0}, 1.0 / 1000),
    ("1600 >= 2*power_W", {("power_W", None): 2.0}, 1600.0),
    ("power_W - 2 <= 3 + area_mm2", {("power_W", None): 1.0, ("area_mm2", None): -1.0}, 5.0),
    ("(power_W + 1)*2 <= 3", {("power_W", None): 2.0}, 1.0),
    ("power_W + power_W <= 10", {("power_W", None): 2.0}, 10.0),
    ("energy_per_token_J <= 0.005", {("energy_per_token_J", "main"): 1.0}, 0.005),
    ("memory_used_B <= 2e10", {("memory_used_B", "main"): 1.0}, 2e10),
    ("system_power_W <= 500", {("system_power_W", None): 1.0}, 500.0),
    ("  clock_GHz >= 1.5  ", {("clock_GHz", None): -1.0}, -1.5),
]


@pytest.mark.parametrize(("text", "terms", "rhs"), GOOD, ids=[g[0].strip() for g in GOOD])
def test_parse_good_budgets(text: str, terms: dict, rhs: float) -> None:
    b = parse_budget(text, ONE)
    assert term_set(b.terms) == pytest.approx(terms, rel=1e-15)
    assert set(term_set(b.terms)) == set(terms)
    assert b.rhs == pytest.approx(rhs, rel=1e-15)
    assert b.text == text.strip()
    assert b.name == text.strip()  # unnamed budgets are labelled by their text


def test_parse_tokens_per_s_is_a_bound_on_time_per_token() -> None:
    b = parse_budget("tokens_per_s >= 1000", ONE, name="tps")
    assert b.name == "tps"
    assert b.terms == (Term(1.0, "time_per_token_s", "main"),)
    assert b.rhs == pytest.approx(1e-3, rel=1e-15)


BAD = [
    # text, a fragment the message must contain
    ("__import__('os').system('x') <= 1", "not allowed in a budget"),
    ("power_W * area_mm2 <= 5", "a product needs a number on one side"),
    ("power_W <= area_mm2 <= 3", "one <= or >="),
    ("powr_W <= 5", "unknown metric 'powr_W'"),
    ("tokens_per_s + power_W >= 3", "can only appear alone"),
    ("power_W", "one <= or >="),
    ("power_W + " * 500 + "0 <= 1", "at most 2000 characters"),
    ("power_W <= 1/0", "division by zero"),
    ("power_W/0.0 <= 1", "division by zero"),
    ("power_W / (1-1) <= 3", "division by zero"),
    ("(1).__class__ <= 2", "not allowed in a budget"),
    ("(lambda: 1)() <= 2", "not allowed in a budget"),
    ("power_W.__class__ <= 2", "unknown metric 'power_W.__class__'"),
    ("().__class__.__bases__[0].__subclasses__() <= 1", "not allowed in a budget"),
    ("power_W[0] <= 1", "not allowed in a budget"),
    ("f'{power_W}' <= 1", "not allowed in a budget"),
    ("power_W**2 <= 3", "not allowed in a budget"),
    ("power_W <= 10**3", "not allowed in a budget"),
    ("power_W // 2 <= 3", "not allowed in a budget"),
    ("power_W <= True", "not allowed in a budget"),
    ("power_W <= 'a'", "not allowed in a budget"),
    ("power_W < 5", "one <= or >="),
    ("power_W == 5", "one <= or >="),
    ("power_W <= 3; import os", "not a valid expression"),
    ("import os", "not a valid expression"),
    ("", "not a valid expression"),
    ("power_W <=", "not a valid expression"),
    ("power_W - power_W <= 3", "at least one metric"),
    ("0*power_W <= 3", "at least one metric"),
    ("power_W <= 1e400", "finite"),
    ("1e308*10*power_W <= 1", "finite"),
    ("tokens_per_s <= 5", "only a lower limit on tokens_per_s"),
    ("tokens_per_s >= 0", "only a lower limit on tokens_per_s"),
    ("tokens_per_s >= -5", "only a lower limit on tokens_per_s"),
    ("power_W <= inf", "unknown metric 'inf'"),
]


@pytest.mark.parametrize(("text", "fragment"), BAD, ids=[b[0][:40] or "empty" for b in BAD])
def test_parse_bad_budgets_are_input_errors(text: str, fragment: str, monkeypatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(os, "system", lambda cmd: calls.append(cmd) or 0)
    with pytest.raises(InputError) as info:
        parse_budget(text, ONE)
    msg = str(info.value)
    assert fragment in msg, msg
    assert info.value.file == "--budget"
    # the message says what a budget looks like
    assert "<= or >=" in (info.value.expected or "")
    assert calls == []  # nothing was evaluated


def test_parse_did_you_mean() -> None:
    with pytest.raises(InputError) as info:
        parse_budget("powr_W <= 5", ONE)
    assert info.value.suggestion == "did you mean 'power_W'?"
    assert "did you mean 'power_W'?" in str(info.value)
    with pytest.raises(InputError) as info:
        parse_budget("tpot <= 5", ONE)
    assert "tpot_s" in (info.value.suggestion or "")


def test_parse_names_the_budget_and_its_source() -> None:
    with pytest.raises(InputError) as info:
        parse_budget("powr_W <= 5", ONE, name="cap", source="x.toml")
    assert info.value.file == "x.toml"
    assert info.value.key == "cap"
    assert str(info.value).startswith("x.toml:cap:")


def test_parse_deeply_nested_budget_is_an_input_error() -> None:
    text = "-" * 1500 + "power_W <= 1"
    assert len(text) < 2000
    with pytest.raises(InputError):
        parse_budget(text, ONE)


def test_parse_long_flat_budget_is_fine() -> None:
    text = "power_W" + " + power_W" * 150 + " <= 1"
    assert len(text) < 2000
    b = parse_budget(text, ONE)
    assert term_set(b.terms) == {("power_W", None): 151.0}


# --------------------------------------------------------------------------------------------------
# multi-workload instances need qualified names
# --------------------------------------------------------------------------------------------------


def test_multi_workload_needs_qualified_names(multi) -> None:
    with pytest.raises(InputError) as info:
        with_budgets(multi, ["tpot_s <= 1"])
    assert "belongs to a workload" in str(info.value)
    assert "llama70b.tpot_s" in (info.value.suggestion or "")
    assert "llama8b.tpot_s" in (info.value.suggestion or "")
    b = with_budgets(multi, ["llama8b.tpot_s <= 0.02"])
    (parsed,) = [p for p in parsed_budgets(b) if p.name == "cli-1"]
    assert parsed.terms == (Term(1.0, "tpot_s", "llama8b"),)
    assert parsed.rhs == 0.02
    b = with_budgets(multi, ["llama8b.tokens_per_s >= 100"])
    (parsed,) = [p for p in parsed_budgets(b) if p.name == "cli-1"]
    assert parsed.terms == (Term(1.0, "time_per_token_s", "llama8b"),)
    assert parsed.rhs == pytest.approx(0.01, rel=1e-15)


def test_multi_workload_unknown_workload_did_you_mean(multi) -> None:
    with pytest.raises(InputError) as info:
        with_budgets(multi, ["llama9b.tpot_s <= 1"])
    assert "llama8b.tpot_s" in (info.value.suggestion or "")


def test_multi_workload_budget_over_two_workloads_is_rejected_when_parsed(multi) -> None:
    with pytest.raises(InputError):
        with_budgets(multi, ["llama8b.tpot_s + llama70b.tpot_s <= 1"])


def test_metric_table_documents_the_names() -> None:
    names = {r["name"] for r in metric_table()}
    assert {
        "power_W",
        "system_power_W",
        "energy_per_token_J",
        "area_mm2",
        "temperature_C",
        "tpot_s",
        "ttft_s",
        "memory_used_B",
        "dram_layers",
        "tokens_per_s",
    } <= names
    for name in names:  # every documented name parses
        parse_budget(f"{name} >= 1" if name == "tokens_per_s" else f"{name} <= 1", ONE)



# --------------------------------------------------------------------------------------------------
# the audit states each budget; values by hand
# --------------------------------------------------------------------------------------------------

def test_audit_values_by_hand(tiny, tiny_opt) -> None:
    d = tiny_opt.design
    base = evaluate(tiny, d)
    m = base.metrics
    cases = [
        ("power_W <= 60", m["power_W"], 60.0),
        ("2*power_W + dram_layers*15 <= 1600", 2 * m["power_W"] + 15 * d["dram_layers"], 1600.0),
        ("tpot_s >= 0.012", -m["tpot_s"], -0.012),
        ("system_power_W <= 500", 4 * m["power_W"], 500.0),
        ("tokens_per_s >= 1000", m["time_per_token_s"], 1e-3),
        (
            "energy_per_token_J - power_W/1000 <= 1",
            m["energy_per_token_J"] - m["power_W"] / 1000,
            1.0,
        ),
    ]
    for text, value, limit in cases:
        ev = evaluate(with_budgets(tiny, [text]), d)
        (a,) = [a for a in ev.audit if a.name == "budget[cli-1]"]
        assert a.family == "budget"
        assert a.value == pytest.approx(value, rel=1e-12), text
        assert a.limit == pytest.approx(limit, rel=1e-12), text
        assert a.ok == (value <= limit), text
        # the other constraints are unchanged
        assert [(x.name, x.value) for x in ev.audit if x.name != "budget[cli-1]"] == [
            (x.name, x.value) for x in base.audit
        ]


def test_budgets_change_the_content_hash(tiny) -> None:
    a = with_budgets(tiny, ["power_W <= 60"])
    b = with_budgets(tiny, ["power_W <= 60"])
    c = with_budgets(tiny, ["power_W <= 61"])
    assert a.content_hash == b.content_hash
    assert len({tiny.content_hash, a.content_hash, c.content_hash}) == 3
    assert with_budgets(tiny, []) is tiny


# --------------------------------------------------------------------------------------------------
# [[budgets.custom]] in an instance file
# --------------------------------------------------------------------------------------------------


def _write(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


def test_instance_file_budget_loads_and_binds(tmp_path: Path, tiny, tiny_opt) -> None:
    f = _write(
        tmp_path / "capped.toml",
        f"""
name = "tiny-capped"
description = "tiny with a power cap as a custom budget"
extends = "{TINY}"

[[budgets.custom]]
name = "power-cap"
expr = "power_W <= 60"

[[budgets.custom]]
name = "stack"
expr = "dram_layers*10 + power_W <= 200"
""",
    )
    inst = load_instance(str(f))
    assert [b.name for b in parsed_budgets(inst)] == ["power-cap", "stack"]
    assert inst.budgets.area_mm2 == 200.0  # the parent's budgets are kept
    bf = brute_force(inst)
    ref = brute_force(with_budgets(tiny, ["power_W <= 60", "dram_layers*10 + power_W <= 200"]))
    assert rel_diff(bf.objective, ref.objective) <= REL
    assert bf.objective < tiny_opt.objective * (1 - 1e-6)  # it binds
    sol = solve(Grid(inst), solver="highs")
    assert sol.status == "optimal" and rel_diff(sol.objective, bf.objective) <= REL
    ev = evaluate(inst, tiny_opt.design)
    assert [a.name for a in ev.audit if not a.ok] == ["budget[power-cap]"]
    # --budget adds to the file's budgets
    both = with_budgets(inst, ["dram_layers <= 4"])
    names = [a.name for a in evaluate(both, sol.design).audit]
    assert {"budget[power-cap]", "budget[stack]", "budget[cli-1]"} <= set(names)


def test_instance_file_bad_budget_names_the_file(tmp_path: Path, cli) -> None:
    f = _write(
        tmp_path / "bad.toml",
        f"""
name = "tiny-bad"
description = "a typo in a custom budget"
extends = "{TINY}"

[[budgets.custom]]
name = "oops"
expr = "powr_W <= 60"
""",
    )
    with pytest.raises(InputError) as info:
        load_instance(str(f))
    assert info.value.file == str(f)
    assert info.value.key == "oops"
    assert "did you mean 'power_W'?" in str(info.value)
    res = cli("show", f)
    assert res.exit_code == 2
    assert str(f) in res.stderr and "Traceback" not in res.output


def test_instance_file_malicious_budget_is_rejected(tmp_path: Path, monkeypatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(os, "system", lambda cmd: calls.append(cmd) or 0)
    f = _write(
        tmp_path / "evil.toml",
        f"""
name = "tiny-evil"
description = "code in a budget"
extends = "{TINY}"

[[budgets.custom]]
name = "evil"
expr = "__import__('os').system('touch pwned') <= 1"
""",
    )
    with pytest.raises(InputError) as info:
        load_instance(str(f))
    assert info.value.file == str(f)
    assert calls == []


def test_instance_file_budget_without_expr_is_an_input_error(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "noexpr.toml",
        f"""
name = "tiny-noexpr"
description = "a custom budget without an expression"
extends = "{TINY}"

[[budgets.custom]]
name = "empty"
""",
    )
    with pytest.raises(InputError) as info:
        load_instance(str(f))
    assert str(f) in str(info.value)



# --------------------------------------------------------------------------------------------------
# a budget on a metric the instance does not have is refused with the reason (issue 34, part 3)
# --------------------------------------------------------------------------------------------------

CATALOG = "dgx-llama70b-chip-choice"


@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        # a catalog chip has no thermal model: its temperature is NaN, and a NaN row once kept
        # `explain` running past any --time-limit
        (CATALOG, "temperature_C <= 80", "needs a thermal model"),
        (CATALOG, "2*temperature_C + power_W <= 900", "needs a thermal model"),
        (CATALOG, "dram_layers <= 4", "no hardware decision 'dram_layers'"),
        (CATALOG, "clock_GHz >= 1", "no hardware decision 'clock_GHz'"),
        # the 3D family decides no appliance ports: a KeyError once, deep in the model
        (TINY, "pool_ports <= 3", "no hardware decision 'pool_ports'"),
    ],
)
def test_a_budget_on_a_metric_the_instance_does_not_have_is_refused(name: str, text: str, reason: str) -> None:
    with pytest.raises(InputError, match="a metric the instance does not have") as info:
        with_budgets(load_instance(name), [text])
    assert reason in info.value.message and info.value.value == text and info.value.key == "cli-1"


def test_the_same_budgets_in_an_instance_file_are_refused_at_load(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "instances" / f"{CATALOG}.toml").read_text()
    path = tmp_path / "t.toml"
    path.write_text(text.replace("system_power_W = 9000.0", 'system_power_W = 9000.0\ncustom = [{name = "hot", expr = "temperature_C <= 80"}]'))
    with pytest.raises(InputError, match="needs a thermal model") as info:
        load_instance(str(path))
    assert info.value.file == str(path) and info.value.key == "hot"


def test_budgets_on_metrics_the_instance_has_still_apply() -> None:
    assert with_budgets(load_instance(CATALOG), ["pool_ports <= 2", "power_W <= 1000"])
    assert with_budgets(load_instance(TINY), ["temperature_C <= 90", "clock_GHz >= 1.5"])


def test_undefined_reason_names_the_decisions_the_instance_has(tiny) -> None:
    reason = undefined_reason(tiny, Term(1.0, "pool_ports", None))
    assert reason is not None and "dram_layers, tsv_count" in reason
    assert undefined_reason(tiny, Term(1.0, "temperature_C", None)) is None
    assert defined_budgets(tiny) == parsed_budgets(tiny)
