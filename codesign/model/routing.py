"""Expert routing of a mixture-of-experts layer: the probability that a token's top-k contains
each expert, from a routing profile, and the classes of interchangeable experts (placement.md
eq. P1, P2, §4); and the routing of a grid workload (``workloads[].routing``, model.md eqs. 2.14b,
4.6b): the experts a step touches and the load of the busiest expert-parallel rank."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

import numpy as np
from pydantic import Field, PositiveInt, model_validator

from codesign.errors import InputError
from codesign.model.workload import as_result, expected_experts_touched
from codesign.schema import Strict

#: a Zipf exponent above this puts every token on one expert (256^-50 ~ 1e-120) and underflows
MAX_ZIPF_EXPONENT = 50.0
#: the most one explicit routing weight may be (relative weights: their sum stays finite)
MAX_ROUTING_WEIGHT = 1e12

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


# --- routing of a grid workload (model.md eqs. 2.14b, 4.6b) ----------------------------------------
class RoutingSpec(Strict):
    """How a workload's tokens pick their experts (``workloads[].routing`` of a grid instance).

    ``uniform`` (the default, and what a workload without ``routing`` gets) is eq. 2.14 exactly;
    ``zipf`` gives the expert of popularity rank r the weight r^(-exponent) (optionally histogrammed
    into ``levels`` frequency levels, :func:`zipf_weights`), the same in every MoE layer.
    ``weights`` states every expert's relative weight, most popular first (e.g. measured expert
    frequencies). ``placement`` says which experts share an expert-parallel rank, in popularity order:
    ``round-robin`` (rank j holds experts j, j + EP, j + 2 EP, ...) or ``contiguous`` (rank j
    holds the j-th block of E/EP, so rank 0 the E/EP most popular)."""

    profile: Literal["uniform", "zipf", "weights"] = "uniform"
    exponent: float = Field(default=1.0, ge=0, le=MAX_ZIPF_EXPONENT)
    levels: PositiveInt | None = None
    #: relative routing weight of every expert, most popular first (profile "weights" only)
    weights: list[float] | None = None
    placement: Literal["round-robin", "contiguous"] = "round-robin"

    @model_validator(mode="after")
    def _weights_iff_profile(self) -> RoutingSpec:
        if (self.profile == "weights") != (self.weights is not None):
            raise ValueError("routing.weights is given exactly when routing.profile = 'weights'")
        w = self.weights or []
        if any(not 0 < x <= MAX_ROUTING_WEIGHT for x in w) or list(w) != sorted(w, reverse=True):
            raise ValueError(f"routing.weights must be in (0, {MAX_ROUTING_WEIGHT:g}] and non-increasing "
                             "(most popular expert first)")
        return self


def _skewed(routing: RoutingSpec | None) -> bool:
    return routing is not None and routing.profile != "uniform"


def token_probabilities(routing: RoutingSpec, experts: int, top_k: int) -> np.ndarray:
    """p_e: the probability that one token's top-k holds expert e, in popularity order
    (non-increasing), Σ p_e = k (:func:`routing_probabilities`, eq. 2.14b)."""
    if routing.profile == "weights":
        if len(routing.weights or ()) != experts:
            raise InputError("routing weights do not match the experts", key="workloads[].routing.weights",
                             value=len(routing.weights or ()), expected=f"one weight per routed expert ({experts})")
        w = np.asarray(routing.weights, dtype=float)
    elif routing.profile == "zipf":
        w = zipf_weights(experts, routing.exponent, routing.levels)
    else:
        w = np.ones(experts)
    return routing_probabilities(w, top_k)


def experts_touched(routing: RoutingSpec | None, experts: int, top_k: int, tokens):
    """Expected distinct experts ``tokens`` tokens touch in one MoE layer (eq. 2.14b):
    Σ_e 1 − (1 − p_e)^T, held to k·T like eq. 2.14 (a device's fractional share of a token).
    Uniform routing (or none given) is eq. 2.14 itself, bit for bit."""
    if not _skewed(routing):
        return expected_experts_touched(experts, top_k, tokens)
    p = token_probabilities(routing, experts, top_k)
    t = np.asarray(tokens, dtype=float)
    missed = np.power.outer(1.0 - p, t)  # (experts, *shape of t)
    return as_result(np.minimum(experts - missed.sum(axis=0), top_k * t))


def busiest_rank(routing: RoutingSpec, experts: int, ep: int) -> np.ndarray:
    """Indices (popularity order) of the experts on expert-parallel rank 0. With p non-increasing,
    both placements give rank 0 the most popular expert of every round (round-robin) or the most
    popular block (contiguous), so its i-th expert is at least as popular as any other rank's i-th:
    rank 0 is the busiest in tokens, FLOPs and expert bytes at once (eq. 4.6b)."""
    if routing.placement == "contiguous":
        return np.arange(experts // ep)
    return np.arange(0, experts, ep)


def busiest_rank_factors(routing: RoutingSpec | None, experts: int, top_k: int, tokens, ep):
    """(λ_tok, λ_B): the busiest EP rank's routed tokens and touched-expert bytes over the mean
    rank's (eq. 4.6b), per schedule row (``tokens`` T and ``ep`` broadcast):

        λ_tok = EP · Σ_{e ∈ R_0} p_e / k,        λ_B = EP · Σ_{e ∈ R_0} q_e / Σ_e q_e,
        q_e = 1 − (1 − p_e)^T.

    1 exactly under uniform routing (or none given) and at EP = 1."""
    t = np.asarray(tokens, dtype=float)
    e = np.asarray(ep, dtype=float)
    shape = np.broadcast_shapes(t.shape, e.shape)
    lam_tok, lam_b = np.ones(shape), np.ones(shape)
    if not _skewed(routing):
        return lam_tok, lam_b
    if top_k == 0:
        raise InputError("a routing profile needs a mixture-of-experts workload", key="workloads[].routing",
                         value=routing.profile, expected="no routing (or uniform) on a dense workload")
    p = token_probabilities(routing, experts, top_k)
    t, e = np.broadcast_to(t, shape), np.broadcast_to(e, shape)
    for g in np.unique(e):
        if g == 1:
            continue
        at = e == g
        rank0 = busiest_rank(routing, experts, int(g))
        q = 1.0 - np.power.outer(1.0 - p, t[at])  # (experts, rows)
        lam_tok[at] = g * p[rank0].sum() / top_k
        total = q.sum(axis=0)
        lam_b[at] = np.where(total > 0, g * q[rank0].sum(axis=0) / np.where(total > 0, total, 1.0), 1.0)
    return lam_tok, lam_b
