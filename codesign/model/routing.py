"""Expert routing of a mixture-of-experts layer: the probability that a token's top-k contains
each expert, from a routing profile, and the classes of interchangeable experts (placement.md
eq. P1, P2, §4)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

#: probabilities equal to this many significant digits form one expert class
CLASS_DIGITS = 12


def routing_probabilities(weights: np.ndarray, top_k: int) -> np.ndarray:
    """Per-expert probability of being among a token's top-k experts, from relative weights.

    p_e = k·w_e / Σw, capped at 1 (a token picks k *distinct* experts) by water-filling: capped
    experts get 1 and the remaining mass k − #capped is spread over the others in proportion to
    their weights. Σ p_e = k exactly (up to round-off); requires k <= number of experts.
    """
    w = np.asarray(weights, dtype=float)
    if np.any(w <= 0) or not np.all(np.isfinite(w)):
        raise ValueError("routing weights must be positive and finite")
    if top_k > len(w):
        raise ValueError("top_k exceeds the number of experts")
    capped = np.zeros(len(w), dtype=bool)
    while True:
        free = ~capped
        p = np.ones(len(w))
        p[free] = (top_k - capped.sum()) * w[free] / w[free].sum()
        over = free & (p > 1.0)
        if not over.any():
            return p
        capped |= over


def zipf_weights(experts: int, exponent: float, levels: int | None = None) -> np.ndarray:
    """Zipf weights r^(−s) for the experts in rank order (expert 0 the most popular).

    With ``levels``, the ranks are cut into ``levels`` contiguous bins with log-spaced edges
    round(E^(i/levels)) (for E = 256 and 4 levels: ranks 1-4, 5-16, 17-64, 65-256), and every
    expert gets the mean weight of its bin: a log-binned histogram of the Zipf profile with that
    many distinct frequencies (classes of interchangeable experts, placement.md §4). Empty bins
    (small E) are merged into the next one.
    """
    r = np.arange(1, experts + 1, dtype=float)
    w = r ** (-float(exponent))
    if levels is None or levels >= experts:
        return w
    edges = sorted({0, experts, *(round(experts ** (i / levels)) for i in range(1, levels))})
    out = np.empty(experts)
    for lo, hi in pairwise(edges):
        out[lo:hi] = w[lo:hi].mean()
    return out


@dataclass(frozen=True)
class ExpertClass:
    """Experts with the same routing probability (interchangeable)."""

    p: float
    q: float
    members: tuple[int, ...]


def expert_routing(profile: str, experts: int, top_k: int, batch: int, *, exponent: float = 1.0,
                   levels: int | None = None, weights=None) -> tuple[np.ndarray, np.ndarray, list[ExpertClass]]:
    """(p, q, classes) of a routing profile ("uniform", "zipf" with ``exponent`` and ``levels``, or
    "weights" given per expert): p_e the probability that a token's top-k contains expert e (P1),
    q_e = 1 - (1 - p_e)^B that a step of ``batch`` tokens touches it (P2), and the experts grouped
    by equal p (to CLASS_DIGITS significant digits; members made exactly equal, their mean)."""
    if profile == "uniform":
        w = np.ones(experts)
    elif profile == "zipf":
        w = zipf_weights(experts, exponent, levels)
    else:
        w = np.asarray(weights, dtype=float)
    p = routing_probabilities(w, top_k)
    q = 1.0 - np.power(1.0 - p, batch)
    keys = np.round(p, CLASS_DIGITS - 1 - math.floor(math.log10(max(p.max(), 1e-300))))
    classes: list[ExpertClass] = []
    for v in sorted(set(keys.tolist()), reverse=True):
        members = tuple(int(e) for e in np.flatnonzero(keys == v))
        # members share p exactly only if their weights were equal; use the members' mean
        classes.append(ExpertClass(float(p[list(members)].mean()), float(q[list(members)].mean()), members))
    for cl in classes:  # make class members exactly equal (they differ at most by round-off)
        p[list(cl.members)] = cl.p
        q[list(cl.members)] = cl.q
    return p, q, classes
