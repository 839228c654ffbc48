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

A device group may also give ``chip`` as a list (one chip per group, ``hardware.chip = {group: id}``):
every per-device row then takes the chosen chip's coefficients (:mod:`codesign.kinds.mapping.chips`),
the devices' static power joins the one-hot families above, and ``budgets.power_W`` (the devices'
TDP plus the lit ports, W) is one row over the one-hot binaries.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from codesign import catalog
from codesign.errors import InputError
from codesign.kinds.base import BruteForce, DecisionInfo, Formulation
from codesign.kinds.fixed import BACKEND_OPTIONS
from codesign.kinds.mapping.brute import brute_force_mapping
from codesign.kinds.mapping.chips import ChipOptions
from codesign.kinds.mapping.formulation import (
    CUTOFF_MARGIN,
    RELAX,
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
    #: the chips of each group, in the file's order (empty: no group gives a list)
    chips: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: devices per stage of each group (``tp``; left out: 1); ``counts`` are stages
    tp: dict[str, int] = field(default_factory=dict)

    def devices(self, g: str) -> int:
        """Devices of group g: its stages x its tp."""
        return self.counts[g] * self.tp.get(g, 1)

    @property
    def joint(self) -> bool:
        """Some hardware decision has more than one value."""
        return len(self.modules) > 1 or any(len(v) > 1 for v in [*self.ports.values(), *self.chips.values()])

    def choices(self) -> list[dict[str, Any]]:
        """Every hardware design, modules varying slowest, then the groups' ports in file order, then
        their chips."""
        groups = list(self.ports)
        chips = list(itertools.product(*(self.chips[g] for g in groups))) if self.chips else [None]
        out = []
        for mods in self.modules or (None,):
            for pp in itertools.product(*(self.ports[g] for g in groups)):
                for cc in chips:
                    out.append(self.design(mods, dict(zip(groups, pp, strict=True)),
                                           None if cc is None else dict(zip(groups, cc, strict=True))))
        return out

    def design(self, modules: int | None, ports: dict[str, int], chips: dict[str, str] | None = None) -> dict[str, Any]:
        hw: dict[str, Any] = {"pool_ports": ports}
        if modules is not None:
            hw = {"modules": modules, **hw}
        if chips is not None:
            hw["chip"] = chips
        return hw

    def largest(self) -> dict[str, Any]:
        """The most modules and ports; each group's first chip."""
        return self.design(self.modules[-1] if self.modules else None, {g: v[-1] for g, v in self.ports.items()},
                           {g: v[0] for g, v in self.chips.items()} if self.chips else None)

    def static_W(self, hw: dict[str, Any]) -> float:
        """The lit ports' static power of a hardware design (the model's ``hardware_static_W``)."""
        lit = sum(self.devices(g) * p for g, p in hw["pool_ports"].items()) + hw.get("modules", 0) * self.ports_per_module
        return self.port_static_W * lit

    def decisions(self) -> list[DecisionInfo]:
        out = [DecisionInfo("modules", self.modules, "hardware")] if self.modules else []
        out += [DecisionInfo(f"pool_ports[{g}]", v, "hardware") for g, v in self.ports.items()]
        return out + [DecisionInfo(f"chip[{g}]", v, "hardware") for g, v in self.chips.items()]


def hardware_space(inst: Any) -> HardwareSpace:
    s = inst.spec
    ports = {g.name: options(g.pool_ports) for g in s.devices}
    counts = {g.name: g.count for g in s.devices}
    tp = {g.name: g.tp for g in s.devices}
    chips = {g.name: tuple(g.chip) if isinstance(g.chip, list) else (g.chip,) for g in s.devices}
    if not any(isinstance(g.chip, list) for g in s.devices):
        chips = {}
    if s.appliance is None:
        return HardwareSpace((), ports, counts, 0.0, 0, chips, tp)
    app = catalog.load_appliance(s.appliance.id)
    mods = options(s.appliance.modules) or (app.modules,)
    return HardwareSpace(mods, ports, counts, s.appliance.port_static_power_W or 0.0, app.ports_per_module, chips, tp)


def key(hw: dict[str, Any]) -> tuple:
    return (hw.get("modules"), tuple(sorted(hw["pool_ports"].items())), tuple(sorted(hw.get("chip", {}).items())))


def instance_at(inst: Any, hw: dict[str, Any]) -> Any:
    """The fixed-hardware instance of one hardware design: the file with the chosen values written in.
    Not validated again: the values come from the validated domains (a design without ports is one of
    the space, though a file giving an appliance and no ports is refused as a likely mistake)."""
    s = inst.spec
    devices = [g.model_copy(update={"pool_ports": hw["pool_ports"][g.name], "chip": hw.get("chip", {}).get(g.name, g.chip)})
               for g in s.devices]
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
    extra = sorted(set(data) - {"modules", "pool_ports", *(("chip",) if space.chips else ())})
    if extra:
        raise InputError("unknown hardware decision", file=source, key=f"{HARDWARE_KEY}.{extra[0]}",
                         expected="modules, pool_ports" + (", chip" if space.chips else ""))
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
    chips = None
    if space.chips:
        chips_in = data.get("chip", {})
        if not isinstance(chips_in, dict) or set(chips_in) - set(space.chips):
            raise InputError("chip is a table of device group -> chip", file=source, key=f"{HARDWARE_KEY}.chip",
                             value=chips_in, expected=f"groups of {sorted(space.chips)}")
        chips = {g: chips_in.get(g, default["chip"][g]) for g in space.chips}
        for g, c in chips.items():
            if c not in space.chips[g]:
                raise InputError("not a value of the decision", file=source, key=f"{HARDWARE_KEY}.chip.{g}",
                                 value=c, expected=f"one of {list(space.chips[g])}")
    return space.design(mods if space.modules else None, ports, chips)


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
    the model's objective, the least static power (devices' and lit ports'), the first in
    :meth:`HardwareSpace.choices`.
    Returns the first: its hardware, its mapping and whether it is feasible."""
    space = prob.hardware
    ranked = []
    for i, hw in enumerate(space.choices()):
        p = prob.problem_at(hw)
        design = greedy_design(p)
        ev = evaluate_mapping(p, design)
        value = ev.period_s if p.objective == "tokens_per_s" else ev.energy_per_token_J
        ranked.append(((not ev.feasible, value, static_total(prob, hw), i), hw, design, ev.feasible))
    _, hw, design, feasible = min(ranked, key=lambda r: r[0])
    return hw, design, feasible


def static_total(prob: Any, hw: dict[str, Any]) -> float:
    """The static power of a hardware design: its devices' and its lit ports', W."""
    return sum(x.static_W for x in prob.problem_at(hw).devices) + prob.hardware.static_W(hw)


def _cap_s(prob: Any) -> float:
    """An upper bound on the period of every joint design at least as good as the rule's (the
    energy objective: E >= the least static power of a hardware design x T / m). The generic bound:
    the largest hardware's, which bounds every smaller hardware's times; with a chip decision, the
    largest over every hardware design."""
    space = prob.hardware
    hw, design, feasible = greedy(prob)
    p = prob.problem_at(hw)
    hws = space.choices() if space.chips else [space.largest()]
    generic = max(time_ub_s(replace(prob.problem_at(h), hardware_static_W=0.0)) for h in hws)
    if not feasible:
        return generic
    ev = evaluate_mapping(p, design)
    if p.objective == "tokens_per_s":
        return min(generic, ev.period_s * (1 + CUTOFF_MARGIN))
    static = min(static_total(prob, h) for h in space.choices())
    if static <= 0:
        return generic
    return min(generic, ev.energy_per_token_J * p.micro_batch / static * (1 + CUTOFF_MARGIN))


def _chip_options(prob: Any, base: Any) -> ChipOptions:
    """Per device, its :class:`Device` on every chip of its group (static power taken out: it is a
    one-hot family of :func:`formulate`'s)."""
    space = prob.hardware
    large = space.largest()
    devices: list[list[Any]] = []
    for d, dev in enumerate(base.devices):
        hws = [{**large, "chip": {**large["chip"], dev.group: c}} for c in space.chips[dev.group]]
        devices.append([replace(prob.problem_at(h).devices[d], static_W=0.0) for h in hws])
    return ChipOptions(devices, [x.group for x in base.devices], space.chips)


def formulate(prob: Any, *, envelopes: bool = True) -> Formulation:
    """The joint MIP (module docstring): the largest hardware's mapping MIP, its hardware static
    power taken out, plus the hardware's one-hot groups, their rows and their static power."""
    space = prob.hardware
    base = replace(prob.problem_at(space.largest()), hardware_static_W=0.0, power_budget_W=None)
    chips = None
    if space.chips:
        chips = _chip_options(prob, base)
        base = replace(base, devices=[replace(x, static_W=0.0) for x in base.devices])
    budget = prob.problem_at(space.largest()).power_budget_W
    y: dict[tuple[str, int], int] = {}

    def extend(mip: MIP, a: dict[tuple[int, int], int], T: int, t_ub: float,
               port_load: dict[int, tuple[list[int], list[float]]]) -> tuple[list[int], list[float]]:
        # (name, values, static W, provisioned W) per one-hot family
        families: list[tuple[str, tuple[Any, ...], list[float], list[float]]] = []
        if space.modules:
            w = [space.port_static_W * space.ports_per_module * m for m in space.modules]
            families.append(("modules", space.modules, w, w))
        for g, opts in space.ports.items():
            w = [space.port_static_W * space.devices(g) * v for v in opts]
            families.append((g, opts, w, w))
        if chips is not None:
            for g, ids in space.chips.items():
                d = chips.groups.index(g)
                static = [space.counts[g] * prob.problem_at({**space.largest(), "chip": {**space.largest()["chip"], g: c}})
                          .devices[d].static_W for c in ids]
                families.append((f"chip[{g}]", ids, static, [space.devices(g) * catalog.load_chip(c).tdp_W for c in ids]))
                for k, var in enumerate(chips.y.get(g, [])):
                    y[f"chip[{g}]", k] = var
        idx: list[int] = []
        val: list[float] = []
        p_idx: list[int] = []
        p_val: list[float] = []
        p_const = 0.0 if chips is not None else base.devices_tdp_W
        for name, opts, watts, provisioned in families:
            if len(opts) > 1:
                for k in range(len(opts)):
                    if (name, k) not in y:
                        y[name, k] = mip.add_binary(f"hw[{name}={opts[k]}]")
                if not name.startswith("chip["):
                    mip.add_row(f"hw-onehot[{name}]", [y[name, k] for k in range(len(opts))], np.ones(len(opts)), lb=1, ub=1)
                p_idx += [y[name, k] for k in range(len(opts))]
                p_val += provisioned
            else:
                p_const += provisioned[0]
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
        if budget is not None:  # provisioned power (model: devices_tdp_W + hardware_static_W <= power_W)
            if p_idx:
                mip.add_row("power", p_idx, p_val, ub=budget * RELAX - p_const)
            elif p_const > budget * RELAX:
                mip.add_row("power", [T], [1.0], ub=-1.0)  # infeasible (T >= 0): over budget whatever the design
        if len(space.modules) > 1:
            for (d, j), var in a.items():
                exists = [y["modules", k] for k, m in enumerate(space.modules) if m > j]
                if len(exists) < len(space.modules):
                    mip.add_row(f"module-exists[{d},{j}]", [var, *exists], [1.0] + [-1.0] * len(exists), ub=0)
            # valid cut: a module's port load is at most T <= t_ub, and 0 when the module does not exist
            for j, (l_idx, l_val) in port_load.items():
                exists = [y["modules", k] for k, m in enumerate(space.modules) if m > j]
                if len(exists) < len(space.modules):
                    mip.add_row(f"port-exists[{j}]", [*l_idx, *exists], [*l_val, *([-t_ub] * len(exists))], ub=0)
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

    mm = build_mapping(base, extend=extend, t_cap_s=_cap_s(prob), chips=chips, envelopes=envelopes)

    def decode(x: np.ndarray) -> dict[str, Any]:
        def pick(name: str, opts: tuple[Any, ...]) -> Any:
            return opts[0] if len(opts) == 1 else opts[int(np.argmax([x[y[name, k]] for k in range(len(opts))]))]
        mods = pick("modules", space.modules) if space.modules else None
        chosen = {g: pick(f"chip[{g}]", ids) for g, ids in space.chips.items()} if space.chips else None
        hw = space.design(mods, {g: pick(g, opts) for g, opts in space.ports.items()}, chosen)
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
