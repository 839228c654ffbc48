"""Custom budgets: ``'2*power_W + dram_layers*15 <= 1600'`` parsed safely into exact constraints.

A budget is a linear expression over named metrics compared with a number. It is parsed with
Python's ``ast`` (never evaluated): only numbers, metric names (dotted for a workload,
``llama8b.tpot_s``), ``+ - * /`` with a number on one side of every ``*`` and on the right of
every ``/``, and one ``<=`` or ``>=``. Each metric is either a hardware column (a function of
the hardware design alone) or a per-workload form of the model (:mod:`codesign.model.evaluate`),
so a budget compiles to an exact row: Σ c_i·metric_i <= rhs.

``tokens_per_s`` is the reciprocal of ``time_per_token_s``; it may appear alone
(``tokens_per_s >= X`` is ``time_per_token_s <= 1/X``), never in a sum.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from codesign.errors import InputError, did_you_mean
from codesign.model.hardware import hardware_table

if TYPE_CHECKING:
    from codesign.kinds.grid.spec import Instance

#: metrics of the hardware design: name -> (hardware column, unit, description)
HARDWARE_METRICS: dict[str, tuple[str, str, str]] = {
    "power_W": ("power_W", "W", "design power of one device (all parts at full load)"),
    "system_power_W": ("power_W", "W", "design power of all devices (devices x power_W)"),
    "temperature_C": ("temperature_C", "C", "junction temperature at design power (3D family)"),
    "area_mm2": ("area_mm2", "mm2", "logic-die footprint of one device"),
    "capacity_B": ("capacity_B", "B", "usable local memory of one device"),
    "bandwidth_Bps": ("bandwidth_Bps", "B/s", "local memory bandwidth of one device"),
    "static_W": ("static_W", "W", "power drawn whenever a device is on"),
    "pool_bandwidth_Bps": ("pool_bandwidth_Bps", "B/s", "pooled-memory bandwidth per device"),
}
#: hardware decisions usable by value in a budget (3D family)
DECISION_METRICS = ("dram_layers", "tsv_count", "tsv_pitch_um", "compute_area_mm2", "clock_GHz", "sram_MiB", "pool_ports",
                    "appliances", "uplink_ports")
#: per-workload metrics (forms): name -> (unit, description)
WORKLOAD_METRICS: dict[str, tuple[str, str]] = {
    "tpot_s": ("s", "time per output token of one sequence (decode)"),
    "ttft_s": ("s", "time to first token (prefill of the batch)"),
    "time_per_token_s": ("s", "system time per generated token (1 / tokens_per_s)"),
    "energy_per_token_J": ("J", "energy per token, all devices"),
    "memory_used_B": ("B", "local memory used per device (weights + KV)"),
    "memory_pool_B": ("B", "pooled memory used by the system"),
    "tokens_per_s": ("1/s", "system tokens/s (alone in a budget only)"),
}
#: a per-workload metric's form in codesign.model.evaluate.workload_forms
FORM_OF = {"memory_used_B": "memory_local_B"}


def metric_table() -> list[dict[str, str]]:
    """Every name a budget may use, with unit and meaning (``codesign metrics``)."""
    rows = [{"name": k, "scope": "hardware", "unit": u, "description": d} for k, (_, u, d) in HARDWARE_METRICS.items()]
    rows += [{"name": k, "scope": "hardware decision", "unit": "", "description": "the decision's value"} for k in DECISION_METRICS]
    rows += [{"name": k, "scope": "workload", "unit": u, "description": d} for k, (u, d) in WORKLOAD_METRICS.items()]
    return rows


@dataclass(frozen=True)
class Term:
    coef: float
    metric: str  # a key of HARDWARE_METRICS / DECISION_METRICS / WORKLOAD_METRICS
    workload: str | None  # set for per-workload metrics


@dataclass(frozen=True)
class Budget:
    """Σ coef·metric <= rhs (a ``>=`` budget is stored negated)."""

    name: str
    text: str
    terms: tuple[Term, ...]
    rhs: float


def _names(workloads: list[str]) -> list[str]:
    base = list(HARDWARE_METRICS) + list(DECISION_METRICS) + list(WORKLOAD_METRICS)
    if len(workloads) > 1:
        base += [f"{w}.{m}" for w in workloads for m in WORKLOAD_METRICS]
    return base


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def parse_budget(text: str, workloads: list[str], *, name: str | None = None, source: str = "--budget") -> Budget:
    """Parse ``EXPR <= NUMBER`` or ``EXPR >= NUMBER`` (see module docstring)."""

    def fail(msg: str, value: object = None, suggestion: str | None = None) -> InputError:
        return InputError(
            msg,
            file=source,
            key=name,
            value=text if value is None else value,
            expected="a linear expression of metrics, then <= or >=, then a number, e.g. '2*power_W + dram_layers*15 <= 1600' (see `codesign metrics`)",
            suggestion=suggestion,
        )

    if not isinstance(text, str) or len(text) > 2000:
        raise fail("a budget is a string of at most 2000 characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        raise fail("not a valid expression") from None
    cmp = tree.body
    if not (isinstance(cmp, ast.Compare) and len(cmp.ops) == 1 and isinstance(cmp.ops[0], ast.LtE | ast.GtE)):
        raise fail("a budget compares an expression with one <= or >=")
    sign = 1.0 if isinstance(cmp.ops[0], ast.LtE) else -1.0
    known = _names(workloads)

    def number(node: ast.AST) -> float | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            v = number(node.operand)
            return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
            a, b = number(node.left), number(node.right)
            if a is None or b is None:
                return None
            if isinstance(node.op, ast.Div):
                if b == 0:
                    raise fail("division by zero")
                return a / b
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}[type(node.op)]
        return None

    def linear(node: ast.AST, k: float) -> list[tuple[float, str]]:
        c = number(node)
        if c is not None:
            return [(k * c, "")]
        name_ = _dotted(node)
        if name_ is not None:
            if name_ not in known:
                raise fail(f"unknown metric {name_!r}", value=name_, suggestion=did_you_mean(name_, known))
            return [(k, name_)]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            return linear(node.operand, -k if isinstance(node.op, ast.USub) else k)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Add):
                return linear(node.left, k) + linear(node.right, k)
            if isinstance(node.op, ast.Sub):
                return linear(node.left, k) + linear(node.right, -k)
            if isinstance(node.op, ast.Mult):
                a, b = number(node.left), number(node.right)
                if a is not None:
                    return linear(node.right, k * a)
                if b is not None:
                    return linear(node.left, k * b)
                raise fail("a product needs a number on one side (budgets are linear)")
            if isinstance(node.op, ast.Div):
                b = number(node.right)
                if b is None:
                    raise fail("division only by a number (budgets are linear)")
                if b == 0:
                    raise fail("division by zero")
                return linear(node.left, k / b)
        raise fail(f"not allowed in a budget: {ast.dump(node)[:60]}")

    try:
        lhs = linear(cmp.left, sign) + linear(cmp.comparators[0], -sign)
    except RecursionError:
        raise fail("expression nested too deeply") from None
    const = -sum(c for c, n in lhs if n == "")
    coefs: dict[str, float] = {}
    for c, n in lhs:
        if n:
            coefs[n] = coefs.get(n, 0.0) + c
    coefs = {n: c for n, c in coefs.items() if c != 0.0}
    if not coefs:
        raise fail("a budget needs at least one metric")
    if not all(math.isfinite(c) for c in coefs.values()) or not math.isfinite(const):
        raise fail("coefficients must be finite")
    terms = []
    for n, c in coefs.items():
        w, m = (n.split(".", 1) if "." in n else (None, n))
        if m in WORKLOAD_METRICS and w is None:
            if len(workloads) > 1:
                raise fail(
                    f"{m!r} belongs to a workload: name it",
                    value=n,
                    suggestion=f"one of {', '.join(f'{x}.{m}' for x in workloads)}",
                )
            w = workloads[0]
        terms.append(Term(c, m, w))
    if len({t.workload for t in terms if t.workload is not None}) > 1:
        raise fail(
            "a budget may involve one workload's metrics (and hardware metrics)",
            suggestion="split it into one budget per workload",
        )
    # tokens_per_s is a reciprocal: only alone, turned into a bound on time per token
    tps = [t for t in terms if t.metric == "tokens_per_s"]
    if tps:
        if len(terms) != 1:
            raise fail("tokens_per_s is 1/time_per_token_s and can only appear alone in a budget")
        (t,) = tps
        # c·tps <= rhs with c < 0 means tps >= rhs/c  ->  time <= c/rhs (rhs/c > 0 required)
        if t.coef >= 0 or const >= 0:
            raise fail("only a lower limit on tokens_per_s is supported (tokens_per_s >= X with X > 0)")
        terms = [Term(1.0, "time_per_token_s", t.workload)]
        const = t.coef / const
    label = name or text.strip()
    return Budget(label, text.strip(), tuple(terms), const)


def as_written(text: str, workloads: list[str], delta: float) -> str:
    """The budget ``text`` relaxed by ``delta`` (in its normalised form Σ c·m <= rhs), written the
    way the user wrote it when it has one metric; limits are rounded in the relaxing direction."""
    b = parse_budget(text, workloads)
    new_rhs = b.rhs + delta
    if "tokens_per_s" in text and len(b.terms) == 1 and new_rhs > 0:
        return f"tokens_per_s >= {_round(1.0 / new_rhs, down=True)}"
    if len(b.terms) == 1:
        (t,) = b.terms
        name = f"{t.workload}.{t.metric}" if t.workload and len(workloads) > 1 else t.metric
        limit = new_rhs / t.coef
        return f"{name} <= {_round(limit, down=False)}" if t.coef > 0 else f"{name} >= {_round(limit, down=True)}"
    lhs = " + ".join(f"{t.coef:g}*{t.metric}" for t in b.terms)
    return f"{lhs} <= {_round(new_rhs, down=False)}"


def written_relaxation(text: str, workloads: list[str], delta: float) -> float | None:
    """How far ``as_written`` moves a one-metric budget's limit, in the metric's own unit (a
    throughput budget in tokens/s, not in the seconds per token it is normalised to); None for a
    budget of several metrics."""
    b = parse_budget(text, workloads)
    if len(b.terms) != 1:
        return None
    if "tokens_per_s" in text and b.rhs > 0 and b.rhs + delta > 0:
        return 1.0 / b.rhs - 1.0 / (b.rhs + delta)
    (t,) = b.terms
    return abs(delta / t.coef)


def _round(x: float, *, down: bool, digits: int = 6) -> str:
    """x to ``digits`` significant digits, rounded down or up (never past the exact value)."""
    if x == 0 or not math.isfinite(x):
        return repr(x)
    scale = 10 ** (digits - 1 - math.floor(math.log10(abs(x))))
    y = (math.floor if down else math.ceil)(x * scale) / scale
    return f"{y:.{digits}g}"


def parsed_budgets(inst: Instance, *, source: str | None = None) -> list[Budget]:
    """The instance's custom budgets, parsed (InputError naming the budget on a bad one)."""
    names = [w.name for w in inst.workloads]
    out = []
    for i, b in enumerate(inst.spec.budgets.custom):
        where = source or (str(inst.source) if inst.source else "<instance>")
        out.append(parse_budget(b.expr, names, name=b.name if b.name else f"budgets.custom[{i}]", source=where))
    return out


#: hardware metrics only some hardware families model: metric -> (families, why the others lack it)
FAMILY_METRICS = {
    "temperature_C": (("stacked-3d",), "it needs a thermal model: only hardware.family = 'stacked-3d' has one "
                                      "(a catalog chip's temperature is not modelled)"),
}


def undefined_reason(inst: Instance, term: Term) -> str | None:
    """Why ``inst`` has no value of a budget term's metric (None: it has one): a hardware
    decision the instance does not decide, or a metric its hardware family does not model."""
    if term.metric in DECISION_METRICS:
        numeric = [d.name for d in inst.hardware_decisions if not isinstance(d.domain[0], str)]
        if term.metric not in numeric:
            return (f"the instance has no hardware decision {term.metric!r} (its {inst.hardware.family} hardware "
                    f"decides {', '.join(numeric) or 'nothing by value'})")
    families, why = FAMILY_METRICS.get(term.metric, (None, ""))
    if families is not None and inst.hardware.family not in families:
        return f"{term.metric} is not defined for this instance: {why}"
    return None


def defined_budgets(inst: Instance, *, source: str | None = None) -> list[Budget]:
    """The instance's custom budgets (:func:`parsed_budgets`), each on metrics the instance has a
    finite value of: a budget on a decision it does not decide, on a metric its hardware family
    does not model, or on a hardware metric that is NaN for one of its hardware designs is an
    InputError saying why (a NaN row would leave the solver and the model without an answer)."""
    budgets = parsed_budgets(inst, source=source)
    where = source or (str(inst.source) if inst.source else "<instance>")
    table = None
    for b in budgets:
        for t in b.terms:
            reason = undefined_reason(inst, t)
            if reason is None and t.workload is None and t.metric in HARDWARE_METRICS:
                table = table if table is not None else hardware_table(inst)
                column = table.features.get(HARDWARE_METRICS[t.metric][0])
                if column is not None and np.isnan(column).any():
                    reason = f"{t.metric} is not a number (NaN) for some hardware design of this instance"
            if reason is not None:
                raise InputError(f"a budget on a metric the instance does not have: {reason}", file=where,
                                 key=b.name, value=b.text, expected="a budget over metrics of this instance "
                                 "(`codesign metrics`; `codesign show NAME` lists its decisions)")
    return budgets
