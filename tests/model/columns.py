"""A table of named columns for testing forms by hand (shared by the model's tests)."""

from __future__ import annotations

import numpy as np


class Cols:
    """A table of named columns (``a*b`` multiplies two), as the forms read them."""

    def __init__(self, cols: dict[str, list[float]]):
        self.features = {k: np.asarray(v, dtype=float) for k, v in cols.items()}
        self.size = len(next(iter(self.features.values())))

    def column(self, name: str) -> np.ndarray:
        out = np.ones(self.size)
        for part in name.split("*"):
            out = out * self.features[part]
        return out
