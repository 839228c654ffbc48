"""Memory: 3D-stacked DRAM capacity, bandwidth limits, TSV area, energy; pooled tiers (model.md §3.2).

The bandwidth a 3D stack delivers to the logic die is the minimum of four limits (eq. 3.7):
vertical (connections x rate), bank activation (layers x banks x bytes per activation / tRC x
active fraction), buffering (Little's law: in-flight bytes = bandwidth x latency <= buffer) and
the logic side (controllers/NoC). Everything broadcasts over numpy arrays.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from codesign.model.units import NANO, PICO, GiB

UM2_PER_MM2 = 1e6


def stack_capacity_B(layers: ArrayLike, footprint_mm2: ArrayLike, capacity_GiB_per_mm2: float) -> np.ndarray:
    """Capacity = layers x footprint x density   (eq. 3.5)."""
    return np.asarray(layers, dtype=float) * np.asarray(footprint_mm2, dtype=float) * capacity_GiB_per_mm2 * GiB


def vertical_bandwidth_Bps(connections: ArrayLike, rate_Gbps: float) -> np.ndarray:
    """Vertical limit = number of connections x rate per connection / 8   (eq. 3.6a)."""
    return np.asarray(connections, dtype=float) * rate_Gbps * 1e9 / 8.0


def bank_bandwidth_Bps(
    layers: ArrayLike,
    footprint_mm2: ArrayLike,
    banks_per_mm2: float,
    bytes_per_activation: float,
    tRC_ns: float,
    max_active_bank_fraction: float,
) -> np.ndarray:
    """Bank-activation limit = layers x banks x bytes/activation / tRC x active fraction   (eq. 3.6b)."""
    banks = np.asarray(layers, dtype=float) * np.asarray(footprint_mm2, dtype=float) * banks_per_mm2
    return banks * bytes_per_activation / (tRC_ns * NANO) * max_active_bank_fraction


def access_latency_s(layers: ArrayLike, base_latency_ns: float, per_layer_latency_ns: float) -> np.ndarray:
    """Round-trip DRAM latency seen by the logic die, growing with the stack   (eq. 3.6c)."""
    return (base_latency_ns + per_layer_latency_ns * np.asarray(layers, dtype=float)) * NANO


def littles_law_bandwidth_Bps(buffer_B: ArrayLike, latency_s: ArrayLike) -> np.ndarray:
    """Buffering limit: bandwidth x latency <= buffer, so bandwidth <= buffer / latency   (eq. 3.6c)."""
    return np.asarray(buffer_B, dtype=float) / np.asarray(latency_s, dtype=float)


def tsv_area_mm2(connections: ArrayLike, pitch_um: ArrayLike, keep_out_factor: float) -> np.ndarray:
    """Logic area taken by the vertical connections = count x pitch^2 x keep-out factor   (eq. 3.8)."""
    p = np.asarray(pitch_um, dtype=float)
    return np.asarray(connections, dtype=float) * p * p * keep_out_factor / UM2_PER_MM2


def stacked_energy_J_per_B(
    layers: ArrayLike,
    pitch_um: ArrayLike,
    array_pJ_per_bit: float,
    per_layer_pJ_per_bit: float,
    vertical_pJ_per_bit_ref: float,
    reference_pitch_um: float,
) -> np.ndarray:
    """Energy per byte moved = 8 x (array + vertical(pitch) + per-layer x layers/2) pJ   (eq. 3.9)."""
    vertical = vertical_pJ_per_bit_ref * np.asarray(pitch_um, dtype=float) / reference_pitch_um
    distance = per_layer_pJ_per_bit * np.asarray(layers, dtype=float) / 2.0
    return 8.0 * (array_pJ_per_bit + vertical + distance) * PICO


def hbm_stack_bandwidth_GBps(io_width_bits: float, pin_rate_Gbps: float) -> float:
    """Bandwidth per HBM stack = pins x Gb/s / 8 (HBM3: 1024 x 6.4 / 8 = 819.2 GB/s)."""
    return io_width_bits * pin_rate_Gbps / 8.0


def pooled_bandwidth_Bps(
    ports: ArrayLike, port_bandwidth_Bps: float, switching_capacity_Bps: float, devices: int
) -> np.ndarray:
    """What a device can draw from a pooled appliance: min(its ports, its share of the switch)   (eq. 3.10)."""
    own = np.asarray(ports, dtype=float) * port_bandwidth_Bps
    return np.minimum(own, switching_capacity_Bps / devices)
