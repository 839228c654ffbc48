"""Transformer workloads: architecture schema, catalog loading and closed-form costs.

What it models
--------------
A decoder-only transformer LLM described by the figures of its public ``config.json``: grouped-query
attention (GQA) or multi-head latent attention (MLA), gated (SwiGLU) or plain MLPs, mixture-of-experts
(MoE) layers with routed and shared experts, a dense-layer prefix and dense/MoE interleaving, and
sliding-window attention layers. From those figures it derives, in closed form and without a solver:

* parameter counts by component (:func:`param_counts`, :func:`layer_weight_params`, :func:`weight_bytes`);
* KV-cache bytes per token and per sequence (:func:`kv_cache_bytes_per_token`, :func:`kv_cache_bytes`);
* the FLOPs and bytes of one forward step over a batch are :mod:`codesign.model.step`'s, from
  these counts.

Every numeric argument of the cost functions may be a numpy array; results broadcast.

Conventions and sources
-----------------------
* 2 FLOPs per multiply-accumulate; a weight matrix with P entries applied to T tokens costs 2·T·P FLOPs
  (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Table 1: C_forward ≈ 2N + ...).
* Attention scores: per query head and attended (query, key) pair, QK^T costs 2·d_qk and score·V costs
  2·d_v FLOPs (Hoffmann et al. 2022, "Chinchilla", Appendix F: logits 2·s²·key_size·heads and the
  same for the softmax@value reduction). Softmax, norms, activations and residual adds are elementwise
  and not counted (softmax is ~3 FLOPs per score against 4·head_dim for the two score matmuls).
* Per-layer closed forms with totals as named sums follow the shape of Calculon (Isaev et al. 2023,
  ``calculon/llm/layers.py``); the tensor-parallel split of each named count is left to the caller.
* GQA KV cache: 2·kv_heads·head_dim elements per token and layer (Ainslie et al. 2023).
* MLA: the cached latent is kv_lora_rank + qk_rope_head_dim elements per token and layer; decode uses
  the "absorbed" form that attends over the latent directly (DeepSeek-V2 report, arXiv 2405.04434,
  §2.1.2-2.1.3 and Appendix C; DeepSeek-V3 report, arXiv 2412.19437, §2.1.1).
* Expected number of distinct routed experts touched by a batch assumes uniform, independent routing
  (the occupancy problem): E·(1 − (1 − k/E)^tokens). Real routers are skewed, which touches fewer
  experts; the uniform value is therefore an upper estimate of expert-weight traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import numpy.typing as npt
from pydantic import Field, StrictBool, StrictInt, StrictStr, ValidationInfo, field_validator

from codesign.errors import InputError, did_you_mean
from codesign.names import alias_index, resolve_name
from codesign.paths import catalog_dir
from codesign.schema import Strict, is_file, load_toml, validate

__all__ = [
    "MLA",
    "LayerParams",
    "MoE",
    "ParamCounts",
    "Workload",
    "embedding_bytes_per_param",
    "expected_experts_touched",
    "kv_cache_bytes",
    "kv_cache_bytes_per_token",
    "layer_weight_params",
    "list_workloads",
    "load_workload",
    "param_counts",
    "weight_bytes",
]

#: the largest model dimension a workload file may give (2**20: the largest real ones are ~2**18, a
#: vocabulary; a layer's parameters, d**2 x layers, then stay well inside 64-bit integers)
MAX_DIMENSION = 2**20
PositiveInt = Annotated[StrictInt, Field(gt=0, le=MAX_DIMENSION)]
NonNegativeInt = Annotated[StrictInt, Field(ge=0, le=MAX_DIMENSION)]

#: A scalar or a numpy array of any shape; every cost function broadcasts over its numeric arguments.
ArrayLike = float | int | npt.NDArray[Any]
#: What the cost functions return: a numpy float64 scalar for scalar inputs, otherwise an array.
FloatArray = np.float64 | npt.NDArray[np.float64]

#: FLOPs per multiply-accumulate.
FLOPS_PER_MAC = 2
#: bytes of one activation element: engines keep activations in 16 bit between kernels and
#: all-reduce / gather them in bf16/fp16 even with fp8 weights (memory and link traffic alike)
ACTIVATION_BYTES = 2.0
#: DRAM bytes per vocabulary entry of one sequence's logits in one step (eq. 2.15l), the engine's
#: sampling path counted kernel by kernel (TensorRT-LLM: the LM head writes 16-bit logits, 2 B;
#: ``mark_output(..., logits_dtype)`` casts them to the float32 ``logits_dtype``, read 2 B and
#: write 4 B; the decoder's PenaltyLayer runs ``invokeBatchApplyPenalty`` every step, default
#: penalties included, from the logits into its runtime-logits buffer, read 4 B and write 4 B;
#: the sampling layer reads them, 4 B): 20 B, the unfused count (as the activations, eq. 2.15j, k)
LOGITS_BYTES_PER_ENTRY = 20.0
#: Matrices in a gated (SwiGLU: gate, up, down) and in a plain (up, down) MLP.
GATED_MLP_MATRICES = 3
PLAIN_MLP_MATRICES = 2
#: RMSNorm vectors per decoder layer (before attention, before the MLP).
NORMS_PER_LAYER = 2


# --------------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------------


class MoE(Strict):
    """Mixture-of-experts feed-forward blocks.

    After ``first_dense_layers`` dense layers, every ``interleave``-th layer is an MoE layer (1: all of
    them; Llama 4 Maverick: 2, i.e. every other layer). Each MoE layer holds ``num_experts`` routed
    experts of width ``expert_ffn_hidden_size``, of which ``top_k`` process each token, plus
    ``num_shared_experts`` always-on experts of width ``shared_expert_ffn_hidden_size``.
    """

    num_experts: PositiveInt
    top_k: PositiveInt
    expert_ffn_hidden_size: PositiveInt
    num_shared_experts: NonNegativeInt = 0
    shared_expert_ffn_hidden_size: Annotated[StrictInt, Field(ge=0, validate_default=True)] = 0
    first_dense_layers: NonNegativeInt = 0
    interleave: PositiveInt = 1

    @field_validator("top_k")
    @classmethod
    def _top_k_at_most_experts(cls, v: int, info: ValidationInfo) -> int:
        n = info.data.get("num_experts")
        if n is not None and v > n:
            raise ValueError(f"top_k ({v}) must be at most num_experts ({n})")
        return v

    @field_validator("shared_expert_ffn_hidden_size")
    @classmethod
    def _shared_width_iff_shared(cls, v: int, info: ValidationInfo) -> int:
        n = info.data.get("num_shared_experts")
        if n is not None and (n > 0) != (v > 0):
            raise ValueError(
                "shared_expert_ffn_hidden_size must be > 0 exactly when num_shared_experts > 0 "
                f"(num_shared_experts={n}, shared_expert_ffn_hidden_size={v})"
            )
        return v


class MLA(Strict):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank compressed queries and keys/values.

    ``q_lora_rank`` None means queries are projected directly (no query compression).
    """

    q_lora_rank: PositiveInt | None
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt


class Workload(Strict):
    """A decoder-only transformer architecture, as given by its public config.json or paper."""

    id: Annotated[StrictStr, Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")]
    name: StrictStr
    source: Annotated[StrictStr, Field(min_length=1)]
    notes: StrictStr = ""
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    ffn_hidden_size: PositiveInt
    vocab_size: PositiveInt
    tied_embeddings: StrictBool = False
    mlp_gated: StrictBool = True
    qk_norm: StrictBool = False
    moe: MoE | None = None
    mla: MLA | None = None
    sliding_window: PositiveInt | None = None
    sliding_window_layers: Annotated[StrictInt, Field(ge=0, validate_default=True)] = 0
    #: checkpoint names of this architecture (Hugging Face repositories), read as this id by
    #: :func:`resolve_workload` (``codesign.names``)
    aliases: list[StrictStr] = Field(default_factory=list)

    @field_validator("num_kv_heads")
    @classmethod
    def _heads_divisible(cls, v: int, info: ValidationInfo) -> int:
        heads = info.data.get("num_attention_heads")
        if heads is not None and heads % v != 0:
            raise ValueError(
                f"num_attention_heads ({heads}) must be divisible by num_kv_heads ({v})"
            )
        return v

    @field_validator("moe")
    @classmethod
    def _moe_fits_layers(cls, v: MoE | None, info: ValidationInfo) -> MoE | None:
        layers = info.data.get("num_layers")
        if v is None or layers is None:
            return v
        if v.first_dense_layers >= layers:
            raise ValueError(
                f"first_dense_layers ({v.first_dense_layers}) must be less than num_layers ({layers})"
            )
        if (layers - v.first_dense_layers) // v.interleave < 1:
            raise ValueError(
                f"no MoE layer: (num_layers - first_dense_layers) // interleave = "
                f"({layers} - {v.first_dense_layers}) // {v.interleave} < 1"
            )
        return v

    @field_validator("mla")
    @classmethod
    def _mla_head_dim(cls, v: MLA | None, info: ValidationInfo) -> MLA | None:
        head_dim = info.data.get("head_dim")
        if v is not None and head_dim is not None:
            qk = v.qk_nope_head_dim + v.qk_rope_head_dim
            if head_dim != qk:
                raise ValueError(
                    f"with [mla], head_dim ({head_dim}) must equal qk_nope_head_dim + qk_rope_head_dim ({qk})"
                )
        return v

    @field_validator("sliding_window_layers")
    @classmethod
    def _window_layers(cls, v: int, info: ValidationInfo) -> int:
        if "sliding_window" not in info.data:  # sliding_window itself failed: reported there
            return v
        window = info.data["sliding_window"]
        layers = info.data.get("num_layers")
        if window is None and v != 0:
            raise ValueError(f"sliding_window_layers is {v} but sliding_window is not set")
        if window is not None and v == 0:
            raise ValueError("sliding_window is set but sliding_window_layers is 0")
        if layers is not None and v > layers:
            raise ValueError(f"sliding_window_layers ({v}) exceeds num_layers ({layers})")
        return v

    # Derived layer counts -------------------------------------------------------------------------

    @property
    def moe_layers(self) -> int:
        """Number of layers whose feed-forward block is an MoE block."""
        if self.moe is None:
            return 0
        return (self.num_layers - self.moe.first_dense_layers) // self.moe.interleave

    @property
    def dense_layers(self) -> int:
        """Number of layers whose feed-forward block is a dense MLP of width ``ffn_hidden_size``."""
        return self.num_layers - self.moe_layers


# --------------------------------------------------------------------------------------------------
# Catalog
# --------------------------------------------------------------------------------------------------


def list_workloads() -> list[str]:
    """Ids of the workloads in the catalog (``instances/catalog/workloads/<id>.toml``), sorted."""
    return sorted(p.stem for p in catalog_dir("workloads").glob("*.toml"))


@cache
def _workload_names() -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    entries = {wid: load_workload(wid).aliases for wid in list_workloads()}
    return entries, alias_index(entries)


def resolve_workload(name: str) -> str | None:
    """The workload id ``name`` stands for: the id itself or one of a workload's ``aliases``,
    compared after ``codesign.names.normalized_name``; None if it names none or more than one."""
    entries, index = _workload_names()
    return resolve_name(name, entries, index=index)


def _looks_like_path(id_or_path: str) -> bool:
    return id_or_path.endswith(".toml") or "/" in id_or_path or "\\" in id_or_path


@cache
def load_workload(id_or_path: str) -> Workload:
    """Load a workload by catalog id (``llama-3.1-70b``) or by path to a TOML file.

    Raises:
        InputError: unknown id (with a did-you-mean), unreadable file, or invalid content (naming
            the file, the key path and the offending value).
    """
    if _looks_like_path(id_or_path):
        path = Path(id_or_path)
        return validate(Workload, load_toml(path), file=path)
    path = catalog_dir("workloads") / f"{id_or_path}.toml"
    if not is_file(path):  # (an id too long for a file name is no catalog id either)
        available = list_workloads()
        raise InputError(
            "unknown workload",
            key="workload",
            value=id_or_path,
            expected="a catalog id (" + ", ".join(available) + ") or a path to a .toml file",
            suggestion=did_you_mean(id_or_path, available),
        )
    workload = validate(Workload, load_toml(path), file=path)
    if workload.id != id_or_path:
        raise InputError(
            "catalog file's id differs from its file name",
            file=path,
            key="id",
            value=workload.id,
            expected=repr(id_or_path),
        )
    return workload


# --------------------------------------------------------------------------------------------------
# Parameter counts
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameter counts of one decoder layer of each kind, for TP/PP/EP splits by the caller.

    Attributes:
        attention: all attention weights of one layer: q, k, v, o (GQA) or the MLA down/up
            projections, o, and the norms inside attention (MLA latent norms, per-head q/k norms).
        attention_norms: the part of ``attention`` that is norm vectors (not matmul weights).
        dense_mlp: one dense MLP of width ``ffn_hidden_size`` (0 when no layer is dense).
        routed_expert: one routed expert (0 without MoE).
        routed_experts: all routed experts of one MoE layer.
        shared_experts: all shared experts of one MoE layer.
        router: the router (gate) matrix of one MoE layer.
        layer_norms: the two RMSNorm vectors of every layer (pre-attention and pre-MLP).
        dense_layers: number of layers with a dense MLP.
        moe_layers: number of layers with an MoE block.
    """

    attention: int
    attention_norms: int
    dense_mlp: int
    routed_expert: int
    routed_experts: int
    shared_experts: int
    router: int
    layer_norms: int
    dense_layers: int
    moe_layers: int

    @property
    def attention_matmul(self) -> int:
        """Attention weights that are matrices (applied to every token)."""
        return self.attention - self.attention_norms


def _mlp_params(w: Workload, width: int) -> int:
    """Weights of one MLP of intermediate width ``width``: gate, up, down (gated) or up, down."""
    matrices = GATED_MLP_MATRICES if w.mlp_gated else PLAIN_MLP_MATRICES
    return matrices * w.hidden_size * width


def _attention_params(w: Workload) -> tuple[int, int]:
    """(all attention parameters of one layer, the part that is norm vectors)."""
    h, heads = w.hidden_size, w.num_attention_heads
    if w.mla is not None:
        m = w.mla
        qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            q = h * heads * qk_head  # q_proj
            q_norm = 0
        else:
            q = h * m.q_lora_rank + m.q_lora_rank * heads * qk_head  # q_a_proj, q_b_proj
            q_norm = m.q_lora_rank  # q_a_layernorm
        kv_down = h * (m.kv_lora_rank + m.qk_rope_head_dim)  # kv_a_proj_with_mqa
        kv_up = m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)  # kv_b_proj
        out = heads * m.v_head_dim * h  # o_proj
        norms = q_norm + m.kv_lora_rank  # + kv_a_layernorm
        return q + kv_down + kv_up + out + norms, norms
    q = h * heads * w.head_dim
    kv = 2 * h * w.num_kv_heads * w.head_dim
    out = heads * w.head_dim * h
    norms = 2 * w.head_dim if w.qk_norm else 0  # per-head RMSNorm weights on q and k (Qwen3)
    return q + kv + out + norms, norms


def layer_weight_params(w: Workload) -> LayerParams:
    """Per-layer named parameter counts (see :class:`LayerParams`)."""
    attention, attention_norms = _attention_params(w)
    moe_layers = w.moe_layers
    dense_layers = w.dense_layers
    if w.moe is None:
        routed_expert = routed_experts = shared = router = 0
    else:
        routed_expert = _mlp_params(w, w.moe.expert_ffn_hidden_size)
        routed_experts = w.moe.num_experts * routed_expert
        shared = w.moe.num_shared_experts * _mlp_params(w, w.moe.shared_expert_ffn_hidden_size)
        router = w.hidden_size * w.moe.num_experts
    return LayerParams(
        attention=attention,
        attention_norms=attention_norms,
        dense_mlp=_mlp_params(w, w.ffn_hidden_size) if dense_layers else 0,
        routed_expert=routed_expert,
        routed_experts=routed_experts,
        shared_experts=shared,
        router=router,
        layer_norms=NORMS_PER_LAYER * w.hidden_size,
        dense_layers=dense_layers,
        moe_layers=moe_layers,
    )


@dataclass(frozen=True, slots=True)
class ParamCounts:
    """Whole-model parameter counts by component.

    ``total`` is the sum of the components; ``active`` is what one token uses: ``total`` minus the
    (num_experts − top_k) routed experts it skips in every MoE layer.
    """

    embedding: int
    lm_head: int
    attention: int
    dense_mlp: int
    routed_experts: int
    shared_experts: int
    router: int
    norms: int
    total: int
    active: int


def param_counts(w: Workload) -> ParamCounts:
    """Parameter counts of ``w``, every weight matrix and norm vector included (biases excluded)."""
    lp = layer_weight_params(w)
    embedding = w.vocab_size * w.hidden_size
    lm_head = 0 if w.tied_embeddings else w.vocab_size * w.hidden_size
    attention = w.num_layers * lp.attention
    dense_mlp = lp.dense_layers * lp.dense_mlp
    routed = lp.moe_layers * lp.routed_experts
    shared = lp.moe_layers * lp.shared_experts
    router = lp.moe_layers * lp.router
    norms = w.num_layers * lp.layer_norms + w.hidden_size  # + final norm before the LM head
    total = embedding + lm_head + attention + dense_mlp + routed + shared + router + norms
    unused = (
        0 if w.moe is None else lp.moe_layers * (w.moe.num_experts - w.moe.top_k) * lp.routed_expert
    )
    return ParamCounts(
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        dense_mlp=dense_mlp,
        routed_experts=routed,
        shared_experts=shared,
        router=router,
        norms=norms,
        total=total,
        active=total - unused,
    )


#: quantised checkpoints keep the embedding table and the LM head in 16 bit: NVIDIA ModelOpt's
#: FP8/INT8/FP4 recipes disable the ``*lm_head*`` quantizer and quantise only linear layers (the
#: embedding is a lookup table), and DeepSeek-V3 keeps "the embedding module, the output head"
#: in BF16 (arXiv 2412.19437, §3.3.1).
EMBEDDING_MIN_BYTES_PER_PARAM = 2.0


def embedding_bytes_per_param(weight_bytes_per_param: float) -> float:
    """B/param of the embedding table and the LM head: the weights' precision, but never below
    16 bit (``EMBEDDING_MIN_BYTES_PER_PARAM``); fp32 weights stay fp32."""
    return max(float(weight_bytes_per_param), EMBEDDING_MIN_BYTES_PER_PARAM)


def weight_bytes(w: Workload, weight_bytes_per_param: ArrayLike) -> FloatArray:
    """Bytes of all weights: total parameters × ``weight_bytes_per_param`` (B/param)."""
    return as_result(param_counts(w).total * as_array(weight_bytes_per_param, "weight_bytes_per_param"))


# --------------------------------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------------------------------


def _kv_elements_per_token_layer(w: Workload) -> int:
    """KV-cache elements one token stores in one layer: 2·kv_heads·head_dim (GQA) or the MLA latent."""
    if w.mla is not None:
        return w.mla.kv_lora_rank + w.mla.qk_rope_head_dim
    return 2 * w.num_kv_heads * w.head_dim


def kv_cache_bytes_per_token(w: Workload, bytes_per_element: ArrayLike) -> FloatArray:
    """KV-cache bytes one token adds over all layers, before any sliding-window eviction.

    = num_layers · e · bytes_per_element, where e = 2·kv_heads·head_dim (GQA) or
    kv_lora_rank + qk_rope_head_dim (MLA: the compressed latent and the shared RoPE key are cached).
    This is also the bytes every new token writes (sliding-window layers write it and evict the
    oldest entry); :func:`kv_cache_bytes` applies the window cap to what is held.
    """
    bpe = as_array(bytes_per_element, "bytes_per_element")
    return as_result(w.num_layers * _kv_elements_per_token_layer(w) * bpe)


def attention_layer_split(w: Workload) -> tuple[int, int, float]:
    """(full-attention layers, sliding-window layers, window or inf)."""
    if w.sliding_window is None:
        return w.num_layers, 0, math.inf
    return w.num_layers - w.sliding_window_layers, w.sliding_window_layers, float(w.sliding_window)


def kv_cache_bytes(
    w: Workload, context_tokens: ArrayLike, bytes_per_element: ArrayLike
) -> FloatArray:
    """KV-cache bytes held for one sequence of ``context_tokens`` tokens.

    = e · bytes_per_element · [(L − S)·c + S·min(c, W)], where L = num_layers, S = sliding-window
    layers, W = window, c = context_tokens, e = elements per token and layer (see
    :func:`kv_cache_bytes_per_token`). A sliding-window layer holds the last W tokens.
    """
    c = as_array(context_tokens, "context_tokens")
    bpe = as_array(bytes_per_element, "bytes_per_element")
    full, slid, window = attention_layer_split(w)
    held_tokens = full * c + (slid * np.minimum(c, window) if slid else 0.0)
    return as_result(_kv_elements_per_token_layer(w) * bpe * held_tokens)


# --------------------------------------------------------------------------------------------------
# Routing
# --------------------------------------------------------------------------------------------------


def expected_experts_touched(
    num_experts: ArrayLike, top_k: ArrayLike, tokens: ArrayLike
) -> FloatArray:
    """Expected number of distinct routed experts selected by ``tokens`` tokens in one MoE layer.

    E·(1 − (1 − k/E)^t): each token picks k of E experts; under uniform, independent routing a given
    expert is missed by one token with probability 1 − k/E and by all t tokens with (1 − k/E)^t.
    The value is ≤ min(E, t·k) for whole t (Bernoulli's inequality), 0 at t = 0, and non-decreasing
    in t; a fractional t below 1 (a device's share of a token) is held to t·k as well, which the
    formula alone would exceed (E = 8, k = 2, t = 0.5: 1.07 > 1).
    Assumption: uniform routing; real routers are skewed and touch fewer experts.
    """
    e = as_array(num_experts, "num_experts")
    k = as_array(top_k, "top_k")
    t = as_array(tokens, "tokens")
    if np.any(e <= 0) or np.any(k > e):
        raise ValueError("need num_experts > 0 and top_k <= num_experts")
    return as_result(np.minimum(e * (1.0 - np.power(1.0 - k / e, t)), k * t))


# --------------------------------------------------------------------------------------------------
# Array helpers
# --------------------------------------------------------------------------------------------------


def as_array(x: ArrayLike, name: str) -> npt.NDArray[np.float64]:
    """``x`` as a float64 array; a negative or non-finite entry is a programming error."""
    a = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{name} must be finite and non-negative, got {x!r}")
    return a


def as_result(x: Any) -> FloatArray:
    """A numpy float64 scalar for 0-d results, otherwise the float64 array itself."""
    a = np.asarray(x, dtype=np.float64)
    return a[()] if a.ndim == 0 else a
