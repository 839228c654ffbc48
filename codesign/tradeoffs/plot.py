"""Plots of trade-offs: a frontier with each point's design labelled (matplotlib, imported only
when a plot is asked for)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codesign.jsonio import atomic_output


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no screen
    import matplotlib.pyplot as plt

    return plt


def frontier_plot(frontier: Any, path: str | Path, *, label_keys: tuple[str, ...] = ()) -> Path:
    """The frontier's points (x against y, a staircase between them), numbered, with each number's
    design beside the axes: the decisions that differ between points, or ``label_keys``."""
    plt = _pyplot()
    pts = frontier.points
    keys = list(label_keys) or [k for k in (pts[0].design if pts else {}) if len({str(p.design.get(k)) for p in pts}) > 1]
    fig, (ax, legend) = plt.subplots(1, 2, figsize=(11, 5.5), dpi=120, gridspec_kw={"width_ratios": [3, 2]})
    order = sorted(pts, key=lambda p: p.x)
    ax.plot([p.x for p in order], [p.y for p in order], drawstyle="steps-pre", color="0.7", lw=1, zorder=1)
    ax.scatter([p.x for p in pts], [p.y for p in pts], s=26, color="tab:blue", zorder=2)
    for i, p in enumerate(pts, 1):
        ax.annotate(str(i), (p.x, p.y), textcoords="offset points", xytext=(4, -9 if i % 2 else 3), fontsize=7)
    better = {"max": "higher", "min": "lower"}
    ax.set_xlabel(f"{frontier.x} ({better['max' if frontier.x == 'tokens_per_s' else 'min']} is better)")
    ax.set_ylabel(f"{frontier.y} ({better['max' if frontier.y == 'tokens_per_s' else 'min']} is better)")
    state = "complete" if frontier.complete else "incomplete"
    ax.set_title(f"{frontier.instance}: {len(pts)} proven points ({state})", fontsize=10)
    ax.grid(True, lw=0.3)
    legend.axis("off")
    lines = [f"{i:>2}  " + ", ".join(_short(k, p.design.get(k)) for k in keys) for i, p in enumerate(pts, 1)]
    legend.text(0.0, 1.0, "\n".join(lines[:40]) + ("\n..." if len(lines) > 40 else ""), va="top", ha="left",
                family="monospace", fontsize=7, transform=legend.transAxes)
    fig.tight_layout()
    path = Path(path)
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path


def _short(key: str, value: Any) -> str:
    v = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{key}={v}"


def sensitivity_plot(result: Any, path: str | Path) -> Path:
    """The proven optimum against the varied value (a step line: the optimum is constant between
    breakpoints where the design does not change), breakpoints shaded to their located interval."""
    plt = _pyplot()
    pts = [p for p in result.points if p.objective is not None]
    # the optimum is constant between breakpoints: the bisection's last solves on either side of
    # each breakpoint place its step where it is, not at the next grid value
    curve = sorted([(p.value, p.objective) for p in pts]
                   + [(b["between"][i], b["objective"][i]) for b in result.breakpoints for i in (0, 1)
                      if b["objective"][i] is not None])
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    ax.plot([c[0] for c in curve], [c[1] for c in curve], drawstyle="steps-post", lw=1.2)
    ax.plot([p.value for p in pts], [p.objective for p in pts], "o", ms=3.5, color="tab:blue")
    for b in result.breakpoints:
        lo, hi = b["between"]
        ax.axvspan(lo, hi, color="tab:orange", alpha=0.35, lw=0)
        ax.annotate(", ".join(b["changed"])[:40], ((lo + hi) / 2, ax.get_ylim()[1]), rotation=90, va="top",
                    ha="right", fontsize=6.5, color="tab:orange")
    ax.set_xlabel(result.vary.split("..")[0].rsplit(" ", 1)[0] if "<=" in result.vary or ">=" in result.vary
                  else result.vary.split("=")[0])
    ax.set_ylabel(f"proven optimum: {result.sense} {result.metric}")
    ax.set_title(f"{result.instance}: {len(pts)} proven points, {len(result.breakpoints)} breakpoints", fontsize=10)
    ax.grid(True, lw=0.3)
    fig.tight_layout()
    path = Path(path)
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path
