"""Validation of the analytical model against measured serving performance (VALIDATION.md).

Each measurement row (schema: ``../shared/validation/README.md``) becomes a one-design catalog
instance: chip = the row's GPU, devices = ``num_gpus``, scale-up domain = the chip's own, the
row's workload, precision and input/output lengths, phase ``both``, TP/PP/EP fixed to the row's.
The batch per model replica is

* offline maximum load (empty ``concurrency``): the largest integer batch (a multiple of PP) that
  the model's own ``memory-capacity-local`` constraint admits (the engine fills memory with KV
  cache), capped at the engine's maximum batch (``ENGINE_MAX_BATCH``, trtllm-bench's 4096);
* fixed concurrency: ``ceil(concurrency / dp)``.

The row is evaluated with :func:`codesign.model.evaluate.evaluate` and the metric read off:
``output_tokens_per_s`` = ``tokens_per_s`` (system), ``output_tokens_per_s_per_gpu`` =
``tokens_per_s_per_device``, ``itl_s`` = ``tpot_s``, ``ttft_s``, ``e2e_latency_s`` =
ttft + (osl - 1) tpot. Rows the model cannot predict are listed in ``skipped`` with the reason.

Calibration (:func:`fit_calibration`) fits the physical parameters of
:class:`codesign.model.hardware.Calibration` per chip family on the rows of a deterministic split
(``validation/split.json``, :func:`make_split`); :func:`run_validation` reports on the rest. The
fit re-composes each row's prediction from the model's own per-term step breakdown (compute,
local memory, link bytes, link latency, per-layer overhead) with the calibration divided out, so
a prediction at any calibration is the model's (:func:`recompose`; equality with ``evaluate`` is
tested). :func:`proposals` measures, the same way, what each mechanism of the model buys (by
removing it: ``Variant`` ablations) and what candidate changes would buy.

Nothing here writes a file unless asked (``write=`` / ``path=`` arguments).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codesign.errors import InputError

# the runtime's decoding state per sequence slot (model.md eq. 4.14b; VALIDATION.md §5.16)
from codesign.model.schedule import decoder_state_per_slot_B


def chip_families() -> dict[str, tuple[str, ...]]:
    """Calibration family -> catalog chip ids, from each chip's ``family`` (a chip without one is
    a family of its own). The calibration is fitted per family and written to the
    ``[chips.<id>]`` table of every chip of a fitted family (VALIDATION.md §4)."""
    from codesign import catalog

    out: dict[str, list[str]] = {}
    for cid in catalog.list_ids("chips"):
        out.setdefault(catalog.chip_family(cid), []).append(cid)
    return {fam: tuple(chips) for fam, chips in sorted(out.items())}


#: metrics the validator predicts
METRICS = ("output_tokens_per_s", "output_tokens_per_s_per_gpu", "ttft_s", "itl_s", "e2e_latency_s")

#: maximum batch of a measured engine whose own is not known (``Row.engine_max_batch``, which takes
#: precedence): trtllm-bench's tuning heuristic caps max_batch_size at 4096 (``finetune_setting``:
#: ``min(kv_cache_max_requests, 4096)``). Pass ``max_batch_cap=None`` to drop every cap.
ENGINE_MAX_BATCH = 4096

#: requests per run of each benchmark the measurements come from, by source document (an offline
#: row's batch is at most its requests per replica; VALIDATION.md §2, §5.8)
def benchmark_requests_path() -> Path:
    """The shipped table of benchmark request counts (installed with the catalog)."""
    from codesign.paths import instances_dir

    return instances_dir() / "catalog" / "benchmark_requests.toml"


#: the engines each benchmark was built with, by source document (the engine's maximum batch
#: caps an offline row's batch, and its sequence slots' decoding state comes out of the KV cache;
#: VALIDATION.md §5.16)
def benchmark_engines_path() -> Path:
    """The shipped table of benchmark engines (installed with the catalog)."""
    from codesign.paths import instances_dir

    return instances_dir() / "catalog" / "benchmark_engines.toml"


#: calibration fields fitted per family by the simplex search, and their physical bounds
FIT_FIELDS = ("compute_efficiency", "memory_efficiency", "network_efficiency", "layer_overhead_us", "stream_overlap",
              "collective_step_latency_us")
#: fields of FIT_FIELDS every family holds instead of fitting: the compute and memory streams of a
#: step add (o = 0, eq. 5.3). Fitted per family, o came out 0 for ampere-pcie and the pooled fit,
#: 0.09 for hopper, 0.25 for ampere and 1.0 for ada, where ada's compute efficiency fell to 0.46
#: to make up for it; held at 0, every family's compute efficiency is 0.67-0.84 and the rows no
#: calibration was fitted on are predicted better (VALIDATION.md §5.17). ``Variant.fit_overlap``
#: fits it again
HELD_FIELDS: tuple[tuple[str, float], ...] = (("stream_overlap", 0.0),)
#: the die's bandwidth cap (eq. 3.21a): fitted too, but only for a family whose chips differ in
#: peak memory bandwidth (one die on two memories: H100 / H200); elsewhere it could not be told
#: from the memory efficiency and stays unset
CAP_FIELD = "memory_bandwidth_cap_GBps"
#: the 8-bit tensor rate's own efficiency (eq. 3.20c): fitted (``Variant.fit_8bit``; ``codesign
#: calibrate --no-fit-8bit`` leaves it out) only for a family whose fit rows run at both an 8-bit and
#: a wider format (hopper: FP8 and FP16; never the pooled fit, whose rows are of several dies);
#: elsewhere it could not be told from the compute efficiency and stays unset. Withdrawn at fix 15,
#: shipped at fix 18, withdrawn again with fix 19, under which hopper fits it at 0.77 against 0.78 at
#: 16 bit and the rows no calibration saw are predicted no better with it (VALIDATION.md §5.15)
EIGHT_BIT_FIELD = "compute_efficiency_8bit"
FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "compute_efficiency": (0.05, 1.0),
    EIGHT_BIT_FIELD: (0.05, 1.0),
    "memory_efficiency": (0.05, 1.0),
    "network_efficiency": (0.05, 1.0),
    # kernel launches and synchronisation of one transformer layer: a handful of kernels of a few
    # microseconds each. TensorRT-LLM's own small-batch ITLs (70B, TP4, H100: 21 ms for 80 layers
    # incl. weights) leave no room for more than a few tens of microseconds per layer.
    "layer_overhead_us": (0.0, 50.0),
    "stream_overlap": (0.0, 1.0),
    # one ring step of a TP collective: the ranks hand a block on and pass a flag barrier, whatever
    # the message size; 2(n-1) steps per all-reduce over n ranks. A microbenchmark's small-message
    # step takes about a microsecond on NVLink and several over PCIe; inside a serving step the
    # barrier also waits for the slowest rank's kernel launches, which grows with n. An assumption
    # of order of magnitude, not a measured figure: 30 us bounds it
    "collective_step_latency_us": (0.0, 30.0),
    # host time per sequence of a step (only with Variant.fit_host): a Python scheduler and sampler
    # spend microseconds to tens of microseconds per request and step
    "host_us_per_sequence": (0.0, 200.0),
    # memory the runtime holds besides weights and KV cache: CUDA context (~0.5-1 GiB), the
    # engine's activation workspace and logits buffers (a few GiB)
    "runtime_reserve_GiB": (0.0, 16.0),
    "usable_memory_fraction": (0.70, 0.98),
    # sustained local-memory bandwidth of one die: from a tenth of any GPU's peak to above every peak
    CAP_FIELD: (100.0, 20000.0),
}
#: runtime_reserve_GiB search (memory rule "engine"): coarse grid, then +-0.5 and +-0.25 GiB
RESERVE_COARSE = tuple(float(g) for g in range(0, 13))
#: usable_memory_fraction search (memory rule "total-fraction"): coarse grid, then +-0.01
USABLE_COARSE = tuple(round(0.80 + 0.02 * i, 2) for i in range(10))
#: the engine rule sizes the KV cache from the memory that is free after weights and the
#: runtime's own allocations (TensorRT-LLM: cudaMemGetInfo), so the whole device counts: u = 1
ENGINE_USABLE_FRACTION = 1.0
#: calibration fields written to a fitted chip's ``[chips.<id>]`` table
HOST_FIELD = "host_us_per_sequence"
CHIP_PARAMS = (*FIT_FIELDS, EIGHT_BIT_FIELD, "usable_memory_fraction", "runtime_reserve_GiB", CAP_FIELD, HOST_FIELD)

SPLIT_METHOD = "fit if the first byte of sha256(id) is even, else held-out"
#: the accuracy the model is held to (issue 6): MAPE of the held-out rows, and of each group's
#: held-out rows (groups of ``--by``; the target is stated for (model, chip))
TARGET_HELD_OUT_MAPE_PCT = 7.0
TARGET_GROUP_MAPE_PCT = 12.0
#: key of the calibration fitted on every measured family together (``fit_calibration``). It goes
#: to the catalog chips (all GPUs) of families without measurements, not ``[default]``'s initial
#: assumptions, which stay for the 3D families. Leaving each measured family out of such a pooled
#: fit and predicting it (benchmarks/unseen_chip.py, VALIDATION.md §6.1) shows the pooled values
#: carry to an unseen family far better than ``[default]`` does
POOLED = "pooled"

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPLIT = REPO_ROOT / "validation" / "split.json"
#: the shared measurements file of a development checkout (``../shared/validation``), the
#: benchmarks' default ``--csv``
DEFAULT_MEASUREMENTS = REPO_ROOT.parent / "shared" / "validation" / "measurements.csv"


def family_of(chip: str) -> str:
    """The calibration family of a catalog chip (its ``family``; the chip id itself if it has none
    or is not in the catalog)."""
    from codesign import catalog

    return catalog.chip_family(chip)


# --- reading measurements ---------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One measurement row, typed."""

    id: str
    model: str
    gpu: str
    num_gpus: int
    tp: int
    pp: int
    ep: int
    attention_dp: int
    precision: str
    isl: int
    osl: int
    concurrency: int | None
    metric: str
    value: float
    unit: str = ""
    source: str = ""
    #: requests of the benchmark run (offline rows): the CSV's ``num_requests`` or, by ``source``,
    #: the shipped table (``benchmark_requests_path``); None if unknown
    num_requests: int | None = None
    #: the benchmark engine's ``max_batch_size`` (sequence slots per executor): the CSV's
    #: ``max_batch_size`` or, by ``source``, the shipped table (``benchmark_engines_path``); None if unknown
    engine_max_batch: int | None = None
    #: the benchmark engine's ``max_num_tokens`` (tokens per iteration): the CSV's ``max_num_tokens``
    #: or, by ``source``, the shipped table; None if unknown (no budget: the static round)
    engine_max_tokens: int | None = None
    #: precision of the KV cache: the CSV's ``kv_precision`` or the engine's rule (``engine_kv_precision``)
    kv_precision: str = ""
    #: the file's own names where they differ from the catalog ids read for them
    #: (``resolve_names``), e.g. ``{"model": "meta-llama/Llama-3.1-70B-Instruct"}``
    named_as: tuple[tuple[str, str], ...] = ()

    @property
    def dp(self) -> int:
        return self.num_gpus // (self.tp * self.pp)

    @property
    def kv_cache_precision(self) -> str:
        """The KV cache's precision: the row's ``kv_precision``, else the engine's rule."""
        return self.kv_precision or engine_kv_precision(self.precision)

    @property
    def attention_dp_on(self) -> bool:
        """Attention data-parallel over the whole TP group (model.md §4.8)."""
        return self.attention_dp > 1 and self.attention_dp == self.tp

    def engine_cap(self, cap: int | None, own: bool = True) -> int | None:
        """The engine's maximum batch for one replica: the row's own engine's ``engine_max_batch``
        where it is known, else ``cap`` (per executor; None: no cap at all), times TP under
        attention DP, where every rank runs its own executor with its own ``max_batch_size``
        (TensorRT-LLM's PyTorch executor sizes each attention-DP rank as TP 1 and divides the
        capacity by nothing; traced in ai-dynamo/dynamo PR #11982 against TensorRT-LLM v1.1).
        ``own=False``: ``cap`` even where the row's engine is known (``Variant.no_engine_cap``)."""
        if cap is None:
            return None
        if own and self.own_engine_cap is not None:
            return self.own_engine_cap
        return cap * (self.tp if self.attention_dp_on else 1)

    @property
    def own_engine_cap(self) -> int | None:
        """The row's own engine's maximum batch for one replica: ``engine_max_batch`` per
        micro-batch (PP of them), times TP under attention DP (one executor per rank); None if the
        engine is unknown."""
        if self.engine_max_batch is None:
            return None
        return self.engine_max_batch * self.pp * (self.tp if self.attention_dp_on else 1)

    @property
    def batch_step(self) -> int:
        """Granularity of a replica's batch: one sequence per stage (PP), and with attention DP
        one per stage and attention rank (TP x PP)."""
        return self.pp * (self.tp if self.attention_dp_on else 1)

    @property
    def request_limit(self) -> int | None:
        """Most sequences one replica can run at a time for lack of requests (a multiple of ``batch_step``):
        the requests per replica of an offline row, None if their number is unknown or the row
        has a fixed concurrency."""
        if self.num_requests is None or self.concurrency is not None:
            return None
        return math.ceil(math.ceil(self.num_requests / self.dp) / self.batch_step) * self.batch_step

    def key(self, by: Sequence[str]) -> str:
        return "|".join(str(getattr(self, k)) for k in by)


INT_FIELDS = ("num_gpus", "tp", "pp", "ep", "attention_dp", "isl", "osl")
_DEFAULT_ONE = ("pp", "ep", "attention_dp")
#: weight precisions whose checkpoints the benchmark engine serves with an FP8 KV cache:
#: trtllm-bench forces the KV cache to FP8 for FP8 and NVFP4 quantisation
#: (tensorrt_llm/bench/build/build.py: "If the quantization is NVFP4 or FP8, force the KV cache
#: dtype to FP8"); every other precision keeps the KV cache in the weights' precision
FP8_KV_PRECISIONS = ("fp8", "fp4")


def engine_kv_precision(precision: str) -> str:
    """KV-cache precision of a row without a ``kv_precision`` column (``FP8_KV_PRECISIONS``; a
    weight-only format's cache at its math's 16 bit, ``instance.kv_precision_of``)."""
    from codesign.kinds.grid.spec import kv_precision_of

    return "fp8" if precision in FP8_KV_PRECISIONS else kv_precision_of(precision, None)


#: other spellings of the precisions in measurement files (NVFP4 is the 4-bit format the catalog's
#: fp4 figures describe; MXFP4 is its own weight-only precision, ``mxfp4``: 4.25-bit weights, 16-bit
#: math, and not in FP8_KV_PRECISIONS, whose source rule names NVFP4 and FP8 only)
PRECISION_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8",
                     "fp8_e4m3": "fp8", "e4m3": "fp8", "nvfp4": "fp4", "mx_fp4": "mxfp4", "w4a16_mxfp4": "mxfp4"}


def resolve_names(model: str, gpu: str, precision: str) -> tuple[str, str, str, tuple[tuple[str, str], ...]]:
    """A row's model, chip and precision as catalog ids (``resolve_workload``, ``resolve_chip``,
    ``PRECISION_ALIASES``), and the names that were read as something else. A name that resolves
    to nothing is kept as written (``skip_reason`` then says why)."""
    from codesign.catalog import resolve_chip
    from codesign.model.workload import resolve_workload

    ids = (resolve_workload(model) or model, resolve_chip(gpu) or gpu,
           PRECISION_ALIASES.get(precision.lower(), precision.lower()) if precision else precision)
    given = (model, gpu, precision)
    renamed = tuple((k, g) for k, g, i in zip(("model", "gpu", "precision"), given, ids, strict=True) if g != i)
    return *ids, renamed


def _int_field(raw: dict[str, Any], key: str) -> int:
    """An integer column (empty: 1 for pp, ep and attention_dp; attention_dp may also be true or
    false, read in ``read_rows`` as the TP degree or 1); a clear error otherwise."""
    text = str(raw.get(key) or "").strip()
    if not text and key in _DEFAULT_ONE:
        return 1
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"column {key}: {text!r} is not an integer") from None


def read_benchmark_requests(path: str | Path | None = None) -> list[tuple[str, dict[tuple[int, int], int]]]:
    """The request counts of known benchmarks: (source prefix, {(ISL, OSL): requests}) per entry
    (default: ``benchmark_requests_path()``)."""
    import tomllib

    path = Path(path) if path is not None else benchmark_requests_path()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot read the benchmarks' request counts: {exc}", file=path) from None
    unknown = sorted(set(data) - {"benchmark"})
    entries = data.get("benchmark", [])
    if unknown or not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InputError("the request-count table must hold only [[benchmark]] tables", file=path,
                         key=unknown[0] if unknown else "benchmark",
                         expected='[[benchmark]] source = "owner/repo@commit:path", num_requests = { "ISL/OSL" = n }')
    out = []
    for i, entry in enumerate(entries):
        key = f"benchmark[{i}]"
        source, table = entry.get("source"), entry.get("num_requests")
        if not isinstance(source, str) or not source or not isinstance(table, dict):
            raise InputError("a benchmark entry needs a source (text) and a num_requests table", file=path, key=key,
                             expected='source = "owner/repo@commit:path", num_requests = { "ISL/OSL" = n }')
        counts: dict[tuple[int, int], int] = {}
        for lengths, n in table.items():
            parts = lengths.split("/")
            if (len(parts) != 2 or not all(p.strip().isdigit() for p in parts) or not isinstance(n, int)
                    or isinstance(n, bool) or n < 1):
                raise InputError("malformed request count", file=path, key=f"{key}.num_requests.{lengths}", value=n,
                                 expected='"ISL/OSL" = a positive integer, e.g. "128/128" = 30000')
            counts[(int(parts[0]), int(parts[1]))] = n
        out.append((source, counts))
    return sorted(out, key=lambda e: -len(e[0]))  # longest prefix first (``_requests_of``)


def _requests_of(source: str, isl: int, osl: int, known: list[tuple[str, dict[tuple[int, int], int]]]) -> int | None:
    """The count of the longest source prefix that lists (ISL, OSL) (``known`` longest first, as
    ``read_benchmark_requests`` returns it); None if none does."""
    for prefix, counts in known:
        if source.startswith(prefix) and (isl, osl) in counts:
            return counts[(isl, osl)]
    return None


@dataclass(frozen=True)
class BenchmarkEngines:
    """One benchmark's engines (``benchmark_engines.toml``): (catalog model, TP) -> {"general" or
    max_seq_len: (max_batch_size, max_num_tokens)}, and the maximum batch of a layout the table
    lacks (None: unknown, the row gets no engine rule)."""

    source: str
    default_max_batch: int | None
    engines: dict[tuple[str, int], dict[str | int, tuple[int, int]]]
    #: the tokens per iteration of a layout the table lacks (None: unknown, no budget)
    default_max_tokens: int | None = None

    def limits(self, model: str, tp: int, pp: int, max_seq_len: int) -> tuple[int, int] | None:
        """(max_batch_size, max_num_tokens) of the table's engine for the layout, None if it has none."""
        entry = self.engines.get((model, tp)) if pp == 1 else None
        return None if entry is None else entry.get(max_seq_len, entry["general"])

    def max_batch(self, model: str, tp: int, pp: int, max_seq_len: int) -> int | None:
        lim = self.limits(model, tp, pp, max_seq_len)
        return self.default_max_batch if lim is None else lim[0]

    def max_tokens(self, model: str, tp: int, pp: int, max_seq_len: int) -> int | None:
        lim = self.limits(model, tp, pp, max_seq_len)
        return self.default_max_tokens if lim is None else lim[1]


def read_benchmark_engines(path: str | Path | None = None) -> list[BenchmarkEngines]:
    """The engines of known benchmarks, longest source prefix first (default: ``benchmark_engines_path()``).
    A table's model names are read as catalog ids (``resolve_workload``)."""
    import tomllib

    from codesign.model.workload import resolve_workload

    path = Path(path) if path is not None else benchmark_engines_path()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot read the benchmarks' engines: {exc}", file=path) from None
    expected = ('[[benchmark]] source = "owner/repo@commit:path", [default_max_batch_size = n,] '
                '[benchmark.engines."<HF model>"] tp<N> = { general = [max_batch_size, max_num_tokens], <max_seq_len> = [...] }')
    entries = data.get("benchmark", [])
    unknown = sorted(set(data) - {"benchmark"})
    if unknown or not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InputError("the engine table must hold only [[benchmark]] tables", file=path,
                         key=unknown[0] if unknown else "benchmark", expected=expected)

    def positive(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1

    known_keys = {"source", "cite", "table_source", "default_max_batch_size", "default_max_num_tokens", "engines"}
    out = []
    for i, entry in enumerate(entries):
        key = f"benchmark[{i}]"
        stray = sorted(set(entry) - known_keys)
        if stray:
            raise InputError("unknown key in a benchmark entry", file=path, key=f"{key}.{stray[0]}",
                             expected=f"only {', '.join(sorted(known_keys))}")
        source, default, models = entry.get("source"), entry.get("default_max_batch_size"), entry.get("engines", {})
        default_tokens = entry.get("default_max_num_tokens")
        if (not isinstance(source, str) or not source or (default is not None and not positive(default))
                or (default_tokens is not None and not positive(default_tokens)) or not isinstance(models, dict)):
            raise InputError("a benchmark entry needs a source (text) and an engines table (and, if given, a "
                             "positive default_max_batch_size and default_max_num_tokens)", file=path, key=key,
                             expected=expected)
        engines: dict[tuple[str, int], dict[str | int, tuple[int, int]]] = {}
        named: dict[str, str] = {}
        for name, layouts in models.items():
            mkey = f"{key}.engines.{name}"
            model = resolve_workload(name)
            if model is None:
                raise InputError("unknown model in the engine table", file=path, key=mkey, value=name,
                                 expected="a Hugging Face name the catalog knows (a workload's aliases)")
            if model in named:
                raise InputError(f"two names for one catalog model ({named[model]!r} and {name!r} are both {model})",
                                 file=path, key=mkey, value=name, expected="one entry per model")
            named[model] = name
            if not isinstance(layouts, dict):
                raise InputError("malformed engine model entry", file=path, key=mkey, value=layouts,
                                 expected="a table of tp<N> layouts")
            for layout, by_len in layouts.items():
                lkey = f"{mkey}.{layout}"
                if not (layout.startswith("tp") and layout[2:].isdigit() and int(layout[2:]) >= 1):
                    raise InputError("malformed engine layout name", file=path, key=lkey, value=layout,
                                     expected="tp<N>, N >= 1 (PP 1 engines only)")
                if not isinstance(by_len, dict) or "general" not in by_len:
                    raise InputError("malformed engine layout", file=path, key=lkey, value=by_len,
                                     expected='{ general = [max_batch_size, max_num_tokens], <max_seq_len> = [...] }')
                sizes: dict[str | int, tuple[int, int]] = {}
                for length, pair in by_len.items():
                    if (not (length == "general" or (length.isdigit() and int(length) >= 1)) or not isinstance(pair, list)
                            or len(pair) != 2 or not all(positive(v) for v in pair)):
                        raise InputError("malformed engine limits", file=path, key=f"{lkey}.{length}", value=pair,
                                         expected='"general" or a max_seq_len = [max_batch_size, max_num_tokens], '
                                                  'positive integers')
                    sizes["general" if length == "general" else int(length)] = (pair[0], pair[1])
                engines[(model, int(layout[2:]))] = sizes
        out.append(BenchmarkEngines(source, default, engines, default_tokens))
    return sorted(out, key=lambda e: -len(e.source))  # longest prefix first


def _engine_of(source: str, model: str, tp: int, pp: int, isl: int, osl: int,
               known: list[BenchmarkEngines]) -> tuple[int | None, int | None]:
    """(``max_batch_size``, ``max_num_tokens``) of the engine the longest source prefix in ``known``
    lists for the row (its max_seq_len = ISL + OSL), (None, None) if no prefix matches."""
    for b in known:
        if source.startswith(b.source):
            return b.max_batch(model, tp, pp, isl + osl), b.max_tokens(model, tp, pp, isl + osl)
    return None, None


def read_rows(csv_path: str | Path) -> tuple[list[Row], list[dict[str, Any]]]:
    """Parse a measurements CSV: (typed rows, malformed rows each with its reason). An offline
    row's request count is its ``num_requests`` column or, if empty, that of its ``source`` in
    the shipped table (``benchmark_requests_path``); its engine's maximum batch likewise
    (``max_batch_size``, ``benchmark_engines_path``)."""
    known = read_benchmark_requests()
    engines = read_benchmark_engines()
    path = Path(csv_path)
    if not path.is_file():
        raise InputError("measurements file not found", file=path)
    try:
        return _read_rows(path, known, engines)
    except UnicodeDecodeError:
        raise InputError("not a measurements CSV: not UTF-8 text", file=path, expected="a CSV file") from None


#: the columns every measurements file has (the others are optional)
REQUIRED_COLUMNS = ("id", "model", "gpu", "num_gpus", "tp", "isl", "osl", "metric", "value")


def _float_field(raw: dict[str, Any], key: str) -> float:
    text = str(raw.get(key) or "").strip()
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"column {key}: {text!r} is not a number") from None


def _read_rows(path: Path, known: Any, engines: Any) -> tuple[list[Row], list[dict[str, Any]]]:
    rows: list[Row] = []
    bad: list[dict[str, Any]] = []
    first_line: dict[str, int] = {}
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        have = list(reader.fieldnames or [])
        missing = [c for c in REQUIRED_COLUMNS if c not in have]
        if missing:
            raise InputError(
                f"measurements file lacks the column(s) {', '.join(missing)}", file=path, value=have,
                expected=f"a header with at least {', '.join(REQUIRED_COLUMNS)} (optional: pp, ep, attention_dp, "
                         "precision, kv_precision, concurrency, unit, source, num_requests, max_batch_size, max_num_tokens)",
            )
        for i, raw in enumerate(reader):
            rid = (raw.get("id") or "").strip() or f"line{i + 2}"
            if rid in first_line:
                bad.append({"id": rid, "reason": f"duplicate id: line {i + 2} repeats the id of line {first_line[rid]}"})
                continue
            first_line[rid] = i + 2
            try:
                adp_text = str(raw.get("attention_dp") or "").strip().lower()
                if adp_text in ("true", "yes", "false", "no"):  # a flag: over the whole TP group, or off
                    raw = {**raw, "attention_dp": raw.get("tp") if adp_text in ("true", "yes") else "1"}
                ints = {k: _int_field(raw, k) for k in INT_FIELDS}
                model, gpu, precision, named_as = resolve_names(
                    str(raw["model"]).strip(), str(raw["gpu"]).strip(), str(raw.get("precision") or "").strip())
                kv_text = str(raw.get("kv_precision") or "").strip()
                kv_precision = (PRECISION_ALIASES.get(kv_text.lower(), kv_text.lower()) if kv_text
                                else engine_kv_precision(precision))
                if kv_text and kv_text != kv_precision:
                    named_as = (*named_as, ("kv_precision", kv_text))
                conc = str(raw.get("concurrency") or "").strip()
                reqs = str(raw.get("num_requests") or "").strip()
                source = str(raw.get("source") or "").strip()
                n_req = _int_field(raw, "num_requests") if reqs else _requests_of(source, ints["isl"], ints["osl"], known)
                if n_req is not None and n_req < 1:
                    raise ValueError(f"num_requests must be positive, got {n_req}")
                table_mb, table_mt = _engine_of(source, model, ints["tp"], ints["pp"], ints["isl"], ints["osl"], engines)
                mbs = str(raw.get("max_batch_size") or "").strip()
                engine_mb = _int_field(raw, "max_batch_size") if mbs else table_mb
                if engine_mb is not None and engine_mb < 1:
                    raise ValueError(f"max_batch_size must be positive, got {engine_mb}")
                mnt = str(raw.get("max_num_tokens") or "").strip()
                engine_mt = _int_field(raw, "max_num_tokens") if mnt else table_mt
                if engine_mt is not None and engine_mt < 1:
                    raise ValueError(f"max_num_tokens must be positive, got {engine_mt}")
                rows.append(
                    Row(
                        id=rid, model=model, gpu=gpu, named_as=named_as,
                        precision=precision, kv_precision=kv_precision, metric=str(raw["metric"]).strip(),
                        value=_float_field(raw, "value"), concurrency=_int_field(raw, "concurrency") if conc else None,
                        unit=str(raw.get("unit") or "").strip(), source=source, num_requests=n_req,
                        engine_max_batch=engine_mb, engine_max_tokens=engine_mt, **ints,
                    )
                )
            except (TypeError, ValueError) as exc:
                bad.append({"id": rid, "reason": f"malformed row: {exc}"})
    return rows, bad


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --- one row -> one instance ------------------------------------------------------------------
#: PCIe cards whose TP traffic crosses the server's PCIe fabric (VALIDATION.md §5.4), as the
#: catalog modelled them before (the ablation ``pcie_as_before``): the A100 PCIe paired by the
#: optional NVLink bridge (nvlink3, scale-up domain 2)
PCIE_CARDS_BEFORE: dict[str, dict[str, Any]] = {
    "a100-pcie-80gb": {"scale_up": "nvlink3", "scale_up_domain": 2},
}
#: the same change proposed for the L40S (``Variant(l40s_tp_over_pcie=True)``): its catalog
#: domain of 1 sends TP collectives over the scale-out NIC; an 8-card PCIe server would keep
#: them on PCIe
L40S_PCIE_SERVER: dict[str, Any] = {"scale_up_domain": 8}


@dataclass(frozen=True)
class Variant:
    """How rows are mapped, fitted and predicted. The default is the model as it is; the other
    settings undo one of its mechanisms (ablations) or try a candidate change (proposals),
    measured by :func:`proposals` (VALIDATION.md §6)."""

    name: str = "model"
    #: calibration fields held at a value instead of fitted, on top of HELD_FIELDS (a field given
    #: here wins), e.g. ``(("stream_overlap", 1.0),)``: the roofline max of the compute and memory
    #: streams (the model before VALIDATION.md §5.1)
    fixed: tuple[tuple[str, float], ...] = ()
    #: fit the stream overlap per family instead of holding it at HELD_FIELDS' 0 (the model of
    #: fixes 1-16, VALIDATION.md §5.17)
    fit_overlap: bool = False
    #: ablation of §5.3: embedding and LM head at the weights' precision (not at least 16 bit)
    embeddings_at_weight_precision: bool = False
    #: memory rule. "engine": the model's KV <= f (u C - W - R) with f = [default]
    #: kv_cache_free_fraction, u = 1 and R fitted; "total-fraction" (ablation): W + KV <= u C with
    #: u fitted (f = 1, R = 0), the rule before VALIDATION.md §5.3
    memory_rule: str = "engine"
    #: ablation of §5.4: PCIe cards as the catalog had them (PCIE_CARDS_BEFORE)
    pcie_as_before: bool = False
    #: proposal of §5.4: the L40S in an 8-card PCIe server (L40S_PCIE_SERVER)
    l40s_tp_over_pcie: bool = False
    #: fit each chip on its own instead of per family (e.g. the 300 W A100 PCIe vs the 400 W SXM)
    per_chip: bool = False
    #: throughput from in-flight-batching iterations instead of the static round: every decode
    #: iteration also carries 1/OSL of the batch's prefill (its FLOPs and link traffic; the
    #: weights are read once per iteration)
    mixed_iteration: bool = False
    #: the requests of the run (Row.num_requests) run in waves of the batch, the last one partial
    request_waves: bool = False
    #: ablation of §5.8: the batch not capped at the run's requests per replica (Row.request_limit)
    no_request_cap: bool = False

    #: ablation of §5.2: the A100 PCIe card calibrated with the A100 SXM module (one "ampere" family)
    ampere_one_family: bool = False
    #: ablation of §5.6: no all-gather of the vocabulary-parallel logits (schedule.LOGITS_GATHER)
    no_logits_gather: bool = False
    #: ablation of §5.9: the collective latency charged once per call (two all-reduces per layer and
    #: the logits all-gather) instead of once per ring step, i.e. independent of the TP degree
    collective_per_call: bool = False
    #: ablation of §5.7: no activation traffic between kernels (workload.ACTIVATION_TRAFFIC)
    no_activation_traffic: bool = False
    #: ablation of §5.13: no logits traffic from the LM head through sampling (workload.LOGITS_TRAFFIC;
    #: the fix chain's "+request-cap" stage)
    no_logits_traffic: bool = False
    #: ablation of §5.10: no die bandwidth cap (every chip of a family at e x its own peak)
    no_bandwidth_cap: bool = False
    #: ablation of §5.12: every all-reduce in a ring, none in the switch (network.IN_SWITCH_MIN_RANKS)
    ring_allreduce: bool = False
    #: fit the host time per sequence of a step too (``host_us_per_sequence``, eq. 5.3): an
    #: engine whose scheduler and sampler run per request on the CPU (VALIDATION.md §6.3)
    fit_host: bool = False
    #: proposal: the engine's dynamic batch-size tuner lowers the memory batch to a table value
    #: (``runtime_batch``)
    runtime_batch_table: bool = False
    #: the embedding table whole on every TP rank (schedule.REPLICATED_EMBEDDING)
    replicated_embedding: bool = False
    #: ablation of §5.14: a PCIe server's cards on one fabric, no socket boundary (the chips'
    #: scale_up_socket_size ignored)
    one_socket: bool = False
    #: fix 18 (§5.15), withdrawn with fix 19: fit the 8-bit tensor rate's own efficiency
    #: (``compute_efficiency_8bit``) for a family with fit rows at both an 8-bit and a wider format;
    #: False (the model): one compute efficiency for every format
    fit_8bit: bool = False
    #: ablations of §5.16: the rows' engines' sequence slots hold no decoding state (``engine_state_B``
    #: = 0), and their ``max_batch_size`` does not cap the batch (the heuristic's 4096 does)
    no_engine_state: bool = False
    no_engine_cap: bool = False
    #: ablation of fix 19 (§5.18): no token budget per iteration (the rows' ``engine_max_tokens``
    #: ignored: the static round, as before it)
    no_token_budget: bool = False

    def group_of(self, chip: str) -> str:
        if self.ampere_one_family and chip in AMPERE_BEFORE:
            return "ampere"
        return chip if self.per_chip else family_of(chip)

    @property
    def fixed_values(self) -> dict[str, float]:
        held = {k: v for k, v in HELD_FIELDS if not (self.fit_overlap and k == "stream_overlap")}
        return {**held, **dict(self.fixed)}


MODEL = Variant()
#: the chips of the "ampere" family before the A100 PCIe card got its own (``ampere_one_family``)
AMPERE_BEFORE = ("a100-sxm-80gb", "a100-pcie-80gb")


@contextmanager
def model_switches(variant: Variant):
    """The model with the variant's code-level ablations while inside: ``embeddings_at_weight_precision``
    (the 16-bit floor ``workload.EMBEDDING_MIN_BYTES_PER_PARAM`` set to 0), ``no_logits_gather``
    (``schedule.LOGITS_GATHER`` off), ``no_activation_traffic`` (``workload.ACTIVATION_TRAFFIC`` off),
    ``no_logits_traffic`` (``workload.LOGITS_TRAFFIC`` off), ``ring_allreduce``
    (``network.IN_SWITCH_MIN_RANKS`` infinite), ``one_socket`` (``network.SOCKETS`` off) and
    ``no_engine_state`` (``schedule.DECODER_STATE`` off: no sequence's decoding state at all)."""
    from codesign.model import network, schedule, workload

    saved = (workload.EMBEDDING_MIN_BYTES_PER_PARAM, schedule.LOGITS_GATHER, workload.ACTIVATION_TRAFFIC,
             workload.LOGITS_TRAFFIC)
    saved_switch = network.IN_SWITCH_MIN_RANKS
    saved_embedding = schedule.REPLICATED_EMBEDDING
    saved_sockets = network.SOCKETS
    saved_state = schedule.DECODER_STATE
    if variant.no_engine_state:
        schedule.DECODER_STATE = False
    if variant.one_socket:
        network.SOCKETS = False
    if variant.replicated_embedding:
        schedule.REPLICATED_EMBEDDING = True
    if variant.ring_allreduce:
        network.IN_SWITCH_MIN_RANKS = math.inf
    if variant.embeddings_at_weight_precision:
        workload.EMBEDDING_MIN_BYTES_PER_PARAM = 0.0
    if variant.no_logits_gather:
        schedule.LOGITS_GATHER = False
    if variant.no_activation_traffic:
        workload.ACTIVATION_TRAFFIC = False
    if variant.no_logits_traffic:
        workload.LOGITS_TRAFFIC = False
    try:
        yield
    finally:
        (workload.EMBEDDING_MIN_BYTES_PER_PARAM, schedule.LOGITS_GATHER, workload.ACTIVATION_TRAFFIC,
         workload.LOGITS_TRAFFIC) = saved
        network.IN_SWITCH_MIN_RANKS = saved_switch
        schedule.REPLICATED_EMBEDDING = saved_embedding
        network.SOCKETS = saved_sockets
        schedule.DECODER_STATE = saved_state


def _system_of(row: Row, variant: Variant) -> dict[str, Any]:
    from codesign import catalog

    chip = catalog.load_chip(row.gpu)
    system: dict[str, Any] = {"devices": row.num_gpus, "scale_up_domain": chip.scale_up_domain_size}
    if variant.pcie_as_before and row.gpu in PCIE_CARDS_BEFORE:
        system.update(PCIE_CARDS_BEFORE[row.gpu])
    if variant.l40s_tp_over_pcie and row.gpu == "l40s":
        system.update(L40S_PCIE_SERVER)
    return system


def row_instance(row: Row, batch: int, variant: Variant = MODEL):
    """The one-design catalog instance of ``row`` at ``batch`` sequences per model replica."""
    from codesign.kinds.grid.spec import Instance, InstanceFile

    raw = {
        "name": f"validate-{row.id}",
        "description": f"measurement row {row.id}",
        "system": _system_of(row, variant),
        "hardware": {"family": "catalog", "chip": row.gpu},
        "workloads": [
            {
                "name": "main",
                "workload": row.model,
                "precision": row.precision,
                "kv_precision": row.kv_cache_precision,
                "phase": "both",
                "input_tokens": row.isl,
                "output_tokens": row.osl,
                **({} if variant.no_token_budget or row.engine_max_tokens is None
                   else {"max_tokens_per_iteration": row.engine_max_tokens}),
                "decisions": {"tp": [row.tp], "pp": [row.pp], "ep": [row.ep], "batch": [int(batch)],
                              **({"attention_dp": [True]} if row.attention_dp_on else {})},
            }
        ],
    }
    return Instance(InstanceFile.model_validate(raw), source=None, raw=raw)


def evaluate_row(row: Row, batch: int, variant: Variant = MODEL):
    """``evaluate`` of the row's instance at ``batch`` (the model, nothing else)."""
    from codesign.model.evaluate import evaluate

    inst = row_instance(row, batch, variant)
    with model_switches(variant):
        return evaluate(inst, inst.baseline())


def _memory_audit(ev) -> Any:
    return next(a for a in ev.audit if a.name.startswith("memory-capacity-local"))


def skip_reason(row: Row, variant: Variant = MODEL) -> str | None:
    """Why ``row`` cannot be predicted, or None."""
    from codesign import catalog
    from codesign.kinds.grid.spec import BYTES_PER_ELEMENT
    from codesign.model.schedule import structural_reason
    from codesign.model.workload import load_workload

    if row.metric not in METRICS:
        return f"unsupported metric {row.metric!r} (supported: {', '.join(METRICS)})"
    if not (math.isfinite(row.value) and row.value > 0):
        return f"measured value {row.value!r} is not a positive number"
    try:
        w = load_workload(row.model)
    except InputError as exc:
        return f"unknown model {row.model!r}" + (f" ({exc.suggestion})" if exc.suggestion else "")
    try:
        catalog.load_chip(row.gpu)
    except InputError as exc:
        return f"unknown chip {row.gpu!r}" + (f" ({exc.suggestion})" if exc.suggestion else "")
    if row.precision not in BYTES_PER_ELEMENT:
        return f"unknown precision {row.precision!r} (known: {', '.join(BYTES_PER_ELEMENT)})"
    if row.kv_cache_precision not in BYTES_PER_ELEMENT:
        return f"unknown kv_precision {row.kv_cache_precision!r} (known: {', '.join(BYTES_PER_ELEMENT)})"
    if row.attention_dp > 1 and not row.attention_dp_on:
        return (f"attention_dp = {row.attention_dp} with tp = {row.tp}: attention data parallelism over part "
                "of the TP group is not modelled (only over all of it, model.md §4.8)")
    if min(row.num_gpus, row.tp, row.pp, row.ep) < 1 or min(row.isl, row.osl) < 1:
        return "num_gpus, tp, pp, ep, isl and osl must be positive"
    if row.num_gpus % (row.tp * row.pp):
        return f"tp*pp = {row.tp * row.pp} does not divide num_gpus = {row.num_gpus}"
    if row.concurrency is not None and row.concurrency < 1:
        return f"concurrency {row.concurrency} is not positive"
    if row.concurrency is not None and row.attention_dp_on and math.ceil(row.concurrency / row.dp) % row.batch_step:
        return (f"concurrency {row.concurrency} over dp = {row.dp} does not split evenly over tp x pp = "
                f"{row.batch_step} attention-DP shares (unequal shares are not modelled)")
    domain = _system_of(row, variant)["scale_up_domain"]
    probe = {"tp": row.tp, "pp": row.pp, "ep": row.ep, "batch": row.batch_step, "weights_tier": "local",
             "kv_tier": "local", "attention_dp": row.attention_dp_on}
    why = structural_reason(w, None, row.num_gpus, False, probe, domain)  # type: ignore[arg-type]
    if why:
        return f"layout not supported by the model: {why}"
    return None


# --- batch ------------------------------------------------------------------------------------
#: the calibration fields of the memory rule (eq. 3.21, 4.14a)
MEMORY_FIELDS = ("usable_memory_fraction", "runtime_reserve_GiB", "kv_cache_free_fraction")


@dataclass(frozen=True)
class Footprint:
    """The model's per-device memory footprint of a row: weights and the KV cache of one sequence
    (at ISL + OSL), the raw capacity, and the memory rule of the calibration the evaluation ran
    with: KV <= f (u C - R - W), i.e. W + KV / f <= ``usable_B`` = u C - R."""

    weights_B: float
    kv_per_sequence_B: float
    raw_capacity_B: float
    usable_B: float  # u C - R at the calibration the evaluation ran with
    kv_free_fraction: float  # f
    #: what the row's engine allocates for its sequence slots before it sizes the KV cache
    #: (``engine_state_B``), taken off the usable memory like the reserve: KV <= f (u C - R - S - W)
    engine_state_B: float = 0.0
    #: the decoding state the model itself charges per sequence of the batch (eq. 4.14b: an engine
    #: built for the batch, one slot per sequence): with the row's engine known it is part of
    #: ``engine_state_B`` (that engine has at least the batch's slots), else it is the state
    state_per_sequence_B: float = 0.0

    def state_B(self, batch: float) -> float:
        """The decoding state at ``batch``: the row's engine's slots, or the batch's own if more
        (or if the engine is unknown)."""
        return max(self.engine_state_B, batch * self.state_per_sequence_B)


def footprint(row: Row, variant: Variant = MODEL) -> Footprint:
    """Read the affine memory footprint off one evaluation at the smallest batch (``batch_step``)."""
    from codesign.model.hardware import kv_cache_free_fraction

    ev = evaluate_row(row, row.batch_step, variant)
    m = ev.workload_metrics["main"]
    return Footprint(
        weights_B=m["weights_per_device_B"],
        kv_per_sequence_B=m["kv_per_device_B"] / row.batch_step,
        raw_capacity_B=ev.metrics["raw_capacity_B"],
        usable_B=_memory_audit(ev).limit,
        kv_free_fraction=kv_cache_free_fraction(),
        engine_state_B=0.0 if variant.no_engine_state else engine_state_B(row),
        state_per_sequence_B=m["decoder_state_per_device_B"] / row.batch_step,
    )


def engine_state_B(row: Row) -> float:
    """Bytes per device the row's engine allocates for its ``engine_max_batch`` sequence slots
    before sizing the KV cache (``decoder_state_per_slot_B`` at max_seq_len = ISL + OSL, the
    engine's under a ``--dataset`` build); 0 if the row's engine is unknown."""
    from codesign.model.workload import load_workload

    if row.engine_max_batch is None:
        return 0.0
    # a device holds its own executor's slots: under attention DP each rank has its own
    # max_batch_size (``engine_cap`` multiplies the replica's batch by TP, not the state); with
    # PP the runtime keeps max_batch_size slots per micro-batch (``mMaxNumSequences`` = PP x
    # max_batch_size), all on the last stage's ranks, which bind: charged on every device
    slots = row.engine_max_batch * row.pp
    per_slot = decoder_state_per_slot_B(load_workload(row.model).vocab_size, row.tp, row.isl + row.osl)
    return float(slots * per_slot)


def _fits(ev, fp: Footprint) -> bool:
    """The model's ``memory-capacity-local`` audit, whose value charges the batch's own decoding
    state (eq. 4.14b), with the rest of the engine's slots' state taken off its limit."""
    from codesign.model.evaluate import holds

    a = _memory_audit(ev)
    own = ev.workload_metrics["main"]["decoder_state_per_device_B"]
    return bool(holds(a.value, a.limit - max(fp.engine_state_B - own, 0.0)))


#: TensorRT-LLM's dynamic batch-size tuner (``executor::DynamicBatchConfig::kDefaultBatchSizeTable``
#: and ``DynamicBatchTuner::getRuntimeBatchSize``): the batch the KV cache holds at the run's mean
#: ISL + OSL, the "max capacity batch size" c, is lowered to a table value: c < 144 -> 128, < 336 ->
#: 256, < 672 -> 512, < 832 -> 768, < 1280 -> 1024, < 1664 -> 1536; beyond, c rounded down to a
#: multiple of 512 when within 128 of it, else c
RUNTIME_BATCH_TABLE: tuple[tuple[int, int], ...] = ((144, 128), (336, 256), (672, 512), (832, 768), (1280, 1024),
                                                     (1664, 1536))
RUNTIME_BATCH_GRANULARITY, RUNTIME_BATCH_FALLBACK = 512, 128


def runtime_batch(capacity: int, step: int = 1) -> int:
    """The engine's runtime maximum batch for a KV cache that holds ``capacity`` sequences
    (``RUNTIME_BATCH_TABLE``), the batch in flight being the smaller of the two; rounded down to
    a multiple of ``step`` (a row's ``batch_step``), but never below one step the cache holds."""
    for limit, size in RUNTIME_BATCH_TABLE:
        if capacity < limit:
            runtime = min(size, capacity)
            break
    else:
        floor = capacity // RUNTIME_BATCH_GRANULARITY * RUNTIME_BATCH_GRANULARITY
        runtime = floor if capacity < floor + RUNTIME_BATCH_FALLBACK else capacity
    return max(runtime // step * step, min(capacity, step))


def batch_from(row: Row, fp: Footprint, mem: dict[str, float] | None, cap: int | None, *,
               requests: bool = True, table: bool = False, own_cap: bool = True) -> int:
    """Largest batch (multiple of ``batch_step``) whose KV cache fits, at most ``cap`` and (if ``requests``)
    the row's requests per replica (``Row.request_limit``); 0 if none fits.

    The rule is the model's: KV <= f (u C - R - S - W), with (u, R, f) from ``mem`` (the fields of
    MEMORY_FIELDS) or, if None, the calibration the footprint was evaluated with, and S the
    decoding state of the larger of the row's engine's slots and the batch's own (eq. 4.14b,
    ``Footprint.state_B``)."""
    if row.concurrency is not None:
        b = math.ceil(math.ceil(row.concurrency / row.dp) / row.batch_step) * row.batch_step
        own = row.own_engine_cap if own_cap else None
        return b if own is None else min(b, max(row.batch_step, own // row.batch_step * row.batch_step))
    if mem is None:
        room, f = fp.usable_B, fp.kv_free_fraction
    else:
        from codesign.model.hardware import GiB

        room = fp.raw_capacity_B * mem["usable_memory_fraction"] - mem["runtime_reserve_GiB"] * GiB
        f = mem["kv_cache_free_fraction"]
    # W + b KV / f + max(S, b s) <= room: both W + b KV / f + S and W + b (KV / f + s) must fit
    free = room - fp.weights_B
    step = row.batch_step
    per_seq = (fp.kv_per_sequence_B / f, fp.kv_per_sequence_B / f + fp.state_per_sequence_B)
    fits = (free - fp.engine_state_B, free)
    b = min(math.floor(x / p / step) * step if x > 0 else 0 for x, p in zip(fits, per_seq, strict=True))
    if table:
        b = runtime_batch(b, step)
    cap = row.engine_cap(cap, own_cap)
    if cap is not None:
        b = min(b, max(step, (cap // step) * step))
    if requests and row.request_limit is not None:
        b = min(b, row.request_limit)
    return max(b, 0)


@dataclass
class BatchChoice:
    batch: int
    footprint: Footprint
    #: what set the batch: "memory" (the KV cache fills it), "engine" (the engine's maximum batch)
    #: or "requests" (the run has no more requests per replica)
    bound: str = "memory"
    reason: str = ""


def max_batch(row: Row, cap: int | None = ENGINE_MAX_BATCH, variant: Variant = MODEL) -> BatchChoice:
    """The memory-filling batch of an offline row, decided by the model's ``memory-capacity-local``
    audit: feasible at the returned batch, infeasible one step (``batch_step`` sequences) above it, unless the
    engine's maximum batch ``cap`` or the row's requests per replica bind first (``bound``).
    ``batch == 0`` (with ``reason``) if not even one step fits."""
    fp = footprint(row, variant)
    step = row.batch_step
    b = batch_from(row, fp, None, None, requests=False)
    while b > 0 and not _fits(evaluate_row(row, b, variant), fp):
        b -= step
    while _fits(evaluate_row(row, b + step, variant), fp):
        b += step
    if b < step:
        w = fp.weights_B / 1e9
        usable = (fp.usable_B - fp.engine_state_B) / 1e9
        free = max(usable - w, 0)
        state = (f" (after {fp.engine_state_B / 1e9:.2f} GB of the engine's decoding state for "
                 f"{row.engine_max_batch} slots)" if fp.engine_state_B else
                 f" (each sequence also holds {fp.state_per_sequence_B / 1e6:.1f} MB of decoding state)")
        return BatchChoice(0, fp, reason=(
            f"does not fit: weights {w:.1f} GB per device leave {free:.2f} GB of {usable:.1f} GB "
            f"usable{state}; the KV cache of {step} sequence(s) needs {fp.kv_per_sequence_B * step / 1e9:.2f} GB "
            f"at {fp.kv_free_fraction:.0%} of the free memory"))
    limits = [("memory", b)]
    if variant.runtime_batch_table:  # the engine's runtime batch table (a proposal, runtime_batch)
        limits.append(("engine", runtime_batch(b, step)))
    if cap is not None:
        limits.append(("engine", (row.engine_cap(cap, not variant.no_engine_cap) // step) * step))
    if row.request_limit is not None and not variant.no_request_cap:
        limits.append(("requests", row.request_limit))
    bound, batch = min(limits, key=lambda lim: (lim[1], lim[0] != "memory"))
    return BatchChoice(batch, fp, bound)


# --- terms and re-composition -----------------------------------------------------------------
#: the per-row quantities a stage step is re-composed from (``step_time``): times at efficiency 1,
#: modelled times, counts, and one chip constant, the peak local-memory bandwidth the die's cap is
#: a fraction of (eq. 3.21a). They travel together so that a family's rows re-compose as arrays.
STEP_TERMS = ("compute", "memory_local", "memory_pool", "net_bw", "net_latency", "layers", "collective_steps", "sequences",
              "memory_peak_GBps", "eight_bit")


@dataclass
class RowTerms:
    """Calibration-free stage-step terms of one evaluated row: seconds at efficiency 1 (compute,
    local memory, link bytes), seconds as modelled (pooled memory, link latency), layers per stage,
    ring steps of the step's TP collectives."""

    batch: int
    dp: float
    pp: float
    osl: int
    devices: int
    metric: str
    prefill: dict[str, float]
    decode: dict[str, float]
    #: the evaluation's own metrics at the calibration it ran with, each step's local weight,
    #: KV-cache and whole-tensor activation bytes per device (``<phase>_step.bytes_weights_local``,
    #: ``..._kv_local``, ``..._act_replicated_local``) and, under a token budget, the round's extra
    #: iterations (``<phase>_step.extra_iterations``)
    evaluated: dict[str, float]


def row_terms(row: Row, batch: int, variant: Variant = MODEL) -> RowTerms:
    """Evaluate ``row`` at ``batch`` and divide the calibration out of every step term."""
    from codesign import catalog
    from codesign.model.hardware import (
        EIGHT_BIT_FORMATS,
        achieved_memory_fraction,
        calibration_for,
        math_format,
    )

    ev = evaluate_row(row, batch, variant)
    m = ev.workload_metrics["main"]
    cal = calibration_for(row.gpu)
    chip = catalog.load_chip(row.gpu)
    peak_GBps = chip.memory_bandwidth_GBps
    fmt = math_format(chip.peak_dense_TFLOPS, row.precision, f"chip {row.gpu} peak_dense_TFLOPS")  # as the columns
    mem_eff = float(achieved_memory_fraction(cal.memory_efficiency, cal.memory_bandwidth_cap_GBps, peak_GBps))
    phases: dict[str, dict[str, float]] = {}
    for ph in ("prefill", "decode"):
        def g(k: str, ph: str = ph) -> float:
            return float(m[f"{ph}_step.{k}_s"])

        phases[ph] = {  # each stream: its serial and its overlapped part (eq. 5.3)
            "compute": (g("compute") + g("compute_overlapped")) * cal.compute_efficiency_at(fmt),
            # 1 where the compute runs at the 8-bit tensor rate (its own efficiency, eq. 3.20c)
            "eight_bit": float(fmt in EIGHT_BIT_FORMATS),
            "memory_local": (g("memory_local") + g("memory_local_overlapped")) * mem_eff,
            "memory_pool": g("memory_pool") + g("memory_pool_overlapped"),
            "net_bw": (g("scale_up_bw") + g("scale_up_bw_in_switch") + g("scale_up_bw_cross") + g("scale_out_bw"))
                      * cal.network_efficiency,
            "net_latency": g("scale_up_latency") + g("scale_out_latency"),
            # counts read off the model: layers of the stage, ring steps of its TP collectives (eq. 4.10a)
            "layers": float(m[f"{ph}_step.layers"]),
            "collective_steps": (float(m[f"{ph}_step.collective_steps"]) if not variant.collective_per_call
                                 else _collective_calls(row, m[f"{ph}_step.layers"], variant)),
            "memory_peak_GBps": peak_GBps,  # the chip's, for the die's cap (eq. 3.21a)
            "sequences": float(m[f"{ph}_step.sequences"]),
        }
    evaluated = {k: float(m[k]) for k in ("tokens_per_s", "tokens_per_s_per_device", "tpot_s", "ttft_s",
                                          *(f"{ph}_step.bytes_{part}_local" for ph in ("prefill", "decode")
                                            for part in ("weights", "kv", "act_replicated")))}
    # the iterations the engine's token budget adds (eq. 4.19), where the row has one
    evaluated |= {k: float(m[k]) for k in ("prefill_step.extra_iterations", "decode_step.extra_iterations") if k in m}
    return RowTerms(batch, float(m["dp"]), float(m["pp"]), row.osl, row.num_gpus, row.metric,
                    phases["prefill"], phases["decode"], evaluated)


def _collective_calls(row: Row, layers_stage: float, variant: Variant) -> float:
    """TP collective calls of one stage step (the per-call ablation of §5.9): two all-reduces per
    layer and the logits all-gather; under attention DP an all-gather and a reduce-scatter per MoE
    layer of the stage (model.md eq. 4.17), no logits gather."""
    from codesign.model.workload import load_workload

    if row.tp <= 1:
        return 0.0
    if row.attention_dp_on:
        w = load_workload(row.model)
        return 2.0 * w.moe_layers * layers_stage / w.num_layers
    return 2.0 * layers_stage + float(not variant.no_logits_gather)


def compute_efficiency(t: dict[str, Any], cal: dict[str, Any]) -> Any:
    """The compute efficiency of each row of ``t``: ``compute_efficiency_8bit`` where the row's
    compute runs at the 8-bit tensor rate (term ``eight_bit``) and the calibration sets it, else
    ``compute_efficiency`` (eq. 3.20c)."""
    e8 = cal.get(EIGHT_BIT_FIELD)
    if e8 is None:
        return cal["compute_efficiency"]
    return np.where(np.asarray(t["eight_bit"]) > 0, e8, cal["compute_efficiency"])


def step_time(t: dict[str, Any], cal: dict[str, Any]) -> Any:
    """One stage step from calibration-free terms, the model's form (eq. 5.3) with
    o = ``cal["stream_overlap"]``, c = compute / ce (``compute_efficiency``: the 8-bit one on 8-bit
    rows, eq. 3.20c), m = memory / min(me, cap / peak) (eq. 3.21a), p = pool:

        o max(c, m, p) + (1 - o)(c + m + p) + link_bytes / ne + link_latency + layers x overhead
          + collective steps x collective step latency
    """
    o = cal["stream_overlap"]
    c = t["compute"] / compute_efficiency(t, cal)
    from codesign.model.hardware import achieved_memory_fraction

    m = t["memory_local"] / achieved_memory_fraction(cal["memory_efficiency"], cal.get(CAP_FIELD),
                                                     t.get("memory_peak_GBps"))
    p = t["memory_pool"]
    streams = o * np.maximum(np.maximum(c, m), p) + (1.0 - o) * (c + m + p)
    return (
        streams
        + t["net_bw"] / cal["network_efficiency"]
        + t["net_latency"]
        + t["layers"] * cal["layer_overhead_us"] * 1e-6
        + t["collective_steps"] * cal["collective_step_latency_us"] * 1e-6
        + t.get("sequences", 0.0) * cal.get(HOST_FIELD, 0.0) * 1e-6
    )


def metric_from_steps(metric: str, t_pre: Any, t_dec: Any, batch: Any, dp: Any, pp: Any, osl: Any, devices: Any) -> Any:
    """A row metric from its prefill and decode stage steps (the model's scale factors, model.md §5):
    output tokens/s = batch x dp x osl / (pp x t_prefill + pp x (osl - 1) x t_decode);
    TTFT = (2 pp - 1) t_prefill; ITL = TPOT = pp x t_decode; e2e = TTFT + (osl - 1) TPOT."""
    if metric in ("output_tokens_per_s", "output_tokens_per_s_per_gpu"):
        tps = batch * dp * osl / (pp * t_pre + pp * np.maximum(osl - 1, 0) * t_dec)
        return tps if metric == "output_tokens_per_s" else tps / devices
    ttft = (2 * pp - 1) * t_pre
    tpot = pp * t_dec
    if metric == "ttft_s":
        return ttft
    if metric == "itl_s":
        return tpot
    if metric == "e2e_latency_s":
        return ttft + np.maximum(osl - 1, 0) * tpot
    raise KeyError(metric)


def mixed_terms(pre: dict[str, Any], dec: dict[str, Any], osl: Any) -> dict[str, Any]:
    """Terms of one in-flight-batching iteration: a decode step plus 1/OSL of the batch's prefill
    (compute, pooled memory and links; local memory and layers of the decode step)."""
    out = dict(dec)
    for k in ("compute", "memory_pool", "net_bw", "net_latency"):
        out[k] = dec[k] + pre[k] / osl
    return out


def recompose(terms: RowTerms, cal: dict[str, float], mixed: bool = False) -> float:
    """The row's metric at calibration ``cal`` (exactly the model's formulas unless ``mixed``: the
    in-flight-batching proposal of VALIDATION.md §6)."""
    t_pre = step_time(terms.prefill, cal)
    t_dec = step_time(terms.decode, cal)
    if mixed and terms.metric in ("output_tokens_per_s", "output_tokens_per_s_per_gpu"):
        t_it = step_time(mixed_terms(terms.prefill, terms.decode, terms.osl), cal)
        tps = terms.batch * terms.dp / (terms.pp * t_it)
        return float(tps if terms.metric == "output_tokens_per_s" else tps / terms.devices)
    return float(metric_from_steps(terms.metric, t_pre, t_dec, terms.batch, terms.dp, terms.pp, terms.osl, terms.devices))


def model_metric(metric: str, m: dict[str, float], osl: int) -> float:
    """A row metric read off ``evaluate``'s workload metrics."""
    if metric == "output_tokens_per_s":
        return m["tokens_per_s"]
    if metric == "output_tokens_per_s_per_gpu":
        return m["tokens_per_s_per_device"]
    if metric == "ttft_s":
        return m["ttft_s"]
    if metric == "itl_s":
        return m["tpot_s"]
    if metric == "e2e_latency_s":
        return m["ttft_s"] + max(osl - 1, 0) * m["tpot_s"]
    raise KeyError(metric)


# --- splits -----------------------------------------------------------------------------------
def split_of(row_id: str) -> str:
    """Deterministic split of a row id: ``fit`` or ``held-out`` (see SPLIT_METHOD)."""
    return "fit" if hashlib.sha256(row_id.encode()).digest()[0] % 2 == 0 else "held-out"


def make_split(csv_path: str | Path, path: str | Path | None = None) -> dict[str, Any]:
    """The fit/held-out split of a measurements file; written to ``path`` if given."""
    rows, _ = read_rows(csv_path)
    fit = sorted(r.id for r in rows if split_of(r.id) == "fit")
    held = sorted(r.id for r in rows if split_of(r.id) == "held-out")
    data = {
        "method": SPLIT_METHOD,
        "csv": Path(csv_path).name,
        "csv_sha256": file_sha256(csv_path),
        "n_fit": len(fit),
        "n_held_out": len(held),
        "fit": fit,
        "held_out": held,
    }
    if path is not None:
        from codesign.jsonio import write_json_atomic

        write_json_atomic(path, data)
        Path(path).chmod(0o644)
    return data


def read_split(split_file: str | Path) -> dict[str, str]:
    """row id -> "fit" | "held-out" from a split file."""
    from codesign.jsonio import read_json

    data = read_json(split_file)
    if not isinstance(data, dict) or "fit" not in data or "held_out" not in data:
        raise InputError("not a split file", file=split_file, expected='{"fit": [ids], "held_out": [ids]}')
    out = {i: "fit" for i in data["fit"]}
    out.update({i: "held-out" for i in data["held_out"]})
    return out


# --- the report -------------------------------------------------------------------------------
def mape(errors_pct: Iterable[float]) -> float:
    """Mean absolute percentage error of signed percentage errors (nan if empty)."""
    e = [abs(x) for x in errors_pct]
    return float(sum(e) / len(e)) if e else float("nan")


@dataclass
class ValidationReport:
    """Per-row predictions and errors, grouped; ``skipped`` rows carry their reason."""

    csv: str
    by: tuple[str, ...]
    rows: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    variant: str = "model"
    split_file: str | None = None
    calibration: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def mape_pct(self) -> float:
        return mape(r["error_pct"] for r in self.rows)

    def subset_mape(self, split: str) -> float:
        return mape(r["error_pct"] for r in self.rows if r.get("split") == split)

    @property
    def groups(self) -> dict[str, dict[str, Any]]:
        g: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in self.rows:
            g["|".join(str(r[k]) for k in self.by)].append(r)
        out = {}
        for k in sorted(g):
            rs = g[k]
            errs = [r["error_pct"] for r in rs]
            out[k] = {
                "n": len(rs),
                "mape_pct": mape(errs),
                "bias_pct": float(np.mean(errs)),
                "max_abs_error_pct": float(max(abs(e) for e in errs)),
                "held_out_mape_pct": mape(r["error_pct"] for r in rs if r.get("split") == "held-out"),
            }
        return out

    @property
    def names_read(self) -> dict[str, int]:
        """``"<file's name> -> <catalog id>"``: rows, for every name the file spells otherwise."""
        out: dict[str, int] = defaultdict(int)
        for r in self.rows:
            for k, given in r.get("named_as", {}).items():
                out[f"{given} -> {r[k]}"] += 1
        return dict(sorted(out.items()))

    @property
    def batch_bounds(self) -> dict[str, int]:
        """Rows by what set their batch (memory, engine, requests, concurrency), the offline
        rows whose request count is unknown (their batch is not capped by it), and the rows whose
        engine is unknown (no ``max_batch_size``: no slots' state, the heuristic's cap; §5.16)."""
        out: dict[str, int] = defaultdict(int)
        for r in self.rows:
            out[r["batch_bound"]] += 1
            if r["concurrency"] is None and r["num_requests"] is None:
                out["no request count"] += 1
            if "engine_max_batch" in r and r["engine_max_batch"] is None:
                out["no engine known"] += 1
        return dict(sorted(out.items()))

    def worst(self, n: int = 10) -> list[dict[str, Any]]:
        return sorted(self.rows, key=lambda r: -abs(r["error_pct"]))[:n]

    def targets(self, groups: dict[str, dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """The held-out MAPE and each group's MAPE against the targets (None when no row is
        labelled fit / held-out: nothing to judge). ``groups``: ``self.groups`` if already built.

        The group target is judged two ways: on each group's every row, as the issue states it
        ("<= 12 % in every (model, chip) group", the ``--by`` table's MAPE column), and on each
        group's held-out rows alone, the stricter reading (``groups_over`` / ``groups_met``)."""
        every = self.groups if groups is None else groups
        held_groups = {k: g["held_out_mape_pct"] for k, g in every.items() if not math.isnan(g["held_out_mape_pct"])}
        if not held_groups:
            return None
        held = self.subset_mape("held-out")
        over = {k: v for k, v in held_groups.items() if v > TARGET_GROUP_MAPE_PCT}
        over_all = {k: g["mape_pct"] for k, g in every.items() if g["mape_pct"] > TARGET_GROUP_MAPE_PCT}
        worst = max(every, key=lambda k: every[k]["mape_pct"])
        return {
            "held_out_mape_pct": held,
            "held_out_target_pct": TARGET_HELD_OUT_MAPE_PCT,
            "held_out_met": held <= TARGET_HELD_OUT_MAPE_PCT,
            "group_target_pct": TARGET_GROUP_MAPE_PCT,
            "groups_all_rows_judged": len(every),
            "groups_all_rows_over": over_all,
            "groups_all_rows_met": not over_all,
            "worst_group_all_rows": [worst, every[worst]["mape_pct"]],
            "groups_judged": len(held_groups),
            "groups_over": over,
            "groups_met": not over,
        }

    def as_dict(self) -> dict[str, Any]:
        groups = self.groups
        return {
            "csv": self.csv,
            "variant": self.variant,
            "by": list(self.by),
            "mape_pct": self.mape_pct,
            "held_out_mape_pct": self.subset_mape("held-out"),
            "fit_mape_pct": self.subset_mape("fit"),
            "n_rows": len(self.rows),
            "n_skipped": len(self.skipped),
            "split_file": self.split_file,
            "groups": groups,
            "batch_bounds": self.batch_bounds,
            "names_read": self.names_read,
            "worst": self.worst(),
            "rows": self.rows,
            "skipped": self.skipped,
            "calibration": self.calibration,
            "targets": self.targets(groups),
        }


def _calibration_used(chips: Iterable[str]) -> dict[str, dict[str, float]]:
    from codesign.model.hardware import calibration_for

    return {c: calibration_for(c).model_dump() for c in sorted(set(chips))}


def predict_row(row: Row, *, cap: int | None = ENGINE_MAX_BATCH, variant: Variant = MODEL) -> dict[str, Any]:
    """Predict one (predictable) row with ``evaluate``: the row's result record."""
    if row.concurrency is None:
        choice = max_batch(row, cap, variant)
    else:
        fp = footprint(row, variant)
        choice = BatchChoice(batch_from(row, fp, None, None), fp, "concurrency")
    rec: dict[str, Any] = {
        "id": row.id, "model": row.model, "gpu": row.gpu, "family": family_of(row.gpu),
        "precision": row.precision, "kv_precision": row.kv_cache_precision,
        "num_gpus": row.num_gpus, "tp": row.tp, "pp": row.pp, "ep": row.ep, "attention_dp": row.attention_dp,
        "isl": row.isl, "osl": row.osl, "concurrency": row.concurrency, "metric": row.metric, "source": row.source,
        "measured": row.value, "num_requests": row.num_requests,
        "batch": choice.batch, "batch_bound": choice.bound,
        "engine_max_batch": row.engine_max_batch, "engine_state_B": choice.footprint.state_B(choice.batch),
        "engine_max_tokens": None if variant.no_token_budget else row.engine_max_tokens,
    }
    if choice.batch < 1:
        rec.update(predicted=0.0, error_pct=-100.0, note=f"model: {choice.reason}")
        return rec
    ev = evaluate_row(row, choice.batch, variant)
    m = ev.workload_metrics["main"]
    pred = model_metric(row.metric, m, row.osl)
    dec = {k: m[f"decode_step.{k}_s"] + m.get(f"decode_step.{k}_overlapped_s", 0.0)
           for k in ("compute", "memory_local", "scale_up_bw", "scale_out_bw", "overhead")}
    dec["scale_up_bw"] += m["decode_step.scale_up_bw_in_switch_s"] + m["decode_step.scale_up_bw_cross_s"]
    rec.update(
        predicted=pred,
        error_pct=100.0 * (pred - row.value) / row.value,
        # weights, KV cache and the decoding state of the engine's slots (or the batch's own)
        memory_used_fraction=(m["weights_per_device_B"] + m["kv_per_device_B"] + choice.footprint.state_B(choice.batch))
        / ev.metrics["raw_capacity_B"],
        decode_bound=max(dec, key=dec.get),
        decode_step_s=m["decode_step_s"],
        prefill_step_s=m["prefill_step_s"],
        # iterations of the round beyond its static OSL under the engine's token budget (eq. 4.19)
        extra_iterations=m.get("prefill_step.extra_iterations", 0.0),
    )
    if variant.mixed_iteration:  # a proposal: re-compose the evaluation's terms
        from codesign.model.hardware import calibration_for

        terms = row_terms(row, choice.batch, variant)
        rec["predicted"] = recompose(terms, calibration_for(row.gpu).model_dump(), variant.mixed_iteration)
        rec["error_pct"] = 100.0 * (rec["predicted"] - row.value) / row.value
    return rec


def _is_hash_split(split_file: str | Path) -> bool:
    """Whether every row a split file labels is labelled as the id-hash rule (``split_of``) would."""
    return all(split_of(i) == label for i, label in read_split(split_file).items())


def _fitted_on_by_hash(csv_path: str | Path) -> bool:
    """Whether the calibration in use records (its ``[fitted_on]`` table) a fit on this very file
    (its sha256) with the id-hash split."""
    from codesign.model.hardware import calibration_file

    cal = calibration_file()
    if cal.fitted_on is not None:
        return cal.fitted_on.split_rule == "id-hash" and cal.fitted_on.csv_sha256 == file_sha256(csv_path)
    # a calibration written before the [fitted_on] table (codesign <= stop 16) said it in `source`
    return f"sha256 {file_sha256(csv_path)[:12]})" in cal.source and SPLIT_METHOD in cal.source


#: the fields of a row's result record (``predict_row``) that ``--by`` can group on
GROUP_FIELDS = ("id", "model", "gpu", "family", "precision", "kv_precision", "num_gpus", "tp", "pp", "ep",
                "attention_dp", "isl", "osl", "concurrency", "metric", "source", "num_requests", "engine_max_batch",
                "batch_bound")


def run_validation(
    csv_path: str | Path,
    by: Sequence[str] = ("model", "gpu"),
    *,
    split_file: str | Path | None = DEFAULT_SPLIT,
    max_batch_cap: int | None = ENGINE_MAX_BATCH,
    variant: Variant = MODEL,
) -> ValidationReport:
    """Predict every row of a measurements CSV with the model and the current calibration.

    ``by``: row fields the groups are keyed on. ``split_file``: labels rows ``fit``/``held-out``
    (ignored if the file does not exist; ``None`` for no labels).
    """
    bad_by = [k for k in by if k not in GROUP_FIELDS]
    if bad_by:
        raise InputError("unknown grouping field", key="--by", value=bad_by, expected=f"some of {', '.join(GROUP_FIELDS)}")
    rows, malformed = read_rows(csv_path)
    labels: dict[str, str] = {}
    used_split = None
    default = split_file is not None and Path(split_file) == DEFAULT_SPLIT
    if default and _fitted_on_by_hash(csv_path):
        # the calibration in use says it was fitted on this very file with the id-hash split (an
        # installed package ships no split file; a `calibrate --out` file records its CSV): label
        # the rows by that rule
        labels = {r.id: split_of(r.id) for r in rows}
        used_split = f"the calibration's own ({SPLIT_METHOD})"
    elif split_file is not None and Path(split_file).exists():
        labels = read_split(split_file)
        used_split = str(split_file)
    out: list[dict[str, Any]] = []
    skipped = list(malformed)
    for r in rows:
        why = skip_reason(r, variant)
        if why:
            skipped.append({"id": r.id, "model": r.model, "gpu": r.gpu, "metric": r.metric, "reason": why})
            continue
        rec = predict_row(r, cap=max_batch_cap, variant=variant)
        rec["split"] = labels.get(r.id, "unlisted" if labels else None)
        if r.named_as:
            rec["named_as"] = dict(r.named_as)
        out.append(rec)
    return ValidationReport(
        csv=str(csv_path), by=tuple(by), rows=out, skipped=skipped, variant=variant.name,
        split_file=used_split, calibration=_calibration_used(r["gpu"] for r in out),
    )


# --- calibration ------------------------------------------------------------------------------
class TermCache:
    """Evaluations of rows at batches under one ``Variant``, memoised: the calibration-free terms of
    each (row, batch) (``row_terms``) and each row's memory footprint. Fitting evaluates every row at
    the few batches its candidate memory fields give; experiments (``benchmarks/``) build on it."""

    def __init__(self, variant: Variant):
        self.variant = variant
        self.terms: dict[tuple[str, int], RowTerms] = {}
        self.fps: dict[str, Footprint] = {}

    def footprint(self, row: Row) -> Footprint:
        if row.id not in self.fps:
            self.fps[row.id] = footprint(row, self.variant)
        return self.fps[row.id]

    def at(self, row: Row, batch: int) -> RowTerms:
        key = (row.id, batch)
        if key not in self.terms:
            self.terms[key] = row_terms(row, batch, self.variant)
        return self.terms[key]


@dataclass
class RowStack:
    """The terms of a set of rows at one set of memory fields, as arrays: ``predict(cal)`` re-composes
    every row's metric at a calibration at once (``step_time``, ``metric_from_steps``), ``mape`` is
    what the fit minimises. Built from a ``TermCache`` with ``RowStack.build``."""

    rows: list[Row]
    batch: np.ndarray
    dp: np.ndarray
    pp: np.ndarray
    osl: np.ndarray
    devices: np.ndarray
    measured: np.ndarray
    pre: dict[str, np.ndarray]
    dec: dict[str, np.ndarray]
    fits: np.ndarray  # batch >= 1
    waves: np.ndarray | None = None  # full waves of the batch (request_waves)
    tail: np.ndarray | None = None  # sequences of the last, partial wave (0: none)
    tail_pre: dict[str, np.ndarray] | None = None
    tail_dec: dict[str, np.ndarray] | None = None

    @classmethod
    def build(cls, rows: list[Row], cache: TermCache, mem: dict[str, float] | None, cap: int | None) -> RowStack:
        batches = [batch_from(r, cache.footprint(r), mem, cap, requests=not cache.variant.no_request_cap,
                              table=cache.variant.runtime_batch_table, own_cap=not cache.variant.no_engine_cap)
                   for r in rows]
        zero = {k: 0.0 for k in STEP_TERMS} | {"compute": 1.0, "memory_peak_GBps": 1.0}
        extra: dict[str, Any] = {}
        if cache.variant.request_waves:
            waves, tails = [], []
            for i, r in enumerate(rows):
                if r.request_limit is None or batches[i] < 1:
                    waves.append(1.0)
                    tails.append(0)
                    continue
                per_replica = math.ceil(r.num_requests / r.dp)
                waves.append(float(per_replica // batches[i]))
                tails.append(per_replica - int(waves[-1]) * batches[i])
            tail_terms = [cache.at(r, t) if t >= 1 else None for r, t in zip(rows, tails, strict=True)]
            extra = {
                "waves": np.array(waves), "tail": np.array(tails, dtype=float),
                "tail_pre": {k: np.array([t.prefill[k] if t else zero[k] for t in tail_terms]) for k in STEP_TERMS},
                "tail_dec": {k: np.array([t.decode[k] if t else zero[k] for t in tail_terms]) for k in STEP_TERMS},
            }
        terms = [cache.at(r, b) if b >= 1 else None for r, b in zip(rows, batches, strict=True)]

        def arr(phase: str) -> dict[str, np.ndarray]:
            return {k: np.array([getattr(t, phase)[k] if t else zero[k] for t in terms]) for k in STEP_TERMS}

        return cls(
            **extra,
            rows=rows,
            batch=np.array([max(b, 1) for b in batches], dtype=float),
            dp=np.array([r.dp for r in rows], dtype=float),
            pp=np.array([r.pp for r in rows], dtype=float),
            osl=np.array([r.osl for r in rows], dtype=float),
            devices=np.array([r.num_gpus for r in rows], dtype=float),
            measured=np.array([r.value for r in rows]),
            pre=arr("prefill"),
            dec=arr("decode"),
            fits=np.array([b >= 1 for b in batches]),
        )

    def predict(self, cal: dict[str, float], how: Variant = MODEL) -> np.ndarray:
        t_pre = step_time(self.pre, cal)
        t_dec = step_time(self.dec, cal)
        out = np.empty(len(self.rows))
        for metric in {r.metric for r in self.rows}:
            sel = np.array([r.metric == metric for r in self.rows])
            out[sel] = metric_from_steps(metric, t_pre[sel], t_dec[sel], self.batch[sel], self.dp[sel],
                                         self.pp[sel], self.osl[sel], self.devices[sel])
            if how.mixed_iteration and metric in ("output_tokens_per_s", "output_tokens_per_s_per_gpu"):
                it = mixed_terms({k: v[sel] for k, v in self.pre.items()}, {k: v[sel] for k, v in self.dec.items()},
                                 self.osl[sel])
                tps = self.batch[sel] * self.dp[sel] / (self.pp[sel] * step_time(it, cal))
                out[sel] = tps if metric == "output_tokens_per_s" else tps / self.devices[sel]
            if self.waves is not None and metric in ("output_tokens_per_s", "output_tokens_per_s_per_gpu"):
                assert self.tail is not None and self.tail_pre is not None and self.tail_dec is not None
                pp, osl, tail = self.pp[sel], self.osl[sel], self.tail[sel]
                full = _round_s(self.pre, self.dec, sel, cal, pp, osl)
                last = _round_s(self.tail_pre, self.tail_dec, sel, cal, pp, osl)
                total = self.waves[sel] * full + np.where(tail > 0, last, 0.0)
                tps = (self.waves[sel] * self.batch[sel] + tail) * self.dp[sel] * osl / total
                out[sel] = tps if metric == "output_tokens_per_s" else tps / self.devices[sel]
        return np.where(self.fits, out, 0.0)

    def mape(self, cal: dict[str, float], how: Variant = MODEL) -> float:
        return float(np.mean(np.abs(self.predict(cal, how) / self.measured - 1.0)) * 100.0)


def _round_s(pre: dict[str, np.ndarray], dec: dict[str, np.ndarray], sel: np.ndarray, cal: dict[str, float],
             pp: np.ndarray, osl: np.ndarray) -> np.ndarray:
    """Seconds of one static round (one prefill, OSL - 1 decode steps) of the selected rows."""
    t_p = step_time({k: v[sel] for k, v in pre.items()}, cal)
    t_d = step_time({k: v[sel] for k, v in dec.items()}, cal)
    return pp * t_p + pp * np.maximum(osl - 1, 0) * t_d


#: fitted fields in microseconds (searched linearly, in units of 10 µs)
_MICROSECONDS = ("layer_overhead_us", "collective_step_latency_us", "host_us_per_sequence")


def _to_cal(z: np.ndarray, base: dict[str, float], free: Sequence[str]) -> dict[str, float]:
    """Optimiser coordinates -> calibration (log for efficiencies, µs/10 for the overheads, the
    overlap itself), clipped to FIT_BOUNDS."""
    cal = dict(base)
    for i, k in enumerate(free):
        lo, hi = FIT_BOUNDS[k]
        if k in _MICROSECONDS:
            v = 10.0 * z[i]
        elif k == "stream_overlap":
            v = z[i]
        else:  # clipped in log space: a coordinate the rows do not constrain may drift far
            v = math.exp(min(max(z[i], math.log(lo)), math.log(hi)))
        cal[k] = min(max(v, lo), hi)
    return cal


def _from_cal(cal: dict[str, float], free: Sequence[str]) -> np.ndarray:
    return np.array([cal[k] / 10.0 if k in _MICROSECONDS else cal[k] if k == "stream_overlap" else math.log(cal[k])
                     for k in free])


#: Nelder-Mead restarts per start, and the MAPE gain (points) below which a restart is the last
FIT_RESTARTS = 10
FIT_RESTART_GAIN_PCT = 1e-4
#: deterministic starting points of the simplex search
_STARTS = (
    {"compute_efficiency": 0.6, "memory_efficiency": 0.8, "network_efficiency": 0.6, "layer_overhead_us": 10.0,
     "stream_overlap": 0.5, "collective_step_latency_us": 10.0, "host_us_per_sequence": 10.0},
    {"compute_efficiency": 0.4, "memory_efficiency": 0.6, "network_efficiency": 0.3, "layer_overhead_us": 2.0,
     "stream_overlap": 0.2, "collective_step_latency_us": 3.0, "host_us_per_sequence": 2.0},
    {"compute_efficiency": 0.8, "memory_efficiency": 0.9, "network_efficiency": 0.9, "layer_overhead_us": 30.0,
     "stream_overlap": 0.8, "collective_step_latency_us": 30.0, "host_us_per_sequence": 30.0},
)


def memory_peaks_GBps(rows: Sequence[Row]) -> list[float]:
    """The distinct datasheet memory bandwidths of the rows' chips, ascending."""
    from codesign import catalog

    return sorted({float(catalog.load_chip(gpu).memory_bandwidth_GBps) for gpu in {r.gpu for r in rows}})


def cap_is_fitted(rows: Sequence[Row], how: Variant, peaks: Sequence[float] | None = None) -> bool:
    """Whether a fit of ``rows`` fits the die's bandwidth cap (eq. 3.21a): only for rows of one
    calibration family (one die) whose chips differ in memory bandwidth (``peaks``: the rows'
    ``memory_peaks_GBps`` if already known), unless the variant ablates or holds it."""
    peaks = memory_peaks_GBps(rows) if peaks is None else peaks
    return (len({family_of(r.gpu) for r in rows}) == 1 and len(peaks) > 1
            and not how.no_bandwidth_cap and CAP_FIELD not in how.fixed_values)


def eight_bit_is_fitted(stack: Any, how: Variant) -> bool:
    """Whether a fit of ``stack`` fits ``compute_efficiency_8bit`` (eq. 3.20c): only if the variant
    asks (``fit_8bit``) and does not hold it, the rows are of one calibration family (one die, as
    for the bandwidth cap: across families the 8-bit rows of one chip against the wider rows of
    another would measure the chips, not the format; the pooled fit never fits it, VALIDATION.md
    §5.15), and some of the rows that fit in memory compute at the 8-bit tensor rate and some at a
    wider one (a ``RowStack``'s ``eight_bit`` terms; another object: never)."""
    if not how.fit_8bit or EIGHT_BIT_FIELD in how.fixed_values:
        return False
    if len({family_of(r.gpu) for r in stack.rows}) != 1:
        return False
    dec = getattr(stack, "dec", None)
    if not isinstance(dec, dict) or "eight_bit" not in dec:
        return False
    flags = np.asarray(dec["eight_bit"])[np.asarray(stack.fits)]
    return bool(np.any(flags > 0) and np.any(flags == 0))


def fit_stack(stack: Any, base: dict[str, float], how: Variant) -> tuple[dict[str, float], float]:
    """Minimise ``stack.mape`` (a ``RowStack`` or any object with ``rows`` and ``mape(cal, how)``)
    over the free calibration fields from the deterministic starts."""
    try:
        from scipy.optimize import minimize
    except ImportError as exc:  # pragma: no cover - scipy is a test/validate dependency
        raise InputError("fitting needs scipy", expected="pip install scipy") from exc
    free = [k for k in FIT_FIELDS if k not in how.fixed_values]
    if how.fit_host and HOST_FIELD not in how.fixed_values:
        free.append(HOST_FIELD)
    peaks = memory_peaks_GBps(stack.rows)
    if cap_is_fitted(stack.rows, how, peaks):
        free.append(CAP_FIELD)
    elif CAP_FIELD not in how.fixed_values:
        base = {**base, CAP_FIELD: None}
    if eight_bit_is_fitted(stack, how):
        free.append(EIGHT_BIT_FIELD)
    elif EIGHT_BIT_FIELD not in how.fixed_values:
        base = {**base, EIGHT_BIT_FIELD: None}
    best: tuple[float, dict[str, float]] | None = None
    for start in _STARTS:
        # the cap starts between the slowest and the fastest memory of the family
        start = {**start, CAP_FIELD: start["memory_efficiency"] * math.sqrt(peaks[0] * peaks[-1])} if peaks else start
        start = {**start, EIGHT_BIT_FIELD: start["compute_efficiency"]}  # from the 16-bit one
        x = _from_cal(start, free)
        previous = math.inf
        for _ in range(FIT_RESTARTS):
            # Nelder-Mead's simplex collapses long before an 8-dimensional minimum: restart it from
            # its own result until a restart gains less than FIT_RESTART_GAIN_PCT (VALIDATION.md §4)
            res = minimize(lambda z: stack.mape(_to_cal(z, base, free), how), x, method="Nelder-Mead",
                           options={"maxiter": 6000, "xatol": 1e-5, "fatol": 1e-7})
            x = _from_cal(_to_cal(res.x, base, free), free)  # the next start inside the bounds
            if previous - res.fun < FIT_RESTART_GAIN_PCT:
                break
            previous = res.fun
        cal = _to_cal(x, base, free)
        val = stack.mape(cal, how)
        if best is None or val < best[0] - 1e-12:
            best = (val, cal)
    assert best is not None
    return best[1], best[0]


def memory_grid(how: Variant) -> tuple[str, tuple[float, ...], tuple[float, ...]]:
    """The memory field fitted by grid search under the variant's rule, its coarse grid and the
    refinement steps around the best coarse value."""
    if how.memory_rule == "engine":
        return "runtime_reserve_GiB", RESERVE_COARSE, (0.5, 0.25)
    if how.memory_rule == "total-fraction":
        return "usable_memory_fraction", USABLE_COARSE, (0.01,)
    raise ValueError(f"unknown memory rule {how.memory_rule!r}")


def memory_base(how: Variant) -> dict[str, float]:
    """The memory fields held fixed under the variant's rule (the fitted one is overwritten)."""
    from codesign.model.hardware import kv_cache_free_fraction

    if how.memory_rule == "engine":
        return {"usable_memory_fraction": ENGINE_USABLE_FRACTION, "runtime_reserve_GiB": 0.0,
                "kv_cache_free_fraction": kv_cache_free_fraction()}
    return {"usable_memory_fraction": 0.9, "runtime_reserve_GiB": 0.0, "kv_cache_free_fraction": 1.0}


def _fit_family(rows: list[Row], cache: TermCache, base: dict[str, float], how: Variant,
                cap: int | None, fit_memory: bool) -> tuple[dict[str, float], float]:
    """Best calibration of one family on ``rows`` (the memory field by grid search if fitted)."""
    if not fit_memory:
        return fit_stack(RowStack.build(rows, cache, None, cap), base, how)
    key, coarse, steps = memory_grid(how)
    lo, hi = FIT_BOUNDS[key]
    tried: dict[float, tuple[dict[str, float], float]] = {}

    def at(v: float) -> None:
        v = min(max(round(v, 4), lo), hi)
        if v not in tried:
            cal0 = {**base, key: v}
            tried[v] = fit_stack(RowStack.build(rows, cache, {k: cal0[k] for k in MEMORY_FIELDS}, cap), cal0, how)

    def best() -> float:
        return min(tried, key=lambda v: (tried[v][1], v))

    for v in coarse:
        at(v)
    for step in steps:
        v0 = best()
        at(v0 - step)
        at(v0 + step)
    return tried[best()]


def fit_calibration(
    csv_path: str | Path,
    split_file: str | Path | None,
    *,
    write: str | Path | bool | None = None,
    fit_memory: bool = True,
    max_batch_cap: int | None = ENGINE_MAX_BATCH,
    variant: Variant = MODEL,
    families: Sequence[str] | None = None,
    pooled: bool = True,
    rows: Sequence[Row] | None = None,
) -> dict[str, Any]:
    """Fit the calibration per chip family on the split's ``fit`` rows (and, with ``pooled`` and
    every family, one calibration on all of them together for the chips of unmeasured families, key POOLED).

    Fitted: compute, memory and network efficiency, the per-layer overhead and the collective step
    latency (bounded by FIT_BOUNDS; HELD_FIELDS, the stream overlap at 0, and the fields in
    ``variant.fixed`` are held; ``variant.fit_overlap`` fits the overlap too), and (``fit_memory``) the memory
    rule's free field by grid search: the runtime reserve R (``memory_rule`` "engine", u = 1, f =
    the file's ``[default]`` kv_cache_free_fraction) or the usable fraction u ("total-fraction").
    The objective is the MAPE of the family's fit rows; ``split_file`` None labels the rows by
    ``split_of`` (SPLIT_METHOD), as ``make_split`` would. Returns ``{family: {"chips", "params",
    "n_fit", "fit_mape_pct", "n_held_out", "held_out_mape_pct"}}``. ``write``: True for the
    shipped calibration.toml, or a path; the family's values go to each of its chips' table.
    ``rows``: the rows of ``csv_path`` as a study altered them (e.g. another engine for some),
    instead of reading the file.
    """
    from codesign.model.hardware import calibration_for

    rows = list(read_rows(csv_path)[0] if rows is None else rows)
    labels = read_split(split_file) if split_file is not None else {r.id: split_of(r.id) for r in rows}
    usable = [r for r in rows if skip_reason(r, variant) is None and r.id in labels]
    by_fam: dict[str, list[Row]] = defaultdict(list)
    for r in usable:
        by_fam[variant.group_of(r.gpu)].append(r)
    cache = TermCache(variant)
    result: dict[str, Any] = {}
    for fam in sorted(by_fam):
        if families is not None and fam not in families:
            continue
        fit_rows = [r for r in by_fam[fam] if labels[r.id] == "fit"]
        held_rows = [r for r in by_fam[fam] if labels[r.id] == "held-out"]
        if not fit_rows:
            continue
        chips = sorted({r.gpu for r in by_fam[fam]})
        if not (variant.per_chip or variant.ampere_one_family):  # every catalog chip of the family
            chips = sorted(set(chips) | set(chip_families().get(fam, ())))
        result[fam] = {"chips": chips, **fit_group(fit_rows, held_rows, calibration_for(chips[0]).model_dump(), cache,
                                                     variant, fit_memory, max_batch_cap)}
    if pooled and families is None and len(by_fam) > 1:
        # one calibration on every family's rows, for the catalog chips whose family has no rows
        from codesign import catalog
        from codesign.model.hardware import calibration_file

        every = [r for rs in by_fam.values() for r in rs]
        result[POOLED] = {
            "chips": [c for c in catalog.list_ids("chips") if family_of(c) not in by_fam],
            **fit_group([r for r in every if labels[r.id] == "fit"], [r for r in every if labels[r.id] == "held-out"],
                         calibration_file().default.model_dump(), cache, variant, fit_memory, max_batch_cap),
        }
    if write:
        write_calibration(result, None if write is True else write, csv_path=csv_path, split_file=split_file)
    return result


def fit_group(fit_rows: list[Row], held_rows: list[Row], initial: dict[str, float], cache: TermCache,
               variant: Variant, fit_memory: bool, cap: int | None) -> dict[str, Any]:
    """Fit one calibration on ``fit_rows`` starting from ``initial`` (the variant's held fields and
    memory rule applied) and report it on ``held_rows``: params, row counts, fit and held-out MAPE."""
    base = {**initial, **variant.fixed_values}
    if fit_memory:
        base.update(memory_base(variant))
    cal, fit_mape = _fit_family(fit_rows, cache, base, variant, cap, fit_memory)
    mem = {k: cal[k] for k in MEMORY_FIELDS} if fit_memory else None
    held = RowStack.build(held_rows, cache, mem, cap)
    return {
        "params": {k: round(float(cal[k]), 4) for k in CHIP_PARAMS
                   if cal.get(k) is not None and (k != HOST_FIELD or cal[k] > 0)},
        "n_fit": len(fit_rows),
        "fit_mape_pct": float(fit_mape),
        "n_held_out": len(held_rows),
        "held_out_mape_pct": float(held.mape(cal, variant)) if held_rows else float("nan"),
    }


def rows_weighted_mape(fitted: dict[str, Any], part: str = "held_out") -> float:
    """The MAPE over every row of a ``fit_calibration`` result's groups (``part`` "held_out" or
    "fit"): each group's MAPE weighted by its row count."""
    n = sum(g[f"n_{part}"] for g in fitted.values())
    return sum(g[f"{part}_mape_pct"] * g[f"n_{part}"] for g in fitted.values()) / n


def _without_table(lines: list[str], name: str) -> list[str]:
    """``lines`` of a TOML file without the table ``[name]`` (its header, keys and the comment
    lines right above it); comment lines right above the next table are kept."""
    out: list[str] = []
    held: list[str] = []  # comment lines met inside the skipped table: the next table's, maybe
    skipping = False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("["):
            was, skipping = skipping, re.match(rf"^\[\s*{re.escape(name)}\s*\](\s*#.*)?$", stripped) is not None
            if skipping:
                while out and out[-1].lstrip().startswith("#"):
                    out.pop()
            elif was:
                out += held
            held = []
        if skipping:
            held = [*held, line] if stripped.startswith("#") else []
        else:
            out.append(line)
    return out


def _stated(params: dict[str, float], default: dict[str, Any]) -> dict[str, float]:
    """A fitted table as the file must state it. ``calibration_for`` merges a chip's table over
    ``[default]`` field by field, so an optional field the fit left unset (no die cap, no 8-bit
    efficiency of its own) would take ``[default]``'s value where that sets one: the table then
    says so explicitly (a cap of inf, the 8-bit efficiency equal to the 16-bit one)."""
    out = dict(params)
    if CAP_FIELD not in out and default.get(CAP_FIELD) is not None:
        out[CAP_FIELD] = math.inf
    if EIGHT_BIT_FIELD not in out and default.get(EIGHT_BIT_FIELD) is not None:
        out[EIGHT_BIT_FIELD] = out["compute_efficiency"]
    return out


def write_calibration(fitted: dict[str, Any], path: str | Path | None = None, *, csv_path: str | Path | None = None,
                      split_file: str | Path | None = None, base: str | Path | None = None) -> Path:
    """Write fitted family values into calibration.toml's ``[chips.<id>]`` tables (``[default]``
    and chips of unfitted families are kept); atomically; clears the loaded calibration.

    The file's other tables come from ``base`` if given, else from ``path`` itself if it exists,
    else from the calibration in use."""
    import os
    import tempfile
    import tomllib

    from codesign.model import hardware

    path = Path(path) if path is not None else hardware.shipped_calibration_path()
    # a new file starts as a copy of the calibration in use: chips the fit does not touch keep it
    text0 = Path(base if base is not None else path if path.exists() else hardware.calibration_path()).read_text()
    data = tomllib.loads(text0)
    chips: dict[str, dict[str, float]] = dict(data.get("chips", {}))
    fam_of_chip: dict[str, str] = {}
    for fam, res in fitted.items():
        for c in res["chips"]:
            chips[c] = _stated(res["params"], data.get("default", {}))
            fam_of_chip[c] = fam
    src = "fitted per chip family by codesign.validate.fit_calibration"
    csv_sha256 = file_sha256(csv_path) if csv_path is not None else None
    if csv_path is not None:
        src += f" on the fit rows of {Path(csv_path).name} (sha256 {csv_sha256[:12]})"
    by_hash = split_file is None or _is_hash_split(split_file)
    src += f", split {Path(split_file).name}" if split_file is not None else ", split by row id"
    # the rule is recorded only when the split follows it: `validate` relabels rows by it
    src += f" ({SPLIT_METHOD})" if by_hash else " (a split of the user's own)"
    if POOLED in fitted:
        src += "; GPUs without measurements take one calibration fitted on every family's fit rows together"
    else:
        src += "; every chip not fitted keeps the calibration this file was started from"
    src += ("; [default] (the 3D families) keeps the initial efficiency assumptions, the engine's "
            "kv_cache_free_fraction and the stream overlap every family holds (0: the streams add); see VALIDATION.md")

    def val(v: Any) -> str:
        return repr(float(v)) if isinstance(v, float | int) and not isinstance(v, bool) else json.dumps(v)

    # keep everything before the first [chips.*] table (comments, [default]) except `source` and
    # the [fitted_on] table, which are written anew
    old = text0.splitlines()
    cut = next((i for i, line in enumerate(old) if line.strip().startswith("[chips.")), len(old))
    while cut > 0 and (not old[cut - 1].strip() or old[cut - 1].lstrip().startswith("#")):
        cut -= 1
    head = _without_table(old[:cut], "fitted_on")
    # [pooled] is written anew below (from the fit, else carried over from the parsed file, wherever
    # its table stood)
    head = _without_table(head, POOLED)
    if not any(line.strip() == "[default]" for line in head):
        default = hardware.calibration_file().default.model_dump()
        head += ["", "[default]", *[f"{k} = {val(v)}" for k, v in default.items()]]
    at = next((i for i, line in enumerate(head) if line.startswith("source")), None)
    if at is None:  # before the first table
        at = next((i for i, line in enumerate(head) if line.strip().startswith("[")), len(head))
        head.insert(at, "")
    else:
        del head[at]
    lines = [*head[:at], f"source = {json.dumps(src)}", *head[at:]]
    if csv_path is not None:  # what `validate` reads to relabel this file's rows (hardware.FittedOn)
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", "# what the [chips.*] values were fitted on (codesign calibrate)", "[fitted_on]",
                  f"csv = {json.dumps(Path(csv_path).name)}", f"csv_sha256 = {json.dumps(csv_sha256)}",
                  f"split = {json.dumps(Path(split_file).name if split_file is not None else 'by row id')}",
                  f"split_rule = {json.dumps('id-hash' if by_hash else 'own')}"]
    # what a chip with no table of its own or of its family takes (hardware.calibration_for)
    pooled = _stated(fitted[POOLED]["params"], data.get("default", {})) if POOLED in fitted else data.get(POOLED)
    if pooled is not None:
        if POOLED in fitted:
            res = fitted[POOLED]
            what = (f"fit MAPE {res['fit_mape_pct']:.1f} % on {res['n_fit']} rows, "
                    f"held-out MAPE {res['held_out_mape_pct']:.1f} % on {res['n_held_out']} rows")
        else:
            what = "carried over from the file this one was started from"
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", f"# every measured family pooled, for chips with no table of their own or of their family: {what}",
                  f"[{POOLED}]", *[f"{k} = {val(v)}" for k, v in pooled.items()]]
    for cid in sorted(chips):
        lines.append("")
        if cid in fam_of_chip:
            res = fitted[fam_of_chip[cid]]
            what = ("no measurements: all measured families pooled" if fam_of_chip[cid] == POOLED
                    else f"family {fam_of_chip[cid]}")
            lines.append(f"# {what}: fit MAPE {res['fit_mape_pct']:.1f} % on {res['n_fit']} rows, "
                         f"held-out MAPE {res['held_out_mape_pct']:.1f} % on {res['n_held_out']} rows")
        lines.append(f"[chips.{cid}]")
        lines += [f"{k} = {val(v)}" for k, v in chips[cid].items()]
    text = "\n".join(lines) + "\n"
    tomllib.loads(text)  # never write a file we cannot read back
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    hardware.forget_calibration()
    return path


# --- proposals --------------------------------------------------------------------------------
#: the mechanisms VALIDATION.md §5 added to the model, as ablations (each undoes one)
_MAX_FORM = (("stream_overlap", 1.0),)
_UNDO = {
    "overlap": {"fixed": _MAX_FORM},
    "embeddings": {"embeddings_at_weight_precision": True},
    "memory": {"memory_rule": "total-fraction"},
    "pcie": {"pcie_as_before": True},
    "collective": {"fixed": (("collective_step_latency_us", 0.0),)},
    "families": {"ampere_one_family": True},
    "logits": {"no_logits_gather": True},
    "activations": {"no_activation_traffic": True},
    "steps": {"collective_per_call": True},
    "cap": {"no_bandwidth_cap": True},
    "switch": {"ring_allreduce": True},
    "requests": {"no_request_cap": True},
    "logits-memory": {"no_logits_traffic": True},
    "sockets": {"one_socket": True},
    "engines": {"no_engine_state": True, "no_engine_cap": True},
    "held-overlap": {"fit_overlap": True},
    "token-budget": {"no_token_budget": True},
}


def _without(name: str, *undo: str, **extra: Any) -> Variant:
    kw: dict[str, Any] = {}
    for u in undo:
        for k, v in _UNDO[u].items():
            kw[k] = kw.get(k, ()) + v if k == "fixed" else v
    return Variant(name, **kw, **extra)


#: the model's changes of VALIDATION.md §5 in the order they were made (§6): the fitted stream
#: overlap, the 16-bit embedding and LM head, the engine's memory rule, the A100 PCIe cards'
#: scale-up over PCIe, the A100 PCIe card's own calibration family, a fixed latency of every TP
#: collective (per call), the logits all-gather, the activation traffic between kernels, the
#: collective latency per ring step instead of per call, the die's bandwidth cap, the all-reduce
#: in the NVSwitch, the batch capped at the run's requests, the logits' memory traffic, the PCIe
#: server's two CPU sockets, the benchmark engine's sequence slots (its max batch and their decoding
#: state), the stream overlap held at 0 for every family instead of fitted, the engine's token budget
#: per iteration (fix 18, the 8-bit tensor rate's own efficiency, was withdrawn with fix 19: its
#: proposal is "model-with-8-bit")
FIX_ORDER: tuple[tuple[str, str], ...] = (
    ("+stream-overlap", "overlap"),
    ("+16-bit-embeddings", "embeddings"),
    ("+engine-memory-rule", "memory"),
    ("+pcie-scale-up", "pcie"),
    ("+a100-pcie-own-family", "families"),
    ("+collective-latency", "collective"),
    ("+logits-gather", "logits"),
    ("+activation-traffic", "activations"),
    ("+ring-step-latency", "steps"),
    ("+bandwidth-cap", "cap"),
    ("+in-switch-allreduce", "switch"),
    ("+request-cap", "requests"),
    ("+logits-memory", "logits-memory"),
    ("+sockets", "sockets"),
    ("+engine-slots", "engines"),
    ("+held-overlap", "held-overlap"),
    ("model", "token-budget"),
)


def _fix_chain() -> list[Variant]:
    """The model before any change ("before"), then each change added in turn; the last stage is
    the model itself and is not repeated. Without any collective latency ("collective" undone)
    whether it is paid per step or per call ("steps") is moot, so only the first is undone."""
    keys = [k for _, k in FIX_ORDER]
    chain = []
    for i, name in enumerate(["before"] + [n for n, _ in FIX_ORDER[:-1]]):
        undo = keys[i:]
        if "collective" in undo:
            undo.remove("steps")
        chain.append(_without(name, *undo))
    return chain


PROPOSALS: tuple[Variant, ...] = (
    MODEL,
    # the model before VALIDATION.md §5's changes, then each change added in turn (FIX_ORDER)
    *_fix_chain(),
    # each change removed from the model alone
    _without("model-without-stream-overlap", "overlap"),
    _without("model-without-16-bit-embeddings", "embeddings"),
    _without("model-without-engine-memory-rule", "memory"),
    _without("model-without-pcie-scale-up", "pcie"),
    _without("model-without-a100-pcie-own-family", "families"),
    _without("model-without-collective-latency", "collective"),
    _without("model-without-logits-gather", "logits"),
    _without("model-without-activation-traffic", "activations"),
    # (model-with-per-call-collective-latency is "model-without-ring-step-latency"; the request cap's
    # ablation is "+in-switch-allreduce" above with the logits traffic undone too)
    _without("model-without-ring-step-latency", "steps"),
    _without("model-without-bandwidth-cap", "cap"),
    _without("model-without-in-switch-allreduce", "switch"),
    _without("model-without-logits-memory", "logits-memory"),
    # fix 16 (§5.16) removed whole, and each half of it alone
    _without("model-without-engine-slots", "engines"),
    Variant("engine-slots-state-only", no_engine_cap=True),
    Variant("engine-slots-cap-only", no_engine_state=True),
    # (the sockets' ablation, fix 14, is "+logits-memory" above)
    # (without fix 17, the overlap fitted per family, is "+engine-slots" above, which also lacks fix 19)
    _without("model-without-token-budget", "token-budget"),
    # fix 18, withdrawn with fix 19: the 8-bit tensor rate's own efficiency, fitted
    Variant("model-with-8-bit", fit_8bit=True),
    # candidate changes not in the model
    Variant("l40s-tp-over-pcie", l40s_tp_over_pcie=True),
    Variant("request-waves", request_waves=True),
    Variant("mixed-iteration", mixed_iteration=True),
    Variant("per-chip-calibration", per_chip=True),
    # engine rules of TensorRT-LLM's TensorRT flow (VALIDATION.md §6.4, benchmarks/engine_rules.py)
    Variant("runtime-batch-table", runtime_batch_table=True),
    Variant("replicated-embedding", replicated_embedding=True),
)


#: measurements no calibration was ever fitted on, of the same engine as measurements.csv
#: (TensorRT-LLM 0.14's overview: Llama 3.1 405B and Mixtral 8x22B, VALIDATION.md §6.2): a change
#: is also judged on them, so that one which fits the held-out half better but these rows worse is
#: seen to fit the rows, not the engine
NEVER_FITTED = REPO_ROOT / "validation" / "other-models.csv"


def never_fitted_errors(fitted: dict[str, Any], variant: Variant = MODEL,
                        path: str | Path = NEVER_FITTED, rows: Sequence[Row] | None = None) -> dict[str, tuple[Row, float]]:
    """Signed % error of every predictable row of ``path`` (or of ``rows``, read from it and
    altered by a study), each predicted with its group's calibration from ``fitted`` (a
    fit_calibration result under ``variant``) through the fit's own re-composition. Every row's
    group must have been fitted."""
    rows = [r for r in (read_rows(path)[0] if rows is None else rows) if skip_reason(r, variant) is None]
    cache = TermCache(variant)
    out: dict[str, tuple[Row, float]] = {}
    for g in sorted({variant.group_of(r.gpu) for r in rows}):
        if g not in fitted:
            raise KeyError(f"no calibration fitted for {g!r}, which rows of {Path(path).name} need")
        mine = [r for r in rows if variant.group_of(r.gpu) == g]
        out |= {r.id: (r, e) for r, e in _group_errors(mine, cache, fitted[g]["params"], variant)}
    return out


def _group_errors(rows: list[Row], cache: TermCache, params: dict[str, float],
                  variant: Variant) -> list[tuple[Row, float]]:
    """Signed % error of each of one calibration group's ``rows`` at its fitted ``params``,
    re-composed as the fit does (the variant's memory rule under the fitted memory fields)."""
    cal = {**memory_base(variant), **params}
    stack = RowStack.build(rows, cache, {k: cal[k] for k in MEMORY_FIELDS}, ENGINE_MAX_BATCH)
    return [(r, 100.0 * (float(p) - r.value) / r.value) for r, p in zip(rows, stack.predict(cal, variant), strict=True)]


def proposals(csv_path: str | Path, split_file: str | Path, variants: Sequence[Variant] = PROPOSALS,
              by: Sequence[str] = ("model", "gpu")) -> dict[str, Any]:
    """Fit each variant on the fit rows and report its held-out MAPE (overall and per group), and
    its MAPE on the NEVER_FITTED rows.

    Every variant is the same model with the calibration re-fitted; only the stated mechanism
    differs, so the difference in held-out error is what the mechanism buys (VALIDATION.md §6).
    """
    rows, _ = read_rows(csv_path)
    labels = read_split(split_file)
    out: dict[str, Any] = {}
    for v in variants:
        fitted = fit_calibration(csv_path, split_file, variant=v, pooled=False)
        cache = TermCache(v)
        by_group: dict[str, list[Row]] = defaultdict(list)
        for r in rows:
            if not skip_reason(r, v) and r.id in labels and v.group_of(r.gpu) in fitted:
                by_group[v.group_of(r.gpu)].append(r)
        preds: list[tuple[Row, float]] = []
        for g, rs in sorted(by_group.items()):
            preds += _group_errors(rs, cache, fitted[g]["params"], v)
        groups: dict[str, list[float]] = defaultdict(list)
        by_tp: dict[str, list[float]] = defaultdict(list)
        for r, e in preds:
            if labels[r.id] == "held-out":
                groups[r.key(by)].append(e)
                by_tp[f"{v.group_of(r.gpu)}|tp{r.tp}"].append(e)
        out[v.name] = {
            "variant": v.__dict__,
            "fit_mape_pct": mape(e for r, e in preds if labels[r.id] == "fit"),
            "held_out_mape_pct": mape(e for r, e in preds if labels[r.id] == "held-out"),
            "all_mape_pct": mape(e for _, e in preds),
            "held_out_groups_mape_pct": {k: mape(v_) for k, v_ in sorted(groups.items())},
            "worst_held_out_group_pct": max((mape(v_) for v_ in groups.values()), default=float("nan")),
            "held_out_by_group_and_tp_mape_pct": {k: mape(v_) for k, v_ in sorted(by_tp.items())},
            "never_fitted_mape_pct": mape(e for _, e in never_fitted_errors(fitted, v).values()),
            "params": {fam: res["params"] for fam, res in fitted.items()},
            "row_errors_pct": {r.id: round(e, 3) for r, e in preds},
        }
    return out


# --- plot -------------------------------------------------------------------------------------
#: legend names of the split labels (rows of a file outside the split were never fitted)
_SPLIT_LABELS = {"unlisted": "not fitted"}


def plot_title(report: ValidationReport) -> str:
    """The plot's default title: file, MAPE, held-out MAPE (or that no row was fitted), rows."""
    held = report.subset_mape("held-out")
    part = f"held-out {held:.1f} %" if not math.isnan(held) else "no row fitted"
    return f"{Path(report.csv).name}: MAPE {report.mape_pct:.1f} % ({part}), {len(report.rows)} rows"


def plot(report: ValidationReport, path: str | Path, *, title: str | None = None) -> Path:
    """Predicted vs measured (log-log), one colour per chip family, hollow markers for fit rows,
    filled for held-out; the y = x line and a +-12 % band. PNG via matplotlib's Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 7.0), dpi=120)
    fams = sorted({r["family"] for r in report.rows})
    colours = plt.get_cmap("tab10")
    pts = [r for r in report.rows if r["predicted"] > 0]
    for i, fam in enumerate(fams):
        for split, face in (("fit", "none"), ("held-out", None), (None, None), ("unlisted", None)):
            sel = [r for r in pts if r["family"] == fam and r.get("split") == split]
            if not sel:
                continue
            ax.scatter([r["measured"] for r in sel], [r["predicted"] for r in sel], s=22,
                       facecolors=face if face else colours(i), edgecolors=colours(i), linewidths=0.9,
                       label=f"{fam} ({_SPLIT_LABELS.get(split, split)})" if split else fam)
    if pts:
        lo = min(min(r["measured"], r["predicted"]) for r in pts) * 0.7
        hi = max(max(r["measured"], r["predicted"]) for r in pts) * 1.4
        xs = np.geomspace(lo, hi, 50)
        ax.plot(xs, xs, color="black", lw=1)
        ax.fill_between(xs, xs * 0.88, xs * 1.12, color="grey", alpha=0.2, lw=0, label="±12 %")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    unit = sorted({r["metric"] for r in report.rows})
    ax.set_xlabel(f"measured {', '.join(unit)}")
    ax.set_ylabel("predicted by the model")
    ax.set_title(title or plot_title(report))
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def format_report(report: ValidationReport, worst: int = 10) -> str:
    """Plain-text summary: overall / held-out MAPE, per-group table, worst rows, skipped rows."""
    d = report.as_dict()
    labelled = any(r.get("split") in ("fit", "held-out") for r in d["rows"])
    def pct(x: float) -> str:
        return "- (no row)" if math.isnan(x) else f"{x:.2f} %"

    split_note = (f"held-out {pct(d['held_out_mape_pct'])}  fit {pct(d['fit_mape_pct'])}" if labelled else
                  "no split file: rows are not labelled fit / held-out" if d["split_file"] is None else
                  "no row is in the split file: none was used for fitting")
    lines = [
        f"rows {d['n_rows']}  skipped {d['n_skipped']}  MAPE {d['mape_pct']:.2f} %  {split_note}",
        "",
        f"{'|'.join(report.by):40s} {'n':>4s} {'MAPE %':>8s} {'bias %':>8s} {'max %':>8s} {'held-out %':>10s}",
    ]
    for k, g in d["groups"].items():
        held = f"{g['held_out_mape_pct']:10.2f}" if labelled and not math.isnan(g["held_out_mape_pct"]) else f"{'-':>10s}"
        lines.append(f"{k:40s} {g['n']:4d} {g['mape_pct']:8.2f} {g['bias_pct']:+8.2f} {g['max_abs_error_pct']:8.1f} {held}")
    if d["batch_bounds"]:
        lines += ["", "batch set by: " + ", ".join(f"{k} {n}" for k, n in d["batch_bounds"].items())]
    if d["names_read"]:
        lines += ["", "names read as catalog ids: " + "; ".join(f"{k} ({n} row{'s' * (n != 1)})" for k, n in d["names_read"].items())]
    t = d["targets"]
    if t is not None:
        def verdict(ok: bool) -> str:
            return "met" if ok else "not met"

        def listed(groups: dict[str, float]) -> str:
            return ", ".join(f"{k} {v:.2f} %" for k, v in groups.items())  # 12.03 is over 12

        over, over_all = listed(t["groups_over"]), listed(t["groups_all_rows_over"])
        worst_k, worst_v = t["worst_group_all_rows"]
        lines += ["", f"targets: held-out MAPE <= {t['held_out_target_pct']:g} %: {t['held_out_mape_pct']:.2f} % "
                      f"({verdict(t['held_out_met'])}); every group's MAPE <= {t['group_target_pct']:g} %: "
                      f"{t['groups_all_rows_judged'] - len(t['groups_all_rows_over'])} of {t['groups_all_rows_judged']} "
                      f"({verdict(t['groups_all_rows_met'])}{': over ' + over_all if over_all else ''}; "
                      f"worst {worst_k} {worst_v:.2f} %); on its held-out rows alone: "
                      f"{t['groups_judged'] - len(t['groups_over'])} of {t['groups_judged']} "
                      f"({verdict(t['groups_met'])}{': over ' + over if over else ''})"]
    lines += ["", "worst rows:"]
    for r in report.worst(worst):
        lines.append(f"  {r['id']} {r['model']} {r['gpu']} {r['precision']} tp{r['tp']} {r['isl']}/{r['osl']} "
                     f"batch {r['batch']}: measured {r['measured']:.4g} predicted {r['predicted']:.4g} "
                     f"({r['error_pct']:+.1f} %){'  ' + r['note'] if r.get('note') else ''}")
    if d["skipped"]:
        lines += ["", "skipped rows:"]
        lines += [f"  {s['id']}: {s['reason']}" for s in d["skipped"]]
    return "\n".join(lines)



# --- everything VALIDATION.md reports -----------------------------------------------------------
def reproduce(csv_path: str | Path, out_dir: str | Path = REPO_ROOT / "validation", *, calibrate: bool = True,
              with_proposals: bool = True) -> dict[str, Any]:
    """Regenerate every artefact of VALIDATION.md from a measurements CSV:

    ``split.json`` (deterministic), the fitted calibration (written to calibration.toml if
    ``calibrate``), ``results.json`` (run_validation, grouped by model and chip), ``results.txt``,
    ``predicted_vs_measured.png`` and (``with_proposals``) ``proposals.json``.
    """
    from codesign.jsonio import write_json_atomic as _write

    def write_json_atomic(p: Path, data: Any) -> None:
        _write(p, data)
        p.chmod(0o644)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    split = out / "split.json"
    make_split(csv_path, split)
    summary: dict[str, Any] = {}
    if calibrate:
        summary["fitted"] = fit_calibration(csv_path, split, write=True)
        write_json_atomic(out / "calibration_fit.json", summary["fitted"])
    report = run_validation(csv_path, split_file=split)
    write_json_atomic(out / "results.json", report.as_dict())
    (out / "results.txt").write_text(format_report(report, worst=15) + "\n")
    plot(report, out / "predicted_vs_measured.png")
    summary["mape_pct"] = report.mape_pct
    summary["held_out_mape_pct"] = report.subset_mape("held-out")
    if with_proposals:
        summary["proposals"] = proposals(csv_path, split)
        write_json_atomic(out / "proposals.json", summary["proposals"])
    return summary
