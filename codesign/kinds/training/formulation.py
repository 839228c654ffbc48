"""The training MIP: a one-hot over the enumerated designs (formulations/training.md §3).

The space is finite and small (layouts x ZeRO stages x micro-batches x recomputation x one path per
traffic class: 3,584 designs on 16 devices; any instance whose space passes
:data:`MAX_COLUMNS` is refused), so the compilation is exact by construction: one binary ``x_i`` per
design, ``Σ x_i = 1``, every constraint a row ``Σ (value_i / limit) x_i <= 1`` with the model's own
value of design i, the objective ``Σ (internal_i / unit) x_i``. No linearisation, no big-M; the
model and the MIP share the per-design numbers, so brute force over the same list is the MIP's
reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from codesign.mip.program import MIP
from codesign.model.training import TrainingDesign, TrainingEvaluation, TrainingSetup, internal

#: the largest space compiled column by column (the issue's bound for an enumerated one-hot)
MAX_COLUMNS = 1_000_000
#: a binary counts as chosen when its value exceeds this (solvers return 1 +- 1e-6)
BINARY_ON = 0.5


@dataclass
class TrainingMIP:
    mip: MIP
    x: np.ndarray
    designs: list[TrainingDesign]
    objective_unit: float
    stats: dict[str, Any]

    def decode(self, values: np.ndarray) -> dict[str, Any]:
        on = np.flatnonzero(np.asarray(values)[self.x] > BINARY_ON)
        if len(on) != 1:
            raise ValueError(f"{len(on)} designs chosen, expected one")
        return self.designs[int(on[0])].as_dict()


def build_training(s: TrainingSetup, designs: list[TrainingDesign], evals: list[TrainingEvaluation]) -> TrainingMIP:
    """The one-hot MIP over ``designs`` (evaluated as ``evals``)."""
    if len(designs) > MAX_COLUMNS:
        raise ValueError(f"{len(designs)} designs: more than the {MAX_COLUMNS} an enumerated one-hot takes")
    mip = MIP(name="training")
    x = np.array([mip.add_binary(f"x[{i}]") for i in range(len(designs))], dtype=np.int64)
    mip.add_row("one-design", x, np.ones(len(x)), 1.0, 1.0)
    cols = {
        "memory": (np.array([e.memory_B_per_device for e in evals]), s.capacity_B),
        "step-time": (np.array([e.step_s for e in evals]), s.step_time_budget_s),
        "power": (np.array([e.system_power_W for e in evals]), s.power_budget_W),
    }
    for name, (values, limit) in cols.items():
        if limit is not None:
            mip.add_row(name, x, values / limit, ub=1.0)
    obj = np.array([internal(s, e) for e in evals])
    positive = obj[obj > 0]
    unit = float(np.median(positive)) if len(positive) else 1.0
    mip.set_objective(x, obj / unit)
    return TrainingMIP(mip, x, designs, unit, {**mip.stats(), "designs": len(designs)})
