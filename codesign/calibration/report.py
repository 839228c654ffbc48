"""Predicting measurement rows with the model and reporting the error (``codesign validate``).

Every predictable row of a measurements file is evaluated with :func:`codesign.model.evaluate.evaluate`
on its one-design instance (``codesign.calibration.engine``) under one calibration, and its metric
compared with the measurement: per row the signed percentage error, per group (``--by``) the MAPE,
bias and worst row, overall the MAPE of every row and, where a split labels them, of the fit and
held-out rows, judged against the targets. Rows the model cannot predict are listed with the reason.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codesign.calibration.concurrency import at_concurrency
from codesign.calibration.engine import (
    ENGINE_MAX_BATCH,
    evaluate_row,
    max_batch,
    model_metric,
    skip_reason,
)
from codesign.calibration.fit import family_of
from codesign.calibration.rows import (
    SPLIT_METHOD,
    Row,
    file_sha256,
    read_rows,
    read_split,
    split_of,
)
from codesign.errors import InputError
from codesign.model.calibration import CalibrationSet, shipped

#: the accuracy the model is held to: MAPE of the held-out rows, and of each group's rows (groups
#: of ``--by``; the target is stated for (model, chip))
TARGET_HELD_OUT_MAPE_PCT = 7.0
TARGET_GROUP_MAPE_PCT = 12.0

#: the split the shipped calibration was fitted on, in a checkout of the repository (an installed
#: package has none: ``run_validation`` then labels the rows of the file the calibration records)
DEFAULT_SPLIT = Path(__file__).resolve().parent.parent.parent / "validation" / "split.json"

#: the fields of a row's result record (``predict_row``) that ``--by`` can group on
GROUP_FIELDS = ("id", "model", "gpu", "family", "precision", "kv_precision", "num_gpus", "tp", "pp", "ep",
                "attention_dp", "isl", "osl", "concurrency", "metric", "source", "num_requests", "engine_max_batch",
                "batch_bound")


def mape(errors_pct: Iterable[float]) -> float:
    """Mean absolute percentage error of signed percentage errors (nan if empty)."""
    e = [abs(x) for x in errors_pct]
    return float(sum(e) / len(e)) if e else float("nan")


@dataclass
class ValidationReport:
    """Per-row predictions and errors, grouped; ``skipped`` rows carry their reason."""

    csv: str
    by: tuple[str, ...]
    rows: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    split_file: str | None = None
    #: the calibration of every chip the rows name, as the model used it
    calibration: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the calibration file's name ("shipped" or its path) and sha256
    calibration_file: str = ""
    calibration_sha256: str = ""

    @property
    def mape_pct(self) -> float:
        return mape(r["error_pct"] for r in self.rows)

    def subset_mape(self, split: str) -> float:
        return mape(r["error_pct"] for r in self.rows if r.get("split") == split)

    @property
    def groups(self) -> dict[str, dict[str, Any]]:
        g: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in self.rows:
            g["|".join(str(r[k]) for k in self.by)].append(r)
        out = {}
        for k in sorted(g):
            rs = g[k]
            errs = [r["error_pct"] for r in rs]
            out[k] = {
                "n": len(rs),
                "mape_pct": mape(errs),
                "bias_pct": float(np.mean(errs)),
                "max_abs_error_pct": float(max(abs(e) for e in errs)),
                "held_out_mape_pct": mape(r["error_pct"] for r in rs if r.get("split") == "held-out"),
            }
        return out

    @property
    def names_read(self) -> dict[str, int]:
        """``"<file's name> -> <catalog id>"``: rows, for every name the file spells otherwise."""
        out: dict[str, int] = defaultdict(int)
        for r in self.rows:
            for k, given in r.get("named_as", {}).items():
                out[f"{given} -> {r[k]}"] += 1
        return dict(sorted(out.items()))

    @property
    def batch_bounds(self) -> dict[str, int]:
        """Rows by what set their batch (memory, engine, requests, concurrency), the offline
        rows whose request count is unknown (their batch is not capped by it), and the rows whose
        engine is unknown (no ``max_batch_size``: no slots' state, the heuristic's cap)."""
        out: dict[str, int] = defaultdict(int)
        for r in self.rows:
            out[r["batch_bound"]] += 1
            if r["concurrency"] is None and r["num_requests"] is None:
                out["no request count"] += 1
            if "engine_max_batch" in r and r["engine_max_batch"] is None:
                out["no engine known"] += 1
        return dict(sorted(out.items()))

    def worst(self, n: int = 10) -> list[dict[str, Any]]:
        return sorted(self.rows, key=lambda r: -abs(r["error_pct"]))[:n]

    def targets(self, groups: dict[str, dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """The held-out MAPE and each group's MAPE against the targets (None when no row is
        labelled fit / held-out: nothing to judge). ``groups``: ``self.groups`` if already built.

        The group target is judged two ways: on each group's every row (the ``--by`` table's MAPE
        column), and on each group's held-out rows alone, the stricter reading (``groups_over`` /
        ``groups_met``)."""
        every = self.groups if groups is None else groups
        held_groups = {k: g["held_out_mape_pct"] for k, g in every.items() if not math.isnan(g["held_out_mape_pct"])}
        if not held_groups:
            return None
        held = self.subset_mape("held-out")
        over = {k: v for k, v in held_groups.items() if v > TARGET_GROUP_MAPE_PCT}
        over_all = {k: g["mape_pct"] for k, g in every.items() if g["mape_pct"] > TARGET_GROUP_MAPE_PCT}
        worst = max(every, key=lambda k: every[k]["mape_pct"])
        return {
            "held_out_mape_pct": held,
            "held_out_target_pct": TARGET_HELD_OUT_MAPE_PCT,
            "held_out_met": held <= TARGET_HELD_OUT_MAPE_PCT,
            "group_target_pct": TARGET_GROUP_MAPE_PCT,
            "groups_all_rows_judged": len(every),
            "groups_all_rows_over": over_all,
            "groups_all_rows_met": not over_all,
            "worst_group_all_rows": [worst, every[worst]["mape_pct"]],
            "groups_judged": len(held_groups),
            "groups_over": over,
            "groups_met": not over,
        }

    def as_dict(self) -> dict[str, Any]:
        groups = self.groups
        return {
            "csv": self.csv,
            "by": list(self.by),
            "mape_pct": self.mape_pct,
            "held_out_mape_pct": self.subset_mape("held-out"),
            "fit_mape_pct": self.subset_mape("fit"),
            "n_rows": len(self.rows),
            "n_skipped": len(self.skipped),
            "split_file": self.split_file,
            "calibration_file": self.calibration_file,
            "calibration_sha256": self.calibration_sha256,
            "groups": groups,
            "batch_bounds": self.batch_bounds,
            "names_read": self.names_read,
            "worst": self.worst(),
            "rows": self.rows,
            "skipped": self.skipped,
            "calibration": self.calibration,
            "targets": self.targets(groups),
        }


def predict_row(row: Row, *, cap: int | None = ENGINE_MAX_BATCH, calibration: CalibrationSet | None = None) -> dict[str, Any]:
    """Predict one (predictable) row with ``evaluate``: the row's result record."""
    calibration = shipped() if calibration is None else calibration
    serving: dict[str, Any] = {}
    if row.concurrency is None:
        choice = max_batch(row, cap, calibration=calibration)
    else:  # the steady state of continuous batching (model.md §5.11)
        choice, serving = at_concurrency(row, cap, calibration=calibration)
    rec: dict[str, Any] = {
        "id": row.id, "model": row.model, "gpu": row.gpu, "family": family_of(row.gpu),
        "precision": row.precision, "kv_precision": row.kv_cache_precision,
        "num_gpus": row.num_gpus, "tp": row.tp, "pp": row.pp, "ep": row.ep, "attention_dp": row.attention_dp,
        "isl": row.isl, "osl": row.osl, "concurrency": row.concurrency, "metric": row.metric, "source": row.source,
        "measured": row.value, "num_requests": row.num_requests,
        "batch": choice.batch, "batch_bound": choice.bound,
        "engine_max_batch": row.engine_max_batch, "engine_state_B": choice.footprint.state_B(choice.batch),
        "engine_max_tokens": row.engine_max_tokens,
    }
    if choice.batch < 1:
        rec.update(predicted=0.0, error_pct=-100.0, note=f"model: {choice.reason}")
        return rec
    if serving:
        rec.update(serving, error_pct=100.0 * (serving["predicted"] - row.value) / row.value)
        return rec
    ev = evaluate_row(row, choice.batch, calibration=calibration)
    m = ev.workload_metrics["main"]
    pred = model_metric(row.metric, m, row.osl)
    dec = {k: m[f"decode_step.{k}_s"] + m.get(f"decode_step.{k}_overlapped_s", 0.0)
           for k in ("compute", "memory_local", "scale_up_bw", "scale_out_bw", "overhead")}
    dec["scale_up_bw"] += m["decode_step.scale_up_bw_in_switch_s"] + m["decode_step.scale_up_bw_cross_s"]
    rec.update(
        predicted=pred,
        error_pct=100.0 * (pred - row.value) / row.value,
        # weights, KV cache and the decoding state of the engine's slots (or the batch's own)
        memory_used_fraction=(m["weights_per_device_B"] + m["kv_per_device_B"] + choice.footprint.state_B(choice.batch))
        / ev.metrics["raw_capacity_B"],
        decode_bound=max(dec, key=dec.get),
        decode_step_s=m["decode_step_s"],
        prefill_step_s=m["prefill_step_s"],
        # iterations of the round beyond its static OSL under the engine's token budget (eq. 4.19)
        extra_iterations=m.get("prefill_step.extra_iterations", 0.0),
    )
    return rec


def fitted_on_by_hash(csv_path: str | Path, calibration: CalibrationSet) -> bool:
    """Whether ``calibration`` records (its ``[fitted_on]`` table) a fit on this very file (its
    sha256) with the id-hash split."""
    cal = calibration.file
    if cal.fitted_on is not None:
        return cal.fitted_on.split_rule == "id-hash" and cal.fitted_on.csv_sha256 == file_sha256(csv_path)
    # a calibration written before the [fitted_on] table said it in `source`
    return f"sha256 {file_sha256(csv_path)[:12]})" in cal.source and SPLIT_METHOD in cal.source


def run_validation(
    csv_path: str | Path,
    by: Sequence[str] = ("model", "gpu"),
    *,
    split_file: str | Path | None = DEFAULT_SPLIT,
    max_batch_cap: int | None = ENGINE_MAX_BATCH,
    calibration: CalibrationSet | None = None,
    progress: Callable[[str], None] | None = None,
    engine: str | None = None,
) -> ValidationReport:
    """Predict every row of a measurements CSV with the model under ``calibration`` (None: the
    shipped one).

    ``by``: row fields the groups are keyed on. ``split_file``: labels rows ``fit``/``held-out``
    (ignored if the file does not exist; ``None`` for no labels). With the default split file, a
    calibration that records a fit on this very file with the id-hash split labels its rows by
    that rule. ``progress`` is told each row's number before it is predicted. ``engine`` names every
    row's engine profile (``--engine``; None: each row's own, ``rows.read_rows``).
    """
    calibration = shipped() if calibration is None else calibration
    bad_by = [k for k in by if k not in GROUP_FIELDS]
    if bad_by:
        raise InputError("unknown grouping field", key="--by", value=bad_by, expected=f"some of {', '.join(GROUP_FIELDS)}")
    rows, malformed = read_rows(csv_path, engine=engine)
    labels: dict[str, str] = {}
    used_split = None
    default = split_file is not None and Path(split_file) == DEFAULT_SPLIT
    if default and fitted_on_by_hash(csv_path, calibration):
        labels = {r.id: split_of(r.id) for r in rows}
        used_split = f"the calibration's own ({SPLIT_METHOD})"
    elif split_file is not None and Path(split_file).exists():
        labels = read_split(split_file)
        used_split = str(split_file)
    out: list[dict[str, Any]] = []
    skipped = list(malformed)
    for i, r in enumerate(rows):
        if progress is not None:
            progress(f"row {i + 1} of {len(rows)}")
        why = skip_reason(r)
        if why:
            skipped.append({"id": r.id, "model": r.model, "gpu": r.gpu, "metric": r.metric, "reason": why})
            continue
        rec = predict_row(r, cap=max_batch_cap, calibration=calibration)
        rec["split"] = labels.get(r.id, "unlisted" if labels else None)
        if r.named_as:
            rec["named_as"] = dict(r.named_as)
        out.append(rec)
    return ValidationReport(
        csv=str(csv_path), by=tuple(by), rows=out, skipped=skipped, split_file=used_split,
        calibration={c: calibration.for_chip(c).model_dump() for c in sorted({r["gpu"] for r in out})},
        calibration_file=calibration.name, calibration_sha256=calibration.sha256,
    )


def format_report(report: ValidationReport, worst: int = 10) -> str:
    """Plain-text summary: overall / held-out MAPE, per-group table, worst rows, skipped rows."""
    d = report.as_dict()
    labelled = any(r.get("split") in ("fit", "held-out") for r in d["rows"])

    def pct(x: float) -> str:
        return "- (no row)" if math.isnan(x) else f"{x:.2f} %"

    split_note = (f"held-out {pct(d['held_out_mape_pct'])}  fit {pct(d['fit_mape_pct'])}" if labelled else
                  "no split file: rows are not labelled fit / held-out" if d["split_file"] is None else
                  "no row is in the split file: none was used for fitting")
    lines = [
        f"rows {d['n_rows']}  skipped {d['n_skipped']}  MAPE {d['mape_pct']:.2f} %  {split_note}",
        "",
        f"{'|'.join(report.by):40s} {'n':>4s} {'MAPE %':>8s} {'bias %':>8s} {'max %':>8s} {'held-out %':>10s}",
    ]
    for k, g in d["groups"].items():
        held = f"{g['held_out_mape_pct']:10.2f}" if labelled and not math.isnan(g["held_out_mape_pct"]) else f"{'-':>10s}"
        lines.append(f"{k:40s} {g['n']:4d} {g['mape_pct']:8.2f} {g['bias_pct']:+8.2f} {g['max_abs_error_pct']:8.1f} {held}")
    if d["batch_bounds"]:
        lines += ["", "batch set by: " + ", ".join(f"{k} {n}" for k, n in d["batch_bounds"].items())]
    if d["names_read"]:
        lines += ["", "names read as catalog ids: " + "; ".join(f"{k} ({n} row{'s' * (n != 1)})" for k, n in d["names_read"].items())]
    if d["targets"] is not None:
        lines += ["", _targets_line(d["targets"])]
    lines += ["", "worst rows:"]
    for r in report.worst(worst):
        lines.append(f"  {r['id']} {r['model']} {r['gpu']} {r['precision']} tp{r['tp']} {r['isl']}/{r['osl']} "
                     f"batch {r['batch']}: measured {r['measured']:.4g} predicted {r['predicted']:.4g} "
                     f"({r['error_pct']:+.1f} %){'  ' + r['note'] if r.get('note') else ''}")
    if d["skipped"]:
        lines += ["", "skipped rows:"]
        lines += [f"  {s['id']}: {s['reason']}" for s in d["skipped"]]
    return "\n".join(lines)


def _targets_line(t: dict[str, Any]) -> str:
    def verdict(ok: bool) -> str:
        return "met" if ok else "not met"

    def listed(groups: dict[str, float]) -> str:
        return ", ".join(f"{k} {v:.2f} %" for k, v in groups.items())  # 12.03 is over 12

    over, over_all = listed(t["groups_over"]), listed(t["groups_all_rows_over"])
    worst_k, worst_v = t["worst_group_all_rows"]
    return (f"targets: held-out MAPE <= {t['held_out_target_pct']:g} %: {t['held_out_mape_pct']:.2f} % "
            f"({verdict(t['held_out_met'])}); every group's MAPE <= {t['group_target_pct']:g} %: "
            f"{t['groups_all_rows_judged'] - len(t['groups_all_rows_over'])} of {t['groups_all_rows_judged']} "
            f"({verdict(t['groups_all_rows_met'])}{': over ' + over_all if over_all else ''}; "
            f"worst {worst_k} {worst_v:.2f} %); on its held-out rows alone: "
            f"{t['groups_judged'] - len(t['groups_over'])} of {t['groups_judged']} "
            f"({verdict(t['groups_met'])}{': over ' + over if over else ''})")
