"""Joint mappings: the appliance's module count and the pool ports of a device group become hardware
decisions in the same MIP as the mapping (formulations/mapping.md §4).

A mapping file gives ``appliance.modules`` or a device group's ``pool_ports`` as a list to make it a
decision over those values (a scalar keeps the fixed-hardware instance). A design then carries
``hardware = {"modules": M, "pool_ports": {group: P, ...}}`` beside the mapping, and the model of
the design is the fixed-hardware model of that hardware (:func:`instance_at`: the file with the
chosen values written in), so nothing of :mod:`codesign.model.mapping` is duplicated here.

The MIP is the fixed-hardware MIP of the largest hardware (every module, every group's most ports)
with one one-hot group per hardware decision and three kinds of rows, each exact:

* a device attaches only to existing modules: ``a[d,j] <= Σ_{k: M_k > j} y_mod[k]`` (module j
  exists iff the chosen count exceeds j; pooled data needs an attachment, so capacity and bandwidth
  of a missing module are out of reach);
* a device attaches to at most its group's chosen ports: ``Σ_j a[d,j] <= Σ_k P_k y_g[k]``;
* the hardware's static power (``appliance.port_static_power_W`` per lit port, the devices' and the
  modules') times the period: the product of a one-hot choice and the period variable T is
  disaggregated, ``T = Σ_k T_k``, ``0 <= T_k <= T_max y[k]``, so Σ_k c_k T_k = c_{chosen} T exactly.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from codesign import catalog
from codesign.errors import InputError
from codesign.kinds.base import BruteForce, DecisionInfo, Formulation
from codesign.kinds.fixed import BACKEND_OPTIONS
from codesign.kinds.mapping.brute import brute_force_mapping
from codesign.kinds.mapping.formulation import (
    CUTOFF_MARGIN,
    TIME_UNIT_S,
    build_mapping,
    greedy_design,
    time_ub_s,
)
from codesign.kinds.mapping.spec import FamilyInstance
from codesign.mip.program import MIP
from codesign.model.mapping import MappingDesign, MappingProblem, evaluate_mapping

#: the design key of the hardware decisions
HARDWARE_KEY = "hardware"


def options(value: int | list[int] | None) -> tuple[int, ...]:
    """A decision's domain: a list's values in ascending order, a scalar alone."""
    if value is None:
        return ()
    return tuple(sorted(value)) if isinstance(value, list) else (value,)


@dataclass(frozen=True)
class HardwareSpace:
    """The hardware decisions of a mapping instance: module counts (empty without an appliance),
    pool-port counts per device group, and what a lit port draws."""

    modules: tuple[int, ...]
    ports: dict[str, tuple[int, ...]]
    counts: dict[str, int]
    port_static_W: float
    ports_per_module: int

    @property
    def joint(self) -> bool:
        """Some hardware decision has more than one value."""
        return len(self.modules) > 1 or any(len(v) > 1 for v in self.ports.values())

    def choices(self) -> list[dict[str, Any]]:
        """Every hardware design, modules varying slowest, then the groups in file order."""
        groups = list(self.ports)
        out = []
        for mods in self.modules or (None,):
            for pp in itertools.product(*(self.ports[g] for g in groups)):
                out.append(self.design(mods, dict(zip(groups, pp, strict=True))))
        return out

    def design(self, modules: int | None, ports: dict[str, int]) -> dict[str, Any]:
        hw: dict[str, Any] = {"pool_ports": ports}
        if modules is not None:
            hw = {"modules": modules, **hw}
        return hw

    def largest(self) -> dict[str, Any]:
        return self.design(self.modules[-1] if self.modules else None, {g: v[-1] for g, v in self.ports.items()})

    def static_W(self, hw: dict[str, Any]) -> float:
        """The lit ports' static power of a hardware design (the model's ``hardware_static_W``)."""
        lit = sum(self.counts[g] * p for g, p in hw["pool_ports"].items()) + hw.get("modules", 0) * self.ports_per_module
        return self.port_static_W * lit

    def decisions(self) -> list[DecisionInfo]:
        out = [DecisionInfo("modules", self.modules, "hardware")] if self.modules else []
        return out + [DecisionInfo(f"pool_ports[{g}]", v, "hardware") for g, v in self.ports.items()]


def hardware_space(inst: Any) -> HardwareSpace:
    s = inst.spec
    ports = {g.name: options(g.pool_ports) for g in s.devices}
    counts = {g.name: g.count for g in s.devices}
    if s.appliance is None:
        return HardwareSpace((), ports, counts, 0.0, 0)
    app = catalog.load_appliance(s.appliance.id)
    mods = options(s.appliance.modules) or (app.modules,)
    return HardwareSpace(mods, ports, counts, s.appliance.port_static_power_W or 0.0, app.ports_per_module)


def key(hw: dict[str, Any]) -> tuple:
    return (hw.get("modules"), tuple(sorted(hw["pool_ports"].items())))


def instance_at(inst: Any, hw: dict[str, Any]) -> Any:
    """The fixed-hardware instance of one hardware design: the file with the chosen values written in.
    Not validated again: the values come from the validated domains (a design without ports is one of
    the space, though a file giving an appliance and no ports is refused as a likely mistake)."""
    s = inst.spec
    devices = [g.model_copy(update={"pool_ports": hw["pool_ports"][g.name]}) for g in s.devices]
    update: dict[str, Any] = {"devices": devices, "baseline": None}
    if "modules" in hw:
        update["appliance"] = s.appliance.model_copy(update={"modules": hw["modules"]})
    spec = s.model_copy(update=update)
    return FamilyInstance(spec, inst.source, spec.model_dump(mode="json", exclude_none=True), inst.calibration)


def parse_hardware(space: HardwareSpace, data: Any, default: dict[str, Any], source: str) -> dict[str, Any]:
    """A hardware design of the space from a (possibly partial) table; the default fills the rest."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("a design's hardware is a table", file=source, key=HARDWARE_KEY, value=data)
    extra = sorted(set(data) - {"modules", "pool_ports"})
    if extra:
        raise InputError("unknown hardware decision", file=source, key=f"{HARDWARE_KEY}.{extra[0]}",
                         expected="modules, pool_ports")
    ports_in = data.get("pool_ports", {})
    if not isinstance(ports_in, dict) or set(ports_in) - set(space.ports):
        raise InputError("pool_ports is a table of device group -> ports", file=source,
                         key=f"{HARDWARE_KEY}.pool_ports", value=ports_in, expected=f"groups of {sorted(space.ports)}")
    ports = {g: ports_in.get(g, default["pool_ports"][g]) for g in space.ports}
    for g, v in ports.items():
        if v not in space.ports[g]:
            raise InputError("not a value of the decision", file=source, key=f"{HARDWARE_KEY}.pool_ports.{g}",
                             value=v, expected=f"one of {list(space.ports[g])}")
    mods = data.get("modules", default.get("modules"))
    if space.modules and mods not in space.modules:
        raise InputError("not a value of the decision", file=source, key=f"{HARDWARE_KEY}.modules", value=mods,
                         expected=f"one of {list(space.modules)}")
    if not space.modules and "modules" in data:
        raise InputError("the instance has no appliance", file=source, key=f"{HARDWARE_KEY}.modules", value=mods)
    return space.design(mods if space.modules else None, ports)


@dataclass(frozen=True)
class JointDesign:
    """A hardware design, the fixed-hardware problem of it and a mapping on it."""

    hardware: dict[str, Any]
    problem: MappingProblem
    mapping: MappingDesign

    def as_dict(self) -> dict[str, Any]:
        return {HARDWARE_KEY: copy.deepcopy(self.hardware), **self.mapping.as_dict()}


def greedy(prob: Any) -> tuple[dict[str, Any], MappingDesign, bool]:
    """The kind's rule for a joint instance (hardware first, with the default mapping): every
    hardware design with its greedy mapping (:func:`greedy_design`), ranked feasible first, then by
    the model's objective, the least static power, the first in :meth:`HardwareSpace.choices`.
    Returns the first: its hardware, its mapping and whether it is feasible."""
    space = prob.hardware
    ranked = []
    for i, hw in enumerate(space.choices()):
        p = prob.problem_at(hw)
        design = greedy_design(p)
        ev = evaluate_mapping(p, design)
        value = ev.period_s if p.objective == "tokens_per_s" else ev.energy_per_token_J
        ranked.append(((not ev.feasible, value, space.static_W(hw), i), hw, design, ev.feasible))
    _, hw, design, feasible = min(ranked, key=lambda r: r[0])
    return hw, design, feasible


def _cap_s(prob: Any) -> float:
    """An upper bound on the period of every joint design at least as good as the rule's (the
    energy objective: E >= (device static + least hardware static) x T / m)."""
    space = prob.hardware
    hw, design, feasible = greedy(prob)
    p = prob.problem_at(hw)
    generic = time_ub_s(replace(prob.problem_at(space.largest()), hardware_static_W=0.0))
    if not feasible:
        return generic
    ev = evaluate_mapping(p, design)
    if p.objective == "tokens_per_s":
        return min(generic, ev.period_s * (1 + CUTOFF_MARGIN))
    static = sum(x.static_W for x in p.devices) + min(space.static_W(h) for h in space.choices())
    if static <= 0:
        return generic
    return min(generic, ev.energy_per_token_J * p.micro_batch / static * (1 + CUTOFF_MARGIN))


def formulate(prob: Any) -> Formulation:
    """The joint MIP (module docstring): the largest hardware's mapping MIP, its hardware static
    power taken out, plus the hardware's one-hot groups, their rows and their static power."""
    space = prob.hardware
    base = replace(prob.problem_at(space.largest()), hardware_static_W=0.0)
    y: dict[tuple[str, int], int] = {}

    def extend(mip: MIP, a: dict[tuple[int, int], int], T: int, t_ub: float) -> tuple[list[int], list[float]]:
        families: list[tuple[str, tuple[int, ...], list[float]]] = []
        if space.modules:
            families.append(("modules", space.modules, [space.port_static_W * space.ports_per_module * m for m in space.modules]))
        for g, opts in space.ports.items():
            families.append((g, opts, [space.port_static_W * space.counts[g] * v for v in opts]))
        idx: list[int] = []
        val: list[float] = []
        for name, opts, watts in families:
            if len(opts) > 1:
                for k in range(len(opts)):
                    y[name, k] = mip.add_binary(f"hw[{name}={opts[k]}]")
                mip.add_row(f"hw-onehot[{name}]", [y[name, k] for k in range(len(opts))], np.ones(len(opts)), lb=1, ub=1)
            if not any(watts):
                continue
            if len(opts) == 1:
                idx.append(T)
                val.append(watts[0])
                continue
            parts = [mip.add_var(f"T[{name}={v}]", 0.0, t_ub) for v in opts]
            for k, tk in enumerate(parts):
                mip.add_row(f"T-hw[{name}={opts[k]}]", [tk, y[name, k]], [1.0, -t_ub], ub=0)
            mip.add_row(f"T-split[{name}]", [*parts, T], [1.0] * len(parts) + [-1.0], lb=0, ub=0)
            idx += parts
            val += watts
        if len(space.modules) > 1:
            for (d, j), var in a.items():
                exists = [y["modules", k] for k, m in enumerate(space.modules) if m > j]
                if len(exists) < len(space.modules):
                    mip.add_row(f"module-exists[{d},{j}]", [var, *exists], [1.0] + [-1.0] * len(exists), ub=0)
        start = 0
        for g, opts in space.ports.items():
            for d in range(start, start + space.counts[g]):
                mods = [var for (dd, _), var in a.items() if dd == d]
                if len(opts) > 1 and mods:
                    ks = [y[g, k] for k in range(len(opts))]
                    mip.add_row(f"hw-ports[{d}]", [*mods, *ks], [1.0] * len(mods) + [-float(v) for v in opts], ub=0)
            start += space.counts[g]
        m = base.micro_batch
        return idx, [w * TIME_UNIT_S / m for w in val]

    mm = build_mapping(base, extend=extend, t_cap_s=_cap_s(prob))

    def decode(x: np.ndarray) -> dict[str, Any]:
        def pick(name: str, opts: tuple[int, ...]) -> int:
            return opts[0] if len(opts) == 1 else opts[int(np.argmax([x[y[name, k]] for k in range(len(opts))]))]
        mods = pick("modules", space.modules) if space.modules else None
        hw = space.design(mods, {g: pick(g, opts) for g, opts in space.ports.items()})
        return {HARDWARE_KEY: hw, **mm.decode(x).as_dict()}

    design_vars = np.array([*mm.n, *mm.cw.values(), *mm.ck.values(), *mm.a.values(), *y.values()], dtype=np.int64)
    return Formulation(mip=mm.mip, objective_unit=mm.objective_unit, decode=decode, design_vars=design_vars,
                       stats=dict(mm.mip.stats()), backend_options=BACKEND_OPTIONS)


def brute_force(prob: Any, deadline: float | None) -> BruteForce:
    """Every hardware design's every mapping (:func:`brute_force_mapping` per hardware design)."""
    best, best_val, points, feasible, complete = None, math.inf, 0, 0, True
    for hw in prob.hardware.choices():
        p = prob.problem_at(hw)
        r = brute_force_mapping(p, deadline)
        points += r.points
        feasible += r.feasible_points
        complete &= r.complete
        if r.design is None:
            continue
        value = -r.objective if p.objective == "tokens_per_s" else r.objective
        if value < best_val:
            best_val, best = value, {HARDWARE_KEY: hw, **r.design.as_dict()}
    return BruteForce(None if best is None else prob.assess(best), points, feasible, complete)
