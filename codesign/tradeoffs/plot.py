"""Plots of trade-offs: a frontier with each point's design labelled, a sensitivity curve with its
breakpoints, and per-design breakdowns (matplotlib, imported only when a plot is asked for).

Each function writes to a path (atomically; the suffix names the format) or to a binary stream
(PNG: the report embeds it)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import IO, Any

from codesign.jsonio import atomic_output


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no screen
    import matplotlib.pyplot as plt

    return plt


def frontier_plot(frontier: Any, path: str | Path | IO[bytes], *, label_keys: tuple[str, ...] = ()) -> Path | IO[bytes]:
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
    # each point's design on at most two lines that fit beside the axes (long decisions shortened)
    lines = [row for i, p in enumerate(pts, 1) for row in textwrap.wrap(
        ", ".join(_short(k, p.design.get(k)) for k in keys), 64, initial_indent=f"{i:>2}  ", subsequent_indent="    ",
        max_lines=2, placeholder=" …")]
    legend.text(0.0, 1.0, "\n".join(lines[:40]) + ("\n..." if len(lines) > 40 else ""), va="top", ha="left",
                family="monospace", fontsize=7, transform=legend.transAxes)
    fig.tight_layout()
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, target: str | Path | IO[bytes]) -> Path | IO[bytes]:
    try:
        if hasattr(target, "write"):
            fig.savefig(target, format="png")
            return target  # type: ignore[return-value]
        path = Path(target)  # type: ignore[arg-type]
        with atomic_output(path) as tmp:
            fig.savefig(tmp, format=path.suffix.lstrip(".") or "png")
        return path
    finally:
        plt.close(fig)


def _short(key: str, value: Any) -> str:
    """``key=value`` compactly: floats as %g, lists without quotes or spaces."""
    def compact(v: Any) -> str:
        if isinstance(v, list | tuple):
            return "[" + ",".join(compact(x) for x in v) + "]"
        return f"{v:g}" if isinstance(v, float) else str(v)
    return f"{key}={compact(value)}"


def sensitivity_plot(result: Any, path: str | Path | IO[bytes]) -> Path | IO[bytes]:
    """The proven optimum against the varied value (a step line: the optimum is constant between
    breakpoints where the design does not change), breakpoints shaded to their located interval."""
    plt = _pyplot()
    pts = [p for p in result.points if p.objective is not None]
    # the optimum is constant between breakpoints: the bisection's last solves on either side of
    # each breakpoint place its step where it is, not at the next grid value
    curve = sorted([(p.value, p.objective) for p in pts]
                   + [(b["between"][i], b["objective"][i]) for b in result.breakpoints for i in (0, 1)
                      if b["objective"][i] is not None])
    fig, ax = plt.subplots(figsize=(8, 4.8 + 0.16 * min(len(result.breakpoints), 8)), dpi=120)
    ax.plot([c[0] for c in curve], [c[1] for c in curve], drawstyle="steps-post", lw=1.2)
    ax.plot([p.value for p in pts], [p.objective for p in pts], "o", ms=3.5, color="tab:blue")
    lines = []
    for i, b in enumerate(result.breakpoints, 1):
        lo, hi = b["between"]
        ax.axvspan(lo, hi, color="tab:orange", alpha=0.35, lw=0)
        # numbered at the top, on three heights so that close breakpoints do not overlap (more
        # than 20 cannot be read: shaded only)
        if len(result.breakpoints) <= 20:
            ax.annotate(str(i), ((lo + hi) / 2, 1.0), xycoords=("data", "axes fraction"),
                        xytext=(2, -4 - 10 * ((i - 1) % 3)), textcoords="offset points", va="top", ha="left",
                        fontsize=7, color="tab:red")
        changed = ", ".join(f"{k} {u}→{w}" for k, (u, w) in b["changed"].items()) or "feasibility"
        lines.append(textwrap.shorten(f"{i}: {changed}", 110, placeholder=" …"))
    lo_y, hi_y = ax.get_ylim()
    ax.set_ylim(lo_y, hi_y + 0.12 * (hi_y - lo_y))  # room for the numbers above the curve
    budget = "<=" in result.vary or ">=" in result.vary
    varied = result.vary.split("..")[0].rsplit(" ", 1)[0] if budget else result.vary.split("=")[0] + " ="
    shown = (lines if len(lines) <= 8 else [*lines[:7], f"... {len(lines) - 7} more (the table lists them)"]
             if len(lines) <= 20 else [f"{len(lines)} breakpoints, not numbered here (the table lists them)"])
    shown += [textwrap.shorten(n, 110) for n in getattr(result, "notes", [])]  # e.g. stopped after N breakpoints
    ax.set_xlabel(f"{varied} v  (the varied value)" + ("\nbreakpoints (shaded): " if lines else "")
                  + "\n".join(shown), fontsize=8.5)
    ax.set_ylabel(f"proven optimum: {result.sense} {result.metric}")
    ax.set_title(f"{result.instance}: {len(pts)} proven points, {len(result.breakpoints)} breakpoints", fontsize=10)
    ax.grid(True, lw=0.3)
    fig.tight_layout()
    return _save(plt, fig, path)


#: SI prefixes a breakdown's axis may use (mm² is shown as is)
_PREFIXES = ((1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))
#: one colour per part name, the same in every panel (compute, memory, network, ...)
_COLOURS = {"compute": "tab:blue", "memory": "tab:orange", "dram": "tab:orange", "network": "tab:green",
            "scale_up": "tab:green", "scale_out": "tab:olive", "pool": "tab:purple", "overhead": "tab:gray",
            "overlapped": "tab:cyan", "static": "tab:red", "io": "tab:brown", "sram": "tab:pink",
            "tsv": "tab:purple", "fixed_logic": "tab:gray", "die": "tab:blue", "TDP": "tab:blue"}


def _scale(values: list[float], unit: str) -> tuple[float, str]:
    """(divisor, unit with prefix) so the largest value reads between 1 and 1000."""
    top = max((abs(v) for v in values), default=0.0)
    if unit not in ("s", "J", "W") or top == 0:
        return 1.0, unit
    for scale, prefix in _PREFIXES:
        if top >= scale:
            return scale, f"{prefix}{unit}"
    return _PREFIXES[-1][0], f"{_PREFIXES[-1][1]}{unit}"


def breakdown_plot(b: Any, path: str | Path | IO[bytes]) -> Path | IO[bytes]:
    """One horizontal bar per design (and workload) in each panel of a
    :class:`codesign.tradeoffs.breakdown.Breakdown`: the model's parts stacked (or side by side
    where they overlap), the total (the record's metric) written at the end of the bar."""
    plt = _pyplot()
    panels = b.panels
    cols = 2 if len(panels) > 1 else 1
    rows = (len(panels) + cols - 1) // cols
    heights = [max(0.42 * max(len(p.bars) for p in panels[r * cols:(r + 1) * cols]) + 1.6, 2.6) for r in range(rows)]
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols if cols > 1 else 7.5, sum(heights)), dpi=110, squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, panel in zip(axes.flat, panels, strict=False):
        div, unit = _scale([x.total for x in panel.bars] + [v for x in panel.bars for v in x.parts.values()], panel.unit)
        names = [k for k in dict.fromkeys(k for x in panel.bars for k in x.parts) if any(x.parts.get(k) for x in panel.bars)]
        ys = list(range(len(panel.bars)))[::-1]
        width = 0.8 / max(len(names), 1) if not panel.stacked else 0.6
        for i, name in enumerate(names):
            vals = [x.parts.get(name, 0.0) / div for x in panel.bars]
            colour = _COLOURS.get(name)
            if panel.stacked:
                left = [sum(x.parts.get(k, 0.0) for k in names[:i]) / div for x in panel.bars]
                ax.barh(ys, vals, left=left, height=width, color=colour, label=name.replace("_", " "))
            else:
                ax.barh([y + 0.4 - width * (i + 0.5) for y in ys], vals, height=width, color=colour,
                        label=name.replace("_", " "))
        totals = [x.total / div for x in panel.bars]
        if not panel.stacked:
            ax.scatter(totals, ys, marker="|", s=400, color="black", zorder=3, label="stage time")
        top = max([*totals, 0.0])
        for y, t in zip(ys, totals, strict=True):
            ax.annotate(f"{t:.4g}", (t, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=7.5)
        ax.set_xlim(0, top * 1.2 if top > 0 else 1)
        ax.set_yticks(ys, [x.label for x in panel.bars], fontsize=8)
        note = "\n".join(textwrap.wrap(panel.note, 80))
        ax.set_xlabel(f"{panel.metric} ({unit})" + (f"\n{note}" if note else ""), fontsize=8)
        ax.set_title(panel.title, fontsize=9.5, pad=20)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(True, axis="x", lw=0.3)
        ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), markerscale=0.5, frameon=False,
                  ncol=min(len(names) + (0 if panel.stacked else 1), 6), handlelength=1.5, columnspacing=1.2)
    fig.suptitle(textwrap.fill(f"{b.instance}: breakdown by component (the model's terms; totals are the metrics)",
                               75 if cols == 1 else 140), fontsize=10)
    fig.tight_layout()
    return _save(plt, fig, path)
