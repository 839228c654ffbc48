"""The predicted-vs-measured plot of a validation report (``codesign validate --plot FILE``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from codesign.calibration.report import TARGET_GROUP_MAPE_PCT, ValidationReport

#: legend names of the split labels (rows of a file outside the split were never fitted)
_SPLIT_LABELS = {"unlisted": "not fitted"}


def plot_title(report: ValidationReport) -> str:
    """The plot's default title: file, MAPE, held-out MAPE (or that no row was fitted), rows."""
    held = report.subset_mape("held-out")
    part = f"held-out {held:.1f} %" if not math.isnan(held) else "no row fitted"
    return f"{Path(report.csv).name}: MAPE {report.mape_pct:.1f} % ({part}), {len(report.rows)} rows"


def plot(report: ValidationReport, path: str | Path, *, title: str | None = None) -> Path:
    """Predicted vs measured (log-log), one colour per chip family, hollow markers for fit rows,
    filled for held-out; the y = x line and a band of +-TARGET_GROUP_MAPE_PCT. PNG via
    matplotlib's Agg backend (matplotlib is imported here: an optional dependency)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 7.0), dpi=120)
    fams = sorted({r["family"] for r in report.rows})
    colours = plt.get_cmap("tab10")
    pts = [r for r in report.rows if r["predicted"] > 0]
    for i, fam in enumerate(fams):
        for split, face in (("fit", "none"), ("held-out", None), (None, None), ("unlisted", None)):
            sel = [r for r in pts if r["family"] == fam and r.get("split") == split]
            if not sel:
                continue
            ax.scatter([r["measured"] for r in sel], [r["predicted"] for r in sel], s=22,
                       facecolors=face if face else colours(i), edgecolors=colours(i), linewidths=0.9,
                       label=f"{fam} ({_SPLIT_LABELS.get(split, split)})" if split else fam)
    if pts:
        lo = min(min(r["measured"], r["predicted"]) for r in pts) * 0.7
        hi = max(max(r["measured"], r["predicted"]) for r in pts) * 1.4
        xs = np.geomspace(lo, hi, 50)
        band = TARGET_GROUP_MAPE_PCT / 100.0
        ax.plot(xs, xs, color="black", lw=1)
        ax.fill_between(xs, xs * (1 - band), xs * (1 + band), color="grey", alpha=0.2, lw=0,
                        label=f"±{TARGET_GROUP_MAPE_PCT:g} %")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    unit = sorted({r["metric"] for r in report.rows})
    ax.set_xlabel(f"measured {', '.join(unit)}")
    ax.set_ylabel("predicted by the model")
    ax.set_title(title or plot_title(report))
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
