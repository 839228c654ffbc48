"""Compute/communication overlap of a stage step (model.md eq. 5.3a): the optional schedule
decision ``overlap`` = "none" | "two-batch".

Two-batch overlap (DeepSeek's inference system, arXiv 2412.19437 §3.4: "we simultaneously process
two micro-batches with similar computational workloads, overlapping the attention and MoE of one
micro-batch with the dispatch and combine of another"; SGLang's ``--enable-two-batch-overlap``)
splits each stage step's micro-batch of m sequences into halves of ceil(m/2) and floor(m/2). Each
half is a whole step of its own (eqs. 2.10-2.16, 4.1-4.10a at its size): it reads every weight it
touches again, pays its own kernel launches and collective ring steps, and moves its own share of
the KV cache, activations and messages. The device's two streams are the chip (compute and memory,
eq. 5.3's o-overlap) and the links; one half's communication runs while the other half computes,
so the step takes the busier stream: t = max(G_a + G_b, N_a + N_b) + host time (eq. 5.3a).

Assumptions: the halves' chunks interleave perfectly (the fill and drain of the pipeline, at most
one chunk, a layer's share of one half, is not charged), so the step is never shorter than the busier
stream; communication does not slow the concurrent kernels (no SM or bandwidth contention); the
stage-to-stage transfer is overlapped like the collectives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from codesign.errors import InputError

if TYPE_CHECKING:
    from codesign.kinds.grid.spec import Instance, WorkloadSpec
    from codesign.model.schedule import ScheduleTable
    from codesign.model.workload import Workload

#: the values of the ``overlap`` decision
OVERLAPS = ("none", "two-batch")
#: the stage form's selector columns: 1 on the rows whose step is serial (eq. 5.3) or two-batch (5.3a)
SERIAL, TWO_BATCH = "serial", "two_batch"


def structural_reason(s: dict[str, Any]) -> str | None:
    """Why a layout cannot run two-batch overlap (each half needs a sequence), or None."""
    if s.get("overlap", "none") == "two-batch" and s["batch"] // s["pp"] < 2:
        return "two-batch overlap needs at least 2 sequences per micro-batch (batch / pp)"
    return None


def apply_two_batch(inst: Instance, spec: WorkloadSpec, w: Workload, table: ScheduleTable,
                    features: Callable[..., None]) -> None:
    """Where the table decides ``overlap``: add the selector columns ``<phase>.serial`` and
    ``<phase>.two_batch``, and on the two-batch rows make every ``<phase>.*`` column the sum of the
    two halves' (``features`` computes a table's columns, :func:`codesign.model.schedule._features`).
    Footprints and scale factors stay those of the whole batch."""
    d = table.decisions
    if "overlap" not in d:
        return
    z = (np.asarray(d["overlap"]) == "two-batch").astype(float)
    phases = ("prefill", "decode")
    rows = np.flatnonzero(z)
    if rows.size and spec.max_tokens_per_iteration is not None:
        raise InputError("two-batch overlap with an engine token budget is not modelled",
                         key=f"workloads.{spec.name}.decisions.overlap", value="two-batch",
                         expected="overlap = ['none'] where max_tokens_per_iteration is set")
    if rows.size:
        pp = d["pp"][rows].astype(int)
        micro = d["batch"][rows].astype(int) // pp
        halves = []
        for size in (micro - micro // 2, micro // 2):
            designs = {k: v[rows] for k, v in d.items()}
            designs["batch"] = size * pp
            half = type(table)(table.workload, designs)
            features(inst, spec, w, half)
            halves.append(half.features)
        for key in [k for k in table.features if k.split(".", 1)[0] in phases]:
            col = table.features[key].copy()
            col[rows] = halves[0][key] + halves[1][key]
            table.features[key] = col
    for phase in phases:
        table.features[f"{phase}.{SERIAL}"] = 1.0 - z
        table.features[f"{phase}.{TWO_BATCH}"] = z
