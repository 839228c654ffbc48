"""codesign.api (``import codesign``): the same pipeline as the command line, for scripts."""

from __future__ import annotations

import pytest

import codesign
from codesign.proof import records


def test_the_api_is_importable_from_the_package():
    assert set(codesign.__all__) >= {"load", "evaluate", "solve", "certify", "explain", "named", "__version__"}
    assert "tiny-3d-llama8b" in codesign.named() and "tiny-pf-mapping" in codesign.named()
    with pytest.raises(AttributeError):
        codesign.nothing  # noqa: B018


def test_load_evaluate_solve_certify(brute, tmp_path):
    p = codesign.load("tiny-3d-llama8b")
    base = codesign.evaluate(p)
    assert isinstance(base, records.Evaluation) and base.design == p.baseline() and base.feasible
    other = codesign.evaluate(p, {"tp": 2})
    assert other.design["tp"] == 2 and other.objective != base.objective
    best = codesign.solve(p)
    assert isinstance(best, records.Solution) and best.status == "optimal"
    assert best.objective == pytest.approx(brute(p).best.objective, rel=1e-9)
    cert = codesign.certify(p, {"tp": 2}, solutions=tmp_path)
    assert isinstance(cert, records.Certificate)
    assert cert.gap == pytest.approx((best.objective - other.objective) / other.objective, rel=1e-9)
    assert codesign.certify(p, solutions=tmp_path).design == p.baseline()


def test_explain(named):
    e = codesign.explain(named("tiny-3d-llama8b").with_budgets(["power_W <= 10"]))
    assert e["feasible"] is False and [c["name"] for c in e["conflicts"]] == ["budget[cli-1]"]


def test_load_under_another_calibration_file(tmp_path):
    from codesign.model.calibration import shipped_path

    cal = tmp_path / "cal.toml"
    cal.write_text(shipped_path().read_text() + "\n# a copy\n")
    p = codesign.load("tiny-3d-llama8b", calibration=cal)
    assert p.calibration.path == cal.resolve()
    assert codesign.evaluate(p).calibration == str(cal.resolve())
