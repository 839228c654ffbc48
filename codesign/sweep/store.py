"""A sweep's output directory: one solution record per point, a journal, and the results tables.

```
DIR/
  results.parquet, results.csv   one row per point (columns: :func:`columns`)
  points/<id>/<instance>.json    the point's solution record (``codesign.proof.records.save``;
  points/<id>/ledger.solu        ``codesign check-solution`` re-checks it) and its ledger
  journal.jsonl                  one line per finished or failed point, appended as it ends
  sweep.json                     the last run's summary
```

A point is *finished* when its record is saved and the journal says so (a record without a
journal line, as a crash between the two leaves, is read back from the record). A rerun skips
finished points; failed ones (an error, a worker lost too often, Ctrl-C during the solve) run
again. Every file is written atomically or appended line by line, so Ctrl-C or a killed process
loses at most the points that were running. The tables are rewritten from the journal at the end
of a run (and during it every :data:`TABLES_EVERY_S` seconds, or ten times as long as the last
rewrite took; BENCHMARKS.md §6 times 10^5 rows).
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from codesign.errors import InputError
from codesign.jsonio import atomic_output, dumps, write_text_atomic
from codesign.kinds.base import HEADLINE_METRICS
from codesign.proof import records
from codesign.sweep.job import Outcome
from codesign.sweep.spec import Point, Sweep

#: seconds between two rewrites of the tables during a run
TABLES_EVERY_S = 60.0
#: solution statuses of a finished point (a solver "error" runs again)
FINISHED = frozenset({"optimal", "feasible", "infeasible", "unbounded", "no_solution"})
#: the status of a point that has no result: an error, a lost worker, Ctrl-C during its solve
FAILED = "failed"
#: the status of a point whose instance refused its substitution
INVALID = "invalid"
#: the columns every row has before the axes, and between the axes and the decisions
LEAD = ("point", "instance", "kind")
RESULT = ("status", "objective_value", "bound", "gap")
TAIL = ("solver", "time_s", "termination", "note", "record")


class Store:
    """The output directory of a sweep (module docstring)."""

    def __init__(self, out: str | Path):
        self.out = Path(out)
        if self.out.exists() and not self.out.is_dir():
            raise InputError("the sweep's output is a directory", file=self.out, key="--out",
                             expected="a directory (created if missing)")
        self.journal = self.out / "journal.jsonl"
        self.parquet = self.out / "results.parquet"
        self.csv = self.out / "results.csv"
        self.summary = self.out / "sweep.json"
        self._journal_lock = threading.Lock()  # (outcomes are saved on several threads)

    def point_dir(self, point: Point) -> Path:
        return self.out / "points" / point.id

    def record_path(self, point: Point) -> Path:
        return self.point_dir(point) / f"{point.name}.json"

    # --- reading what a previous run left -----------------------------------------------------------
    def entries(self) -> dict[str, dict[str, Any]]:
        """point id -> its last journal entry (a torn last line, from a killed run, is skipped)."""
        out: dict[str, dict[str, Any]] = {}
        if not self.journal.is_file():
            return out
        with self.journal.open(encoding="utf-8") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(entry, dict) and isinstance(entry.get("point"), str):
                    out[entry["point"]] = entry
        return out

    def finished(self, point: Point, entry: dict[str, Any] | None) -> dict[str, Any] | None:
        """The point's entry if it is finished (module docstring), else None."""
        path = self.record_path(point)
        if entry is not None and entry.get("status") in FINISHED and path.is_file():
            return entry
        if entry is None and path.is_file():  # saved, but the journal line was not written
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            if isinstance(record, dict) and record.get("record") == "solution" and record.get("status") in FINISHED \
                    and not str(record.get("termination", "")).startswith("interrupted"):
                entry = entry_of(point, record, self.relative(path))
                self.append(entry)
                return entry
        return None

    def relative(self, path: Path) -> str:
        return path.relative_to(self.out).as_posix()

    # --- writing -------------------------------------------------------------------------------------
    def put(self, point: Point, outcome: Outcome) -> dict[str, Any]:
        """Save a point's outcome: its record (when it has a result) and its journal line, in this
        order (a crash between the two leaves a record that :meth:`finished` reads back). Safe
        from several threads (points have directories of their own; the journal is locked)."""
        if outcome.ok and outcome.record is not None:
            sol = records.Solution.model_validate(outcome.record)
            path, _ = records.save(sol, self.point_dir(point), replace=True)
            entry = entry_of(point, outcome.record, self.relative(path))
            entry["worker"] = outcome.worker
        else:
            entry = {"point": point.id, "status": FAILED, "error": outcome.error, "error_kind": outcome.error_kind,
                     "worker": outcome.worker}
        self.append(entry)
        return entry

    def append(self, entry: dict[str, Any]) -> None:
        """One journal line (after a torn last line, as a killed run leaves, on a line of its own)."""
        self.out.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self._journal_lock, self.journal.open("a+b") as f:
            if f.tell() and (f.seek(-1, 2), f.read(1))[1] != b"\n":
                line = "\n" + line
            f.write(line.encode("utf-8"))
            f.flush()

    def write_tables(self, sweep: Sweep, entries: dict[str, dict[str, Any]]) -> int:
        """results.parquet and results.csv: one row per point that has an entry, in the SPEC's
        order; returns the number of rows."""
        rows = [row(p, entries[p.id]) for p in sweep.points if p.id in entries]
        table = as_table(rows, columns(sweep, rows))
        self.out.mkdir(parents=True, exist_ok=True)
        with atomic_output(self.parquet) as tmp:
            pq.write_table(table, tmp)
        with atomic_output(self.csv) as tmp:
            pacsv.write_csv(table, tmp)
        return len(rows)

    def write_summary(self, summary: dict[str, Any]) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.summary, dumps(summary) + "\n")


# --- rows ------------------------------------------------------------------------------------------
def entry_of(point: Point, record: dict[str, Any], path: str) -> dict[str, Any]:
    """The journal entry of a point with a solution record."""
    metrics = record.get("metrics") or {}
    return {
        "point": point.id, "status": record["status"], "objective_value": record.get("objective"),
        "bound": record.get("bound"), "gap": record.get("gap"), "design": record.get("design") or {},
        "metrics": {k: metrics.get(k) for k in HEADLINE_METRICS}, "solver": record.get("solver"),
        "time_s": record.get("time_s"), "termination": record.get("termination"),
        "instance_hash": record.get("instance_hash"), "record": path,
    }


def invalid_entry(point: Point) -> dict[str, Any]:
    return {"point": point.id, "status": INVALID, "error": point.invalid}


def row(point: Point, entry: dict[str, Any]) -> dict[str, Any]:
    """A point's row: the point, its axes, the result, each decision, the headline metrics."""
    notes = list(point.notes)
    if entry.get("error"):
        notes.append(str(entry["error"]).splitlines()[0] if entry["status"] == FAILED else str(entry["error"]))
    out: dict[str, Any] = {"point": point.id, "instance": point.instance, "kind": point.kind, **point.axes}
    out.update({k: entry.get(k) for k in RESULT})
    out.update({f"design.{k}": v for k, v in (entry.get("design") or {}).items()})
    out.update({k: _number(v) for k, v in (entry.get("metrics") or {}).items()})
    out.update({"solver": entry.get("solver"), "time_s": entry.get("time_s"), "termination": entry.get("termination"),
                "note": "; ".join(notes) or None, "record": entry.get("record")})
    return out


def columns(sweep: Sweep, rows: list[dict[str, Any]]) -> list[str]:
    """The table's columns: the point, the axes, the result, each decision (as first seen), the
    headline metrics, how it was solved."""
    decisions: dict[str, None] = {}
    for r in rows:
        decisions.update((k, None) for k in r if k.startswith("design."))
    return [*LEAD, *sweep.axis_columns, *RESULT, *decisions, *HEADLINE_METRICS, *TAIL]


def _number(v: Any) -> Any:
    """A metric as JSON carries it ("inf" for an infinite one) -> a float."""
    if v == "inf":
        return math.inf
    if v == "-inf":
        return -math.inf
    return v


def as_table(rows: list[dict[str, Any]], names: list[str]) -> pa.Table:
    """The rows as an arrow table, each column typed by its values: bool, int64, float64 (ints
    and floats), else string (lists and tables as JSON)."""
    return pa.table({name: _column([r.get(name) for r in rows]) for name in names})


def _column(values: list[Any]) -> pa.Array:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.array(values, type=pa.bool_())
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.array(values, type=pa.int64() if present else pa.string())
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())
    return pa.array([None if v is None else v if isinstance(v, str) else
                     json.dumps(v) if isinstance(v, list | dict) else repr(v) for v in values], type=pa.string())
