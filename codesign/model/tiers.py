"""The memory tiers a mapping may place weights and KV cache in (formulations/mapping.md §1): each
device's local memory and host memory, and every tier of every module of a pooled-memory
appliance, with the appliance's port and switch limits and the energy of its path."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from codesign import catalog
from codesign.model import network
from codesign.model.units import PICO, TB, GBps

BITS_PER_BYTE = 8


@dataclass(frozen=True)
class Tier:
    """A place for weights or KV cache: kind local/host (of the device that uses it) or pool."""

    label: str
    kind: str  # local | host | pool
    module: int = -1
    sub: str = ""
    capacity_B: float = math.inf  # pool tiers: per module tier; local/host: per device (see Device)
    J_per_B: float = 0.0  # pool tiers: path + memory access


@dataclass
class MemoryTiers:
    """The tiers of a mapping instance and its appliance's figures (zeros and None without one)."""

    tiers: list[Tier]
    modules: int = 0
    port_Bps: float = 0.0  # one module's ports together
    switch_Bps: float = 0.0
    path_J_per_B: float = 0.0  # adapter + switch + adapter
    assumed_device_Bps: float | None = None  # the paper's assumed bandwidth per device, if stated
    max_devices_per_module: int | None = None
    module_ports: int = 0  # optical ports of the modules used
    module_tiers: list[str] = field(default_factory=list)


def memory_tiers(appliance: Any) -> MemoryTiers:
    """Local and host tiers, and a pool tier per module and appliance tier of the instance's
    ``[appliance]`` table (None: no appliance)."""
    out = MemoryTiers([Tier("local", "local"), Tier("host", "host")])
    if appliance is None:
        return out
    app = catalog.load_appliance(appliance.id)
    out.modules = appliance.modules or app.modules
    out.port_Bps = app.port_bandwidth_GBps * app.ports_per_module * GBps
    out.switch_Bps = app.switching_capacity_GBps * GBps
    out.module_ports = out.modules * app.ports_per_module
    e = getattr(app.energy_pJ_per_bit, appliance.medium)
    g = network.appliance_system(1, 1, adapter_pJ_per_bit=e.adapter, switch_pJ_per_bit=e.switch)
    out.path_J_per_B = network.path_energy_pJ_per_bit(g, "dev0", "mod0") * BITS_PER_BYTE * PICO
    if appliance.assumed_device_bandwidth_GBps is not None:
        out.assumed_device_Bps = appliance.assumed_device_bandwidth_GBps * GBps
    out.max_devices_per_module = appliance.max_devices_per_module
    out.module_tiers = [t.name for t in app.tiers]
    for j in range(out.modules):
        for t in app.tiers:
            tech = catalog.load_memory(t.memory_technology)
            out.tiers.append(Tier(f"pool:{j}:{t.name}", "pool", module=j, sub=t.name,
                                  capacity_B=t.capacity_TB * TB / app.modules,
                                  J_per_B=out.path_J_per_B + tech.energy_pJ_per_bit * BITS_PER_BYTE * PICO))
    return out
