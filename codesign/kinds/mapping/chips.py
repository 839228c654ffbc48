"""Chip-dependent coefficients of the mapping MIP (formulations/mapping.md §4, "Chip per group").

A device group may give ``chip`` as a list: one chip per group is a hardware decision
(:mod:`codesign.kinds.mapping.joint`). Every per-device row of the §2 MIP (memory streams,
compute, local capacity, energy) is an affine expression of the device's counts ``n[d]``,
``cw[d,t]``, ``ck[d,t]`` (and of its memory time ``M[d]``) whose coefficients are the chip's.
With a one-hot ``y[g,k]`` over the group's chips the expression is Σ_k y_k·(c_k·x + e_k): the
products y_k·x are disaggregated, ``x = Σ_k x_k``, ``0 <= x_k <= ub(x)·y_k``, so ``x_k = x`` for the
chosen chip and 0 for the others, and the expression is Σ_k c_k·x_k + Σ_k e_k·y_k, exactly, at
every integral y (the convex hull of the disjunction). A variable whose coefficient is the same for
every chip (a pooled tier's read time, its energy) keeps the variable itself.

:class:`DeviceTerms` is what :func:`codesign.kinds.mapping.formulation.build_mapping` asks for a
device's expression; without a chip decision it returns the fixed device's coefficients, so the
fixed-hardware MIP is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from codesign.mip.program import MIP
from codesign.model.mapping import Device, MappingProblem

#: an affine expression: (variables, coefficients, constant)
Affine = tuple[list[int], list[float], float]


@dataclass
class ChipOptions:
    """The chip decision as the MIP builder needs it: per device, the :class:`Device` of every chip
    of its group (in the file's order; one entry: a fixed chip); each device's group; each group's
    chips. ``y`` (group -> one binary per chip) is filled in by the builder."""

    devices: list[list[Device]]
    groups: list[str]
    chips: dict[str, tuple[str, ...]]
    y: dict[str, list[int]] = field(default_factory=dict)


class DeviceTerms:
    """Per-device affine expressions of the MIP, with chip-dependent coefficients disaggregated."""

    def __init__(self, mip: MIP, p: MappingProblem, chips: ChipOptions | None):
        self.mip = mip
        self.opts = chips.devices if chips else [[dev] for dev in p.devices]
        self.sel: list[list[int] | None] = [None] * p.stages
        if chips is not None:
            for g, ids in chips.chips.items():
                if len(ids) > 1:
                    chips.y[g] = [mip.add_binary(f"hw[chip[{g}]={c}]") for c in ids]
                    mip.add_row(f"hw-onehot[chip[{g}]]", chips.y[g], np.ones(len(ids)), lb=1, ub=1)
            self.sel = [chips.y.get(g) for g in chips.groups]
        self._parts: dict[tuple[int, int], list[int]] = {}

    def options(self, d: int) -> list[Device]:
        return self.opts[d]

    def split(self, d: int, var: int) -> list[int]:
        """``var = Σ_k var_k``, ``0 <= var_k <= ub(var)·y_k``: its copy per chip of device d."""
        if (d, var) not in self._parts:
            y = self.sel[d]
            assert y is not None
            v = self.mip.vars[var]
            # a copy of an integer count is integer too (it is 0 or the count): CP-SAT propagates it
            parts = [self.mip.add_var(f"{v.name}@{k}", 0.0, v.ub, integer=v.integer) for k in range(len(y))]
            for k, part in enumerate(parts):
                self.mip.add_row(f"chip-link[{v.name}@{k}]", [part, y[k]], [1.0, -v.ub], ub=0)
            self.mip.add_row(f"chip-split[{v.name}]", [*parts, var], [1.0] * len(parts) + [-1.0], lb=0, ub=0)
            self._parts[d, var] = parts
        return self._parts[d, var]

    def part(self, d: int, k: int, fn: Callable[[Device], Affine]) -> Affine:
        """Chip k's share of device d's expression ``fn``: ``fn`` of that chip over its copies, its
        constant on y_k (0 unless chip k is chosen); without a decision, ``fn`` itself."""
        idx, val, const = fn(self.opts[d][k])
        y = self.sel[d]
        if y is None:
            return idx, val, const
        return [self.split(d, i)[k] for i in idx] + [y[k]], [*val, const], 0.0

    def expr(self, d: int, fn: Callable[[Device], Affine]) -> Affine:
        """Device d's expression ``fn`` of its chip: Σ_k of :meth:`part`, except that a variable (or
        the constant) with the same coefficient for every chip stays as it is."""
        per = [fn(dev) for dev in self.opts[d]]
        if len(per) == 1:
            return per[0]
        y = self.sel[d]
        assert y is not None
        coefs: dict[int, list[float]] = {}
        for k, (idx, val, _) in enumerate(per):
            for i, v in zip(idx, val, strict=True):
                coefs.setdefault(i, [0.0] * len(per))[k] += v
        out_i: list[int] = []
        out_v: list[float] = []
        for i, cs in coefs.items():
            if all(c == cs[0] for c in cs):
                out_i.append(i)
                out_v.append(cs[0])
            else:
                for k, part in enumerate(self.split(d, i)):
                    out_i.append(part)
                    out_v.append(cs[k])
        consts = [c for _, _, c in per]
        if all(c == consts[0] for c in consts):
            return out_i, out_v, consts[0]
        return out_i + list(y), out_v + consts, 0.0
