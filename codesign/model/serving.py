"""Serving at a fixed concurrency: the steady state of continuous batching with chunked prefill
(model.md §5.11).

A server holds ``c`` requests per model replica (a closed loop: a client sends its next request
when the last one ends), each of ``I`` prompt and ``O`` output tokens. Every step (an engine
iteration) carries one token of each request in decode and chunks of the prompts in prefill, at
most ``T`` tokens in all (the engine's token budget, an engine-profile figure); at most ``B``
requests run at once (the engine's batch limit, or the KV cache's), the rest wait outside.

Two parts, kept apart:

* :class:`MixedStep`: the time of one step that carries ``D`` decode tokens and ``P`` prefill
  tokens, from the schedule features (:func:`codesign.model.schedule.schedule_table`) and the
  stage-step form (:func:`codesign.model.evaluate.stage_form`): a decode step of ``D`` sequences
  plus ``P / I`` of the work one prompt's prefill adds to a step beyond the step's fixed cost.
* :func:`steady_state`: ITL, TTFT and throughput from any step-time function, by the fluid
  equations of §5.11 (an arrival-theorem view: a request sees the others in their phases in
  proportion to the steps each phase lasts).

Units: seconds, tokens, requests; rates per second.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from codesign.model.evaluate import attention_of, eval_form, stage_form
from codesign.model.hardware import hardware_table
from codesign.model.schedule import ScheduleTable, schedule_table

if TYPE_CHECKING:
    from codesign.kinds.grid.spec import Instance

#: most fixed-point iterations of the prefill steps (the map is monotone; it settles in a few)
MAX_ITERATIONS = 200

#: the columns of one stage step that the stage form reads (model.md eq. 5.3)
STEP_COLUMNS = ("flops", "bytes_local", "bytes_pool", "bytes_scale_up", "bytes_scale_up_in_switch",
                "bytes_scale_up_cross", "steps_scale_up", "bytes_scale_out", "steps_scale_out", "layers",
                "collective_steps", "sequences")
#: the columns of a step whose attention is priced apart (eq. 2.15m), where the table has them
ATTENTION_COLUMNS = ("flops_attn", "flops_other", "exps")


@dataclass(frozen=True)
class ServingPoint:
    """The steady state of one replica at a fixed concurrency (model.md §5.11)."""

    #: requests per replica (in flight and waiting)
    concurrency: int
    #: requests running at once (min(concurrency, the batch limit))
    running: int
    #: steps from admission to the first token (prefill, chunked), n_p
    prefill_steps: float
    #: decode steps of a request, n_d = O - 1
    decode_steps: int
    #: decode tokens and prefill tokens of the step a decoding request sees
    itl_step_tokens: tuple[float, float]
    #: decode tokens and prefill tokens of the step a prefilling request sees
    prefill_step_tokens: tuple[float, float]
    #: mean time between two tokens of a request (one step period)
    itl_s: float
    #: time a request waits before it runs (more requests than the batch limit)
    queue_s: float
    #: time an admitted request waits for the step in flight before its prefill (one ITL unless alone)
    step_wait_s: float
    #: time to the first token: queue_s + step_wait_s + n_p steps
    ttft_s: float
    #: requests completed per second (one replica)
    requests_per_s: float
    #: output tokens per second (one replica): O x requests_per_s
    output_tokens_per_s: float

    @property
    def e2e_latency_s(self) -> float:
        return self.ttft_s + self.decode_steps * self.itl_s


def prefill_steps(running: int, input_tokens: int, decode_steps: int, token_budget: int | None) -> float:
    """Steps a request spends in prefill, n_p (model.md eq. 5.11c): at least one, at least the
    chunks its prompt needs with the budget the others' decode tokens leave, ceil(I / (T - D_p)),
    and, when the prompts and decode tokens of all running requests fill every step's budget,
    what that saturation leaves, b (I + n_d) / T - n_d. Without a budget: one step."""
    if token_budget is None:
        return 1.0
    b, n_d, t = running, decode_steps, float(token_budget)
    saturated = b * (input_tokens + n_d) / t - n_d
    n_p = max(1.0, math.ceil(input_tokens / t), saturated)
    for _ in range(MAX_ITERATIONS):
        d_p = (b - 1) * n_d / (n_p + n_d) if n_p + n_d > 0 else 0.0
        room = max(t - d_p, 1.0)
        new = max(1.0, math.ceil(input_tokens / room), saturated)
        if new == n_p:
            break
        n_p = new
    return n_p


def steady_state(step_s: Callable[[float, float], float], *, concurrency: int, input_tokens: int,
                 output_tokens: int, token_budget: int | None = None, max_running: int | None = None,
                 pipeline_stages: int = 1) -> ServingPoint:
    """ITL, TTFT and throughput of one replica with ``concurrency`` requests (model.md §5.11).

    ``step_s(D, P)`` is the time of one stage step carrying ``D`` decode tokens and ``P`` prefill
    tokens; a step period is ``pipeline_stages`` stage steps (each sequence advances once per
    period). With b = min(c, B) running, n_d = O - 1, n_p from :func:`prefill_steps` and the share
    of steps a request spends in decode q = n_d / (n_p + n_d):

    * a decoding request sees D_d = 1 + (b - 1) q decode tokens and the others' prompts,
      P_d = (b - 1) I / (n_p + n_d) tokens per step, at most T - D_d: ITL = S step_s(D_d, P_d);
    * a prefilling request sees D_p = (b - 1) q decode tokens and its own chunk I / n_p plus the
      others' P_d, at most T - D_p: TTFT = queue + n_p S step_s(D_p, P_p);
    * the closed loop's step in flight: a request arrives when another ends, just after the engine
      scheduled its next step without it, so unless it is alone (b = 1) it waits out that step,
      w = ITL, before its prefill: TTFT = queue + w + n_p S t_p;
    * Little's law on the running requests: lambda = b / (w + n_p S t_p + n_d ITL); the c - b
      waiting requests wait queue = (c - b) / lambda; output tokens per second = O lambda.
    """
    if concurrency < 1 or input_tokens < 1 or output_tokens < 1:
        raise ValueError("concurrency, input_tokens and output_tokens must be positive")
    if token_budget is not None and token_budget < 1:
        raise ValueError("token_budget must be positive")
    b = concurrency if max_running is None else max(1, min(concurrency, max_running))
    n_d = output_tokens - 1
    n_p = prefill_steps(b, input_tokens, n_d, token_budget)
    q = n_d / (n_p + n_d)
    others_prefill = (b - 1) * input_tokens / (n_p + n_d)
    budget = math.inf if token_budget is None else float(token_budget)
    d_d = 1.0 + (b - 1) * q
    p_d = max(min(others_prefill, budget - d_d), 0.0)
    d_p = (b - 1) * q
    p_p = max(min(input_tokens / n_p + others_prefill, budget - d_p), 1.0)
    period = float(pipeline_stages)
    itl = period * step_s(d_d, p_d) if n_d > 0 else 0.0
    t_prefill = n_p * period * step_s(d_p, p_p)
    wait = itl if b > 1 else 0.0
    rate = b / (wait + t_prefill + n_d * itl)
    queue = (concurrency - b) / rate
    return ServingPoint(concurrency=concurrency, running=b, prefill_steps=n_p, decode_steps=n_d,
                        itl_step_tokens=(d_d, p_d), prefill_step_tokens=(d_p, p_p), itl_s=itl,
                        queue_s=queue, step_wait_s=wait, ttft_s=queue + wait + t_prefill, requests_per_s=rate,
                        output_tokens_per_s=output_tokens * rate)


class MixedStep:
    """Time of one stage step carrying ``D`` decode tokens and ``P`` prefill tokens of the
    workload of a one-workload instance at one design (model.md eq. 5.11a):

        X(D, P) = F_decode(D) + (P / I) (F_prefill(1) - F_prefill(0))

    over the stage step's feature columns (STEP_COLUMNS), F_phase(n) the schedule's features of
    the phase at a batch of n sequences (decode at context I + O/2, prefill of an I-token prompt):
    a decode step of D sequences (its weights, per-step latencies and layer overheads included)
    plus P / I of what one prompt's prefill adds to a step. The step time is the stage form of
    X (eq. 5.3). Chunking the prompt leaves its FLOPs, attention pairs, activations and KV writes
    as they are; the KV re-reads of earlier chunks are not charged (eq. 5.11a's note)."""

    def __init__(self, inst: Instance, design: dict[str, Any], workload: str | None = None):
        spec = inst.workloads[0] if workload is None else next(w for w in inst.workloads if w.name == workload)
        self.workload = spec.name
        self.precision = spec.precision
        self.input_tokens = spec.input_tokens
        self.inst = inst
        self.design = design
        self.hw = hardware_table(inst, {d.name: np.array([design[d.name]], dtype=object if isinstance(design[d.name], str)
                                                          else None) for d in inst.hardware_decisions})
        self._decisions = inst.schedule_decisions(spec.name)
        base_table = self._table(np.array([0.0, 1.0]))
        base = base_table.features
        # the attention priced apart (eq. 2.15m) where the schedule does so: its columns mix too
        self.attention = attention_of(base_table)
        self.columns = STEP_COLUMNS + tuple(c for c in ATTENTION_COLUMNS if f"decode.{c}" in base)
        self.prefill_per_prompt = {c: base[f"prefill.{c}"][1] - base[f"prefill.{c}"][0] for c in self.columns}

    def _table(self, batch: np.ndarray) -> ScheduleTable:
        n = len(batch)
        arrs = {d.key: np.array([self.design[d.name]] * n, dtype=object if isinstance(self.design[d.name], str) else None)
                for d in self._decisions}
        arrs["batch"] = np.asarray(batch, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):  # the round's scale factors at batch 0
            return schedule_table(self.inst, self.workload, arrs)

    def _features(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        return self._table(batch).features

    def __call__(self, decode_tokens: Any, prefill_tokens: Any) -> Any:
        """Stage-step seconds (arrays broadcast; a scalar in, a float out)."""
        d = np.atleast_1d(np.asarray(decode_tokens, dtype=float))
        p = np.atleast_1d(np.asarray(prefill_tokens, dtype=float))
        d, p = np.broadcast_arrays(d, p)
        f = self._features(d.astype(float))
        share = p / self.input_tokens
        cols = {f"decode.{c}": f[f"decode.{c}"] + share * self.prefill_per_prompt[c] for c in self.columns}
        cols["one"] = np.ones_like(d)
        table = ScheduleTable(self.workload, {"batch": d}, cols)
        out = eval_form(stage_form("decode", self.precision, "one", attention=self.attention), self.hw, table)[0]
        return float(out[0]) if np.ndim(decode_tokens) == 0 and np.ndim(prefill_tokens) == 0 else out
