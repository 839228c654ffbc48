"""All-reduce algorithms as physics, and the TP collectives of a stage step priced on the system's
topology (model.md §3.4, eqs. 3.14a, 3.17c, 3.17d).

Each algorithm of an M-byte all-reduce over n devices of one switched domain is (bytes the busiest
port of a device carries per direction, latency steps) — the α–β model (Hockney 1994; Thakur,
Rabenseifner & Gropp 2005):

- ring: reduce-scatter then all-gather around a ring, 2(n-1)/n M, 2(n-1) steps (Patarasuk & Yuan
  2009);
- two-shot: the same reduce-scatter and all-gather with every peer at once (each rank reads its
  1/n shard from the n-1 others, reduces, and they read it back), 2(n-1)/n M, 2 steps
  (TensorRT-LLM's TWOSHOT kernel; needs every peer one hop away: a switch);
- one-shot: every rank reads the whole message of each of the n-1 others and reduces it itself,
  (n-1) M in, 1 step: for small messages (TensorRT-LLM's ONESHOT kernel);
- tree: NCCL's double binary tree, each rank interior in one tree and a leaf in the other:
  about 2M per direction, 2 ceil(log2 n) steps (reduce up, broadcast down);
- in-switch: NVLink SHARP (NVLS): the switch reduces each rank's shard of all ranks and multicasts
  it, (n+1)/n M moved per direction, 2 steps; timed by NCCL's measured bus bandwidth on 8 H100
  (network.IN_SWITCH_BYTES_PER_MESSAGE_BYTE), which at 2-4 ranks is the ring's
  (network.IN_SWITCH_MIN_RANKS); only where the scale-up switches reduce (interconnect
  ``in_switch_reduction``).

An engine may choose by message size instead (its profile's ``allreduce_bands``; ``by_size``):
vLLM's custom all-reduce runs one-shot below one size and two-shot up to another, its symmetric-
memory all-reduce in the switch up to a third, then NCCL, each bound per TP size and device.

``system.allreduce`` chooses (left out: the one of ``system.engine``'s profile, else "fastest"; an
engine profile's name: that engine's rule, its bands included):
"nccl" keeps the engine profile the measured rows were fitted with; "fastest" takes, per collective (each schedule row and phase), the algorithm of least
time on the instance's scale-up link — a min the schedule table evaluates exactly for every
enumerated schedule, since the link's figures are the same for every hardware design (else an
InputError); a name pins one. A group spanning domains keeps the hierarchical ring (eq. 3.17). On
a torus (topology.py) every TP collective is a ring per dimension (eq. 3.17d).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from codesign.errors import InputError
from codesign.model import network, topology
from codesign.model.engines import allreduce_mode, rules_per_chip
from codesign.model.hardware import hardware_table
from codesign.model.topology import ALLREDUCE_MODES

if TYPE_CHECKING:
    from codesign.kinds.grid.spec import Instance


def _f(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=float)


# --- the algorithms: (timed bytes per device at the link's rate, bytes moved, steps) -------------
def ring(n: ArrayLike, m: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b, s = network.ring_allreduce(n, m)
    return b, b, s * np.ones_like(b)


def two_shot(n: ArrayLike, m: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, m = _f(n), _f(m)
    b = 2.0 * (n - 1.0) / n * m
    return b, b, np.where(n > 1, 2.0, 0.0) * np.ones_like(b)


def one_shot(n: ArrayLike, m: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, m = _f(n), _f(m)
    b = (n - 1.0) * m
    return b, b, np.where(n > 1, 1.0, 0.0) * np.ones_like(b)


def tree(n: ArrayLike, m: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, m = _f(n), _f(m)
    b = np.where(n > 1, 2.0 * m, 0.0)
    return b, b, 2.0 * np.ceil(np.log2(np.maximum(n, 1.0))) * np.ones_like(b)


def in_switch(n: ArrayLike, m: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, m = _f(n), _f(m)
    ring_b = 2.0 * (n - 1.0) / n * m
    timed = np.where(n >= network.IN_SWITCH_MIN_RANKS, network.IN_SWITCH_BYTES_PER_MESSAGE_BYTE * m, ring_b)
    moved = np.where(n > 1, (n + 1.0) / n * m, 0.0)
    return timed, moved, np.where(n > 1, 2.0, 0.0) * np.ones_like(m)


ALGORITHM_FUNCTIONS = {"ring": ring, "two-shot": two_shot, "one-shot": one_shot, "tree": tree, "in-switch": in_switch}


def time_s(timed_B: ArrayLike, steps: ArrayLike, s_per_B: ArrayLike, s_per_step: ArrayLike) -> np.ndarray:
    """α–β time of a collective: its timed bytes at the link's time per byte plus its steps at
    the link's latency and the software time per step."""
    return _f(timed_B) * _f(s_per_B) + _f(steps) * _f(s_per_step)


def fastest(names: tuple[str, ...], n: ArrayLike, m: ArrayLike, s_per_B: ArrayLike,
            s_per_step: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(timed bytes, moved bytes, steps, index into ``names``) of the algorithm of least time per
    element; ties go to the first of ``names``."""
    runs = [ALGORITHM_FUNCTIONS[a](n, m) for a in names]
    times = np.stack([time_s(t, s, s_per_B, s_per_step) for t, _, s in runs])
    pick = np.argmin(times, axis=0)

    def take(k: int) -> np.ndarray:
        return np.choose(pick, np.broadcast_arrays(*[r[k] for r in runs]))

    return take(0), take(1), take(2), pick


Bands = tuple[tuple[int, tuple[tuple[int, str], ...]], ...]


def by_size(bands: Bands, n: ArrayLike, m: ArrayLike, reduces: bool
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(timed bytes, moved bytes, steps, NCCL's) per element of an engine's all-reduce by message
    size: a TP group of ``n`` runs the first of its size's bands ``(below_B, algorithm)`` whose
    bound the ``m``-byte message is below. NCCL's (True; the others 0) where no band takes it: a
    message at or above the last bound, a TP size without bands, or an in-switch band on switches
    that do not reduce (``reduces`` False: the engine's multicast buffer fails, it falls back)."""
    n = _f(n)
    m = _f(m) * np.ones_like(n)
    timed, moved, steps = np.zeros_like(m), np.zeros_like(m), np.zeros_like(m)
    claimed = np.zeros(m.shape, dtype=bool)
    nccl = np.ones(m.shape, dtype=bool)
    for tp, sizes in bands:
        for below, name in sizes:
            sel = (n == tp) & ~claimed & (m < below)
            claimed |= sel
            if name == "in-switch" and not reduces:
                continue
            t, mv, st = ALGORITHM_FUNCTIONS[name](n, m)
            timed, moved, steps = np.where(sel, t, timed), np.where(sel, mv, moved), np.where(sel, st, steps)
            nccl &= ~sel
    return timed, moved, steps, nccl


# --- the torus: a ring per dimension (eq. 3.17d) --------------------------------------------------
def torus_ring(group: topology.TorusGroup, m: ArrayLike, phases: int = 2) -> tuple[np.ndarray, np.ndarray, float]:
    """(timed bytes, moved bytes, steps) of a ring collective per dimension over a torus group:
    ``phases`` 2 for an all-reduce (reduce-scatter along dimensions 0, 1, ..., all-gather back),
    1 for an all-gather or reduce-scatter. Along dimension i the ring carries (e_i - 1)/e_i of
    the block left, M / (e_0 ... e_(i-1)), in e_i - 1 steps, on its links_i of the device's
    ``degree`` links: timed at degree / links_i times the device's whole-port time per byte."""
    m = _f(m)
    timed = np.zeros_like(m)
    moved = np.zeros_like(m)
    steps = 0.0
    block = m
    for e, links in zip(group.extents, group.links, strict=True):
        if e > 1:
            b = phases * (e - 1.0) / e * block
            moved = moved + b
            timed = timed + b * group.degree / links
            steps += phases * (e - 1.0)
        block = block / e
    return timed, moved, steps


# --- the plan of an instance and the TP collectives of a step -------------------------------------
@dataclass(frozen=True)
class Plan:
    """How an instance's TP collectives run: ``mode`` (``system.allreduce``), the torus extents
    (None: hierarchical), and for "fastest" the scale-up link's figures: time per byte, extra per
    byte across CPU sockets, time per step (link latency + software step), whether it reduces."""

    mode: str
    torus: tuple[int, ...] | None = None
    s_per_B: float = 0.0
    s_per_B_cross: float = 0.0
    s_per_step: float = 0.0
    reduces: bool = False
    #: an engine's all-reduce by message size (``by_size``; NCCL outside its bands), or None
    bands: Bands | None = None


LINK_COLUMNS = ("s_per_B_scale_up", "s_per_B_scale_up_cross", "s_per_step_scale_up", "s_per_collective_step",
                "reduce_in_switch")


def plan_of(inst: Instance) -> Plan:
    """The plan of ``inst``; "fastest", a pinned "in-switch" and an engine's size bands read the
    scale-up link off the hardware table (one row per chip), which must agree for every design
    (for the bands: whether the switches reduce)."""
    mode = allreduce_mode(inst)
    dims = topology.torus_dims(inst)
    if mode not in ALLREDUCE_MODES:  # an engine's name: its all-reduce by message size
        bands = engine_bands(inst, mode)
        if bands is None or dims is not None:
            return Plan("nccl", dims)
        reduces = {f[-1] for f in _link_figures(inst)}
        if len(reduces) > 1:
            raise InputError("an engine's all-reduce bands need switches that all reduce, or none",
                             key="system.allreduce", value=mode,
                             expected="chips whose scale-up switches agree on in_switch_reduction",
                             suggestion="solve each chip as its own instance")
        return Plan("nccl", None, reduces=bool(reduces.pop()), bands=bands)
    if mode == "nccl" or (mode != "in-switch" and dims is not None) or mode in ("ring", "two-shot", "one-shot", "tree"):
        return Plan(mode, dims)
    figures = _link_figures(inst)
    if len(figures) > 1:
        unset = inst.system.allreduce is None  # (no engine and no all-reduce: the physics' default)
        raise InputError(
            f"all-reduce {mode!r}{' (the physics default: the instance names no engine)' if unset else ''} picks per "
            f"collective on one scale-up link, but the hardware designs have {len(figures)} different ones",
            key="system.allreduce", value=mode,
            expected="one chip (or chips with the same scale-up link and calibration)",
            suggestion=("name an engine (system.engine = 'trtllm-0.14') or " if unset else "")
            + "pin an algorithm (e.g. allreduce = 'two-shot'), or solve each chip as its own instance",
        )
    up, cross, lat, soft, reduces = next(iter(figures))
    if mode == "in-switch" and not reduces:
        raise InputError("an in-switch all-reduce needs scale-up switches that reduce", key="system.allreduce",
                         value=mode, expected="an interconnect with in_switch_reduction = true (NVLink 4 or 5)",
                         suggestion="pin another algorithm, or choose 'fastest'")
    return Plan(mode, dims, up, cross, lat + soft, bool(reduces))


def engine_bands(inst: Instance, name: str) -> Bands | None:
    """Engine ``name``'s all-reduce bands on the instance's catalog chips (the profile's base
    rules for a family without one); InputError if they differ between the chips."""
    chips, rules = rules_per_chip(inst, name)
    found = {r.allreduce_bands for r in rules}
    if len(found) > 1:
        raise InputError(f"engine {name!r} reduces by other size bands on some of the chips ({', '.join(chips)})",
                         key="system.allreduce", value=name, expected="chips on which the engine's all-reduce agrees",
                         suggestion="solve each chip as its own instance")
    return found.pop()


def _link_figures(inst: Instance) -> set[tuple[float, ...]]:
    """The distinct scale-up link figures (``LINK_COLUMNS``) of the instance's hardware designs."""
    decs = inst.hardware_decisions
    chips = next((d.domain for d in decs if d.key == "chip"), (None,))
    designs = {d.name: np.array(list(d.domain) if d.key == "chip" else [d.domain[0]] * len(chips),
                                dtype=object if isinstance(d.domain[0], str) else None) for d in decs}
    hw = hardware_table(inst, designs)
    return {tuple(float(hw.features[c][i]) for c in LINK_COLUMNS) for i in range(hw.size)}


def check_system(inst: Instance, path: str | Path | None) -> None:
    """``system.topology``, ``torus`` and ``allreduce`` are modelled (topology.check_system), and a
    mode that reads the scale-up link (``plan_of``) finds one it can use; else an InputError."""
    topology.check_system(inst, path)
    try:
        plan_of(inst)
    except InputError as exc:
        raise InputError(exc.message, file=path, key=exc.key, value=exc.value, expected=exc.expected,
                         suggestion=exc.suggestion) from None


@dataclass(frozen=True)
class Collective:
    """Per-device traffic of one TP collective: scale-up bytes at the link's rate for a device that
    reduces in a ring (``timed``) and on switches that reduce (``timed_switch``), the bytes moved
    for each (energy), the scale-up bytes paced by a CPU-socket crossing (``cross``), steps, and
    the scale-out part."""

    timed: Any
    timed_switch: Any
    moved: Any
    moved_switch: Any
    cross: Any
    up_steps: Any
    out_B: Any
    out_steps: Any


def tp_allreduce(plan: Plan, n: ArrayLike, domain: ArrayLike, m: ArrayLike, crossing: ArrayLike) -> Collective:
    """One all-reduce of ``m`` bytes over TP groups of ``n`` (an array per schedule row) under
    ``plan``. "nccl" is eqs. 3.17, 3.17a as before; a torus runs a ring per dimension; otherwise
    a group inside one domain runs the pinned or the fastest available algorithm and a group
    spanning domains the hierarchical ring."""
    n, m = _f(n), _f(m) * np.ones_like(_f(n))
    h = network.hierarchical_allreduce(n, domain, m)
    if plan.bands is not None:  # the engine's bands inside one domain, else NCCL's (as below)
        t, mv, s, nccl = by_size(plan.bands, n, m, plan.reduces)
        nccl |= n > _f(domain)
        ts, ms = network.in_switch_allreduce(n, domain, m)
        t_ring = np.where(nccl, h.scale_up_B, t)
        return Collective(t_ring, np.where(nccl, ts, t), np.where(nccl, h.scale_up_B, mv), np.where(nccl, ms, mv),
                          t_ring, np.where(nccl, h.scale_up_steps, s), h.scale_out_B, h.scale_out_steps)
    if plan.mode == "nccl" and plan.torus is None:
        ts, ms = network.in_switch_allreduce(n, domain, m)
        return Collective(h.scale_up_B, ts, h.scale_up_B, ms, h.scale_up_B, h.scale_up_steps,
                          h.scale_out_B, h.scale_out_steps)
    if plan.torus is not None:
        return _on_torus(plan.torus, n, m, 2)
    inside = n <= _f(domain)
    if plan.mode == "fastest":
        names = ("ring", "two-shot", "one-shot", "tree") + (("in-switch",) if plan.reduces else ())
        s_b = plan.s_per_B + _f(crossing) * plan.s_per_B_cross
        t, mv, s, _ = fastest(names, n, m, s_b, plan.s_per_step)
    else:
        t, mv, s = ALGORITHM_FUNCTIONS[plan.mode](n, m)
    t, mv, s = (np.where(inside, a, b) for a, b in ((t, h.scale_up_B), (mv, h.scale_up_B), (s, h.scale_up_steps)))
    return Collective(t, t, mv, mv, t, s, h.scale_out_B, h.scale_out_steps)


def tp_allgather(plan: Plan, n: ArrayLike, domain: ArrayLike, m: ArrayLike) -> Collective:
    """The logits all-gather of an ``m``-byte result: a hierarchical ring (eq. 4.9a) on a switched
    system whatever the all-reduce mode, a ring per dimension on a torus."""
    if plan.torus is not None:
        return _on_torus(plan.torus, _f(n), _f(m) * np.ones_like(_f(n)), 1)
    g = network.hierarchical_allgather(_f(n), domain, m)
    return Collective(g.scale_up_B, g.scale_up_B, g.scale_up_B, g.scale_up_B, g.scale_up_B, g.scale_up_steps,
                      g.scale_out_B, g.scale_out_steps)


def _on_torus(dims: tuple[int, ...], n: np.ndarray, m: np.ndarray, phases: int) -> Collective:
    timed, moved, steps = np.zeros_like(m), np.zeros_like(m), np.zeros_like(m)
    for size in np.unique(n):
        group = topology.torus_group(dims, int(size))
        if group is None:  # a layout the structural rules refuse (topology.torus_reason): as one line
            degree = topology.links_per_device(topology.torus_graph(dims))
            t, mv, s = torus_ring(topology.TorusGroup((int(size),), (1,), degree), m, phases)
        else:
            t, mv, s = torus_ring(group, m, phases)
        sel = n == size
        timed = np.where(sel, t, timed)
        moved = np.where(sel, mv, moved)
        steps = np.where(sel, s, steps)
    zero = np.zeros_like(m)
    return Collective(timed, timed, moved, moved, zero, steps, zero, zero)
