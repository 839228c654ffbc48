"""Certificates and explanations (issue 5), with brute force as the reference.

* certify: gap 0 at the optimum; (f* − f(d))/|f(d)| for tokens/s (max) and (f(d) − f*)/|f(d)| for
  energy per token (min) at a perturbed feasible design; infeasible designs list exactly the
  violated constraints; certificates re-check, tampering is caught, stored solutions are reused
  only when the instance hash matches.
* explain: a hand-built conflict of two budgets is returned exactly; each relaxation, applied,
  makes brute force feasible again (and a slightly smaller one does not).
* CLI contracts of metrics, certify, check-certificate, explain and solve on infeasible input.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import codesign.kinds.grid.space as space
from codesign.cli import app
from codesign.jsonio import dumps
from codesign.kinds.grid.budgets import parse_budget
from codesign.kinds.grid.explain import explain
from codesign.kinds.grid.space import brute_force
from codesign.kinds.grid.spec import load_instance, parsed_budgets, with_budgets, with_objective
from codesign.model.evaluate import evaluate
from codesign.proof.certify import certify, check_certificate

TINY = "tiny-3d-llama8b"
SMALL = "small-3d-llama8b"
runner = CliRunner()

#: a conflict on small-3d-llama8b: a small compute die and a tokens/s floor between the optimum
#: under that die (~39.5k) and the unconstrained optimum (~67.4k)
SMALL_A = "compute_area_mm2 <= 40"
SMALL_B = "tokens_per_s >= 50000"
#: the same on tiny-3d-llama8b: at most 4 DRAM layers (optimum ~17.1k) and >= 22k tokens/s (~22.8k)
TINY_A = "dram_layers <= 4"
TINY_B = "tokens_per_s >= 22000"


def run(*args: str):
    return runner.invoke(app, list(args))


def rel_diff(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def no_traceback(res) -> None:
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)


@pytest.fixture(scope="module")
def tiny():
    return load_instance(TINY)


@pytest.fixture(scope="module")
def small():
    return load_instance(SMALL)


@pytest.fixture(scope="module")
def tiny_opt(tiny):
    return brute_force(tiny)


@pytest.fixture(scope="module")
def small_opt(small):
    return brute_force(small)


@pytest.fixture(scope="module")
def tiny_energy(tiny):
    inst = with_objective(tiny, "energy_per_token_J")
    return inst, brute_force(inst)


# --------------------------------------------------------------------------------------------------
# certify
# --------------------------------------------------------------------------------------------------


def test_certify_optimal_design_gap_zero(tiny, tiny_opt) -> None:
    cert = certify(tiny, tiny_opt.design, solution_dir=None)
    assert cert["feasible"] and cert["violated"] == []
    assert cert["sense"] == "max" and cert["objective_metric"] == "tokens_per_s"
    assert rel_diff(cert["objective"], tiny_opt.objective) <= 1e-12
    assert rel_diff(cert["bound"], tiny_opt.objective) <= 1e-9
    assert cert["gap"] == pytest.approx(0.0, abs=1e-9)
    assert cert["bound_provenance"]["source"] == "solve"
    assert cert["instance_hash"] == tiny.content_hash


def test_certificate_dict_is_plain_json(tiny, tiny_opt) -> None:
    cert = certify(tiny, tiny_opt.design, solution_dir=None)
    assert cert["feasible"] is True
    json.dumps(cert)


def test_certify_optimal_design_gap_zero_small(small, small_opt) -> None:
    cert = certify(small, small_opt.design, solution_dir=None)
    assert cert["feasible"]
    assert cert["gap"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    ("which", "change"),
    [
        ("tiny", {"batch": 32}),
        ("tiny", {"tp": 4, "batch": 8}),
        ("tiny", {"sram_MiB": 0.5}),
        ("tiny", {"compute_area_mm2": 40.0, "tp": 2}),  # at TP 1 the smaller die holds too little KV
        ("small", {"batch": 64}),
        ("small", {"tp": 2}),
        ("small", {"dram_layers": 4, "tp": 4}),
    ],
)
def test_certify_perturbed_design_max(which, change, tiny, tiny_opt, small, small_opt) -> None:
    inst, opt = (tiny, tiny_opt) if which == "tiny" else (small, small_opt)
    design = {**opt.design, **change}
    ev = evaluate(inst, design)
    assert ev.feasible  # a feasible, worse design
    f_star, f_d = opt.objective, ev.objective
    assert f_d < f_star
    cert = certify(inst, design, solution_dir=None)
    assert cert["feasible"] and cert["violated"] == []
    assert cert["objective"] == pytest.approx(f_d, rel=1e-12)
    assert cert["gap"] == pytest.approx((f_star - f_d) / abs(f_d), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(
    "change", [{"batch": 32}, {"compute_area_mm2": 40.0, "tp": 2}, {"dram_layers": 4, "tp": 4}]
)
def test_certify_perturbed_design_min_energy(change, tiny_energy) -> None:
    inst, opt = tiny_energy
    design = {**opt.design, **change}
    ev = evaluate(inst, design)
    assert ev.feasible
    f_star, f_d = opt.objective, ev.objective
    assert f_d > f_star
    cert = certify(inst, design, solution_dir=None)
    assert cert["sense"] == "min" and cert["objective_metric"] == "energy_per_token_J"
    assert cert["objective"] == pytest.approx(f_d, rel=1e-12)
    assert cert["bound"] == pytest.approx(f_star, rel=1e-9)
    assert cert["gap"] == pytest.approx((f_d - f_star) / abs(f_d), rel=1e-9, abs=1e-12)


def test_certify_infeasible_design_lists_exactly_the_violated_budgets(tiny, tiny_opt) -> None:
    m = evaluate(tiny, tiny_opt.design).metrics
    assert m["power_W"] > 60 and m["area_mm2"] > 100 and tiny_opt.design["dram_layers"] <= 8
    inst = with_budgets(tiny, ["power_W <= 60", "area_mm2 <= 100", "dram_layers <= 8"])
    cert = certify(inst, tiny_opt.design, solution_dir=None)
    assert not cert["feasible"]
    assert cert["violated"] == ["budget[cli-1]", "budget[cli-2]"]
    assert cert["gap"] is None
    assert "budget[cli-1]" in cert["statement"] and "budget[cli-2]" in cert["statement"]
    assert "budget[cli-3]" not in cert["statement"]
    audit = {a["name"]: a for a in cert["audit"]}
    assert audit["budget[cli-1]"]["ok"] is False and audit["budget[cli-3]"]["ok"] is True
    # the bound is still the optimum under the budgets
    assert rel_diff(cert["bound"], brute_force(inst).objective) <= 1e-9


def test_certify_infeasible_design_memory(tiny, tiny_opt) -> None:
    design = {**tiny_opt.design, "dram_layers": 2, "tp": 1, "batch": 128}
    cert = certify(tiny, design, solution_dir=None)
    assert not cert["feasible"]
    assert cert["violated"] == ["memory-capacity-local[main]"]
    assert cert["gap"] is None


def test_certify_infeasible_instance_has_no_bound(tiny, tiny_opt) -> None:
    inst = with_budgets(tiny, ["energy_per_token_J <= 0.0048"])
    cert = certify(inst, tiny_opt.design, solution_dir=None)
    assert not cert["feasible"] and cert["violated"] == ["budget[cli-1]"]
    assert cert["bound"] is None and cert["gap"] is None
    assert cert["bound_provenance"]["status"] == "infeasible"


def _design_file(tmp_path: Path, design: dict) -> Path:
    p = tmp_path / "design.json"
    p.write_text(json.dumps(design))
    return p


def test_certificate_json_rechecks_and_tampering_fails(tmp_path: Path, tiny_opt) -> None:
    design = {**tiny_opt.design, "batch": 32}
    cert_path = tmp_path / "cert.json"
    res = run(
        "certify",
        TINY,
        "--design",
        str(_design_file(tmp_path, design)),
        "--solutions",
        str(tmp_path),
        "-o",
        str(cert_path),
        "--json",
    )
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout)
    for key in ("feasible", "objective", "sense", "bound", "gap", "audit"):
        assert key in printed
    stored = json.loads(cert_path.read_text())
    assert stored["gap"] == printed["gap"] and stored["instance_hash"] == printed["instance_hash"]

    report = check_certificate(cert_path)
    assert report["ok"] is True, report
    assert report["gap"] == pytest.approx(printed["gap"], rel=1e-12)
    res = run("check-certificate", str(cert_path))
    assert res.exit_code == 0, res.output

    tampered = dict(stored, objective=stored["objective"] * 1.01)
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(tampered))
    report = check_certificate(bad)
    assert report["ok"] is False
    assert "objective differs" in report["message"]
    res = run("check-certificate", str(bad))
    assert res.exit_code == 1
    no_traceback(res)

    for key, value in (("gap", 0.0), ("feasible", False)):
        bad.write_text(json.dumps(dict(stored, **{key: value})))
        assert check_certificate(bad)["ok"] is False, key
    bad.write_text(json.dumps(dict(stored, design={**stored["design"], "batch": 128})))
    assert check_certificate(bad)["ok"] is False


def test_certificate_with_objective_removed_fails(tmp_path: Path, tiny, tiny_opt) -> None:
    cert = certify(tiny, {**tiny_opt.design, "batch": 32}, solution_dir=None)
    bad = tmp_path / "cert.json"
    bad.write_text(dumps(dict(cert, objective=None)))
    assert check_certificate(bad)["ok"] is False


def test_certificate_with_budget_rechecks(tmp_path: Path, tiny) -> None:
    cert_path = tmp_path / "cert.json"
    res = run(
        "certify",
        TINY,
        "--budget",
        "power_W <= 60",
        "--set",
        "batch=32",
        "--solutions",
        str(tmp_path),
        "-o",
        str(cert_path),
        "--json",
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    inst = with_budgets(tiny, ["power_W <= 60"])
    assert data["instance_hash"] == inst.content_hash
    assert data["budgets"] == [{"name": "cli-1", "expr": "power_W <= 60"}]
    assert "budget[cli-1]" in {a["name"] for a in data["audit"]}
    assert check_certificate(cert_path)["ok"] is True


def test_certificate_of_an_instance_file_rechecks(tmp_path: Path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text(
        f'name = "my-tiny"\ndescription = "tiny, capped"\nextends = "{TINY}"\n\n'
        '[[budgets.custom]]\nname = "cap"\nexpr = "power_W <= 60"\n'
    )
    cert_path = tmp_path / "cert.json"
    res = run("certify", str(f), "--solutions", str(tmp_path), "-o", str(cert_path), "--json")
    assert res.exit_code == 0, res.output
    res = run("check-certificate", str(cert_path))
    assert res.exit_code == 0, res.output


def test_stored_solution_is_reused_only_when_the_hash_matches(
    tmp_path: Path, tiny, tiny_opt
) -> None:
    res = run("solve", TINY, "--save", "--out-dir", str(tmp_path), "--json")
    assert res.exit_code == 0, res.output
    stored = tmp_path / f"{TINY}.json"
    assert stored.exists()
    design = {**tiny_opt.design, "batch": 32}
    dfile = _design_file(tmp_path, design)
    f_d = evaluate(tiny, design).objective

    res = run("certify", TINY, "--design", str(dfile), "--solutions", str(tmp_path), "--json")
    assert res.exit_code == 0, res.output
    cert = json.loads(res.stdout)
    assert str(stored) in cert["bound_provenance"]["source"]
    assert "stored solution" in cert["bound_provenance"]["source"]
    assert cert["gap"] == pytest.approx((tiny_opt.objective - f_d) / f_d, rel=1e-9)

    # the library does the same
    lib = certify(tiny, design, solution_dir=tmp_path)
    assert str(stored) in lib["bound_provenance"]["source"]

    # a --budget changes the instance: the stored solution is not reused (even a slack budget)
    res = run(
        "certify",
        TINY,
        "--design",
        str(dfile),
        "--solutions",
        str(tmp_path),
        "--budget",
        "power_W <= 1000",
        "--json",
    )
    assert res.exit_code == 0, res.output
    cert = json.loads(res.stdout)
    assert cert["bound_provenance"]["source"] == "solve"
    assert cert["gap"] == pytest.approx((tiny_opt.objective - f_d) / f_d, rel=1e-9)
    # a binding budget: the bound is the budgeted optimum, and the design violates the budget
    res = run(
        "certify",
        TINY,
        "--design",
        str(dfile),
        "--solutions",
        str(tmp_path),
        "--budget",
        "power_W <= 60",
        "--json",
    )
    cert = json.loads(res.stdout)
    assert cert["bound_provenance"]["source"] == "solve"
    assert (
        rel_diff(cert["bound"], brute_force(with_budgets(tiny, ["power_W <= 60"])).objective)
        <= 1e-9
    )

    # a stored solution whose hash does not match is ignored
    data = json.loads(stored.read_text())
    data["instance_hash"] = "0" * 64
    stored.write_text(json.dumps(data))
    assert certify(tiny, design, solution_dir=tmp_path)["bound_provenance"]["source"] == "solve"


# --------------------------------------------------------------------------------------------------
# explain
# --------------------------------------------------------------------------------------------------


def brute_force_keeping(inst, keep: set[str]):
    """Brute force with only the named constraints (the divisibility rules always hold)."""
    original = space.constraints
    space.constraints = lambda i, hw, scheds: [c for c in original(i, hw, scheds) if c.name in keep]
    try:
        return brute_force(inst)
    finally:
        space.constraints = original


def normalized_text(inst, name: str, limit: float) -> str:
    """The budget ``name`` of ``inst`` as Σ coef·metric <= limit (no rounding)."""
    (b,) = [b for b in parsed_budgets(inst) if f"budget[{b.name}]" == name]
    return " + ".join(f"({t.coef!r})*{t.metric}" for t in b.terms) + f" <= {limit!r}"


@pytest.fixture(scope="module")
def small_conflict(small, small_opt):
    inst = with_budgets(small, [SMALL_A, SMALL_B])
    under_a = brute_force(with_budgets(small, [SMALL_A])).objective
    assert under_a < 50000 < small_opt.objective  # the brief's construction
    assert not brute_force(inst).feasible
    # {A, B} conflict on their own (no physical limit, SLO or other budget is needed), and each
    # alone is satisfiable: so the deletion filter must return exactly {A, B}
    assert not brute_force_keeping(inst, {"budget[cli-1]", "budget[cli-2]"}).feasible
    assert brute_force_keeping(inst, {"budget[cli-1]"}).feasible
    assert brute_force_keeping(inst, {"budget[cli-2]"}).feasible
    return inst, explain(inst)


def test_explain_returns_exactly_the_conflicting_budgets(small_conflict) -> None:
    _, e = small_conflict
    assert e.feasible is False
    assert [c["name"] for c in e.conflicts] == ["budget[cli-1]", "budget[cli-2]"]
    assert [c["expr"] for c in e.conflicts] == [SMALL_A, SMALL_B]
    assert [r["name"] for r in e.relaxations] == ["budget[cli-1]", "budget[cli-2]"]
    assert all(r["restores"] is True for r in e.relaxations)


def test_explain_relaxations_restore_feasibility_and_are_least(small_conflict, small) -> None:
    inst, e = small_conflict
    texts = {"budget[cli-1]": SMALL_A, "budget[cli-2]": SMALL_B}
    for r in e.relaxations:
        other = [t for n, t in texts.items() if n != r["name"]]
        limit = r["new_limit"]
        assert isinstance(limit, float)
        assert r["violation_at_best"] > 0
        relaxed = with_budgets(small, [normalized_text(inst, r["name"], limit), *other])
        bf = brute_force(relaxed)
        assert bf.feasible, r
        # a little less relaxation is not enough
        tighter = limit - 1e-6 * r["violation_at_best"] - 1e-7 * abs(limit)
        assert not brute_force(
            with_budgets(small, [normalized_text(inst, r["name"], tighter), *other])
        ).feasible, r
    (r1, r2) = e.relaxations
    # by hand: the compute die must grow to 80 mm2; tokens/s must drop to the optimum under A
    assert r1["new_limit"] == pytest.approx(80.0, rel=1e-9)
    under_a = brute_force(with_budgets(small, [SMALL_A])).objective
    assert 1.0 / r2["new_limit"] == pytest.approx(under_a, rel=1e-9)


def test_explain_as_written_relaxations_restore_feasibility(small_conflict, small) -> None:
    _, e = small_conflict
    texts = {"budget[cli-1]": SMALL_A, "budget[cli-2]": SMALL_B}
    for r in e.relaxations:
        other = [t for n, t in texts.items() if n != r["name"]]
        assert brute_force(with_budgets(small, [r["as_written"], *other])).feasible, r["as_written"]


@pytest.mark.parametrize("text", ["60 >= power_W", "power_W - 10 <= 50"])
def test_explain_as_written_keeps_the_budget_meaning(text, tiny) -> None:
    inst = with_budgets(tiny, [text, "tokens_per_s >= 20000"])
    e = explain(inst)
    (r,) = [r for r in e.relaxations if r["name"] == "budget[cli-1]"]
    parsed = parse_budget(r["as_written"], ["main"])
    assert [(t.metric, t.coef) for t in parsed.terms] == [("power_W", 1.0)]
    assert parsed.rhs == pytest.approx(r["new_limit"], rel=1e-5)


def test_explain_feasible_instance(tiny) -> None:
    e = explain(tiny)
    assert e.feasible is True
    assert e.conflicts == [] and e.relaxations == []
    d = e.as_dict()
    assert d["feasible"] is True and d["conflicts"] == [] and d["relaxations"] == []


def test_explain_single_hardware_budget(tiny) -> None:
    inst = with_budgets(tiny, ["power_W <= 10"])
    assert not brute_force(inst).feasible
    e = explain(inst)
    assert [c["name"] for c in e.conflicts] == ["budget[cli-1]"]
    (r,) = e.relaxations
    assert r["restores"] is True
    bf = brute_force(with_budgets(tiny, [f"power_W <= {r['new_limit']!r}"]))
    assert bf.feasible
    # the least: the lowest power of any design that meets the other constraints
    assert not brute_force(
        with_budgets(tiny, [f"power_W <= {r['new_limit'] * (1 - 1e-6)!r}"])
    ).feasible


def test_cli_solve_infeasible_prints_explanation(tiny, tiny_opt) -> None:
    under_a = brute_force(with_budgets(tiny, [TINY_A])).objective
    assert under_a < 22000 < tiny_opt.objective
    res = run("solve", TINY, "--budget", TINY_A, "--budget", TINY_B, "--json")
    assert res.exit_code == 1, res.output
    no_traceback(res)
    data = json.loads(res.stdout)
    assert data["status"] == "infeasible"
    assert "explanation" in data
    assert data["explanation"]["feasible"] is False
    assert [c["name"] for c in data["explanation"]["conflicts"]] == [
        "budget[cli-1]",
        "budget[cli-2]",
    ]
    res = run("solve", TINY, "--budget", TINY_A, "--budget", TINY_B)
    assert res.exit_code == 1
    assert "budget[cli-1]" in res.stdout and "budget[cli-2]" in res.stdout
    assert "cannot all hold" in res.stdout


def test_cli_explain_json_keys() -> None:
    res = run("explain", TINY, "--budget", TINY_A, "--budget", TINY_B, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert {"feasible", "conflicts", "relaxations"} <= set(data)
    assert data["feasible"] is False
    assert [c["name"] for c in data["conflicts"]] == ["budget[cli-1]", "budget[cli-2]"]
    res = run("explain", TINY, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["feasible"] is True and data["conflicts"] == [] and data["relaxations"] == []
    res = run("explain", TINY)
    assert res.exit_code == 0 and "feasible" in res.stdout


# --------------------------------------------------------------------------------------------------
# CLI contracts
# --------------------------------------------------------------------------------------------------


def test_cli_metrics_json() -> None:
    res = run("metrics", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    names = {r["name"] for r in rows}
    assert {"power_W", "tpot_s", "tokens_per_s"} <= names
    assert all({"name", "scope", "unit", "description"} <= set(r) for r in rows)


def test_cli_certify_json_keys(tmp_path: Path) -> None:
    res = run("certify", TINY, "--set", "batch=32", "--solutions", str(tmp_path), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    for key in ("feasible", "objective", "sense", "bound", "gap", "audit"):
        assert key in data
    assert data["feasible"] and data["sense"] == "max" and data["gap"] > 0
    assert {"thermal-junction-upper", "memory-capacity-local[main]", "budget-area"} <= {
        a["name"] for a in data["audit"]
    }
    res = run("certify", TINY, "--set", "batch=32", "--solutions", str(tmp_path))
    assert res.exit_code == 0, res.output
    assert "no feasible design beats this one" in res.stdout


@pytest.mark.parametrize("command", ["solve", "certify", "explain", "evaluate"])
@pytest.mark.parametrize(
    ("budget", "piece"),
    [
        ("powr_W <= 5", "did you mean 'power_W'?"),
        ("power_W * area_mm2 <= 5", "a product needs a number"),
        ("__import__('os').system('x') <= 1", "not allowed in a budget"),
        ("power_W", "one <= or >="),
    ],
)
def test_cli_bad_budget_exits_2(command, budget, piece, tmp_path: Path) -> None:
    args = [command, TINY, "--budget", budget]
    if command == "certify":
        args += ["--solutions", str(tmp_path)]
    res = run(*args)
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert res.stderr.startswith("error:")
    assert piece in res.stderr
    assert "--budget" in res.stderr
    no_traceback(res)


def test_cli_deeply_nested_budget_exits_2() -> None:
    res = run("solve", TINY, "--budget", "-" * 1500 + "power_W <= 1")
    assert res.exit_code == 2
    no_traceback(res)


@pytest.mark.parametrize(
    ("which", "budgets"),
    [
        # a limit 5.4e-6 (relative) below the best design's TTFT: within a solver's tolerance
        ("tiny", ["tpot_s <= 0.0075765", "ttft_s <= 0.2964", "clock_GHz >= 1.75"]),
        # the same budget as 1e5*ttft_s <= 5380, scaled: its terms' helper variables were ~1e-7
        ("small", ["1e7*ttft_s <= 538000"]),
        ("small", ["memory_used_B + 2.6e+09*ttft_s <= 1.26e+09", "static_W <= 5.14"]),
    ],
)
def test_explain_and_solve_judge_by_the_model(which, budgets, tiny, small) -> None:
    """Budget sets a helper's fuzzing found explain calling feasible (and solve, for the last,
    'no_solution' after 21 s): by enumeration none is; explain and solve now say so."""
    from codesign.proof.driver import solve_instance

    inst = with_budgets(tiny if which == "tiny" else small, budgets)
    assert not brute_force(inst).feasible
    assert explain(inst).feasible is False
    assert solve_instance(inst).status == "infeasible"


def test_each_relaxation_carries_its_witness(tiny) -> None:
    """The relaxation's witness is a design the model accepts under every other constraint, whose
    own violation is the amount reported; the least, proven."""
    inst = with_budgets(tiny, ["power_W <= 10"])
    (r,) = explain(inst).relaxations
    assert r["restores"] is True and r["least"] is True
    ev = evaluate(inst, r["witness"])
    (a,) = [a for a in ev.audit if a.name == "budget[cli-1]"]
    assert a.value - a.limit == pytest.approx(r["violation_at_best"], rel=1e-12)
    assert all(x.ok for x in ev.audit if x.name != "budget[cli-1]")
