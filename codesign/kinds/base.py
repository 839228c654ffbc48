"""The problem protocol every instance kind implements, and the registry commands dispatch through.

An *instance kind* (hardware/schedule grids, pipeline mappings, expert placements, ...) brings
its file schema, its model glue, its exact MIP and its brute force; everything else — the solve
driver (verify, exclude, confirm), the records, certificates, explanations, the command line —
is shared and sees a kind only through :class:`Problem`:

- identity: ``name``, ``kind``, ``source``, ``content_hash`` (the instance's content and the
  calibration it is evaluated under), ``data`` (the validated content, re-loadable anywhere);
- the question: ``metric``, ``sense``, ``decisions()``, ``space_size()``, ``baseline()``;
- the model: ``parse_design(data)`` and ``assess(design)`` -> :class:`Assessment`;
- the MIP: ``formulate(solver)`` -> :class:`Formulation` (exact on the finite space);
- the reference: ``brute_force()`` where the space is small enough to enumerate;
- the rest: ``lints()``, ``summary()``, ``explain(...)``, ``render_design(...)``.

A kind registers its :class:`Problem` subclass with :func:`register` under
the value its files give in ``kind = "..."`` (the hardware/schedule grid's files give none: ``grid``).
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from codesign.errors import InputError
from codesign.mip.program import MIP
from codesign.model.calibration import CalibrationSet

Sense = Literal["min", "max"]

#: the metrics every record states first, with their units (a kind leaves out what it does not
#: model: a decode-only mapping has no time to first token)
HEADLINE_METRICS: dict[str, str] = {
    "tokens_per_s": "tokens/s",
    "ttft_s": "s",
    "tpot_s": "s",
    "energy_per_token_J": "J",
    "system_power_W": "W",
}


@dataclass(frozen=True)
class Lint:
    """An assumption of an instance that contradicts its own hardware, with the numbers."""

    code: str
    severity: Literal["error", "warning"]
    message: str
    numbers: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "message": self.message, "numbers": dict(self.numbers)}


@dataclass(frozen=True)
class DecisionInfo:
    """One decision as ``show`` lists it: its name, its finite domain (or, for structured
    decisions such as a layer-to-stage partition, a description of it) and the group of
    :data:`DECISION_GROUPS` it belongs to."""

    name: str
    domain: tuple[Any, ...] | str
    group: str

    def __post_init__(self) -> None:
        if self.group not in DECISION_GROUPS:
            raise ValueError(f"decision {self.name!r}: group {self.group!r} is not one of {DECISION_GROUPS}")

    @property
    def free(self) -> bool:
        """More than one value to choose from (a structured decision always is)."""
        return not isinstance(self.domain, tuple) or len(self.domain) > 1

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "group": self.group,
                "domain": list(self.domain) if isinstance(self.domain, tuple) else self.domain}


#: what a decision decides: the chip and its knobs; the parallel layout and batch; where weights,
#: KV and layers live (tiers, stages); which device holds which expert, group or port
DECISION_GROUPS = ("hardware", "parallelism", "mapping", "placement")


def decision_groups(decisions: list[DecisionInfo]) -> list[str]:
    """The groups an instance decides (those with a free decision), in :data:`DECISION_GROUPS` order."""
    free = {d.group for d in decisions if d.free}
    return [g for g in DECISION_GROUPS if g in free]


@dataclass(frozen=True)
class AuditRow:
    """One constraint of the instance at a design: left side, limit, slack (limit - value)."""

    name: str
    value: float
    limit: float
    unit: str
    ok: bool

    @property
    def slack(self) -> float:
        return self.limit - self.value

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "limit": self.limit, "slack": self.slack,
                "unit": self.unit, "ok": self.ok}


@dataclass(frozen=True)
class Assessment:
    """The model's verdict on one design: what the solve driver judges by and every record holds.

    Attributes:
        design: the complete design, JSON-ready (decision name -> value).
        feasible: every constraint holds and the layout is valid.
        objective: the user's metric (tokens/s, J/token, ...) of the design.
        internal: the quantity the MIP minimises, in SI (seconds per token for a throughput
            objective, J for energy); the driver compares designs by it.
        metrics: the headline metrics (:data:`HEADLINE_METRICS`, where modelled) and every other
            metric of the kind, JSON-ready, SI units named in the key.
        violations: one line per broken constraint or layout rule.
        audit: every constraint at this design.
        detail: the kind's own evaluation object (for its renderer).
    """

    design: dict[str, Any]
    feasible: bool
    objective: float
    internal: float
    metrics: dict[str, Any]
    violations: tuple[str, ...] = ()
    audit: tuple[AuditRow, ...] = ()
    detail: Any = None

    def headline(self) -> dict[str, float | None]:
        return {k: self.metrics.get(k) for k in HEADLINE_METRICS}


@dataclass
class Formulation:
    """An exact MIP of a problem and how to read a design back from a solution vector.

    Attributes:
        mip: the solver-neutral model (minimisation).
        objective_unit: the internal objective = (MIP objective) x this.
        decode: solution vector -> the design it selects (JSON-ready).
        design_vars: the variables whose values identify a design; a no-good cut over them
            excludes exactly that design.
        onehot: the design variables are one-hot groups (a no-good needs only the chosen ones).
        integer_grid: the backend sees integer grids (CP-SAT): the MIP's objective of a design
            under-estimates the model's by less than one step, so claims are not compared.
        empty_reason: a presolve proved that no design is feasible (the MIP is not solved).
        stats: sizes for people (variables, binaries, rows, ...).
        backend_options: solver name -> options this kind's MIPs need by default (the user's
            ``--threads`` wins).
        describe: design variable -> the decisions it selects (``export`` writes them beside the
            file); None: the variables' names say it (``n[d]``: layers of stage d, ...).
    """

    mip: MIP
    objective_unit: float
    decode: Callable[[np.ndarray], dict[str, Any]]
    design_vars: np.ndarray
    onehot: bool = False
    integer_grid: bool = False
    empty_reason: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    describe: Callable[[int], Any] | None = None


@dataclass(frozen=True)
class BruteForce:
    """Enumeration of the whole space with the model: the reference the MIP is tested against."""

    best: Assessment | None
    points: int
    #: feasible points of the space (None: the kind's enumeration does not count them)
    feasible_points: int | None
    #: every point was enumerated (False: a deadline stopped it; ``best`` is the best of the part done)
    complete: bool = True


class Problem(ABC):
    """One loaded instance of some kind (see the module docstring)."""

    #: the value of ``kind =`` in the instance file
    kind: ClassVar[str]
    #: the objectives ``--objective`` may choose (empty: fixed by the file)
    objectives: ClassVar[tuple[str, ...]] = ()
    #: ``--budget`` expressions are accepted
    takes_budgets: ClassVar[bool] = False
    #: the backend ``--solver auto`` (the default) uses for this kind: the faster one to a proof on
    #: the kind's named instances (BENCHMARKS.md, "Which solver")
    default_solver: ClassVar[str] = "highs"
    #: writes an instance of this kind as TOML-able data from keyword parameters (``generate``)
    generator: ClassVar[Callable[..., dict[str, Any]] | None] = None

    def __init__(self, spec: Any, *, source: Path | None, calibration: CalibrationSet):
        self.spec = spec
        self.source = source
        self.calibration = calibration

    @classmethod
    @abstractmethod
    def load(cls, path: Path, *, calibration: CalibrationSet | None = None) -> Problem:
        """Read, validate and cross-check an instance file of this kind."""

    @classmethod
    @abstractmethod
    def from_data(cls, data: dict[str, Any], *, source: str, calibration: CalibrationSet | None = None) -> Problem:
        """The same from an instance's content (:attr:`data` of a problem, or a generator's output)."""

    # --- identity -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def description(self) -> str:
        return getattr(self.spec, "description", "")

    @property
    def data(self) -> dict[str, Any]:
        """The validated content, JSON-ready: :func:`from_data` of it is this problem again."""
        return self.spec.model_dump(mode="json", exclude_none=True)

    @property
    def content_hash(self) -> str:
        """SHA-256 of what decides the answer: the content (minus names for people: description,
        provenance, the baseline) and the calibration's digest."""
        blob = {k: v for k, v in self.data.items() if k not in PRESENTATION_KEYS}
        text = json.dumps({"instance": blob, "calibration": self.calibration.sha256}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    # --- the question -----------------------------------------------------------------------
    @property
    @abstractmethod
    def metric(self) -> str:
        """The objective metric (``tokens_per_s``, ``energy_per_token_J``, ...)."""

    @property
    @abstractmethod
    def sense(self) -> Sense: ...

    @abstractmethod
    def decisions(self) -> list[DecisionInfo]: ...

    @abstractmethod
    def space_size(self) -> int:
        """The number of points of the design space (exact)."""

    @abstractmethod
    def baseline(self) -> dict[str, Any]:
        """The reference design (the file's ``[baseline]``, else the kind's conventional one)."""

    @property
    def baseline_description(self) -> str:
        return getattr(self.spec, "baseline_description", None) or "the instance's [baseline]"

    # --- the model ------------------------------------------------------------------------
    @abstractmethod
    def parse_design(self, data: dict[str, Any], source: str = "design") -> dict[str, Any]:
        """A complete design from a (possibly partial) one; InputError when it is not of the space."""

    @abstractmethod
    def assess(self, design: dict[str, Any]) -> Assessment:
        """The model's evaluation of a complete design (see :meth:`parse_design`)."""

    @abstractmethod
    def to_user(self, internal: float) -> float:
        """The user's metric of an internal (minimised) objective value."""

    @property
    def internal_description(self) -> str:
        """What the internal (minimised) objective is, in words, and how the user's metric
        follows from it (``export`` states it)."""
        return f"{self.metric} in SI units"

    # --- the MIP ----------------------------------------------------------------------------
    @abstractmethod
    def formulate(self, solver: str, *, presolve: bool = True) -> Formulation:
        """The exact MIP (``solver`` chooses encodings: CP-SAT gets integer grids). ``presolve``
        False keeps every design in the MIP, also those a presolve proves worse than the best
        (``export`` writes the whole space)."""

    def own_search(self, solver: str, time_limit: float | None) -> Any | None:
        """An exact search of the kind's own that answers ``solve`` instead of a MIP, as the solve
        record (:func:`codesign.proof.records.solution`), or None: solve the MIP. ``solver`` is
        the one asked for (``auto`` included)."""
        return None

    def brute_force(self, *, deadline: float | None = None) -> BruteForce:
        """Every design evaluated with the model; ValueError when the space is too large. No chunk
        of the enumeration starts after ``deadline`` (a ``time.perf_counter()`` value) but the first."""
        raise ValueError(f"{self.kind} instances have no brute force")

    # --- views --------------------------------------------------------------------------------
    @abstractmethod
    def lints(self) -> list[Lint]: ...

    def summary(self) -> dict[str, Any]:
        """What ``show`` prints: the kind's own facts beyond the decisions (JSON-ready)."""
        return {}

    def render_summary(self, console: Any, summary: dict[str, Any]) -> None:  # noqa: B027 (optional)
        """Print :meth:`summary` for people (the shared part is printed by the command line)."""

    def render_design(self, console: Any, assessment: Assessment) -> None:  # noqa: B027 (optional)
        """Print the kind's view of a design (stages, devices, ...); nothing by default."""

    # --- variants of the question --------------------------------------------------------
    def with_budgets(self, texts: list[str]) -> Problem:
        if texts:
            raise InputError(f"--budget does not apply to {self.kind} instances", value=texts[0],
                             expected="set [budgets] in the instance file")
        return self

    def with_objective(self, metric: str | None) -> Problem:
        if metric is not None:
            raise InputError(f"--objective does not apply to {self.kind} instances", value=metric,
                             expected="set [objective] in the instance file")
        return self

    def with_formulation(self, formulation: str) -> Problem:
        """The same instance compiled another way (grid instances: ``enumerated`` or ``factored``);
        ``auto`` is each kind's own choice."""
        if formulation != "auto":
            raise InputError(f"--formulation does not apply to {self.kind} instances", key="--formulation",
                             value=formulation, expected="auto")
        return self

    def budget_texts(self) -> list[str]:
        """The ``--budget`` expressions this problem carries beyond its file's (re-applied when a
        record is loaded back)."""
        return []

    def explain(self, *, solver: str, time_limit: float | None, progress: Any = None) -> dict[str, Any]:
        """Why no design is feasible (see :mod:`codesign.proof.explain`)."""
        raise InputError(f"explain is not available for {self.kind} instances")


#: keys of an instance's content that are for people, not for the answer
PRESENTATION_KEYS = frozenset({"description", "provenance", "baseline", "baseline_description"})


#: instance kind -> its problem class (filled by :func:`register`; read by :mod:`codesign.kinds.registry`)
_KINDS: dict[str, type[Problem]] = {}
#: the kind of files without a ``kind`` key
DEFAULT_KIND = "grid"


def register(cls: type[Problem]) -> type[Problem]:
    """Class decorator: make ``cls`` the problem class of instance files with ``kind = cls.kind``."""
    _KINDS[cls.kind] = cls
    return cls


class InstanceProblem(Problem):
    """A problem that wraps one validated instance record of its kind (``inst``).

    A subclass names its loaders as class attributes, so loading is written once:
    ``load_instance(name_or_path, calibration=)`` and
    ``instance_from_data(raw, source=, calibration=)``, each returning a record with ``spec``,
    ``source`` and ``calibration``.
    """

    load_instance: ClassVar[Callable[..., Any]]
    instance_from_data: ClassVar[Callable[..., Any]]

    def __init__(self, inst: Any):
        super().__init__(inst.spec, source=inst.source, calibration=inst.calibration)
        self.inst = inst

    @classmethod
    def load(cls, path: Path, *, calibration: CalibrationSet | None = None) -> Problem:
        return cls(cls.load_instance(str(path), calibration=calibration))

    @classmethod
    def from_data(cls, data: dict[str, Any], *, source: str, calibration: CalibrationSet | None = None) -> Problem:
        return cls(cls.instance_from_data(data, source=source, calibration=calibration))
