"""evaluate(instance, design) -> Evaluation: the reference the MIP compiles and the verifier trusts.

Every metric is a *form* over the schedule features of a workload (S) and the hardware features
(H) (model.md §5):

    metric(S, H) = Σ_k a_k(S)·h_k(H) + Σ_g max_{j in g} a_gj(S)·h_gj(H)

where ``a`` are schedule columns (already scaled by the metric's per-schedule factor, e.g. PP for
TPOT) and ``h`` hardware columns. A stage step overlaps its compute, local-memory and
pooled-memory streams by a calibrated fraction (the overlapped parts form a max, the rest adds),
plus its exposed communication and per-layer overheads. Because every term is a product of one schedule quantity
and one hardware quantity, the MIP represents each exactly on the finite design space.

Constraints are ``form(S, H) <= rhs_hw(H) + rhs``: memory capacity, thermal limit, appliance ports,
budgets and SLOs, each with a stable name shared with formulations/ and the solver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from codesign.errors import InputError
from codesign.model import topology
from codesign.model.budgets import FORM_OF, HARDWARE_METRICS, parsed_budgets
from codesign.model.engines import instance_rules
from codesign.model.hardware import HardwareTable, hardware_table
from codesign.model.schedule import PHASES, ScheduleTable, schedule_table, structural_reason
from codesign.model.workload import load_workload

if TYPE_CHECKING:
    from codesign.kinds.grid.spec import Instance

#: a constraint lhs <= rhs holds when lhs <= rhs + FEASIBILITY_RTOL·|rhs| (one tolerance for the
#: verifier, brute force and the MIP presolve; solvers meet rows to ~1e-9 on O(1)-scaled rows)
FEASIBILITY_RTOL = 1e-9


def holds(lhs, rhs):
    """lhs <= rhs within FEASIBILITY_RTOL (broadcasts over arrays)."""
    return lhs <= rhs + FEASIBILITY_RTOL * np.abs(rhs)


@dataclass(frozen=True)
class Product:
    """One term a(S)·h(H): ``sched`` and ``hw`` name columns (``x*y`` multiplies columns)."""

    name: str
    sched: str
    hw: str


#: one branch of a max group: a product, or a sum of products (eq. 5.3a)
Branch = Product | tuple[Product, ...]


def terms(branch: Branch) -> tuple[Product, ...]:
    """The products a max group's branch sums (one for a plain product)."""
    return branch if isinstance(branch, tuple) else (branch,)


@dataclass(frozen=True)
class Form:
    """Σ linear products + Σ over groups of the max of the group's branches (each a product or a
    sum of products)."""

    linear: tuple[Product, ...] = ()
    maxes: tuple[tuple[Branch, ...], ...] = ()

    def __add__(self, other: Form) -> Form:
        return Form(self.linear + other.linear, self.maxes + other.maxes)

    @property
    def products(self) -> tuple[Product, ...]:
        """Every product once (a product several branches share is listed once)."""
        out = dict.fromkeys(self.linear + tuple(p for g in self.maxes for b in g for p in terms(b)))
        return tuple(out)

    @property
    def hardware_only(self) -> bool:
        return all(p.sched == "one" for p in self.products)


def _prod(a: np.ndarray, h: np.ndarray) -> np.ndarray:
    """a·h with 0·inf = 0 (an unused tier's infinite time per byte costs nothing)."""
    with np.errstate(invalid="ignore"):
        out = np.multiply.outer(h, a)
    # a's zeros broadcast over the hardware axis (the last axis of ``out`` is a's)
    return np.where(np.asarray(a) == 0.0, 0.0, out)


def eval_form(form: Form, hw: HardwareTable, sched: ScheduleTable | None, hw_rows=None, sched_rows=None) -> np.ndarray:
    """Value of ``form`` for every pair (hardware row, schedule row): shape (H, S)."""
    hsel = slice(None) if hw_rows is None else hw_rows
    ssel = slice(None) if sched_rows is None else sched_rows

    def a(p: Product) -> np.ndarray:
        if sched is None:
            return np.ones(1)
        return sched.column(p.sched)[ssel]

    def h(p: Product) -> np.ndarray:
        return hw.column(p.hw)[hsel]

    total: np.ndarray | float = 0.0
    for p in form.linear:
        total = total + _prod(a(p), h(p))
    for group in form.maxes:
        total = total + np.maximum.reduce([sum(_prod(a(p), h(p)) for p in terms(b)) for b in group])
    if isinstance(total, float):
        n_h = hw.size if hw_rows is None else len(np.atleast_1d(np.arange(hw.size)[hsel]))
        n_s = 1 if sched is None else (sched.size if sched_rows is None else len(np.atleast_1d(np.arange(sched.size)[ssel])))
        return np.zeros((n_h, n_s))
    return total


# --- forms of the metrics ---------------------------------------------------------------------
#: a stage step's attention priced apart (eq. 2.15m): (its precision, whether the hardware has an
#: exponential rate), from :func:`attention_of`; None: one compute term at the weights' precision
Attention = tuple[str, bool] | None


def attention_of(sched: Any) -> Attention:
    """How a schedule table's steps price their attention (eq. 2.15m): None where the table keeps
    one compute term (:attr:`ScheduleTable.attention_precision` unset)."""
    prec = getattr(sched, "attention_precision", None)
    return None if prec is None else (prec, "decode.exps" in sched.features or "prefill.exps" in sched.features)


def stage_form(phase: str, prec: str, scale: str, hw_factor: str | None = None, two_batch: bool = False,
               attention: Attention = None) -> Form:
    """scale(S) × t_stage(phase) (eq. 5.3): the compute, local-memory and pooled-memory streams
    overlap by the fraction o = ``stream_overlap`` of the hardware design,

        o·max(compute, local memory, pooled memory) + (1 − o)·(compute + local memory + pooled memory)

    plus communication, per-collective latency, per-layer overhead and the host's time per sequence. Each stream is two products of the same schedule
    column with the hardware columns ``<col>_ovl`` = o·col (in the max group) and ``<col>_seq`` =
    (1 − o)·col (added); o·max(x, y, z) = max(o·x, o·y, o·z) since o ≥ 0.

    With ``attention`` = (precision p_a, exps) the compute is the FLOPs other than the attention's
    at the weights' precision plus the attention (eq. 2.15m): its FLOPs at p_a and, where ``exps``,
    the larger of that and the softmax's exponentials at the exponential rate, compute = C + max(A, E).
    Then o·max(C + max(A, E), L, P) = max(o(C + A), o(C + E), oL, oP) (one max group whose compute
    branches are sums) and (1 − o)·max(A, E) = max((1 − o)A, (1 − o)E) a second group; without
    ``exps`` A is added to C.

    With ``hw_factor`` every hardware column is multiplied by it (static power × time).

    With ``two_batch`` (the workload decides ``overlap``, eq. 5.3a) the terms above are those of
    the rows whose column ``<phase>.serial`` is 1, and on the rows whose ``<phase>.two_batch`` is 1
    the step is max(chip, links) + host: one max group whose branches are the chip's sums
    o·stream_j + (1 − o)·(compute + local + pooled) + overhead, one per stream j, and the links' sum
    (bandwidth and latency terms of every collective). With the exponentials the chip's sums are
    max over the attention's unit k in {A, E} of the same sums with k for max(A, E) (each has
    max(A, E) with a coefficient 1 or 1 − o ≥ 0): one branch per stream and unit."""

    def hw(col: str) -> str:
        return f"{hw_factor}*{col}" if hw_factor else col

    def s(col: str, sel: str | None = "serial" if two_batch else None) -> str:
        return f"{scale}*{phase}.{sel}*{phase}.{col}" if sel else f"{scale}*{phase}.{col}"

    tag = f"{phase}"
    flops = "flops" if attention is None else "flops_other"
    compute_ovl = Product(f"{tag}.compute_overlapped", s(flops), hw(f"s_per_flop_ovl@{prec}"))
    memory = (
        Product(f"{tag}.memory_local_overlapped", s("bytes_local"), hw("s_per_B_local_ovl")),
        Product(f"{tag}.memory_pool_overlapped", s("bytes_pool"), hw("s_per_B_pool_ovl")),
    )
    # the attention's units, each (overlapped part, serial part): its FLOPs and the exponentials
    units: tuple[tuple[Product, Product], ...] = ()
    if attention is not None:
        a_prec, exps = attention
        units = ((Product(f"{tag}.attention_overlapped", s("flops_attn"), hw(f"s_per_flop_ovl@{a_prec}")),
                  Product(f"{tag}.attention", s("flops_attn"), hw(f"s_per_flop_seq@{a_prec}"))),)
        if exps:
            units += ((Product(f"{tag}.exponentials_overlapped", s("exps"), hw("s_per_exp_ovl")),
                       Product(f"{tag}.exponentials", s("exps"), hw("s_per_exp_seq"))),)
    streams = (*(((compute_ovl, k) for k, _ in units) if units else (compute_ovl,)), *memory)
    linear = (
        Product(f"{tag}.compute", s(flops), hw(f"s_per_flop_seq@{prec}")),
        *((units[0][1],) if len(units) == 1 else ()),
        Product(f"{tag}.memory_local", s("bytes_local"), hw("s_per_B_local_seq")),
        Product(f"{tag}.memory_pool", s("bytes_pool"), hw("s_per_B_pool_seq")),
        # the all-reduces run in a ring or in the switches (eq. 4.9b): one of the two is zero
        Product(f"{tag}.scale_up_bw", s("bytes_scale_up"), hw("reduce_ring*s_per_B_scale_up")),
        Product(f"{tag}.scale_up_bw_in_switch", s("bytes_scale_up_in_switch"), hw("reduce_in_switch*s_per_B_scale_up")),
        # a ring across a server's CPU sockets: its bytes again at the extra time per byte (eq. 3.17b)
        Product(f"{tag}.scale_up_bw_cross", s("bytes_scale_up_cross"), hw("reduce_ring*s_per_B_scale_up_cross")),
        Product(f"{tag}.scale_up_latency", s("steps_scale_up"), hw("s_per_step_scale_up")),
        Product(f"{tag}.scale_out_bw", s("bytes_scale_out"), hw("s_per_B_scale_out")),
        Product(f"{tag}.scale_out_latency", s("steps_scale_out"), hw("s_per_step_scale_out")),
        Product(f"{tag}.overhead", s("layers"), hw("s_per_layer")),
        Product(f"{tag}.collective_latency", s("collective_steps"), hw("s_per_collective_step")),
        Product(f"{tag}.host", s("sequences", None), hw("s_per_sequence")),
    )
    # the attention's serial parts: the larger of the two units' (eq. 2.15m)
    attention_max = ((tuple(seq for _, seq in units),) if len(units) > 1 else ())
    if not two_batch:
        return Form(linear, (streams, *attention_max))

    def tb(p: Product) -> Product:  # the same term on the two-batch rows
        return Product(f"{tag}.two_batch_{p.name.split('.', 1)[1]}", p.sched.replace(".serial*", ".two_batch*"), p.hw)

    chip = tuple(tb(p) for p in linear if p.name.split(".", 1)[1] in CHIP_TERMS)
    links = tuple(tb(p) for p in linear if p.name.split(".", 1)[1] in LINK_TERMS)
    if len(units) > 1:  # one branch per stream and attention unit k: k's parts for max(A, E)
        branches = tuple((*(tb(q) for q in terms(b)), *chip, tb(seq))
                         for k, seq in units for b in ((compute_ovl, k), *memory))
    else:
        branches = tuple((*(tb(q) for q in terms(b)), *chip) for b in streams)
    return Form(linear, (streams, *attention_max, (*branches, links)))


#: the terms of eq. 5.3 that run on the chip, and on the links, under two-batch overlap (eq. 5.3a)
CHIP_TERMS = ("compute", "attention", "memory_local", "memory_pool", "overhead")
LINK_TERMS = ("scale_up_bw", "scale_up_bw_in_switch", "scale_up_bw_cross", "scale_up_latency",
              "scale_out_bw", "scale_out_latency", "collective_latency")


def dynamic_energy_form(phase: str, prec: str, scale: str) -> Form:
    """scale(S) × dynamic energy of one stage step: FLOPs, local and pooled bytes, link bytes."""

    def s(col: str) -> str:
        return f"{scale}*{phase}.{col}"

    return Form(
        (
            Product(f"{phase}.energy_compute", s("flops"), f"J_per_flop@{prec}"),
            Product(f"{phase}.energy_dram", s("bytes_local"), "J_per_B_local"),
            Product(f"{phase}.energy_pool", s("bytes_pool"), "J_per_B_pool"),
            Product(f"{phase}.energy_scale_up", s("moved_scale_up"), "reduce_ring*J_per_B_scale_up"),
            Product(f"{phase}.energy_scale_up_in_switch", s("moved_scale_up_in_switch"), "reduce_in_switch*J_per_B_scale_up"),
            Product(f"{phase}.energy_scale_out", s("bytes_scale_out"), "J_per_B_scale_out"),
        )
    )


WORKLOAD_METRICS = ("time_per_token_s", "tpot_s", "ttft_s", "energy_per_token_J", "memory_local_B", "memory_pool_B")


def workload_forms(sched: ScheduleTable, prec: str) -> dict[str, Form]:
    """The forms of the per-workload metrics, built from the scale columns the schedule has."""
    forms: dict[str, Form] = {}
    cols = sched.features
    tb = "decode.two_batch" in cols  # the workload decides overlap (eq. 5.3a)
    at = attention_of(sched)  # the attention priced apart (eq. 2.15m)
    forms["tpot_s"] = stage_form("decode", prec, "scale.tpot_s|decode", two_batch=tb, attention=at)
    forms["ttft_s"] = stage_form("prefill", prec, "scale.ttft_s|prefill", two_batch=tb, attention=at)
    tpt = Form()
    energy = Form()
    for phase in PHASES:
        key = f"scale.time_per_token_s|{phase}"
        if key in cols:
            tpt = tpt + stage_form(phase, prec, key, two_batch=tb, attention=at)
            ekey = f"scale.energy_per_token_J|{phase}"
            energy = (energy + dynamic_energy_form(phase, prec, ekey)
                      + stage_form(phase, prec, ekey, "static_W", two_batch=tb, attention=at))
    forms["time_per_token_s"] = tpt
    forms["energy_per_token_J"] = energy
    forms["memory_local_B"] = Form((Product("memory_local", "memory_local_B", "one"),))
    # the pooled weights once per copy (one per appliance when replicated, eq. 3.10f), the KV cache once
    forms["memory_pool_B"] = Form((Product("memory_pool_weights", "memory_pool_weights_B", "pool_copies"),
                                   Product("memory_pool_kv", "memory_pool_kv_B", "one")))
    return forms


HW_METRICS = {
    "power_W": "power_W",
    "temperature_C": "temperature_C",
    "area_mm2": "area_mm2",
}


@dataclass(frozen=True)
class Constraint:
    """Σ coef·form(S, H) <= rhs_hw(H) + rhs, with a stable hierarchical name.

    Most constraints have one term (``form`` with coefficient 1); a custom budget
    (:mod:`codesign.model.budgets`) has several, with any signs (``terms``).
    """

    name: str
    family: Literal["physical", "budget", "slo"]
    workload: str | None
    form: Form
    rhs: float = 0.0
    rhs_hw: str | None = None
    unit: str = ""
    terms: tuple[tuple[float, Form], ...] = ()
    text: str = ""

    @property
    def lhs(self) -> tuple[tuple[float, Form], ...]:
        """(coefficient, form) pairs of the left-hand side."""
        return self.terms or ((1.0, self.form),)

    @property
    def hardware_only(self) -> bool:
        return self.workload is None


def constraint_lhs(c: Constraint, hw: HardwareTable, sched: ScheduleTable | None, hw_rows=None, sched_rows=None) -> np.ndarray:
    """Left-hand side of ``c`` for every (hardware row, schedule row) pair."""
    total = None
    for coef, form in c.lhs:
        v = coef * eval_form(form, hw, sched, hw_rows=hw_rows, sched_rows=sched_rows)
        total = v if total is None else total + v
    return total


def hw_form(col: str) -> Form:
    return Form((Product(col, "one", col),))


def constraints(inst: Instance, hw: HardwareTable, scheds: dict[str, ScheduleTable]) -> list[Constraint]:
    """Every constraint of the instance in a fixed order (physical, SLO, budgets)."""
    out: list[Constraint] = []
    if inst.hardware.family == "stacked-3d":
        out.append(Constraint("thermal-junction-upper", "physical", None, hw_form("temperature_C"), rhs_hw="junction_max_C", unit="C"))
    if inst.system.appliance:
        out.append(Constraint("appliance-ports-upper", "physical", None, hw_form("pool_ports_used"), rhs_hw="pool_ports_available", unit="ports"))
    for w in inst.workloads:
        forms = workload_forms(scheds[w.name], w.precision)
        q = f"[{w.name}]"
        out.append(Constraint(f"memory-capacity-local{q}", "physical", w.name, forms["memory_local_B"], rhs_hw="capacity_B", unit="B"))
        if inst.system.appliance:
            out.append(Constraint(f"memory-capacity-pool{q}", "physical", w.name, forms["memory_pool_B"], rhs_hw="pool_capacity_B", unit="B"))
        if w.tpot_slo_ms is not None:
            out.append(Constraint(f"slo-tpot{q}", "slo", w.name, forms["tpot_s"], rhs=w.tpot_slo_ms * 1e-3, unit="s"))
        if w.ttft_slo_ms is not None:
            out.append(Constraint(f"slo-ttft{q}", "slo", w.name, forms["ttft_s"], rhs=w.ttft_slo_ms * 1e-3, unit="s"))
        if inst.budgets.energy_per_token_J is not None:
            out.append(Constraint(f"budget-energy-per-token{q}", "budget", w.name, forms["energy_per_token_J"], rhs=inst.budgets.energy_per_token_J, unit="J"))
    b = inst.budgets
    if b.power_W is not None:
        out.append(Constraint("budget-power", "budget", None, hw_form("power_W"), rhs=b.power_W, unit="W"))
    if b.temperature_C is not None:
        out.append(Constraint("budget-temperature", "budget", None, hw_form("temperature_C"), rhs=b.temperature_C, unit="C"))
    if b.area_mm2 is not None:
        out.append(Constraint("budget-area", "budget", None, hw_form("area_mm2"), rhs=b.area_mm2, unit="mm2"))
    if b.system_power_W is not None:
        out.append(Constraint("budget-system-power", "budget", None, Form((Product("system_power", "one", "power_W"),)), rhs=b.system_power_W / inst.system.devices, unit="W per device"))
    out.extend(custom_constraints(inst, scheds))
    return out


def custom_constraints(inst: Instance, scheds: dict[str, ScheduleTable]) -> list[Constraint]:
    """``[[budgets.custom]]`` and ``--budget``: Σ coef·metric <= rhs, each metric a form."""
    out = []
    for b in parsed_budgets(inst):
        workloads = {t.workload for t in b.terms if t.workload is not None}
        if len(workloads) > 1:
            raise InputError(
                "a budget may involve one workload's metrics (and hardware metrics)",
                key=b.name,
                value=b.text,
                suggestion="split it into one budget per workload",
            )
        w = next(iter(workloads), None)
        terms = []
        for t in b.terms:
            if t.workload is None:
                col = HARDWARE_METRICS[t.metric][0] if t.metric in HARDWARE_METRICS else f"value:{t.metric}"
                coef = t.coef * (inst.system.devices if t.metric == "system_power_W" else 1.0)
                terms.append((coef, hw_form(col)))
            else:
                spec = next(x for x in inst.workloads if x.name == t.workload)
                forms = workload_forms(scheds[t.workload], spec.precision)
                terms.append((t.coef, forms[FORM_OF.get(t.metric, t.metric)]))
        out.append(Constraint(f"budget[{b.name}]", "budget", w, terms[0][1], rhs=b.rhs, terms=tuple(terms), text=b.text))
    return out


# --- objective --------------------------------------------------------------------------------
OBJECTIVE_METRIC = {
    "tokens_per_s": "time_per_token_s",
    "energy_per_token_J": "energy_per_token_J",
    "tpot_s": "tpot_s",
    "ttft_s": "ttft_s",
}


def objective_terms(inst: Instance) -> list[tuple[str, str, float]]:
    """(workload, metric, weight): the solver minimises Σ weight × metric."""
    m = OBJECTIVE_METRIC[inst.objective.metric]
    return [(w.name, m, w.weight) for w in inst.workloads]


def objective_from_internal(inst: Instance, internal: float) -> float:
    """Σ weight × metric -> the user's objective (mix tokens/s, or weighted mean)."""
    total_w = sum(w.weight for w in inst.workloads)
    if inst.objective.metric == "tokens_per_s":
        return total_w / internal if internal > 0 else float("inf")
    return internal / total_w


def internal_from_objective(inst: Instance, value: float) -> float:
    total_w = sum(w.weight for w in inst.workloads)
    if inst.objective.metric == "tokens_per_s":
        return total_w / value if value > 0 else float("inf")
    return value * total_w


# --- evaluation of one design -----------------------------------------------------------------
@dataclass
class Audit:
    name: str
    family: str
    value: float
    limit: float
    unit: str

    @property
    def slack(self) -> float:
        return self.limit - self.value

    @property
    def ok(self) -> bool:
        return bool(holds(self.value, self.limit))


@dataclass
class Evaluation:
    design: dict[str, Any]
    metrics: dict[str, float]
    workload_metrics: dict[str, dict[str, float]]
    audit: list[Audit]
    objective: float
    internal_objective: float
    feasible: bool
    structural: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "design": self.design,
            "objective": self.objective,
            "feasible": self.feasible,
            "metrics": self.metrics,
            "workloads": self.workload_metrics,
            "audit": [
                {"name": a.name, "family": a.family, "value": a.value, "limit": a.limit, "slack": a.slack, "ok": a.ok, "unit": a.unit}
                for a in self.audit
            ],
            "structural": self.structural,
        }


def _single(inst: Instance, design: dict[str, Any]) -> tuple[HardwareTable, dict[str, ScheduleTable], list[str]]:
    hw_designs = {d.name: np.array([design[d.name]], dtype=object if isinstance(design[d.name], str) else None) for d in inst.hardware_decisions}
    hw = hardware_table(inst, hw_designs)
    scheds: dict[str, ScheduleTable] = {}
    problems: list[str] = []

    for w in inst.workloads:
        decs = inst.schedule_decisions(w.name)
        s = {d.key: design[d.name] for d in decs}
        why = structural_reason(
            load_workload(w.workload), w, inst.system.devices, inst.system.appliance is not None, s,
            inst.system.scale_up_domain, topology.torus_dims(inst), instance_rules(inst).max_batch_size,
        )
        if why:
            problems.append(f"{w.name}: {why}" if len(inst.workloads) > 1 else why)
        arrs = {d.key: np.array([design[d.name]], dtype=object if isinstance(design[d.name], str) else None) for d in decs}
        scheds[w.name] = schedule_table(inst, w.name, arrs)
    return hw, scheds, problems


def evaluate(inst: Instance, design: dict[str, Any]) -> Evaluation:
    """Evaluate one full design (every decision set) with the analytical model."""
    hw, scheds, problems = _single(inst, design)
    row = hw.row(0)
    metrics: dict[str, float] = {}
    per_w: dict[str, dict[str, float]] = {}
    for w in inst.workloads:
        st = scheds[w.name]
        forms = workload_forms(st, w.precision)
        m = {name: float(eval_form(forms[name], hw, st)[0, 0]) for name in WORKLOAD_METRICS}
        m["tokens_per_s"] = 1.0 / m["time_per_token_s"] if m["time_per_token_s"] > 0 else float("inf")
        m["tokens_per_s_per_device"] = m["tokens_per_s"] / inst.system.devices
        # breakdown of one decode / prefill stage step (unscaled)
        for phase in PHASES:
            f = stage_form(phase, w.precision, "one", two_batch=f"{phase}.two_batch" in st.features,
                           attention=attention_of(st))
            for p in f.products:
                m[f"{phase}_step.{p.name.split('.', 1)[1]}_s"] = float(eval_form(Form((p,)), hw, st)[0, 0])
            m[f"{phase}_step_s"] = float(eval_form(f, hw, st)[0, 0])
            # the step's counts and three parts of its local bytes per device (not times)
            for count in ("layers", "collective_steps", "sequences", "bytes_weights_local", "bytes_kv_local",
                          "bytes_act_replicated_local"):
                m[f"{phase}_step.{count}"] = float(st.features[f"{phase}.{count}"][0])
            if f"{phase}.extra_iterations" in st.features:  # the engine's token budget (eq. 4.19)
                m[f"{phase}_step.extra_iterations"] = float(st.features[f"{phase}.extra_iterations"][0])
            flops = st.features[f"{phase}.model_flops"][0]
            peak = row[f"peak_flops@{w.precision}"] * inst.system.devices / st.features["dp"][0] / st.features["pp"][0]
            m[f"{phase}_mfu"] = flops / (m[f"{phase}_step_s"] * st.features["pp"][0] * peak) if peak > 0 else 0.0
        ekey = [k for k in st.features if k.startswith("scale.energy_per_token_J|")]
        split = {"compute": 0.0, "dram": 0.0, "pool": 0.0, "scale_up": 0.0, "scale_out": 0.0}
        for k in ekey:
            phase = k.split("|")[1]
            for p in dynamic_energy_form(phase, w.precision, k).linear:
                split[p.name.split("energy_")[1].removesuffix("_in_switch")] += float(eval_form(Form((p,)), hw, st)[0, 0])
        for k, v in split.items():
            m[f"energy_per_token_{k}_J"] = v
        m["energy_per_token_static_J"] = m["energy_per_token_J"] - sum(split.values())
        for key in ("tp", "pp", "dp", "batch"):
            m[key] = float(st.features[key][0])
        m["weights_per_device_B"] = float(st.features["weights_per_device_B"][0])
        m["kv_per_device_B"] = float(st.features["kv_per_device_B"][0])
        m["decoder_state_per_device_B"] = float(st.features["decoder_state_per_device_B"][0])
        per_w[w.name] = m

    for name, col in HW_METRICS.items():
        metrics[name] = row[col]
    metrics["system_power_W"] = row["power_W"] * inst.system.devices
    for key in ("bandwidth_Bps", "capacity_B", "raw_capacity_B", "static_W", "pool_bandwidth_Bps"):
        if key in row:
            metrics[key] = row[key]
    for key, val in row.items():
        if key.startswith(("bw_", "power_", "peak_flops@")):
            metrics[key] = val
    internal = sum(wt * per_w[w][m] for w, m, wt in objective_terms(inst))
    objective = objective_from_internal(inst, internal)
    # the mix over workloads
    total_w = sum(w.weight for w in inst.workloads)
    metrics["tokens_per_s"] = total_w / sum(w.weight * per_w[w.name]["time_per_token_s"] for w in inst.workloads)
    metrics["energy_per_token_J"] = sum(w.weight * per_w[w.name]["energy_per_token_J"] for w in inst.workloads) / total_w
    if len(inst.workloads) == 1:
        only = per_w[inst.workloads[0].name]
        for k, v in only.items():
            metrics.setdefault(k, v)

    audit = []
    for c in constraints(inst, hw, scheds):
        st = scheds[c.workload] if c.workload else None
        value = float(constraint_lhs(c, hw, st)[0, 0])
        limit = c.rhs + (row[c.rhs_hw] if c.rhs_hw else 0.0)
        unit = c.unit
        if c.name == "budget-system-power":  # the MIP's row is per device; the audit states the system
            value, limit, unit = value * inst.system.devices, limit * inst.system.devices, "W"
        audit.append(Audit(c.name, c.family, value, limit, unit))
    feasible = bool(not problems and all(a.ok for a in audit) and np.isfinite(internal))
    return Evaluation(design, metrics, per_w, audit, objective, internal, feasible, problems)


# --- parts of the headline metrics (plots, reports) ------------------------------------------------
#: the kind of each term of a stage step's time (the suffix of its product's name)
TIME_CATEGORY = {
    "compute": "compute", "attention": "compute", "exponentials": "compute", "memory_local": "memory", "memory_pool": "memory",
    "scale_up_bw": "network", "scale_up_bw_in_switch": "network", "scale_up_bw_cross": "network",
    "scale_up_latency": "network", "scale_out_bw": "network", "scale_out_latency": "network",
    "collective_latency": "network", "overhead": "overhead", "host": "overhead",
}
#: the parts of a device's area and design power (hardware columns; a catalog chip has one each)
AREA_PARTS = ("area_compute_mm2", "area_sram_mm2", "tsv_area_mm2", "area_fixed_logic_mm2")
POWER_PARTS = ("power_compute_W", "power_dram_W", "power_static_W", "io_power_W")


def breakdown(inst: Instance, design: dict[str, Any]) -> dict[str, Any]:
    """The terms the model sums into a design's time per token (per workload), device area and
    device power, each from the same forms and columns :func:`evaluate` sums (the parts add up to
    the metric up to rounding):

    - ``time_per_token_s[workload]``: category (compute, memory, network, overhead, and
      ``overlapped`` for the overlapped streams' max) -> seconds, summed over phases, each phase
      weighted as in the metric;
    - ``area_mm2`` and ``power_W``: part -> value; a catalog chip's total as one part (its die
      area and TDP are not split by the model).
    Energy per token by component is in the metrics already (``energy_per_token_<part>_J``)."""
    hw, scheds, _ = _single(inst, design)
    row = hw.row(0)
    times: dict[str, dict[str, float]] = {}
    for w in inst.workloads:
        st = scheds[w.name]
        parts: dict[str, float] = {}
        for phase in PHASES:
            key = f"scale.time_per_token_s|{phase}"
            if key not in st.features:
                continue
            form = stage_form(phase, w.precision, key, two_batch=f"{phase}.two_batch" in st.features,
                              attention=attention_of(st))
            for p in form.linear:
                cat = TIME_CATEGORY[p.name.split(".", 1)[1]]
                parts[cat] = parts.get(cat, 0.0) + float(eval_form(Form((p,)), hw, st)[0, 0])
            for group in form.maxes:
                # the attention's serial max (eq. 2.15m) is compute; the streams' max overlapped
                cat = "compute" if all(TIME_CATEGORY.get(p.name.split(".", 1)[1]) == "compute"
                                       for b in group for p in terms(b)) else "overlapped"
                parts[cat] = parts.get(cat, 0.0) + float(eval_form(Form((), (group,)), hw, st)[0, 0])
        times[w.name] = parts
    if all(k in row for k in AREA_PARTS):
        area = {k.removesuffix("_mm2").replace("tsv_area", "area_tsv").removeprefix("area_"): row[k] for k in AREA_PARTS}
    else:
        area = {"die": row["area_mm2"]}
    if all(k in row for k in POWER_PARTS):
        power = {k.removesuffix("_W").replace("io_power", "power_io").removeprefix("power_"): row[k] for k in POWER_PARTS}
    else:
        power = {"TDP": row["power_W"]}
    return {"time_per_token_s": times, "area_mm2": area, "power_W": power}
