"""Several pooled-memory appliances (model.md §3.2, eqs. 3.10d-3.10g): appliance count, data layout, uplinks.

A system of D devices may attach to N appliances (the hardware decision ``appliances``, N | D):
each appliance serves k = D/N devices, each over ``pool_ports`` of its ports. Where the pooled data
lives is the hardware decision ``pool_layout``:

* ``replicated``: every appliance holds its own copy of the pooled weights and the KV cache of its
  own devices. A device reads its TP shard of its stage's weights and its own KV cache, so no byte
  crosses to another appliance, whatever TP and PP are; the pool stores N copies of the weights.
* ``shared``: one copy of the pooled data striped evenly over the N appliances (the pool the paper
  tiers to 128-256 accelerators). A device finds 1/N of its bytes on its own appliance; the share
  r = (N-1)/N crosses to another one through the appliances' ``uplink_ports`` (ports taken from
  each appliance's own, to a tier-2 switch joining them).

The tier-2 switch is a scenario assumption (no public figure for an appliance-to-appliance link
exists in the sources the catalog cites): an appliance of the same catalog entry used as a switch,
so its ports, port bandwidth and switching capacity are the catalog's, and a remote byte's path is
adapter + switch + tier-2 switch + switch + adapter (the paper's E = E_src + ΣE_switch + E_dst with
three switches). With N = 1 both layouts are the single appliance of eq. 3.10.

Per device, with port bandwidth P, switching capacity S, p pool ports, L uplink ports (eq. 3.10d):

    b = min( p·P,  S / (k·(1 + r)),  L·P / (k·r),  S / (D·r) )      (the last two only when r > 0)

its ports; its appliance's switch, which carries its k devices' reads plus the share r of them
that other appliances' devices read from its modules (symmetric load); its appliance's uplinks,
which carry the remote share of its k devices' reads per direction; the tier-2 switch, which
carries every remote byte once. Ports: k·p + L' on every appliance and N·L' on the tier-2 switch,
L' = L in the shared layout with N > 1 and 0 otherwise, each at most the appliance's ports.
Energy per pooled bit: (1 - r)·E_local + r·E_remote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from codesign import catalog
from codesign.errors import InputError
from codesign.model import network
from codesign.model.units import PICO, TB, GBps

if TYPE_CHECKING:
    from pathlib import Path

    from codesign.kinds.grid.spec import Instance

#: values of the ``pool_layout`` decision
LAYOUTS = ("replicated", "shared")
#: decisions this module reads, with their value when an instance does not decide them
DEFAULTS: dict[str, Any] = {"appliances": 1, "pool_layout": "replicated", "uplink_ports": 1}


def remote_share(appliances: Any, shared: Any) -> np.ndarray:
    """Share of a device's pooled bytes on another appliance: (N - 1)/N shared, else 0."""
    n = np.asarray(appliances, dtype=float)
    return np.where(np.asarray(shared, dtype=bool), (n - 1.0) / n, 0.0)


def uplinks_used(appliances: Any, shared: Any, uplinks: Any) -> np.ndarray:
    """Uplink ports each appliance lights: L in the shared layout with N > 1, else none."""
    n = np.asarray(appliances, dtype=float)
    on = np.asarray(shared, dtype=bool) & (n > 1)
    return np.where(on, np.asarray(uplinks, dtype=float), 0.0)


def ports_used(devices: int, appliances: Any, ports: Any, shared: Any, uplinks: Any) -> np.ndarray:
    """The busier of an appliance (k·p + L') and the tier-2 switch (N·L'), in ports."""
    n = np.asarray(appliances, dtype=float)
    lit = uplinks_used(n, shared, uplinks)
    return np.maximum(devices / n * np.asarray(ports, dtype=float) + lit, n * lit)


def device_bandwidth_Bps(devices: int, appliances: Any, ports: Any, shared: Any, uplinks: Any,
                         port_Bps: float, switch_Bps: float) -> np.ndarray:
    """Pooled bandwidth per device (eq. 3.10d, module docstring)."""
    n = np.asarray(appliances, dtype=float)
    k = devices / n
    r = remote_share(n, shared)
    # its ports and its appliance's switch: eq. 3.10 with the k devices of one appliance when r = 0
    bw = np.minimum(np.asarray(ports, dtype=float) * port_Bps, switch_Bps / (k * (1.0 + r)))
    with np.errstate(divide="ignore"):
        up = np.where(r > 0, np.asarray(uplinks, dtype=float) * port_Bps / (k * r), np.inf)
        tier2 = np.where(r > 0, switch_Bps / (devices * r), np.inf)
    return np.minimum(bw, np.minimum(up, tier2))


def tiered_system(appliances: int, *, adapter_pJ_per_bit: float, switch_pJ_per_bit: float) -> nx.Graph:
    """N appliances (a device ``dev<a>`` and a module ``mod<a>`` on each switch ``sw<a>``) joined
    through a tier-2 switch: the graph whose paths give the per-bit energies."""
    g = nx.Graph()
    g.add_node("tier2", kind="switch", energy_pJ_per_bit=switch_pJ_per_bit)
    for a in range(appliances):
        g.add_node(f"sw{a}", kind="switch", energy_pJ_per_bit=switch_pJ_per_bit)
        g.add_edge(f"sw{a}", "tier2")
        for node, kind in ((f"dev{a}", "device"), (f"mod{a}", "module")):
            g.add_node(node, kind=kind, energy_pJ_per_bit=adapter_pJ_per_bit)
            g.add_edge(node, f"sw{a}")
    return g


def path_energies_pJ_per_bit(adapter: float, switch: float) -> tuple[float, float]:
    """(to a module of the device's own appliance, to a module of another appliance)."""
    g = tiered_system(2, adapter_pJ_per_bit=adapter, switch_pJ_per_bit=switch)
    return network.path_energy_pJ_per_bit(g, "dev0", "mod0"), network.path_energy_pJ_per_bit(g, "dev0", "mod1")


def decision(t: Any, name: str) -> np.ndarray:
    """A hardware table's values of one of this module's decisions (its default if undecided)."""
    if name in t.decisions:
        return np.asarray(t.decisions[name])
    return np.full(t.size, DEFAULTS[name], dtype=object if isinstance(DEFAULTS[name], str) else float)


def pool_features(inst: Instance, t: Any) -> None:
    """The pooled-memory columns of a hardware table ``t`` (a ``HardwareTable``): bandwidth per
    device (the ports and switches, or the instance's stated assumption), per-byte path energy,
    capacity, copies of the pooled weights, port use."""
    sysm = inst.system

    def put(name: str, value: Any, label: str) -> None:
        t.features[name] = np.broadcast_to(np.asarray(value, dtype=float), (t.size,)).copy()
        t.labels[name] = label

    if sysm.appliance is None:
        for name in ("s_per_B_pool", "J_per_B_pool", "pool_capacity_B", "pool_bandwidth_Bps", "pool_ports_used",
                     "pool_ports_available", "pool_copies", "pool_remote_share"):
            put(name, np.inf if name == "s_per_B_pool" else 0.0, "no pooled memory")
        return
    app = catalog.load_appliance(sysm.appliance)
    n = decision(t, "appliances").astype(float)
    ports = decision(t, "pool_ports").astype(float) if "pool_ports" in t.decisions else np.ones(t.size)
    shared = decision(t, "pool_layout") == "shared"
    uplinks = decision(t, "uplink_ports").astype(float)
    port_bw, switch_bw = app.port_bandwidth_GBps * GBps, app.switching_capacity_GBps * GBps
    if sysm.pooled_bandwidth_GBps_per_device is not None:  # the paper's assumption: ports and switches aside
        bw = np.full(t.size, sysm.pooled_bandwidth_GBps_per_device * GBps)
    else:
        bw = device_bandwidth_Bps(sysm.devices, n, ports, shared, uplinks, port_bw, switch_bw)
    e = getattr(app.energy_pJ_per_bit, sysm.appliance_medium)
    local, remote = path_energies_pJ_per_bit(e.adapter, e.switch)
    r = remote_share(n, shared)
    put("pool_bandwidth_Bps", bw, "pooled-memory bandwidth per device, B/s")
    put("s_per_B_pool", 1.0 / bw, "s per pooled byte")
    put("J_per_B_pool", ((1.0 - r) * local + r * remote) * 8 * PICO,
        "J per pooled byte (adapter + switch + adapter; a remote byte: + tier-2 switch + switch)")
    put("pool_remote_share", r, "share of a device's pooled bytes on another appliance")
    put("pool_capacity_B", n * app.pooled_capacity_TB * TB, "pooled capacity of all appliances, B")
    put("pool_copies", np.where(shared, 1.0, n), "copies of the pooled weights (one per appliance when replicated)")
    put("pool_ports_used", ports_used(sysm.devices, n, ports, shared, uplinks),
        "appliance ports used on the busiest appliance or tier-2 switch")
    put("pool_ports_available", app.modules * app.ports_per_module, "ports of one appliance")


def check_decisions(inst: Instance, path: Path | str | None) -> None:
    """The appliance decisions of a grid instance are well formed: a layout is one of
    :data:`LAYOUTS`, every appliance count divides the devices, and they need an appliance."""
    decided = {k: v for k, v in inst.hardware.decisions.items() if k in DEFAULTS}
    if decided and inst.system.appliance is None:
        key = next(iter(decided))
        raise InputError("an appliance decision needs `system.appliance`", file=path, key=f"hardware.decisions.{key}",
                         value=decided[key], suggestion="add system.appliance, or remove the decision")
    for x in decided.get("pool_layout", []):
        if x not in LAYOUTS:
            raise InputError("not a pooled-data layout", file=path, key="hardware.decisions.pool_layout", value=x,
                             expected=" | ".join(LAYOUTS))
    for x in decided.get("appliances", []):
        if inst.system.devices % x:
            raise InputError(f"{x} appliances do not split the {inst.system.devices} devices evenly", file=path,
                             key="hardware.decisions.appliances", value=x,
                             expected=f"a divisor of {inst.system.devices} (every appliance serves as many devices)")
