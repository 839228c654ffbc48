"""A sweep's SPEC file and the points of its product.

```toml
instances = ["small-3d-llama8b", "tiny-3d-llama8b", "my/instance.toml"]  # names, or paths from here
objectives = ["tokens_per_s", "energy_per_token_J"]  # optional; grid instances only
solver = "auto"         # optional: auto | highs | cpsat | pyomo:<name>
time_limit = 600        # optional: seconds per point (the best design and its bound are kept)
threads = 1             # optional: solver threads per point (default: cores // workers)

[grid]                  # a budget per value: "EXPR <=" or "EXPR >=" -> values
"power_W <=" = [60, 80, 100, 120]
"clock_GHz <=" = [1.2, 1.6]

[substitute]            # catalog substitutions, where an instance has the field
chip = ["h100-sxm", "h200-sxm", "b200"]
workload = ["llama-3.1-70b", "qwen3-235b-a22b"]
```

Each instance is crossed with the axes that apply to it. An axis that does not apply (a chip on
a 3D-stacked instance, budgets or objectives on a mapping instance, a budget on a metric the
instance lacks) collapses to one value for that instance, and its rows say so in ``note``; an
axis that applies to no instance at all, an unknown catalog id, an unknown metric or objective is
a bad SPEC (InputError naming the file, the key and the value). A substitution the instance
refuses (a model whose layers the instance cannot hold) makes its points ``invalid`` rows.

Substitutions: ``chip`` replaces a grid instance's ``hardware.chip`` (catalog family: a chip
decision is fixed to it), a placement's ``devices.chip`` or a mapping's one device group's chip;
``workload`` replaces the model of a grid instance with one workload, or of a mapping or placement.

A point's id is a digest of what decides its answer (the instance's content hash, which covers
the calibration, the budgets, the objective, the solver and the time limit): a rerun finds the
points it has finished, and an edited SPEC keeps every point it did not change.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictInt, StrictStr

from codesign.catalog import list_ids
from codesign.errors import InputError, did_you_mean
from codesign.kinds.base import Problem
from codesign.kinds.registry import from_data, load
from codesign.model.calibration import CalibrationSet, shipped
from codesign.model.workload import list_workloads
from codesign.proof.driver import check_limits, check_solver
from codesign.schema import Strict, load_toml, validate
from codesign.sweep.job import Job

#: the substitution axes, in the order their columns appear
SUBSTITUTIONS = ("chip", "workload")
#: a budget axis's key ends with its comparison
BUDGET_OPS = ("<=", ">=")


def _number(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError("a number is expected (not quoted)")
    return v


#: a TOML number, kept an integer when it is one (``power_W <= 60``, not ``60.0``)
Number = Annotated[int | float, BeforeValidator(_number)]


class Substitute(Strict):
    chip: list[StrictStr] = Field(default_factory=list)
    workload: list[StrictStr] = Field(default_factory=list)


class SweepFile(Strict):
    """The TOML schema of a SPEC (module docstring)."""

    instances: list[StrictStr] = Field(min_length=1)
    objectives: list[StrictStr] = Field(default_factory=list)
    solver: StrictStr = "auto"
    time_limit: Number | None = None
    threads: StrictInt | None = Field(default=None, ge=0)
    grid: dict[str, list[Number]] = Field(default_factory=dict)
    substitute: Substitute = Field(default_factory=Substitute)


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its instance (as the SPEC names it), its axes and its job.

    Attributes:
        id: the digest that names the point (module docstring).
        instance: the SPEC's entry; name: the instance's own name (its record's file name).
        axes: column -> value: ``chip``, ``workload`` (None: not substituted), ``objective`` (the
            metric optimised), each budget key (None: the budget does not apply).
        notes: why an axis does not apply to this point, and what a substitution fixed.
        job: the solve (None for an invalid point); invalid: why the instance refused the point.
    """

    id: str
    instance: str
    name: str
    kind: str
    axes: dict[str, Any]
    notes: tuple[str, ...] = ()
    job: Job | None = None
    invalid: str | None = None


@dataclass
class Sweep:
    """A SPEC read and expanded: its points in the SPEC's order (instance, substitutions,
    objective, budgets)."""

    path: Path
    file: SweepFile
    calibration: CalibrationSet
    points: list[Point] = field(default_factory=list)

    @property
    def budget_keys(self) -> list[str]:
        return list(self.file.grid)

    @property
    def axis_columns(self) -> list[str]:
        return [*SUBSTITUTIONS, "objective", *self.budget_keys]


def load_sweep(path: str | Path, *, calibration: CalibrationSet | None = None) -> Sweep:
    """Read, check and expand a SPEC (every error an InputError naming the file, key and value)."""
    path = Path(path)
    spec = validate(SweepFile, load_toml(path), file=path)
    _check_file(spec, path)
    cal = calibration or shipped()
    sweep = Sweep(path, spec, cal)
    problems = [_load_entry(entry, i, path, cal) for i, entry in enumerate(spec.instances)]
    applies = _budget_applicability(spec, problems, path)
    seen: dict[str, Point] = {}
    for entry, base in zip(spec.instances, problems, strict=True):
        for point in _points_of(spec, path, cal, entry, base, applies[base.content_hash]):
            if point.id in seen:
                raise InputError("the SPEC names the same point twice", file=path, key="instances",
                                 value=f"{seen[point.id].instance} and {entry}", expected="each instance once")
            seen[point.id] = point
            sweep.points.append(point)
    return sweep


# --- checking the file ------------------------------------------------------------------------------
def _check_file(spec: SweepFile, path: Path) -> None:
    try:
        check_solver(spec.solver)
    except InputError as exc:
        raise InputError(exc.message, file=path, key="solver", value=spec.solver, expected=exc.expected,
                         suggestion=exc.suggestion) from None
    # the driver's own limits, checked before any point runs (a point would fail on each)
    limits = {"time_limit": (None if spec.time_limit is None else float(spec.time_limit), None),
              "threads": (None, spec.threads)}
    for key, (time_limit, threads) in limits.items():
        try:
            check_limits(time_limit, threads)
        except InputError as exc:
            raise InputError(exc.message, file=path, key=key, value=getattr(spec, key), expected=exc.expected) from None
    _unique(spec.instances, path, "instances")
    _unique(spec.objectives, path, "objectives")
    for key, values in spec.grid.items():
        if not key.rstrip().endswith(BUDGET_OPS) or not key.rstrip()[:-2].strip():
            raise InputError("a budget axis is named by its expression and comparison", file=path, key=f"grid.{key}",
                             expected='"EXPR <=" or "EXPR >=" (e.g. "power_W <=" = [60, 80])')
        if not values:
            raise InputError("an axis without values", file=path, key=f"grid.{key}", expected="at least one number")
        _unique(values, path, f"grid.{key}")
    known = {"chip": list_ids("chips"), "workload": list_workloads()}
    for axis in SUBSTITUTIONS:
        values = getattr(spec.substitute, axis)
        _unique(values, path, f"substitute.{axis}")
        for i, v in enumerate(values):
            if v not in known[axis]:
                raise InputError(f"no catalog {axis} with this id", file=path, key=f"substitute.{axis}[{i}]", value=v,
                                 expected="one of: " + ", ".join(known[axis]), suggestion=did_you_mean(v, known[axis]))


def _unique(values: list[Any], path: Path, key: str) -> None:
    for i, v in enumerate(values):
        if v in values[:i]:
            raise InputError("a value given twice", file=path, key=f"{key}[{i}]", value=v, expected="each value once")


def _load_entry(entry: str, i: int, path: Path, cal: CalibrationSet) -> Problem:
    """A SPEC's instance: a named instance, or a path relative to the SPEC's directory."""
    target: str | Path = entry
    if entry.endswith(".toml") or "/" in entry or "\\" in entry:
        target = Path(entry) if Path(entry).is_absolute() else path.parent / entry
    try:
        return load(target, calibration=cal)
    except InputError as exc:
        if exc.file is None:  # (an unknown name: the SPEC's key is the place to fix it)
            raise InputError(exc.message, file=path, key=f"instances[{i}]", value=entry, expected=exc.expected,
                             suggestion=exc.suggestion) from None
        raise


def _budget_text(key: str, value: float) -> str:
    return f"{key.rstrip()} {value}"


def _budget_applicability(spec: SweepFile, problems: list[Problem], path: Path) -> dict[str, dict[str, str | None]]:
    """instance content hash -> budget key -> None (applies) or why not. A key that applies to no
    instance taking budgets is a bad SPEC."""
    out: dict[str, dict[str, str | None]] = {}
    first_error: dict[str, InputError] = {}
    for p in problems:
        reasons: dict[str, str | None] = {}
        for key, values in spec.grid.items():
            if not p.takes_budgets:
                reasons[key] = f"{p.kind} instances take no budgets"
                continue
            try:
                p.with_budgets([_budget_text(key, values[0])])
                reasons[key] = None
            except InputError as exc:
                reasons[key] = exc.message
                first_error.setdefault(key, exc)
        out[p.content_hash] = reasons
    for key in spec.grid:
        takers = [p for p in problems if p.takes_budgets]
        if takers and all(out[p.content_hash][key] is not None for p in takers):
            exc = first_error[key]
            raise InputError(f"no instance of the sweep takes this budget: {exc.message}", file=path,
                             key=f"grid.{key}", value=spec.grid[key], expected=exc.expected,
                             suggestion=exc.suggestion or "`codesign metrics` lists the names a budget may use")
    return out


# --- substitutions ----------------------------------------------------------------------------------
Setter = Callable[[dict[str, Any], str], str | None]


def _setter(p: Problem, axis: str) -> tuple[Setter | None, str]:
    """(a function putting a value into a copy of ``p.data`` and returning a note, or None; why
    not, when None)."""
    data = p.data
    if axis == "chip":
        if p.kind == "grid":
            family = data.get("hardware", {}).get("family")
            if family != "catalog":
                return None, f"chip: a {family} instance has no catalog chip; axis skipped"

            def put_grid_chip(d: dict[str, Any], v: str) -> str | None:
                hw = d["hardware"]
                hw["chip"] = v
                if "chip" in (hw.get("decisions") or {}):
                    hw["decisions"]["chip"] = [v]
                    if "chip" in (d.get("baseline") or {}):
                        d["baseline"]["chip"] = v
                    return f"chip: the chip decision fixed to {v}"
                return None

            return put_grid_chip, ""
        if p.kind == "placement":
            return (lambda d, v: d["devices"].__setitem__("chip", v)), ""
        if p.kind == "mapping":
            groups = data.get("devices") or []
            if len(groups) != 1:
                return None, f"chip: {len(groups)} device groups, the axis names one chip; axis skipped"
            return (lambda d, v: d["devices"][0].__setitem__("chip", v)), ""
        return None, f"chip: {p.kind} instances have no chip to substitute; axis skipped"
    if p.kind == "grid":
        workloads = data.get("workloads") or []
        if len(workloads) != 1:
            return None, f"workload: {len(workloads)} workloads, the axis names one model; axis skipped"
        return (lambda d, v: d["workloads"][0].__setitem__("workload", v)), ""
    if isinstance(data.get("workload"), dict) and "workload" in data["workload"]:
        return (lambda d, v: d["workload"].__setitem__("workload", v)), ""
    return None, f"workload: {p.kind} instances have no model to substitute; axis skipped"


@dataclass
class _Variant:
    problem: Problem | None
    data: dict[str, Any]
    subs: dict[str, str | None]
    notes: list[str]
    invalid: str | None = None


def _variants(spec: SweepFile, entry: str, base: Problem) -> list[_Variant]:
    """The instance under every combination of the substitutions that apply to it."""
    axes: list[tuple[str, Setter, list[str]]] = []
    notes: list[str] = []
    for axis in SUBSTITUTIONS:
        values = getattr(spec.substitute, axis)
        if not values:
            continue
        put, why = _setter(base, axis)
        if put is None:
            notes.append(why)
        else:
            axes.append((axis, put, values))
    if not axes:
        return [_Variant(base, base.data, dict.fromkeys(SUBSTITUTIONS), notes)]
    out = []
    for combo in itertools.product(*(values for _, _, values in axes)):
        data = copy.deepcopy(base.data)
        subs: dict[str, str | None] = dict.fromkeys(SUBSTITUTIONS)
        these = list(notes)
        for (axis, put, _), v in zip(axes, combo, strict=True):
            subs[axis] = v
            if note := put(data, v):
                these.append(note)
        where = f"{entry} with " + ", ".join(f"{k}={v}" for k, v in subs.items() if v is not None)
        try:
            problem = from_data(data, source=where, calibration=base.calibration)
        except InputError as exc:
            out.append(_Variant(None, data, subs, these, invalid=f"{where}: {exc.message}"))
            continue
        out.append(_Variant(problem, problem.data, subs, these))
    return out


# --- points -------------------------------------------------------------------------------------------
def _objectives(spec: SweepFile, path: Path, base: Problem) -> tuple[list[str | None], str | None]:
    """The objectives to cross the instance with (None: its own), and the note when it keeps its own."""
    if not spec.objectives:
        return [None], None
    if not base.objectives:
        return [None], f"objectives: {base.kind} instances keep their own ({base.metric})"
    for i, metric in enumerate(spec.objectives):
        try:
            base.with_objective(metric)
        except InputError as exc:
            raise InputError(exc.message, file=path, key=f"objectives[{i}]", value=metric,
                             expected=" | ".join(base.objectives), suggestion=did_you_mean(metric, base.objectives)) from None
    return list(spec.objectives), None


def point_id(instance_hash: str, budgets: tuple[str, ...], objective: str | None, solver: str,
             time_limit: float | None) -> str:
    """The digest naming a point (16 hex digits)."""
    blob = json.dumps({"instance": instance_hash, "budgets": list(budgets), "objective": objective, "solver": solver,
                       "time_limit": time_limit}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _points_of(spec: SweepFile, path: Path, cal: CalibrationSet, entry: str, base: Problem,
               applies: dict[str, str | None]) -> list[Point]:
    objectives, objective_note = _objectives(spec, path, base)
    keys = list(spec.grid)
    live = [k for k in keys if applies[k] is None]
    budget_notes = [f"{k}: {why}; axis skipped" for k in keys if (why := applies[k]) is not None]
    combos = list(itertools.product(*(spec.grid[k] for k in live)))
    time_limit = None if spec.time_limit is None else float(spec.time_limit)
    out: list[Point] = []
    for var in _variants(spec, entry, base):
        for metric in objectives:
            for combo in combos:
                budgets = tuple(_budget_text(k, v) for k, v in zip(live, combo, strict=True))
                axes: dict[str, Any] = {**var.subs, "objective": metric or base.metric,
                                        **dict.fromkeys(keys), **dict(zip(live, combo, strict=True))}
                notes = tuple([*var.notes, *([objective_note] if objective_note else []), *budget_notes])
                if var.problem is None:
                    blob = json.dumps({"invalid": var.data, "budgets": budgets, "objective": metric}, sort_keys=True)
                    pid = hashlib.sha256(blob.encode()).hexdigest()[:16]
                    out.append(Point(pid, entry, base.name, base.kind, axes, notes, None, var.invalid))
                    continue
                pid = point_id(var.problem.content_hash, budgets, metric, spec.solver, time_limit)
                job = Job(key=pid, instance=var.data, source=entry, budgets=budgets, objective=metric,
                          calibration=None if cal.shipped else str(cal.path), calibration_sha256=cal.sha256,
                          solver=spec.solver, time_limit=time_limit)
                out.append(Point(pid, entry, var.problem.name, base.kind, axes, notes, job))
    return out
