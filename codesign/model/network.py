"""Network: topologies as networkx graphs, collective traffic, per-bit path energy (model.md §3.4).

Collective traffic per device follows the bandwidth-optimal ring algorithms (Patarasuk & Yuan
2009; Thakur et al. 2005): all-reduce moves 2(n-1)/n x M bytes per device in 2(n-1) steps;
all-gather and reduce-scatter (n-1)/n x M in n-1 steps; all-to-all (n-1)/n x M in n-1 steps;
point-to-point M in one step. A group larger than a scale-up domain runs hierarchically:
inside each domain of size d, then across the n/d domains over scale-out with M/d per device.

Energy per bit along a path = source adapter + sum of switches + destination adapter (the
Photonic Fabric paper, arXiv 2507.14000): nodes carry their per-bit energy and a path's energy is
the sum over its nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True)
class Traffic:
    """Per-device traffic of one collective, split by link class."""

    scale_up_B: np.ndarray
    scale_up_steps: np.ndarray
    scale_out_B: np.ndarray
    scale_out_steps: np.ndarray


def _f(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=float)


def ring_allreduce(n: ArrayLike, message_B: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(bytes per device, latency steps) of a ring all-reduce over n devices."""
    n = _f(n)
    return 2.0 * (n - 1.0) / n * _f(message_B), 2.0 * (n - 1.0)


def ring_allgather(n: ArrayLike, message_B: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(bytes per device, steps) of an all-gather (or reduce-scatter) of an M-byte result."""
    n = _f(n)
    return (n - 1.0) / n * _f(message_B), n - 1.0


def all_to_all(n: ArrayLike, message_B: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(bytes per device, steps) of an all-to-all where each device holds M bytes to scatter."""
    n = _f(n)
    return (n - 1.0) / n * _f(message_B), n - 1.0


def expert_all_to_all(ep: ArrayLike, domain: int, selections: ArrayLike, selection_B: float) -> Traffic:
    """Per-device traffic of one expert-parallel all-to-all (a dispatch, or the combine back) over
    ``ep`` ranks placed contiguously in scale-up domains of ``domain`` devices, under balanced
    routing (model.md eq. 3.16a; placement.md P5 with every device's load k/ep).

    Each rank sends ``selections`` (its tokens x top-k) vectors of ``selection_B`` bytes, one per
    (token, selected expert); a selection lands on each of the ep ranks with probability 1/ep, so
    min(ep, d) - 1 of ep go to the rank's own domain (scale-up), ep - min(ep, d) of ep to other
    domains (scale-out) and 1/ep stays; under balance each rank receives as much as it sends. All
    sends are posted at once: one link latency, on scale-out if the group spans domains (as
    placement's a2a latency), else on scale-up; none at ep = 1."""
    ep = _f(ep)
    sent = _f(selections) * selection_B
    inside = np.minimum(ep, domain)
    spans = ep > domain
    return Traffic(
        sent * (inside - 1.0) / ep,
        ((ep > 1.0) & ~spans).astype(float),
        sent * (ep - inside) / ep,
        spans.astype(float),
    )


def _hierarchical(ring, n: ArrayLike, domain: ArrayLike, message_B: ArrayLike) -> Traffic:
    """A ring collective over n devices placed contiguously in scale-up domains of ``domain``:
    inside each domain over min(n, d) devices on scale-up with the whole message, across the
    max(n/d, 1) domains on scale-out with the M/d block each device holds."""
    n = _f(n)
    m = _f(message_B)
    inside = np.minimum(n, domain)
    groups = np.maximum(n / domain, 1.0)
    up_b, up_s = ring(inside, m)
    out_b, out_s = ring(groups, m / inside)
    return Traffic(up_b, up_s, out_b, out_s)


def hierarchical_allreduce(n: ArrayLike, domain: ArrayLike, message_B: ArrayLike) -> Traffic:
    """All-reduce over n devices placed contiguously in scale-up domains of ``domain`` devices.

    n <= domain: one ring on scale-up links. n > domain (n a multiple of domain): reduce-scatter
    and all-gather inside each domain (2(d-1)/d x M on scale-up), all-reduce of the M/d shard
    across the n/d domains on scale-out.
    """
    return _hierarchical(ring_allreduce, n, domain, message_B)


def hierarchical_allgather(n: ArrayLike, domain: int, result_B: ArrayLike) -> Traffic:
    """All-gather of an M-byte result (each of the n devices holds M/n) over n devices placed
    contiguously in scale-up domains of ``domain`` devices.

    n <= domain: one ring on scale-up, (n-1)/n x M. n > domain: first across the g = n/d domains
    among devices of the same local rank on scale-out ((g-1)/g x M/d, g-1 steps), then inside each
    domain on scale-up ((d-1)/d x M, d-1 steps).
    """
    return _hierarchical(ring_allgather, n, domain, result_B)


def crosses_sockets(n: ArrayLike, domain: int, socket: int | None) -> np.ndarray:
    """1.0 where a TP group's scale-up ring crosses a server's CPU sockets, else 0.0 (eq. 3.17b).

    The ring inside one scale-up domain spans min(n, domain) devices; on a two-socket PCIe fabric
    whose sockets hold ``socket`` devices each it crosses the sockets' link if it spans more. Every
    hop of a ring carries the same bytes, so that link, the slowest hop, sets the ring's pace.
    ``socket`` None (no socket boundary): never."""
    n = _f(n)
    if socket is None:
        return np.zeros_like(n)
    return (np.minimum(n, domain) > socket).astype(float)


#: NCCL runs an all-reduce in the NVSwitch (NVLink SHARP, "NVLS") only from 5 ranks on: with 2-4
#: GPUs NVLS measures the ring's bus bandwidth (github.com/NVIDIA/nccl/issues/1455)
IN_SWITCH_MIN_RANKS = 5
#: time of an in-switch all-reduce per byte of its message, in bytes of the ring's time at the
#: ring's link efficiency: on 8 x H100 (450 GB/s per direction) the ring reaches ~370 GB/s bus
#: bandwidth (0.82) and NVLS ~480 GB/s bus = ~275 GB/s algorithm bandwidth (0.61 of the link)
#: (NCCL maintainer, github.com/NVIDIA/nccl-tests/issues/212): M / (0.61 B) = 1.35 M / (0.82 B)
IN_SWITCH_BYTES_PER_MESSAGE_BYTE = 0.82 / 0.61


def in_switch_allreduce(n: ArrayLike, domain: ArrayLike, message_B: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """An all-reduce the scale-up switches reduce (eq. 3.17a): (ring-equivalent bytes per device,
    bytes each device moves per direction).

    The switch runs it for a group inside one domain of at least IN_SWITCH_MIN_RANKS devices:
    each device sends its M bytes (its shards to be reduced, then its reduced shard M/n) and
    receives M/n + M, (n+1)/n x M per direction, at the measured 0.61 of the link, which costs
    IN_SWITCH_BYTES_PER_MESSAGE_BYTE x M at the ring's efficiency. Any other group runs
    ``hierarchical_allreduce`` (its scale-up bytes are returned for both)."""
    n = _f(n)
    m = _f(message_B)
    ring = hierarchical_allreduce(n, domain, m).scale_up_B
    used = (n >= IN_SWITCH_MIN_RANKS) & (n <= domain)
    timed = np.where(used, IN_SWITCH_BYTES_PER_MESSAGE_BYTE * m, ring)
    moved = np.where(used, (n + 1.0) / n * m, ring)
    return timed, moved


def point_to_point(same_domain: ArrayLike, message_B: ArrayLike) -> Traffic:
    """One message to the next pipeline stage, over scale-up if both ends share a domain."""
    inside = np.asarray(same_domain, dtype=bool)
    m = _f(message_B) * np.ones_like(inside, dtype=float)
    one = np.ones_like(m)
    return Traffic(
        np.where(inside, m, 0.0), np.where(inside, one, 0.0), np.where(inside, 0.0, m), np.where(inside, 0.0, one)
    )


# --- topologies ------------------------------------------------------------------------------


def switched_system(
    devices: int,
    domain: int,
    *,
    adapter_pJ_per_bit: float,
    switch_pJ_per_bit: float,
    scale_out_switch_pJ_per_bit: float | None = None,
) -> nx.Graph:
    """Hierarchical system: ``devices`` in scale-up domains of ``domain``, one switch per domain,
    domain switches joined by a scale-out switch. Node attribute ``energy_pJ_per_bit``."""
    g = nx.Graph()
    n_domains = max(1, -(-devices // domain))
    spine = "spine"
    if n_domains > 1:
        g.add_node(spine, kind="switch", energy_pJ_per_bit=scale_out_switch_pJ_per_bit or switch_pJ_per_bit)
    for d in range(n_domains):
        sw = f"sw{d}"
        g.add_node(sw, kind="switch", energy_pJ_per_bit=switch_pJ_per_bit)
        if n_domains > 1:
            g.add_edge(sw, spine)
        for i in range(d * domain, min(devices, (d + 1) * domain)):
            g.add_node(f"dev{i}", kind="device", energy_pJ_per_bit=adapter_pJ_per_bit)
            g.add_edge(f"dev{i}", sw)
    return g


def ring_system(devices: int, *, adapter_pJ_per_bit: float, hop_pJ_per_bit: float) -> nx.Graph:
    """Devices on a bidirectional ring; each intermediate device forwards at ``hop`` pJ/bit."""
    g = nx.cycle_graph(devices)
    g = nx.relabel_nodes(g, {i: f"dev{i}" for i in range(devices)})
    nx.set_node_attributes(g, "device", "kind")
    nx.set_node_attributes(g, adapter_pJ_per_bit, "energy_pJ_per_bit")
    nx.set_node_attributes(g, hop_pJ_per_bit, "forward_pJ_per_bit")
    return g


def torus_2d(rows: int, cols: int, *, adapter_pJ_per_bit: float, hop_pJ_per_bit: float) -> nx.Graph:
    """A rows x cols 2D torus of devices."""
    g = nx.grid_2d_graph(rows, cols, periodic=True)
    g = nx.relabel_nodes(g, {(r, c): f"dev{r * cols + c}" for r in range(rows) for c in range(cols)})
    nx.set_node_attributes(g, "device", "kind")
    nx.set_node_attributes(g, adapter_pJ_per_bit, "energy_pJ_per_bit")
    nx.set_node_attributes(g, hop_pJ_per_bit, "forward_pJ_per_bit")
    return g


def appliance_system(
    devices: int, modules: int, *, adapter_pJ_per_bit: float, switch_pJ_per_bit: float
) -> nx.Graph:
    """Devices and memory modules of a pooled appliance joined by its all-to-all switch."""
    g = nx.Graph()
    g.add_node("pf-switch", kind="switch", energy_pJ_per_bit=switch_pJ_per_bit)
    for i in range(devices):
        g.add_node(f"dev{i}", kind="device", energy_pJ_per_bit=adapter_pJ_per_bit)
        g.add_edge(f"dev{i}", "pf-switch")
    for j in range(modules):
        g.add_node(f"mod{j}", kind="module", energy_pJ_per_bit=adapter_pJ_per_bit)
        g.add_edge(f"mod{j}", "pf-switch")
    return g


def path_energy_pJ_per_bit(g: nx.Graph, src: str, dst: str) -> float:
    """Energy per bit along the shortest path: endpoints' adapters + every switch (or forwarding
    device) in between."""
    path = nx.shortest_path(g, src, dst)
    total = g.nodes[path[0]]["energy_pJ_per_bit"] + g.nodes[path[-1]]["energy_pJ_per_bit"]
    for node in path[1:-1]:
        attrs = g.nodes[node]
        total += attrs.get("forward_pJ_per_bit", attrs["energy_pJ_per_bit"])
    return float(total)


def hops(g: nx.Graph, src: str, dst: str) -> int:
    """Number of links on the shortest path."""
    return nx.shortest_path_length(g, src, dst)


def domain_sizes(devices: int, size: int) -> list[int]:
    """``devices`` in scale-up domains of ``size``, the last domain holding the remainder."""
    return [min(size, devices - i) for i in range(0, devices, size)]


def placement_topology(domains: list[int], up_pJ_per_bit: float, out_pJ_per_bit: float) -> nx.Graph:
    """Devices in scale-up domains (one switch node per domain carrying the scale-up path energy)
    and a scale-out network (a NIC node per device, one spine carrying the NIC-to-NIC path energy).

    Same-domain shortest path: dev - upK - dev (2 links) = scale-up energy; cross-domain: dev - nic
    - spine - nic - dev = scale-out energy. Node attribute ``energy_pJ_per_bit`` as in
    :mod:`codesign.model.network`.
    """
    g = nx.Graph()
    g.add_node("spine", kind="switch", energy_pJ_per_bit=out_pJ_per_bit)
    d = 0
    for k, size in enumerate(domains):
        g.add_node(f"up{k}", kind="switch", energy_pJ_per_bit=up_pJ_per_bit)
        for _ in range(size):
            g.add_node(f"dev{d}", kind="device", energy_pJ_per_bit=0.0, domain=k)
            g.add_node(f"nic{d}", kind="nic", energy_pJ_per_bit=0.0)
            g.add_edge(f"dev{d}", f"up{k}")
            g.add_edge(f"dev{d}", f"nic{d}")
            g.add_edge(f"nic{d}", "spine")
            d += 1
    return g
