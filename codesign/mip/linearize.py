"""Exact linearizations on finite domains, as small pure functions (formulations/codesign.md §2).

Each function adds auxiliaries and rows to a :class:`~codesign.mip.program.MIP` and returns a
linear expression ``(idx, val)``; none reads an instance. Every product is between a quantity
selected by one one-hot (the schedule of a workload) and a quantity selected by another (the
hardware design), so it is represented exactly by disaggregating one factor over the distinct
values of the other (a convex-hull formulation, no big-M):

    u = (Σ_s a_s y_s) · (Σ_h h_h x_h),   Σ y = Σ x = 1
      = Σ_v v · A_v,   Σ_v A_v = Σ_s a_s y_s,   0 <= A_v <= a_max · Σ_{h: h_h = v} x_h

With x one-hot, exactly one group v has Σ x = 1, forcing A_v = Σ a y and every other A_v = 0.
"""

from __future__ import annotations

import math

import numpy as np

from codesign.mip.program import MIP

Expr = tuple[np.ndarray, np.ndarray]

#: relative tolerance for "the same value" when grouping values of a factor
SAME_VALUE_RTOL = 1e-12


def empty() -> Expr:
    return np.zeros(0, dtype=np.int64), np.zeros(0)


def add(*exprs: Expr) -> Expr:
    idx = np.concatenate([e[0] for e in exprs]) if exprs else np.zeros(0, dtype=np.int64)
    val = np.concatenate([e[1] for e in exprs]) if exprs else np.zeros(0)
    return idx, val


def scale(e: Expr, k: float) -> Expr:
    return e[0], e[1] * k


def onehot(mip: MIP, name: str, labels: list[str]) -> np.ndarray:
    """Binaries z_i, Σ z_i = 1 (row ``<name>-onehot``): choose exactly one value."""
    idx = np.array([mip.add_binary(f"{name}[{lab}]") for lab in labels], dtype=np.int64)
    mip.add_row(f"{name}-onehot", idx, np.ones(len(idx)), 1.0, 1.0)
    return idx


def groups(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values (up to SAME_VALUE_RTOL) and, per input, the index of its group."""
    order = np.argsort(values, kind="stable")
    v = values[order]
    new = np.ones(len(v), dtype=bool)
    finite = np.isfinite(v)
    both_finite = finite[1:] & finite[:-1]
    with np.errstate(invalid="ignore"):
        close = np.abs(np.diff(v)) <= SAME_VALUE_RTOL * np.maximum(np.abs(v[1:]), np.abs(v[:-1]))
    same = (both_finite & close) | (~finite[1:] & ~finite[:-1] & (v[1:] == v[:-1]))
    new[1:] = ~same
    gid_sorted = np.cumsum(new) - 1
    gid = np.empty(len(values), dtype=np.int64)
    gid[order] = gid_sorted
    reps = v[new]
    return reps, gid


def product(
    mip: MIP,
    name: str,
    a: np.ndarray,
    y: np.ndarray,
    h: np.ndarray,
    x: np.ndarray,
    unit: float,
) -> Expr:
    """Linear expression equal to (Σ a·y)(Σ h·x) / unit for one-hot y and x (exact).

    ``a`` >= 0 finite (schedule side), ``h`` >= 0 possibly +inf (hardware side; an infinite value
    means the pair is impossible unless a = 0, and 0·inf counts as 0).
    """
    a = np.asarray(a, dtype=float)
    h = np.asarray(h, dtype=float)
    if np.any(a < 0) or np.any(h < 0):
        raise ValueError(f"{name}: products are built for non-negative factors")
    amax = float(a.max()) if len(a) else 0.0
    if amax == 0.0:
        return empty()
    finite_h = np.isfinite(h)
    if np.all(h[finite_h] == h[finite_h][0]) and finite_h.all():
        return y, a * (h[0] / unit)  # hardware factor is a constant
    if np.all(a == a[0]) and finite_h.all():
        return x, h * (a[0] / unit)  # schedule factor is a constant
    reps_h, gid_h = groups(h)
    reps_a, gid_a = groups(a)
    if np.isfinite(reps_h).all() and len(reps_a) < len(reps_h):
        return _disaggregate(mip, f"{name}~s", reps_a, gid_a, y, h, x, unit)
    return _disaggregate(mip, f"{name}~h", reps_h, gid_h, x, a, y, unit)


def _disaggregate(
    mip: MIP, name: str, reps: np.ndarray, gid: np.ndarray, sel: np.ndarray, other: np.ndarray, other_sel: np.ndarray, unit: float
) -> Expr:
    """u = Σ_v v·B_v with Σ_v B_v = Σ other·other_sel / omax and B_v <= Σ_{i in group v} sel_i."""
    omax = float(other.max())
    parts_idx, parts_val = [], []
    b_idx = []
    for g, v in enumerate(reps):
        members = sel[gid == g]
        if not np.isfinite(v):
            # the selected group forbids any positive other factor: Σ other/omax·y <= 1 − Σ members
            mip.add_row(
                f"{name}[inf]-forbid",
                np.concatenate([other_sel, members]),
                np.concatenate([other / omax, np.ones(len(members))]),
                ub=1.0,
            )
            continue
        b = mip.add_var(f"{name}[{g}]", 0.0, 1.0)
        b_idx.append(b)
        mip.add_row(f"{name}[{g}]-link", np.concatenate([[b], members]), np.concatenate([[1.0], -np.ones(len(members))]), ub=0.0)
        parts_idx.append(b)
        parts_val.append(v * omax / unit)
    mip.add_row(
        f"{name}-sum",
        np.concatenate([np.array(b_idx, dtype=np.int64), other_sel]),
        np.concatenate([np.ones(len(b_idx)), -other / omax]),
        0.0,
        0.0,
    )
    return np.array(parts_idx, dtype=np.int64), np.array(parts_val, dtype=float)


def epigraph_max(mip: MIP, name: str, exprs: list[Expr], ub: float, step: float | None = None) -> Expr:
    """t >= each expression (rows ``<name>-ge[j]``); exact for a max that is minimised or bounded
    above, which is how every max of the model enters (time and energy are never bounded below).

    With ``step`` (integer grids) t is an integer number of steps and rows are divided by it."""
    if step is None:
        t = mip.add_var(name, 0.0, ub)
        scale_t = 1.0
    else:
        t = mip.add_var(name, 0.0, float(math.ceil(ub / step)), integer=True)
        scale_t = step
    for j, (idx, val) in enumerate(exprs):
        mip.add_row(f"{name}-ge[{j}]", np.concatenate([idx, [t]]), np.concatenate([val / scale_t, [-1.0]]), ub=0.0)
    return np.array([t], dtype=np.int64), np.array([scale_t])


def exact_max(mip: MIP, name: str, exprs: list[Expr], bounds: list[tuple[float, float]]) -> Expr:
    """t = max_k e_k exactly (needed where a max is bounded from below, e.g. a budget with a
    negative coefficient on TPOT): t >= e_k, and a one-hot δ picks the active branch with
    δ_k => t <= e_k. Indicator rows: native in CP-SAT, big-M from bounds in HiGHS."""
    lo = max(b[0] for b in bounds)
    hi = max(b[1] for b in bounds)
    t = mip.add_var(name, lo, hi)
    delta = onehot(mip, f"{name}:branch", [str(k) for k in range(len(exprs))])
    for k, (idx, val) in enumerate(exprs):
        mip.add_row(f"{name}-ge[{k}]", np.concatenate([idx, [t]]), np.concatenate([val, [-1.0]]), ub=0.0)
        mip.add_indicator(f"{name}-le[{k}]", int(delta[k]), np.concatenate([[t], idx]), np.concatenate([[1.0], -val]), ub=0.0)
    return np.array([t], dtype=np.int64), np.array([1.0])


def product_indicator(
    mip: MIP,
    name: str,
    a: np.ndarray,
    y: np.ndarray,
    h: np.ndarray,
    x: np.ndarray,
    unit: float,
    resolution: float,
    two_sided: bool = False,
) -> Expr:
    """Integer-grid encoding of (Σ a·y)(Σ h·x)/unit for integer solvers (CP-SAT).

    One integer U (the product in steps of ``resolution``) and, per distinct value v of the factor
    with fewer values, an enforced row  [group v chosen]  =>  U >= Σ floor(v·a_s/(unit·res))·y_s.
    With one-hot y exactly one term of the row is active, so U·res under-estimates the product by
    less than one step: the integer model is a relaxation whose every product is within
    ``resolution`` of the exact one (the solve loop re-evaluates designs with the model, so
    exactness is restored there). Coefficients are integers, so the backend lowers the rows
    without further rounding.
    """
    a = np.asarray(a, dtype=float)
    h = np.asarray(h, dtype=float)
    if np.any(a < 0) or np.any(h < 0):
        raise ValueError(f"{name}: products are built for non-negative factors")
    if len(a) == 0 or float(a.max()) == 0.0:
        return empty()
    reps_h, gid_h = groups(h)
    reps_a, gid_a = groups(a)
    if np.isfinite(reps_h).all() and len(reps_a) < len(reps_h):
        reps, gid, sel, other, other_sel = reps_a, gid_a, y, h, x
    else:
        reps, gid, sel, other, other_sel = reps_h, gid_h, x, a, y
    finite_other = np.isfinite(other)
    top = max(float(v) * float(other[finite_other].max()) for v in reps if np.isfinite(v)) if finite_other.any() else 0.0
    steps_max = math.ceil(top / (unit * resolution)) + 1
    u = mip.add_var(f"{name}~U", 0.0, float(steps_max), integer=True)
    for g, v in enumerate(reps):
        members = sel[gid == g]
        if len(members) == 1:
            lit = int(members[0])
        else:
            lit = mip.add_binary(f"{name}~lit[{g}]")
            mip.add_row(f"{name}~lit[{g}]-def", np.concatenate([[lit], members]), np.concatenate([[1.0], -np.ones(len(members))]), 0.0, 0.0)
        if not np.isfinite(v):
            # the chosen group forbids a positive other factor
            pos = other_sel[other > 0]
            mip.add_row(f"{name}[inf]-forbid", np.concatenate([[lit], pos]), np.ones(1 + len(pos)), ub=1.0)
            continue
        with np.errstate(invalid="ignore"):
            coef = np.where(other == 0, 0.0, np.floor(v * other / (unit * resolution)))
        if not np.all(np.isfinite(coef)):
            # an infinite factor on the other side: that pair is impossible
            bad = other_sel[~np.isfinite(coef)]
            mip.add_row(f"{name}[{g}]-forbid", np.concatenate([[lit], bad]), np.ones(1 + len(bad)), ub=1.0)
            coef = np.where(np.isfinite(coef), coef, 0.0)
        nz = coef > 0
        if nz.any():
            mip.add_indicator(
                f"{name}[{g}]", lit, np.concatenate([[u], other_sel[nz]]), np.concatenate([[1.0], -coef[nz]]), lb=0.0
            )
        if two_sided:
            # also U <= ceil(product / step): needed where the product enters with a negative sign
            with np.errstate(invalid="ignore"):
                up = np.where(other == 0, 0.0, np.ceil(v * other / (unit * resolution)))
            up = np.where(np.isfinite(up), up, 0.0)
            mip.add_indicator(
                f"{name}[{g}]-ub", lit, np.concatenate([[u], other_sel]), np.concatenate([[1.0], -up]), ub=0.0
            )
    return np.array([u], dtype=np.int64), np.array([resolution])


#: an integer variable's value counts as v when it is within this of v (solvers return v ± 1e-6)
INTEGRALITY_TOL = 0.5


def nogood(mip: MIP, name: str, idx: np.ndarray, values: np.ndarray, *, onehot: bool = False) -> None:
    """Exclude one assignment ``values`` of the integer variables ``idx`` (row ``<name>``).

    For one-hot groups (``onehot``) it is enough that not all chosen binaries are chosen again:
    Σ_{z chosen} z <= |chosen| - 1. Otherwise, with B the binaries and G the general integers:

        Σ_{b in B, on} (1 - b) + Σ_{b in B, off} b + Σ_{g in G} (δ⁻_g + δ⁺_g) >= 1,
        δ⁻_g = 1  =>  g <= v_g - 1,      δ⁺_g = 1  =>  g >= v_g + 1,

    where v is the excluded assignment; δ⁻ (δ⁺) exists only when v_g is above its lower (below
    its upper) bound. Any other assignment differs somewhere and satisfies the row; v does not.
    """
    idx = np.asarray(idx, dtype=np.int64)
    v = np.rint(np.asarray(values, dtype=float))
    binary = np.array([mip.vars[i].lb >= 0 and mip.vars[i].ub <= 1 for i in idx], dtype=bool)
    if onehot:
        if not binary.all():
            raise ValueError(f"{name}: a one-hot no-good over non-binary variables")
        chosen = idx[v > INTEGRALITY_TOL]
        mip.add_row(name, chosen, np.ones(len(chosen)), ub=len(chosen) - 1)
        return
    on = binary & (v > INTEGRALITY_TOL)
    off = binary & ~on
    terms_idx = [idx[on], idx[off]]
    terms_val = [-np.ones(int(on.sum())), np.ones(int(off.sum()))]
    for k in np.flatnonzero(~binary):
        var, value = int(idx[k]), float(v[k])
        lo, hi = mip.vars[var].lb, mip.vars[var].ub
        if value - 1 >= lo:
            below = mip.add_binary(f"{name}:below[{mip.vars[var].name}]")
            mip.add_indicator(f"{name}:below[{mip.vars[var].name}]", below, [var], [1.0], ub=value - 1)
            terms_idx.append(np.array([below]))
            terms_val.append(np.ones(1))
        if value + 1 <= hi:
            above = mip.add_binary(f"{name}:above[{mip.vars[var].name}]")
            mip.add_indicator(f"{name}:above[{mip.vars[var].name}]", above, [var], [1.0], lb=value + 1)
            terms_idx.append(np.array([above]))
            terms_val.append(np.ones(1))
    mip.add_row(name, np.concatenate(terms_idx), np.concatenate(terms_val), lb=1.0 - int(on.sum()))
