"""codesign.tradeoffs.report and report_html (``codesign report``): one self-contained page whose
numbers are the solve's, the certificate's and the frontier's.

References: the page's embedded records equal a direct solve, ``certify`` on the baseline and a
direct frontier with the same options; its displayed numbers are those records' to 6 digits; it
references nothing outside itself (every image a data: PNG); a budget binds exactly when the
direct solve without it is better; a mapping instance's page states what does not apply to it.
A headless-Chromium screenshot runs where Chromium is installed (skipped otherwise).
"""

from __future__ import annotations

import base64
import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codesign.kinds.registry import from_data, load
from codesign.proof.certify import certify
from codesign.proof.driver import solve
from codesign.tradeoffs.pareto import frontier
from codesign.tradeoffs.report import Options, build_report
from codesign.tradeoffs.report_html import render

TINY = "tiny-3d-llama8b"
MAPPING = "tiny-pf-mapping"
ROOT = Path(__file__).resolve().parents[2]


def page_data(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="codesign-report">(.*?)</script>', text, re.S)
    assert m, "no embedded report data"
    return json.loads(m.group(1).replace("<\\/", "</"))


def assert_self_contained(text: str) -> None:
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r'(?:src|href)="(?!data:|#)', text), "a reference outside the page"
    assert "<link" not in text and "@import" not in text and "url(" not in text
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', text)
    assert images and len(images) == text.count("<img")
    for data in images:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_page(tmp_path_factory, cli):
    path = tmp_path_factory.mktemp("report") / "tiny.html"
    r = cli("report", TINY, "-o", path, "--max-points", "3", "-q")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return path.read_text()


def test_the_page_is_self_contained_with_every_section(tiny_page):
    assert_self_contained(tiny_page)
    for section in ("instance", "optimum", "breakdown", "budgets", "pareto", "certificate"):
        assert f'<section id="{section}">' in tiny_page


def test_the_numbers_are_the_solves(tiny_page):
    data = page_data(tiny_page)
    p = load(TINY)
    sol = solve(p)
    opt = data["optimum"]
    assert (opt["status"], opt["design"]) == (sol.status, sol.design) and sol.status == "optimal"
    assert (opt["objective"], opt["bound"], opt["gap"]) == (sol.objective, sol.bound, sol.gap)
    assert f"{sol.objective:.6g}" in tiny_page and "Proven optimal" in tiny_page
    cert = certify(p, p.baseline())
    got = data["certificate"]
    assert (got["objective"], got["bound"], got["gap"], got["statement"]) == (cert.objective, cert.bound, cert.gap,
                                                                              cert.statement)
    assert cert.statement in tiny_page
    f = frontier(p, "tokens_per_s", "energy_per_token_J", max_points=3)
    assert [(q["x"], q["y"], q["design"]) for q in data["frontier"]["points"]] == [(q.x, q.y, q.design) for q in f.points]
    for q in f.points:
        assert f"{q.x:.6g}" in tiny_page
    # tiny-3d-llama8b's one budget (area <= 200 mm2) does not bind: the page says so
    assert [b["binds"] for b in data["bindings"]] == [False]
    assert "no budget binds at the optimum" in tiny_page


def test_a_binding_budget_gets_its_sensitivity():
    """With budgets.area_mm2 = 100 the area budget binds (the optimum without it is better, as a
    direct solve says) and the sensitivity varies the instance's own field around it."""
    base = load(TINY)
    data = copy.deepcopy(base.data)
    data["budgets"]["area_mm2"] = 100.0
    p = from_data(data, source="tiny with area <= 100")
    r = build_report(p, Options(max_points=2, sensitivity_points=3))
    (b,) = r.bindings
    assert b.name == "budget-area" and b.binds
    assert b.without.objective == solve(base).objective > r.optimum.objective
    assert b.vary.startswith("budgets.area_mm2=50..") and b.sensitivity is not None
    for pt in b.sensitivity.points:
        d = copy.deepcopy(data)
        d["budgets"]["area_mm2"] = pt.value
        direct = solve(from_data(d, source="direct"))
        assert (pt.status, pt.objective) == (direct.status, direct.objective if direct.status == "optimal" else None)
    page = render(r)
    assert_self_contained(page)
    assert "Sensitivity to budget-area" in page and "1 of 1 budgets bind at the optimum" in page


def test_a_sensitivity_past_its_time_limit_keeps_what_it_proved_and_says_how_to_finish():
    p = load(TINY).with_budgets(["power_W <= 45"])
    r = build_report(p, Options(max_points=1, sensitivity_time_limit=0.01))
    b = next(x for x in r.bindings if x.binds)
    assert b.sensitivity is not None and not b.sensitivity.complete
    assert len(b.sensitivity.points) < 5 and "--sensitivity-time-limit" in b.note
    assert f"codesign sensitivity {TINY} --vary 'power_W <= " in b.note
    assert "--sensitivity-time-limit" in render(r)


def test_the_time_limit_covers_the_whole_report():
    """With the report's --time-limit spent by the optimum's solve, the later parts are not run and
    the page says so; the optimum is still there (a solve's first round always runs)."""
    p = load(TINY).with_budgets(["power_W <= 45"])
    r = build_report(p, Options(max_points=3, time_limit=1e-9))
    assert r.optimum.design is not None
    assert r.frontier is None and "--time-limit" in r.frontier_note
    if r.optimum.status == "optimal":  # proven within its first round: the budget checks were skipped
        assert r.bindings and all(b.binds is None and "--time-limit" in b.note for b in r.bindings)
    else:
        assert not r.bindings and "not proven" in r.binding_note
    assert r.solves == 1
    page = render(r)
    assert_self_contained(page)
    assert "--time-limit was spent" in page


def test_a_mapping_instance_states_what_does_not_apply(tmp_path, cli):
    path = tmp_path / "m.html"
    r = cli("report", MAPPING, "-o", path, "-q")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    page = path.read_text()
    assert_self_contained(page)
    data = page_data(page)
    sol = solve(load(MAPPING))
    assert (data["optimum"]["objective"], data["optimum"]["status"]) == (sol.objective, sol.status)
    if not load(MAPPING).takes_budgets:  # (until mapping instances take metric budgets)
        assert data["frontier"] is None and "not available" in data["frontier_note"]
        assert "take no metric budgets" in data["binding_note"]
    else:
        assert data["frontier"]["points"] and all(q["status"] == "optimal" for q in data["frontier"]["points"])
    assert data["breakdown"]["panels"][0]["metric"] == "stage_s"


@pytest.mark.parametrize(("args", "what"), [
    (["-o", "r.txt"], ".html or .htm"),
    (["-o", "r.html", "--x", "speed"], "not a metric"),
    (["-o", "r.html", "--max-points", "0"], "positive count"),
    (["-o", "r.html", "--sensitivity-points", "1"], "2..50"),
    (["-o", "r.html", "--time-limit", "-1"], ""),
])
def test_bad_options_are_input_errors(tmp_path, cli, args, what):
    args = [str(tmp_path / a) if a.startswith("r.") else a for a in args]
    r = cli("report", TINY, *args)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert what in r.stderr
    assert not list(tmp_path.iterdir())


def test_breakdown_command_writes_a_png(tmp_path, cli):
    path = tmp_path / "b.png"
    r = cli("breakdown", TINY, "-o", path, "--set", "tp=2")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli("breakdown", TINY, "-o", tmp_path / "b.txt").exit_code == 2


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no Chromium (apt-get install chromium)")
def test_the_page_renders_in_headless_chromium(tmp_path, tiny_page):
    page = tmp_path / "tiny.html"
    page.write_text(tiny_page)
    shot = tmp_path / "tiny.png"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "screenshot_report.py"), str(page), "-o", str(shot),
                        "--height", "1500"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
