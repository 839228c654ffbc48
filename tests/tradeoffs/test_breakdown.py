"""codesign.tradeoffs.breakdown (and codesign.model.evaluate.breakdown): the parts of a design's
time per token, energy per token, device power and area are the model's terms.

References: on a stacked-3D instance, a catalog-chip instance and a multi-workload one, each
panel's parts add up to its total (the record's metric) to 1e-12 relative, and each total is the
assessed metric itself; a placement instance gets a note, no panel; every plot is a PNG.
"""

from __future__ import annotations

import io

import pytest

from codesign.kinds.registry import load
from codesign.tradeoffs.breakdown import breakdown
from codesign.tradeoffs.plot import breakdown_plot


@pytest.mark.parametrize("name", ["tiny-3d-llama8b", "dgx-llama70b-chip-choice", "deepstack-multi-workload"])
def test_the_parts_add_up_to_the_metrics(name):
    p = load(name)
    base = p.parse_design(p.baseline())
    b = breakdown(p, {"baseline": base})
    a = p.assess(base)
    assert [x.metric for x in b.panels] == ["time_per_token_s", "energy_per_token_J", "power_W", "area_mm2"]
    for panel in b.panels:
        assert panel.stacked
        for bar in panel.bars:
            assert sum(bar.parts.values()) == pytest.approx(bar.total, rel=1e-12)
            key = panel.metric if " · " not in bar.label else f"{bar.label.split(' · ')[0]}.{panel.metric}"
            assert bar.total == a.metrics[key]
    buf = io.BytesIO()
    breakdown_plot(b, buf)
    assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_mapping_shows_its_stages_and_a_placement_says_why_not():
    p = load("tiny-pf-mapping")
    b = breakdown(p, {"baseline": p.baseline()})
    (panel,) = b.panels
    a = p.assess(p.parse_design(p.baseline()))
    assert not panel.stacked and [x.total for x in panel.bars] == a.metrics["stage_s"]
    q = load("tiny-placement-mixtral")
    b = breakdown(q, {"baseline": q.baseline()})
    assert not b.panels and "no breakdown is drawn" in b.notes[0]
