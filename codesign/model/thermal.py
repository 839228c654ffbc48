"""Thermal: junction temperature of a 3D stack (model.md §3.3).

DeepStack (arXiv 2604.04750) models the stack as a lumped thermal resistance that grows with the
number of DRAM layers: R_th = r0 + r_layer x layers [C/W]; T_j = T_ambient + P x R_th.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def thermal_resistance_C_per_W(layers: ArrayLike, r0_C_per_W: float, r_per_layer_C_per_W: float) -> np.ndarray:
    """R_th(layers) = r0 + r_layer x layers   (eq. 3.11)."""
    return r0_C_per_W + r_per_layer_C_per_W * np.asarray(layers, dtype=float)


def junction_temperature_C(power_W: ArrayLike, r_th_C_per_W: ArrayLike, ambient_C: float) -> np.ndarray:
    """T_j = T_ambient + P x R_th   (eq. 3.12)."""
    return ambient_C + np.asarray(power_W, dtype=float) * np.asarray(r_th_C_per_W, dtype=float)


def max_power_W(r_th_C_per_W: ArrayLike, ambient_C: float, junction_max_C: float) -> np.ndarray:
    """Power cap from the junction limit: P_max = (T_max - T_ambient) / R_th (DeepStack)."""
    return (junction_max_C - ambient_C) / np.asarray(r_th_C_per_W, dtype=float)
