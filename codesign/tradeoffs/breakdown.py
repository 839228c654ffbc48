"""Per-design breakdowns for plots and reports: time per token (compute, memory, network), energy
per token by component, device area and power by component.

Every number is the model's: the parts are the terms :func:`codesign.model.evaluate.breakdown`
returns (or the metrics a record holds), the totals the record's metrics; nothing is recomputed
here. A kind whose model does not split a quantity gets a note saying so instead of a panel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codesign.kinds.base import Problem
from codesign.model.evaluate import breakdown as model_breakdown

#: energy per token's components as the metrics name them (``energy_per_token_<part>_J``)
ENERGY_PARTS = ("compute", "dram", "pool", "scale_up", "scale_out", "static")


@dataclass
class Bar:
    """One bar: a design (and workload), its parts and its total (the metric, from the record)."""

    label: str
    parts: dict[str, float]
    total: float


@dataclass
class Panel:
    """One quantity for every design shown. ``stacked``: the parts add up to the total; else the
    parts are shown side by side and the total apart (overlapped streams)."""

    title: str
    metric: str
    unit: str
    bars: list[Bar]
    stacked: bool = True
    note: str = ""


@dataclass
class Breakdown:
    instance: str
    kind: str
    panels: list[Panel]
    notes: list[str] = field(default_factory=list)


def _metric(metrics: dict[str, Any], workload: str | None, key: str) -> Any:
    return metrics[key] if workload is None else metrics[f"{workload}.{key}"]


def breakdown(problem: Problem, designs: dict[str, dict[str, Any]]) -> Breakdown:
    """The breakdown of each design (label -> a design of ``problem``), in the order given."""
    assessed = {label: problem.assess(problem.parse_design(d, source=label)) for label, d in designs.items()}
    if problem.kind == "grid":
        return _grid(problem, assessed)
    if problem.kind == "mapping":
        return _mapping(problem, assessed)
    return Breakdown(problem.name, problem.kind, [], [
        f"{problem.kind} instances: the model states the step's parts (expert phase, dispatch, combine, all-reduce, "
        "fixed) but they overlap and do not add up to the step, and energy, power and area are not split by "
        "component: no breakdown is drawn"])


def _grid(problem: Problem, assessed: dict[str, Any]) -> Breakdown:
    inst = problem.inst  # type: ignore[attr-defined]
    names = [w.name for w in inst.workloads]
    many = len(names) > 1
    time_bars, energy_bars, power_bars, area_bars = [], [], [], []
    parts = {label: model_breakdown(inst, a.design) for label, a in assessed.items()}
    # workload by workload, each design's bar beside the other's
    for w in names:
        key = None if not many else w
        for label, a in assessed.items():
            wl = f"{w} · {label}" if many else label
            time_bars.append(Bar(wl, parts[label]["time_per_token_s"][w], _metric(a.metrics, key, "time_per_token_s")))
            energy_bars.append(Bar(wl, {p: _metric(a.metrics, key, f"energy_per_token_{p}_J") for p in ENERGY_PARTS},
                                   _metric(a.metrics, key, "energy_per_token_J")))
    for label, a in assessed.items():
        power_bars.append(Bar(label, parts[label]["power_W"], a.metrics["power_W"]))
        area_bars.append(Bar(label, parts[label]["area_mm2"], a.metrics["area_mm2"]))
    chip = inst.hardware.family != "stacked-3d"
    return Breakdown(problem.name, problem.kind, [
        Panel("time per token", "time_per_token_s", "s", time_bars,
              note="1 / tokens_per_s; decode and prefill steps weighted as in the metric"),
        Panel("energy per token", "energy_per_token_J", "J", energy_bars),
        Panel("device power (design power, all parts at full load)", "power_W", "W", power_bars,
              note="a catalog chip's TDP is not split by the model" if chip else ""),
        Panel("device area", "area_mm2", "mm²", area_bars,
              note=("a catalog chip's die area is not split by the model" if chip else "")
              + ("; 0 mm² is a die area the catalog marks not public" if chip and any(
                  x.total == 0 for x in area_bars) else "")),
    ])


def _mapping(problem: Problem, assessed: dict[str, Any]) -> Breakdown:
    bars = []
    for label, a in assessed.items():
        m = a.metrics
        for d, (c, mem, s) in enumerate(zip(m["compute_s"], m["memory_s"], m["stage_s"], strict=True)):
            bars.append(Bar(f"{label} · stage {d}", {"compute": c, "memory": mem}, s))
    return Breakdown(problem.name, problem.kind, [
        Panel("time per stage step", "stage_s", "s", bars, stacked=False,
              note="a stage's compute and memory streams overlap by the calibrated fraction: the stage time "
                   "(black tick) is not their sum; the period is the slowest stage or port")],
        ["mapping instances: energy per token, power and area are not split by component by the model "
         "(only their totals are stated)"])
