"""Compute die: peak throughput, voltage-frequency, dynamic and static power (formulations/model.md §3.1).

All functions broadcast over numpy arrays so a whole hardware space is evaluated at once.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from codesign.model.units import PICO, TERA


def peak_flops(
    compute_area_mm2: ArrayLike,
    clock_GHz: ArrayLike,
    dense_TFLOPS_per_mm2: float,
    reference_clock_GHz: float,
) -> np.ndarray:
    """Peak dense FLOP/s = area x density x (clock / reference clock)   (eq. 3.1)."""
    area = np.asarray(compute_area_mm2, dtype=float)
    clock = np.asarray(clock_GHz, dtype=float)
    return area * dense_TFLOPS_per_mm2 * TERA * clock / reference_clock_GHz


def voltage_V(clock_GHz: ArrayLike, curve_GHz: list[float], curve_V: list[float]) -> np.ndarray:
    """Supply voltage at a clock level, linear interpolation on the V-f curve (eq. 3.2)."""
    return np.interp(np.asarray(clock_GHz, dtype=float), curve_GHz, curve_V)


def energy_per_flop_J(
    energy_pJ_per_FLOP_ref: float, voltage: ArrayLike, reference_voltage: float
) -> np.ndarray:
    """Dynamic energy per FLOP scales with V^2 (CV^2 switching energy)   (eq. 3.3)."""
    v = np.asarray(voltage, dtype=float)
    return energy_pJ_per_FLOP_ref * PICO * (v / reference_voltage) ** 2


def static_power_W(
    logic_area_mm2: ArrayLike, static_W_per_mm2: float, voltage: ArrayLike, reference_voltage: float
) -> np.ndarray:
    """Leakage power, proportional to area and (to first order) to supply voltage   (eq. 3.4)."""
    area = np.asarray(logic_area_mm2, dtype=float)
    return area * static_W_per_mm2 * np.asarray(voltage, dtype=float) / reference_voltage
