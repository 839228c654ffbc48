"""The system's topology as a networkx graph, and the checks of ``system.topology`` (model.md §3.4,
eqs. 3.17c, 3.17d).

Two kinds of system are modelled:

- ``hierarchical`` (the default): scale-up domains of ``system.scale_up_domain`` devices, each
  joined by a switch, the domains joined by scale-out (``network.switched_system``);
- ``torus-2d`` / ``torus-3d``: the devices on a 2D or 3D torus of direct links (extents
  ``system.torus``, dimension 0 fastest), the torus being the whole scale-up fabric
  (``scale_up_domain`` = devices, no scale-out). Each device's scale-up bandwidth (the catalog's
  per-device figure, all links together) is split evenly over its links, the graph's degree.

A TP group is the first ``tp`` devices (TP-fastest placement): on a torus it must be a box, full in
dimensions 0..j-1 and ``r`` long in dimension j with r dividing the extent, so that the groups tile
the torus. What the collectives need of a group is read off the graph: per dimension its extent
and the links a ring along it uses per device (2 where the group closes the dimension's cycle,
a bidirectional ring; 1 on a line or a 2-long dimension, whose two neighbours are one).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import networkx as nx

from codesign.catalog import engine_names
from codesign.errors import InputError, did_you_mean

if TYPE_CHECKING:
    from codesign.kinds.grid.spec import Instance

#: modelled topologies and the dimensions of their torus (None: switched, no torus)
TOPOLOGIES: dict[str, int | None] = {"hierarchical": None, "torus-2d": 2, "torus-3d": 3}

#: the all-reduce algorithms a TP collective may run (model.md eq. 3.14a; collectives.py)
ALGORITHMS = ("ring", "two-shot", "one-shot", "tree", "in-switch")
#: ``system.allreduce``: the engine profile "nccl" (NCCL's ring, in the switch from 5 ranks where
#: the switches reduce; the measured rows' behaviour), "fastest" (the cheapest available algorithm
#: per collective), or one algorithm pinned
ALLREDUCE_MODES = ("nccl", "fastest", *ALGORITHMS)
#: the algorithms a torus runs: a ring per dimension (one-shot, two-shot and tree need every
#: peer one hop away, the in-switch reduction a switch)
TORUS_ALGORITHMS = ("ring",)


def torus_graph(dims: tuple[int, ...]) -> nx.Graph:
    """The torus of extents ``dims`` (dimension 0 fastest): node i is device i (attribute
    ``coord``), an edge joins neighbours along one dimension (attribute ``dim``) with wrap-around;
    a 2-long dimension has one edge per pair, a 1-long none."""
    g = nx.Graph()
    coords = [tuple(reversed(c)) for c in itertools.product(*(range(k) for k in reversed(dims)))]
    index = {c: i for i, c in enumerate(coords)}
    for c, i in index.items():
        g.add_node(i, coord=c, kind="device")
    for c, i in index.items():
        for d, k in enumerate(dims):
            if k > 1:
                nxt = list(c)
                nxt[d] = (c[d] + 1) % k
                g.add_edge(i, index[tuple(nxt)], dim=d)
    return g


def links_per_device(g: nx.Graph) -> int:
    """Links of each device (the torus is regular: the graph's degree)."""
    return max((deg for _, deg in g.degree()), default=0)


@dataclass(frozen=True)
class TorusGroup:
    """A TP group on a torus: its extent and ring links per device in each dimension it spans,
    and the devices' links in all (``degree``)."""

    extents: tuple[int, ...]
    links: tuple[int, ...]
    degree: int


def group_shape(dims: tuple[int, ...], n: int) -> tuple[int, ...] | None:
    """The extents of the box of the first ``n`` devices, or None if it is no box that tiles the
    torus (n = k_0 ... k_(j-1) r with r | k_j)."""
    extents: list[int] = []
    rest = n
    for k in dims:
        if rest == 1:
            break
        r = min(rest, k)
        if rest % r or k % r or (r < k and rest != r):
            return None
        extents.append(r)
        rest //= r
    return tuple(extents) if rest == 1 else None


def torus_group(dims: tuple[int, ...], n: int) -> TorusGroup | None:
    """The group of the first ``n`` devices (``group_shape``) with the ring links per device of each
    dimension it spans, read off the graph: the fewest neighbours along that dimension any member
    has inside the group (2: the dimension's cycle, 1: a line or a 2-long cycle)."""
    shape = group_shape(dims, n)
    if shape is None:
        return None
    g = torus_graph(dims)
    members = set(range(n))
    sub = g.subgraph(members)
    links = []
    for d in range(len(shape)):
        along = [sum(1 for _, _, a in sub.edges(v, data="dim") if a == d) for v in members]
        links.append(min(along))
    return TorusGroup(shape, tuple(links), links_per_device(g))


def torus_reason(dims: tuple[int, ...] | None, tp: int) -> str | None:
    """Why TP groups of ``tp`` cannot sit on the torus (None: they can, or there is no torus)."""
    if dims is None or group_shape(dims, tp) is not None:
        return None
    return f"tp = {tp} groups are no boxes that tile the {'x'.join(map(str, dims))} torus"


def torus_dims(inst: Instance) -> tuple[int, ...] | None:
    """The torus extents of a torus system, None for a hierarchical one."""
    if TOPOLOGIES.get(inst.system.topology) is None:
        return None
    return tuple(inst.system.torus or ())


def check_system(inst: Instance, path: str | Path | None) -> None:
    """``system.topology``, ``system.torus`` and ``system.allreduce`` name something the model
    prices; else an InputError naming the file, key, value, what is expected and a suggestion."""
    sysm = inst.system
    if sysm.topology not in TOPOLOGIES:
        raise InputError(
            f"topology {sysm.topology!r} is not modelled", file=path, key="system.topology", value=sysm.topology,
            expected="one of: " + ", ".join(TOPOLOGIES),
            suggestion=did_you_mean(sysm.topology, TOPOLOGIES) or "leave `topology` out for the hierarchical system",
        )
    # an engine profile's name: that engine's all-reduce rule (its size bands, collectives.by_size)
    # (left out: the engine's rule, else the physics' fastest; engines.allreduce_mode)
    if sysm.allreduce is not None and sysm.allreduce not in ALLREDUCE_MODES and sysm.allreduce not in engine_names():
        raise InputError(
            f"all-reduce {sysm.allreduce!r} is not modelled", file=path, key="system.allreduce", value=sysm.allreduce,
            expected="one of: " + ", ".join(ALLREDUCE_MODES) + ", or an engine profile's name (its rule)",
            suggestion=did_you_mean(sysm.allreduce, ALLREDUCE_MODES) or "leave `allreduce` out for the engine's rule",
        )
    rank = TOPOLOGIES[sysm.topology]
    if rank is None:
        if sysm.torus is not None:
            raise InputError("`torus` is given but the topology is no torus", file=path, key="system.torus",
                             value=sysm.torus, expected="topology = 'torus-2d' or 'torus-3d' with it",
                             suggestion="drop `torus`, or set the topology")
        return
    dims = sysm.torus
    if dims is None or len(dims) != rank or any(k < 1 for k in dims):
        raise InputError(f"a {sysm.topology} needs its {rank} extents", file=path, key="system.torus", value=dims,
                         expected=f"{rank} positive integers, e.g. torus = {[4] * rank}",
                         suggestion="give the devices along each dimension")
    if math.prod(dims) != sysm.devices or sysm.scale_up_domain != sysm.devices:
        raise InputError(
            "a torus holds every device in one scale-up fabric", file=path, key="system.torus", value=dims,
            expected=f"extents whose product is the {sysm.devices} devices, and scale_up_domain = devices",
            suggestion=f"set scale_up_domain = {math.prod(dims)} and devices = {math.prod(dims)}",
        )
    if sysm.allreduce is not None and sysm.allreduce not in ("nccl", "fastest", *TORUS_ALGORITHMS):
        raise InputError(
            f"a torus cannot run a {sysm.allreduce!r} all-reduce", file=path, key="system.allreduce",
            value=sysm.allreduce, expected="nccl, fastest or " + ", ".join(TORUS_ALGORITHMS),
            suggestion="a torus runs a ring per dimension: leave `allreduce` out",
        )
    for i, w in enumerate(inst.workloads):
        if True in w.decisions.get("ep_all_to_all", []):
            raise InputError(
                "an expert all-to-all is priced on switched domains only", file=path,
                key=f"workloads[{i}].decisions.ep_all_to_all", value=w.decisions["ep_all_to_all"],
                expected="[false] on a torus", suggestion="use the hierarchical topology for EP by all-to-all",
            )

