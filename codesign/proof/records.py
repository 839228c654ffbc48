"""The records every command prints and saves: one schema for every instance kind.

- :class:`Evaluation` — a design and what the model says of it (``evaluate``);
- :class:`Solution` — a solve's best design, its proven bound and gap, and how it was proved
  (``solve``; ``solve --save`` writes it, ``check-solution`` re-verifies it);
- :class:`Certificate` — how far a chosen design can be from the best (``certify``;
  ``check-certificate`` re-derives it).

Each carries the instance it answers (``instance_data``: the validated content, re-loadable from
any directory, and ``instance_hash`` over that content and the calibration), so a record is
checked against what it states, not against whatever file has the same name today. Records are
pydantic models with a ``schema_version``; the command line prints the record it saves.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import platform
import subprocess
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from codesign import __version__
from codesign.errors import InputError
from codesign.jsonio import dumps, jsonable, read_json, write_text_atomic
from codesign.kinds.base import Assessment, Problem
from codesign.proof.tolerances import table as tolerance_table

#: the version of the record schema (1: the records before one schema served every kind)
SCHEMA_VERSION = 2

Status = Literal["optimal", "feasible", "infeasible", "unbounded", "no_solution", "error"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LintRow(_Model):
    code: str
    severity: Literal["error", "warning"]
    message: str
    numbers: dict[str, float] = {}


class AuditEntry(_Model):
    name: str
    value: float
    limit: float
    slack: float
    unit: str
    ok: bool


class Record(_Model):
    """What every record holds: the instance it answers, the design and the model's view of it."""

    schema_version: int = SCHEMA_VERSION
    record: str
    instance: str
    kind: str
    instance_hash: str
    instance_source: str | None = None
    instance_data: dict[str, Any]
    calibration: str
    calibration_sha256: str
    objective_metric: str
    sense: Literal["min", "max"]
    design: dict[str, Any] | None = None
    objective: float | None = None
    feasible: bool | None = None
    metrics: dict[str, Any] | None = None
    violations: list[str] = []
    audit: list[AuditEntry] = []
    lints: list[LintRow] = []

    @field_validator("objective", "bound", "gap", check_fields=False)
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        """A stated objective, bound or gap is a finite number (or absent): NaN and infinities are
        refused, never carried into a statement."""
        if v is not None and not math.isfinite(v):
            raise ValueError("must be a finite number (or null)")
        return v

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (non-finite floats as strings, see :func:`codesign.jsonio.jsonable`)."""
        return jsonable(self.model_dump())


class Evaluation(Record):
    record: Literal["evaluation"] = "evaluation"


class Solution(Record):
    record: Literal["solution"] = "solution"
    status: Status
    bound: float | None = None
    gap: float | None = None
    solver: str
    solver_version: str = ""
    termination: str = ""
    build_s: float = 0.0
    solve_s: float = 0.0
    time_s: float = 0.0
    mip: dict[str, Any] = {}
    proof: dict[str, Any] = {}
    parameters: dict[str, Any] = {}
    provenance: dict[str, Any] = {}
    cross_check: dict[str, Any] | None = None
    explanation: dict[str, Any] | None = None


class BoundSource(_Model):
    """Where a certificate's bound comes from, and what lets it be re-derived.

    ``witness`` is the optimal design of the solve that proved the bound: for an optimal solve
    the bound *is* the model's objective of that design, so anyone can recompute it without
    solving (the optimality itself rests on the solve, which ``check-certificate --resolve``
    repeats). A bound from a solve that stopped with a gap has no witness that derives it; it is
    re-derived only by solving again."""

    source: str
    status: Status
    solver: str | None = None
    solver_version: str | None = None
    solution_hash: str | None = None
    witness: dict[str, Any] | None = None
    optimum: float | None = None


class Certificate(Record):
    record: Literal["certificate"] = "certificate"
    bound: float | None = None
    gap: float | None = None
    statement: str
    bound_source: BoundSource
    provenance: dict[str, Any] = {}


RECORDS: dict[str, type[Record]] = {"evaluation": Evaluation, "solution": Solution, "certificate": Certificate}


def user_gap(sense: str, objective: float | None, bound: float | None) -> float | None:
    """Relative gap in the user's metric: (f - lb)/|f| for min, (ub - f)/|f| for max."""
    if objective is None or bound is None:
        return None
    if not (math.isfinite(objective) and math.isfinite(bound)):
        return math.inf if bound != objective else 0.0
    if objective == 0:
        return 0.0 if bound == 0 else math.inf
    diff = (objective - bound) if sense == "min" else (bound - objective)
    return diff / abs(objective)


# --- building records ------------------------------------------------------------------------------


def _instance_fields(problem: Problem) -> dict[str, Any]:
    cal = problem.calibration
    return {
        "instance": problem.name,
        "kind": problem.kind,
        "instance_hash": problem.content_hash,
        "instance_source": None if problem.source is None else str(problem.source),
        "instance_data": problem.data,
        "calibration": cal.name,
        "calibration_sha256": cal.sha256,
        "objective_metric": problem.metric,
        "sense": problem.sense,
        "lints": [x.as_dict() for x in problem.lints()],
    }


def _design_fields(a: Assessment | None) -> dict[str, Any]:
    if a is None:
        return {}
    return {
        "design": jsonable(a.design),
        "objective": a.objective,
        "feasible": a.feasible,
        "metrics": jsonable(a.metrics),
        "violations": list(a.violations),
        "audit": [r.as_dict() for r in a.audit],
    }


def evaluation(problem: Problem, a: Assessment) -> Evaluation:
    return Evaluation(**_instance_fields(problem), **_design_fields(a))


def solution(
    problem: Problem, *, solver: str, status: str, best: Assessment | None, bound: float | None, termination: str,
    stats: dict[str, Any], build_s: float, solve_s: float, time_s: float, proof: dict[str, Any],
    solver_version: str = "", parameters: dict[str, Any] | None = None,
) -> Solution:
    return Solution(
        **_instance_fields(problem), **_design_fields(best),
        status=status, bound=bound, gap=None if best is None else _finite_or_none(user_gap(problem.sense, best.objective, bound)),
        solver=solver, solver_version=solver_version, termination=termination,
        build_s=build_s, solve_s=solve_s, time_s=time_s, mip=jsonable(stats), proof=jsonable(proof),
        parameters={**jsonable(parameters or {}), "tolerances": tolerance_table()}, provenance=provenance(),
    )


def _finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


@functools.lru_cache(maxsize=1)
def git_revision() -> str | None:
    """The source checkout's HEAD commit, if codesign runs from one (asked once per process)."""
    here = Path(__file__).resolve().parents[2]
    if not (here / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def provenance() -> dict[str, Any]:
    return {
        "codesign_version": __version__,
        "git_revision": git_revision(),
        "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


# --- reading records -----------------------------------------------------------------------------------


def read_record(path: str | Path, *, expected: type[Record] | None = None) -> Record:
    """A record file, validated (InputError naming the file and the first bad key)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError("not a codesign record: a JSON object is expected", file=path, value=type(data).__name__)
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InputError("a record of another schema version", file=path, key="schema_version", value=version,
                         expected=str(SCHEMA_VERSION), suggestion="re-create it with this codesign version")
    cls = RECORDS.get(data.get("record"))  # type: ignore[arg-type]
    if cls is None or (expected is not None and cls is not expected):
        want = expected.model_fields["record"].default if expected is not None else " | ".join(RECORDS)
        raise InputError("not a record of this type", file=path, key="record", value=data.get("record"), expected=want)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(first["msg"], file=path, key=".".join(str(p) for p in first["loc"]),
                         value=first.get("input") if not isinstance(first.get("input"), dict) else None) from None


def save(record: Record, directory: str | Path, *, replace: bool = False) -> tuple[Path, str]:
    """Write ``record`` to ``<directory>/<instance>.json`` atomically and rewrite the ledger;
    returns the path and what was done. A stored solution of the same content that is better (a
    proven optimum, or a better objective) is not replaced by a worse one unless ``replace``: the
    new one is written to ``<instance>.unproven.json`` beside it."""
    directory = Path(directory)
    name = record.instance
    if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise InputError("an instance name that is not a file name", key="name", value=name,
                         expected="letters, digits, '-', '_' and '.' (not leading)")
    path = directory / f"{name}.json"
    done = "saved"
    if isinstance(record, Solution) and not replace and path.is_file():
        try:
            stored = read_record(path, expected=Solution)
        except InputError:
            stored = None
        if stored is not None and stored.instance_hash == record.instance_hash and _better(stored, record):
            path = directory / f"{name}.unproven.json"
            done = (f"kept the better stored {stored.status} solution {directory / f'{name}.json'} "
                    "(--replace replaces it); saved")
    write_text_atomic(path, dumps(record.as_dict()) + "\n")
    write_ledger(directory)
    return path, done


def _better(stored: Solution, new: Solution) -> bool:
    """The stored solution of the same content says more than the new one: it is proven optimal
    and the new one is not, or neither is and the stored design is better."""
    if new.status == "optimal":
        return False
    if stored.status == "optimal":
        return True
    if stored.objective is None:
        return False
    if new.objective is None:
        return True
    return stored.objective > new.objective if stored.sense == "max" else stored.objective < new.objective


LEDGER_TAGS = {"optimal": "=opt=", "feasible": "=best=", "infeasible": "=inf="}


def write_ledger(directory: str | Path) -> Path:
    """Rewrite ``<dir>/ledger.solu`` from every solution file in ``dir``.

    One line per instance in the SCIP ``.solu`` style: ``=opt=`` proven optimum, ``=best=`` best
    known with its gap, ``=inf=`` proven infeasible; the value is the user's objective."""
    directory = Path(directory)
    lines = ["# instance ledger: =opt= proven optimal (verified gap <= 1e-6), =best= feasible, =inf= infeasible"]
    for f in sorted(directory.glob("*.json")):
        try:
            d = read_json(f)
        except InputError:
            continue
        if not isinstance(d, dict) or d.get("record") != "solution" or d.get("instance") != f.stem:
            continue  # (<name>.unproven.json beside a stored optimum is not the ledger's)
        tag = LEDGER_TAGS.get(d.get("status"))
        if tag is None:
            continue
        value = "" if d.get("objective") is None else f"{float(d['objective']):.12g}"
        extra = f"  # {d.get('sense')} {d.get('objective_metric')}, {d.get('solver')}"
        if d["status"] == "feasible" and d.get("gap") is not None:
            extra += f", gap {float(d['gap']):.3g}"
        lines.append(f"{tag} {d['instance']} {value}{extra}".rstrip())
    path = directory / "ledger.solu"
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path
