"""Budgets on the metrics of a mapping design: ``'energy_per_token_J <= 0.05'``, ``'tokens_per_s >= 900'``.

A budget is parsed by :func:`codesign.model.budgets.parse_budget` (the grammar every kind's budgets
share) and must be an upper limit, with positive coefficients, on the metrics of a mapping that grow
with the pipeline period T (formulations/mapping.md §1):

    time_per_token_s   = T / m                   (tokens/s = m / T; ``tokens_per_s >= X`` is T/m <= 1/X)
    tpot_s             = D · T
    energy_per_token_J = (dynamic energy of a period + static power of all devices · T) / m

Each is linear in the layer counts and in T, so a budget is one exact row of the MIP, and each is
nondecreasing in T, so the period's epigraph (T >= every stage time and shared load) stays exact:
an upper limit only ever needs T large enough. A lower limit (``energy_per_token_J >= X``, a
negative coefficient, ``tokens_per_s <= X``) would need T equal to the period and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codesign.errors import InputError
from codesign.model.budgets import parse_budget

#: the metrics a mapping budget may name (``tokens_per_s`` alone, as a lower limit, becomes
#: ``time_per_token_s``), with their units
MAPPING_BUDGET_METRICS: dict[str, str] = {
    "tokens_per_s": "1/s",
    "time_per_token_s": "s",
    "tpot_s": "s",
    "energy_per_token_J": "J",
}
#: relative tolerance of a budget check (float round-off only; the model's capacity checks use the same)
BUDGET_RTOL = 1e-9


@dataclass(frozen=True)
class MappingBudget:
    """Σ coef·metric <= rhs over :data:`MAPPING_BUDGET_METRICS` (coefficients > 0)."""

    name: str
    text: str
    coefs: tuple[tuple[str, float], ...]
    rhs: float

    def lhs(self, period_s: np.ndarray, energy_per_token_J: np.ndarray, stages: int, micro_batch: int) -> np.ndarray:
        """The left side for designs with these periods and energies (arrays broadcast)."""
        values = {"time_per_token_s": period_s / micro_batch, "tpot_s": stages * period_s,
                  "energy_per_token_J": energy_per_token_J}
        return sum(c * values[m] for m, c in self.coefs)

    def holds(self, lhs: np.ndarray) -> np.ndarray:
        return lhs <= self.rhs + BUDGET_RTOL * abs(self.rhs)


def parse_mapping_budget(text: str, *, name: str, source: str) -> MappingBudget:
    """``text`` as a mapping budget; InputError naming the budget when it is not one (module docstring)."""
    b = parse_budget(text, ["workload"], name=name, source=source)
    expected = ("an upper limit on " + ", ".join(m for m in MAPPING_BUDGET_METRICS if m != "tokens_per_s")
                + ", or tokens_per_s >= X")
    coefs = []
    for t in b.terms:
        if t.metric not in MAPPING_BUDGET_METRICS:
            raise InputError(f"{t.metric!r} is no metric of a mapping design", file=source, key=name, value=text,
                             expected=expected)
        if t.coef <= 0:
            raise InputError("a mapping budget is an upper limit on metrics that grow with the period",
                             file=source, key=name, value=text, expected=expected)
        coefs.append((t.metric, t.coef))
    return MappingBudget(b.name, b.text, tuple(coefs), b.rhs)
