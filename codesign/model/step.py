"""One forward step of a workload: its FLOPs and DRAM bytes, term by term (model.md eq. 2.15).

:func:`step_costs` gives the work of one forward pass of the whole model over a batch of
sequences, each adding ``new_tokens`` to a context of ``context`` tokens, on one device without
parallelism; :mod:`codesign.model.schedule` splits it over TP, PP and EP. Every argument may be an
array: the terms broadcast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from codesign.model.routing import RoutingSpec, experts_touched
from codesign.model.workload import (
    ACTIVATION_BYTES,
    FLOPS_PER_MAC,
    LOGITS_BYTES_PER_ENTRY,
    ArrayLike,
    FloatArray,
    Workload,
    as_array,
    as_result,
    attention_layer_split,
    kv_cache_bytes,
    kv_cache_bytes_per_token,
    layer_weight_params,
)


@dataclass(frozen=True, slots=True)
class StepCosts:
    """FLOPs and bytes of one forward pass of the whole model (all layers, one device, no parallelism).

    Each field is a named term (float or numpy array, broadcast over the step's arguments); the
    properties are their sums. Bytes are DRAM traffic assuming no reuse across steps and perfect
    reuse within a step (every weight read once per step). ``exponentials`` counts the softmax's
    exponentials (not FLOPs; priced on the special-function units, eq. 2.15m). Activations (16 bit) are split into the
    part every tensor-parallel rank holds whole (``bytes_act_replicated``: the hidden-size tensors
    around the all-reduces) and the part split over the ranks (``bytes_act_sharded``).
    """

    flops_attn_proj: FloatArray
    flops_attn_score: FloatArray
    flops_mlp_dense: FloatArray
    flops_moe_routed: FloatArray
    flops_moe_shared: FloatArray
    flops_router: FloatArray
    flops_lm_head: FloatArray
    bytes_w_attn: FloatArray
    bytes_w_mlp_dense: FloatArray
    bytes_w_moe_routed: FloatArray
    bytes_w_moe_shared: FloatArray
    bytes_w_router: FloatArray
    bytes_w_norms: FloatArray
    bytes_w_embed_head: FloatArray
    bytes_kv_read: FloatArray
    bytes_kv_write: FloatArray
    bytes_act_replicated: FloatArray
    bytes_act_sharded: FloatArray
    bytes_logits: FloatArray
    exponentials: FloatArray
    tokens: FloatArray
    moe_layers: int
    dense_layers: int

    @property
    def flops(self) -> FloatArray:
        """All FLOPs of the step: the sum of the ``flops_*`` terms."""
        return (
            self.flops_attn_proj
            + self.flops_attn_score
            + self.flops_mlp_dense
            + self.flops_moe_routed
            + self.flops_moe_shared
            + self.flops_router
            + self.flops_lm_head
        )

    @property
    def bytes_weights(self) -> FloatArray:
        """Weight bytes read by the step: the sum of the ``bytes_w_*`` terms."""
        return (
            self.bytes_w_attn
            + self.bytes_w_mlp_dense
            + self.bytes_w_moe_routed
            + self.bytes_w_moe_shared
            + self.bytes_w_router
            + self.bytes_w_norms
            + self.bytes_w_embed_head
        )

    @property
    def bytes_total(self) -> FloatArray:
        """Weights plus KV-cache reads and writes."""
        return self.bytes_weights + self.bytes_kv_read + self.bytes_kv_write


def _attended_pairs(
    new_tokens: npt.NDArray[np.float64], context: npt.NDArray[np.float64], window: float
) -> npt.NDArray[np.float64]:
    """Causal (query, key) pairs of one sequence and layer: Σ_{j=c+1}^{c+n} min(j, W).

    New token j (1-based absolute position) attends to itself and the j − 1 tokens before it, capped
    at the window W (``math.inf`` for full attention). With F(m) = Σ_{j=1}^{m} min(j, W)
    = min(m, W)·(min(m, W) + 1)/2 + W·max(m − W, 0), the sum is F(c + n) − F(c).
    Full attention: n·c + n·(n + 1)/2 (decode, n = 1: c + 1; prefill, c = 0: the triangle n(n+1)/2).
    """

    def prefix(m: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        capped = np.minimum(m, window)
        beyond = np.maximum(m - window, 0.0) * window if math.isfinite(window) else 0.0
        return capped * (capped + 1.0) / 2.0 + beyond

    return prefix(context + new_tokens) - prefix(context)


def _score_flops_per_pair(w: Workload, absorbed: npt.NDArray[np.bool_] | bool) -> FloatArray:
    """FLOPs of QK^T plus score·V for one (query, key) pair in one layer, over all query heads.

    GQA: 2·heads·head_dim + 2·heads·head_dim (Chinchilla App. F).
    MLA naive (keys/values decompressed): 2·heads·(nope + rope) + 2·heads·v_head_dim.
    MLA absorbed (W_UK folded into q, W_UV into o; attend over the latent):
    2·heads·(kv_lora + rope) + 2·heads·kv_lora (DeepSeek-V2 report, §2.1.2, "absorb").
    """
    heads = w.num_attention_heads
    if w.mla is None:
        return np.float64(2 * FLOPS_PER_MAC * heads * w.head_dim)
    m = w.mla
    naive = FLOPS_PER_MAC * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
    latent = FLOPS_PER_MAC * heads * (m.kv_lora_rank + m.qk_rope_head_dim + m.kv_lora_rank)
    return np.where(absorbed, float(latent), float(naive))


@dataclass(frozen=True)
class ActivationParts:
    """Activation elements of one token between kernels, by where they sit (model.md eq. 2.15j, k;
    see :func:`activation_elements`)."""

    replicated_per_layer: float  # 20 h: whole on every TP rank
    attention_per_layer: float  # 4q + 2k: split over TP
    dense_mlp_per_layer: float  # 6 I (gated) or 4 I of a dense layer: split over TP
    moe_permutation_per_layer: float  # 2 (top_k + 1) h: whole on every rank
    moe_shared_per_layer: float  # the shared experts' intermediates: 6 or 4 x their width
    routed_per_selection: float  # one routed expert's intermediates for one token: 6 or 4 x f_e
    per_step: float  # 4 h: embedding gather, final norm, LM-head input


def activation_parts(w: Workload) -> ActivationParts:
    """The pieces of :func:`activation_elements` (per token), for models that place them apart
    (the placement model puts routed experts on devices, not split over TP)."""
    h = float(w.hidden_size)
    mlp = 6.0 if w.mlp_gated else 4.0
    moe = w.moe
    return ActivationParts(
        replicated_per_layer=20.0 * h,
        attention_per_layer=4.0 * w.num_attention_heads * w.head_dim + 2.0 * w.num_kv_heads * w.head_dim,
        dense_mlp_per_layer=mlp * w.ffn_hidden_size,
        moe_permutation_per_layer=0.0 if moe is None else 2.0 * (moe.top_k + 1) * h,
        moe_shared_per_layer=0.0 if moe is None else mlp * moe.num_shared_experts * moe.shared_expert_ffn_hidden_size,
        routed_per_selection=0.0 if moe is None else mlp * moe.expert_ffn_hidden_size,
        per_step=4.0 * h,
    )


def activation_elements(w: Workload) -> tuple[float, float]:
    """Activation elements one token moves through DRAM in one forward pass, written by one kernel
    and read by the next (model.md eq. 2.15j, k): (replicated, sharded), the first held whole by every
    tensor-parallel rank, the second split over the ranks. Per layer, h = hidden size, q = heads ·
    head_dim, k = KV heads · head_dim, I = MLP intermediate width of one token (gated: the fused
    gate/up GEMM writes 2I):

    * replicated, 20 h: input norm (read h, write h); QKV GEMM reads h; O-projection writes h;
      all-reduce (copy in: read h, write h; result: write h); residual add (read 2h, write h) and
      post-attention norm (read h, write h); gate/up GEMM reads h; down GEMM writes h; all-reduce
      3h; residual add 3h. MoE layers add the token permutation to the top-k experts and back:
      2(top_k + 1) h.
    * sharded: attention 4q + 2k (QKV GEMM writes q + 2k, attention reads q and writes q,
      O-projection reads q); MLP gated 6I (gate/up write 2I, activation reads 2I writes I, down
      reads I), plain 4I.

    Once per step: embedding gather writes h, final norm reads h and writes h, LM head reads h (4h
    replicated). The KV cache, the weights and the logits (``StepCosts.bytes_logits``, eq. 2.15l)
    are counted apart.
    """
    a = activation_parts(w)
    lp = layer_weight_params(w)
    top_k = 0 if w.moe is None else w.moe.top_k
    rep = a.replicated_per_layer * w.num_layers + a.moe_permutation_per_layer * lp.moe_layers + a.per_step
    shard = (a.attention_per_layer * w.num_layers + a.dense_mlp_per_layer * lp.dense_layers
             + (a.moe_shared_per_layer + top_k * a.routed_per_selection) * lp.moe_layers)
    return rep, shard


def attention_side_elements(w: Workload) -> float:
    """Of the whole-tensor activations of :func:`activation_elements`, the elements one token moves
    on the rank that holds its sequence under attention data parallelism (model.md eq. 4.18): in
    an MoE layer the attention side, 9 h (input norm 2 h, QKV GEMM reads h, O-projection writes h,
    residual add 3 h, post-attention norm 2 h); a dense layer, data-parallel end to end, all its
    20 h; once per step 4 h (embedding gather, final norm, LM-head input)."""
    a = activation_parts(w)
    return 9.0 * w.hidden_size * w.moe_layers + a.replicated_per_layer * w.dense_layers + a.per_step


def step_costs(
    w: Workload,
    *,
    batch: ArrayLike,
    new_tokens: ArrayLike,
    context: ArrayLike,
    weight_bytes_per_param: ArrayLike,
    kv_bytes_per_element: ArrayLike,
    embedding_bytes_per_param: ArrayLike | None = None,
    routing: RoutingSpec | None = None,
) -> StepCosts:
    """Cost of one forward pass of the whole model over ``batch`` sequences.

    Each sequence adds ``new_tokens`` tokens on top of ``context`` cached tokens (decode:
    new_tokens = 1; prefill: new_tokens = prompt length, context = 0; chunked prefill: both > 0).
    With T = batch·new_tokens tokens, L layers, L_d dense and L_m MoE layers:

    * flops_attn_proj = 2·T·L·P_attn, P_attn the attention matrices of one layer (MLA: the down/up
      projections; the absorbed form multiplies the same number of weights per token).
    * flops_attn_score = batch · Σ_layers pairs(layer) · f_pair, pairs from :func:`_attended_pairs`
      (causal triangle in prefill, window cap on sliding layers), f_pair from
      :func:`_score_flops_per_pair`. MLA uses the absorbed form whenever cached context is attended
      (context > 0) and the naive, decompressed form for a pure prefill (context = 0).
    * flops_mlp_dense = 2·T·L_d·P_mlp; flops_moe_routed = 2·T·L_m·top_k·P_expert;
      flops_moe_shared = 2·T·L_m·P_shared; flops_router = 2·T·L_m·hidden·E.
    * flops_lm_head = 2·batch·hidden·vocab: logits for the last new token of each sequence only
      (decode: every new token; prefill: the last prompt token). Speculative verification, which
      needs logits at every new position, is not modelled.
    * bytes_w_* = parameters read × weight_bytes_per_param; every weight is read once per step,
      except routed experts: per MoE layer only the expected distinct experts touched by T tokens
      (eq. 2.14; under a skewed ``routing`` eq. 2.14b, :func:`routing.experts_touched`), and
      the embedding table: only min(T, vocab) gathered rows
      (the LM-head matrix is read whole; with tied embeddings the two reads are still counted apart).
      The embedding and LM-head bytes use ``embedding_bytes_per_param`` (default: the weights'):
      quantised checkpoints keep these two matrices in 16 bit (:func:`embedding_bytes_per_param`).
    * bytes_kv_read = batch · kv_cache_bytes(context); bytes_kv_write = T · kv_cache_bytes_per_token.
      The new tokens' own keys/values are consumed on chip and not re-read.
    * bytes_act_* = 2 B · T · elements each token's activations move through DRAM between kernels
      (:func:`activation_elements`): replicated (whole on every TP rank) and sharded (split by TP).
    * bytes_logits = batch · vocab · LOGITS_BYTES_PER_ENTRY: the logits of each sequence's last new
      token from the LM head through sampling (eq. 2.15l), whole on every TP rank after the gather.
    * exponentials = batch · Σ_layers pairs(layer) · query heads (eq. 2.15m): the softmax takes one
      exponential per attended (query, key) pair and query head, the pairs those of
      ``flops_attn_score`` (causal triangle, window cap); MLA's too (its heads, absorbed or not).

    Args:
        w: the workload.
        batch: sequences in the step (≥ 0).
        new_tokens: tokens each sequence adds (≥ 0).
        context: tokens already cached per sequence (≥ 0).
        weight_bytes_per_param: B/param of the weights (e.g. 2 for bf16, 0.5 for 4-bit).
        kv_bytes_per_element: B/element of the KV cache.
        embedding_bytes_per_param: B/param of the embedding table and the LM head (default:
            ``weight_bytes_per_param``).
        routing: how tokens pick experts (default: uniform, eq. 2.14).
    """
    b = as_array(batch, "batch")
    n = as_array(new_tokens, "new_tokens")
    c = as_array(context, "context")
    wb = as_array(weight_bytes_per_param, "weight_bytes_per_param")
    kvb = as_array(kv_bytes_per_element, "kv_bytes_per_element")
    eb = wb if embedding_bytes_per_param is None else as_array(embedding_bytes_per_param, "embedding_bytes_per_param")
    lp = layer_weight_params(w)
    t = b * n
    mac = float(FLOPS_PER_MAC)

    full, slid, window = attention_layer_split(w)
    pairs = full * _attended_pairs(n, c, math.inf)
    if slid:
        pairs = pairs + slid * _attended_pairs(n, c, window)
    score = b * pairs * _score_flops_per_pair(w, c > 0)
    exps = b * pairs * float(w.num_attention_heads)

    if w.moe is None:
        touched = np.zeros_like(t)
        top_k = 0
    else:
        touched = experts_touched(routing, w.moe.num_experts, w.moe.top_k, t)
        top_k = w.moe.top_k
    embed_rows = np.minimum(t, float(w.vocab_size))
    act_rep, act_shard = activation_elements(w)
    head_params = w.vocab_size * w.hidden_size

    shape = np.broadcast_shapes(b.shape, n.shape, c.shape, wb.shape, kvb.shape, eb.shape)

    def fit(x: Any) -> FloatArray:
        """Broadcast a term to the step's common shape (constant terms included)."""
        return as_result(np.broadcast_to(np.asarray(x, dtype=np.float64), shape).copy())

    return StepCosts(
        flops_attn_proj=fit(mac * t * w.num_layers * lp.attention_matmul),
        flops_attn_score=fit(score),
        flops_mlp_dense=fit(mac * t * lp.dense_layers * lp.dense_mlp),
        flops_moe_routed=fit(mac * t * lp.moe_layers * top_k * lp.routed_expert),
        flops_moe_shared=fit(mac * t * lp.moe_layers * lp.shared_experts),
        flops_router=fit(mac * t * lp.moe_layers * lp.router),
        flops_lm_head=fit(mac * b * head_params),
        bytes_w_attn=fit(wb * w.num_layers * lp.attention),
        bytes_w_mlp_dense=fit(wb * lp.dense_layers * lp.dense_mlp),
        bytes_w_moe_routed=fit(wb * lp.moe_layers * touched * lp.routed_expert),
        bytes_w_moe_shared=fit(wb * lp.moe_layers * lp.shared_experts),
        bytes_w_router=fit(wb * lp.moe_layers * lp.router),
        bytes_w_norms=fit(wb * (w.num_layers * lp.layer_norms + w.hidden_size)),
        bytes_w_embed_head=fit(eb * (head_params + embed_rows * w.hidden_size)),
        bytes_kv_read=fit(b * kv_cache_bytes(w, c, kvb)),
        bytes_kv_write=fit(t * kv_cache_bytes_per_token(w, kvb)),
        bytes_act_replicated=fit(ACTIVATION_BYTES * t * act_rep),
        bytes_act_sharded=fit(ACTIVATION_BYTES * t * act_shard),
        bytes_logits=fit(b * w.vocab_size * LOGITS_BYTES_PER_ENTRY),
        exponentials=fit(exps),
        tokens=fit(t),
        moe_layers=lp.moe_layers,
        dense_layers=lp.dense_layers,
    )
