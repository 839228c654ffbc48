"""Measurement rows: reading a measurements CSV into typed rows, the benchmarks' request counts
and engines they were run with, and the deterministic fit/held-out split.

A row is one measured configuration (model, chip, parallel layout, precision, input/output
lengths, offline or at a fixed concurrency) and one metric. Names are read as catalog ids
(Hugging Face repositories and nvidia-smi names too); the columns are documented in
``validation/README.md``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codesign.catalog import load_chip, resolve_chip
from codesign.errors import InputError
from codesign.jsonio import read_json, write_json_atomic
from codesign.model.engines import PHYSICS, Rules, load_engine, rules_of
from codesign.model.units import WEIGHT_ONLY_KV_PRECISION, kv_precision_of
from codesign.model.workload import resolve_workload
from codesign.paths import instances_dir
from codesign.schema import MAX_STRING, input_text, read_input

#: metrics a row may measure
METRICS = ("output_tokens_per_s", "output_tokens_per_s_per_gpu", "ttft_s", "itl_s", "e2e_latency_s")

#: the columns every measurements file has (the others are optional)
REQUIRED_COLUMNS = ("id", "model", "gpu", "num_gpus", "tp", "isl", "osl", "metric", "value")
OPTIONAL_COLUMNS = ("pp", "ep", "attention_dp", "precision", "kv_precision", "concurrency", "unit", "source",
                    "num_requests", "max_batch_size", "max_num_tokens", "engine")
INT_FIELDS = ("num_gpus", "tp", "pp", "ep", "attention_dp", "isl", "osl")
_DEFAULT_ONE = ("pp", "ep", "attention_dp")

#: weight precisions whose checkpoints the benchmark engine serves with an FP8 KV cache:
#: trtllm-bench forces the KV cache to FP8 for FP8 and NVFP4 quantisation
#: (tensorrt_llm/bench/build/build.py: "If the quantization is NVFP4 or FP8, force the KV cache
#: dtype to FP8"); every other precision keeps the KV cache in the weights' precision
FP8_KV_PRECISIONS = ("fp8", "fp4")

#: other spellings of the precisions in measurement files (NVFP4 is the 4-bit format the catalog's
#: fp4 figures describe; MXFP4 is its own weight-only precision, ``mxfp4``: 4.25-bit weights, 16-bit
#: math, and not in FP8_KV_PRECISIONS, whose source rule names NVFP4 and FP8 only)
PRECISION_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8",
                     "fp8_e4m3": "fp8", "e4m3": "fp8", "nvfp4": "fp4", "mx_fp4": "mxfp4", "w4a16_mxfp4": "mxfp4"}

#: the largest measurements file read (bytes)
MAX_CSV_BYTES = 64 * 2**20
#: the largest integer a column takes (counts of GPUs, tokens, requests)
MAX_INT = 2**31 - 1

SPLIT_METHOD = "fit if the first byte of sha256(id) is even, else held-out"


def engine_kv_precision(precision: str) -> str:
    """KV-cache precision of a row without a ``kv_precision`` column (``FP8_KV_PRECISIONS``; a
    weight-only format's cache at its math's 16 bit, ``kv_precision_of``)."""
    return "fp8" if precision in FP8_KV_PRECISIONS else kv_precision_of(precision, None)


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
    #: the engine profile the row was measured with (``codesign.model.engines``): the ``--engine``
    #: option, else the CSV's ``engine``, else its source's in ``benchmark_engines.toml``; None if unknown
    engine: str | None = None
    #: that profile's rules on the row's chip (PHYSICS if the engine is unknown)
    rules: Rules = PHYSICS

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

    def engine_cap(self, cap: int | None) -> int | None:
        """The engine's maximum batch for one replica: the row's own engine's (``own_engine_cap``)
        where it is known, else ``cap`` (per executor; None: no cap at all), times TP under
        attention DP, where every rank runs its own executor with its own ``max_batch_size``
        (TensorRT-LLM's PyTorch executor sizes each attention-DP rank as TP 1 and divides the
        capacity by nothing; traced in ai-dynamo/dynamo PR #11982 against TensorRT-LLM v1.1)."""
        if cap is None:
            return None
        if self.own_engine_cap is not None:
            return self.own_engine_cap
        # a row of a known engine: its profile's maximum batch (None: the profile has none)
        base = cap if self.engine is None else self.rules.max_batch_size
        return None if base is None else base * (self.tp if self.attention_dp_on else 1)

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
        """Most sequences one replica can run at a time for lack of requests (a multiple of
        ``batch_step``): the requests per replica of an offline row, None if their number is
        unknown or the row has a fixed concurrency."""
        if self.num_requests is None or self.concurrency is not None:
            return None
        return math.ceil(math.ceil(self.num_requests / self.dp) / self.batch_step) * self.batch_step

    def key(self, by: Sequence[str]) -> str:
        return "|".join(str(getattr(self, k)) for k in by)


def resolve_names(model: str, gpu: str, precision: str) -> tuple[str, str, str, tuple[tuple[str, str], ...]]:
    """A row's model, chip and precision as catalog ids (``resolve_workload``, ``resolve_chip``,
    ``PRECISION_ALIASES``), and the names that were read as something else. A name that resolves
    to nothing is kept as written (``engine.skip_reason`` then says why)."""
    ids = (resolve_workload(model) or model, resolve_chip(gpu) or gpu,
           PRECISION_ALIASES.get(precision.lower(), precision.lower()) if precision else precision)
    given = (model, gpu, precision)
    renamed = tuple((k, g) for k, g, i in zip(("model", "gpu", "precision"), given, ids, strict=True) if g != i)
    return *ids, renamed


# --- the benchmarks' request counts and engines ---------------------------------------------------
def benchmark_requests_path() -> Path:
    """The shipped table of benchmark request counts, by source document (an offline row's batch
    is at most its requests per replica; installed with the catalog)."""
    return instances_dir() / "catalog" / "benchmark_requests.toml"


def benchmark_engines_path() -> Path:
    """The shipped table of the engines each benchmark was built with, by source document (the
    engine's maximum batch caps an offline row's batch, its sequence slots' decoding state comes
    out of the KV cache, its tokens per iteration bound an iteration; installed with the catalog)."""
    return instances_dir() / "catalog" / "benchmark_engines.toml"


def _read_toml_table(path: Path, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot read the benchmarks' {what}: {exc}", file=path) from None


def read_benchmark_requests(path: str | Path | None = None) -> list[tuple[str, dict[tuple[int, int], int]]]:
    """The request counts of known benchmarks: (source prefix, {(ISL, OSL): requests}) per entry,
    longest prefix first (default file: ``benchmark_requests_path()``)."""
    path = Path(path) if path is not None else benchmark_requests_path()
    data = _read_toml_table(path, "request counts")
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
    return sorted(out, key=lambda e: -len(e[0]))


def requests_of(source: str, isl: int, osl: int, known: list[tuple[str, dict[tuple[int, int], int]]]) -> int | None:
    """The count of the longest source prefix that lists (ISL, OSL) (``known`` longest first, as
    ``read_benchmark_requests`` returns it); None if none does."""
    for prefix, counts in known:
        if source.startswith(prefix) and (isl, osl) in counts:
            return counts[(isl, osl)]
    return None


@dataclass(frozen=True)
class BenchmarkEngines:
    """One benchmark's engines (``benchmark_engines.toml``): (catalog model, TP) -> {"general" or
    max_seq_len: (max_batch_size, max_num_tokens)}, and the limits of a layout the table lacks
    (None: unknown, the row gets no engine rule)."""

    source: str
    default_max_batch: int | None
    engines: dict[tuple[str, int], dict[str | int, tuple[int, int]]]
    #: the tokens per iteration of a layout the table lacks (None: unknown, no budget)
    default_max_tokens: int | None = None
    #: the engine profile the benchmark ran (``codesign.model.engines``), None if not known
    engine: str | None = None

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


_ENGINES_EXPECTED = ('[[benchmark]] source = "owner/repo@commit:path", [default_max_batch_size = n,] '
                     '[benchmark.engines."<HF model>"] tp<N> = { general = [max_batch_size, max_num_tokens], '
                     '<max_seq_len> = [...] }')
_ENGINE_KEYS = {"source", "cite", "table_source", "default_max_batch_size", "default_max_num_tokens", "engines",
                "engine"}


def _positive(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def read_benchmark_engines(path: str | Path | None = None) -> list[BenchmarkEngines]:
    """The engines of known benchmarks, longest source prefix first (default file:
    ``benchmark_engines_path()``). A table's model names are read as catalog ids (``resolve_workload``)."""
    path = Path(path) if path is not None else benchmark_engines_path()
    data = _read_toml_table(path, "engines")
    entries = data.get("benchmark", [])
    unknown = sorted(set(data) - {"benchmark"})
    if unknown or not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InputError("the engine table must hold only [[benchmark]] tables", file=path,
                         key=unknown[0] if unknown else "benchmark", expected=_ENGINES_EXPECTED)
    out = []
    for i, entry in enumerate(entries):
        key = f"benchmark[{i}]"
        stray = sorted(set(entry) - _ENGINE_KEYS)
        if stray:
            raise InputError("unknown key in a benchmark entry", file=path, key=f"{key}.{stray[0]}",
                             expected=f"only {', '.join(sorted(_ENGINE_KEYS))}")
        source, default, models = entry.get("source"), entry.get("default_max_batch_size"), entry.get("engines", {})
        default_tokens = entry.get("default_max_num_tokens")
        if (not isinstance(source, str) or not source or (default is not None and not _positive(default))
                or (default_tokens is not None and not _positive(default_tokens)) or not isinstance(models, dict)):
            raise InputError("a benchmark entry needs a source (text) and an engines table (and, if given, a "
                             "positive default_max_batch_size and default_max_num_tokens)", file=path, key=key,
                             expected=_ENGINES_EXPECTED)
        engine = entry.get("engine")
        if engine is not None:
            try:
                load_engine(engine)
            except InputError as exc:
                raise InputError(exc.message, file=path, key=f"{key}.engine", value=engine, expected=exc.expected,
                                 suggestion=exc.suggestion) from None
        out.append(BenchmarkEngines(source, default, _engine_models(path, key, models), default_tokens, engine))
    return sorted(out, key=lambda e: -len(e.source))


def _engine_models(path: Path, key: str, models: dict[str, Any]) -> dict[tuple[str, int], dict[str | int, tuple[int, int]]]:
    """One benchmark entry's ``engines`` table, checked: (catalog model, TP) -> limits by max_seq_len."""
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
                        or len(pair) != 2 or not all(_positive(v) for v in pair)):
                    raise InputError("malformed engine limits", file=path, key=f"{lkey}.{length}", value=pair,
                                     expected='"general" or a max_seq_len = [max_batch_size, max_num_tokens], '
                                              'positive integers')
                sizes["general" if length == "general" else int(length)] = (pair[0], pair[1])
            engines[(model, int(layout[2:]))] = sizes
    return engines


def engine_of(source: str, model: str, tp: int, pp: int, isl: int, osl: int,
              known: list[BenchmarkEngines]) -> tuple[int | None, int | None, str | None]:
    """(``max_batch_size``, ``max_num_tokens``, engine profile) of the engine the longest source
    prefix in ``known`` lists for the row (its max_seq_len = ISL + OSL), Nones if no prefix matches."""
    for b in known:
        if source.startswith(b.source):
            return b.max_batch(model, tp, pp, isl + osl), b.max_tokens(model, tp, pp, isl + osl), b.engine
    return None, None, None


# --- reading a measurements file ------------------------------------------------------------------
def read_rows(csv_path: str | Path, *, engine: str | None = None) -> tuple[list[Row], list[dict[str, Any]]]:
    """Parse a measurements CSV: (typed rows, malformed rows each with its reason). An offline
    row's request count is its ``num_requests`` column or, if empty, that of its ``source`` in
    the shipped table (``benchmark_requests_path``); its engine's limits likewise
    (``max_batch_size``, ``max_num_tokens``; ``benchmark_engines_path``). ``engine`` (``--engine``)
    names every row's engine profile, over the CSV's ``engine`` column and the source's."""
    if engine is not None:
        load_engine(engine)  # an unknown name: InputError listing the known ones
    known = read_benchmark_requests()
    engines = read_benchmark_engines()
    path = Path(csv_path)
    data = read_input(path, what="measurements file", expected="a CSV file", limit=MAX_CSV_BYTES)
    text = input_text(path, data, what="measurements CSV", expected="a CSV file")
    return _read_rows(path, text, known, engines, engine)


def _int_field(raw: dict[str, Any], key: str) -> int:
    """An integer column (empty: 1 for pp, ep and attention_dp); ValueError naming it when it is
    not an integer or not below :data:`MAX_INT`."""
    text = str(raw.get(key) or "").strip()
    if not text and key in _DEFAULT_ONE:
        return 1
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"column {key}: {text[:40]!r} is not an integer") from None
    if abs(value) > MAX_INT:
        raise ValueError(f"column {key}: {value} is out of range (at most {MAX_INT:,})")
    return value


def _float_field(raw: dict[str, Any], key: str) -> float:
    text = str(raw.get(key) or "").strip()
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"column {key}: {text!r} is not a number") from None


def _optional_positive(raw: dict[str, Any], key: str, default: int | None) -> int | None:
    """An optional positive integer column; ``default`` (from the shipped tables) when empty."""
    if not str(raw.get(key) or "").strip():
        return default
    value = _int_field(raw, key)
    if value < 1:
        raise ValueError(f"{key} must be positive, got {value}")
    return value


def _read_rows(path: Path, text: str, known: Any, engines: Any,
               engine: str | None = None) -> tuple[list[Row], list[dict[str, Any]]]:
    rows: list[Row] = []
    bad: list[dict[str, Any]] = []
    first_line: dict[str, int] = {}
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        have = list(reader.fieldnames or [])
        missing = [c for c in REQUIRED_COLUMNS if c not in have]
        if missing:
            raise InputError(
                f"measurements file lacks the column(s) {', '.join(missing)}", file=path,
                value=have if len(str(have)) <= 400 else f"{str(have)[:400]}...",
                expected=f"a header with at least {', '.join(REQUIRED_COLUMNS)} (optional: {', '.join(OPTIONAL_COLUMNS)})",
            )
        for i, raw in enumerate(reader):
            rid = (raw.get("id") or "").strip() or f"line{i + 2}"
            if rid in first_line:
                bad.append({"id": rid, "reason": f"duplicate id: line {i + 2} repeats the id of line {first_line[rid]}"})
                continue
            first_line[rid] = i + 2
            try:
                rows.append(_row(rid, raw, known, engines, engine))
            except (TypeError, ValueError) as exc:
                bad.append({"id": rid, "reason": f"malformed row: {exc}"})
    except csv.Error as exc:  # a NUL byte, a field over the csv module's limit, ...
        raise InputError(f"not a readable CSV at line {reader.reader.line_num}: {exc}", file=path,
                         expected=f"a CSV file, every field at most {csv.field_size_limit():,} characters") from None
    return rows, bad


def _row(rid: str, raw: dict[str, Any], known: Any, engines: Any, engine: str | None = None) -> Row:
    """One CSV line as a Row (ValueError naming the column that is malformed)."""
    for column, text in raw.items():  # (a row's id goes into the split file, read with the same limit)
        if isinstance(text, str) and len(text) > MAX_STRING:
            raise ValueError(f"column {column}: {len(text):,} characters, more than {MAX_STRING:,}")
    adp_text = str(raw.get("attention_dp") or "").strip().lower()
    if adp_text in ("true", "yes", "false", "no"):  # a flag: over the whole TP group, or off
        raw = {**raw, "attention_dp": raw.get("tp") if adp_text in ("true", "yes") else "1"}
    ints = {k: _int_field(raw, k) for k in INT_FIELDS}
    model, gpu, precision, named_as = resolve_names(
        str(raw["model"]).strip(), str(raw["gpu"]).strip(), str(raw.get("precision") or "").strip())
    source = str(raw.get("source") or "").strip()
    table_mb, table_mt, table_engine = engine_of(source, model, ints["tp"], ints["pp"], ints["isl"], ints["osl"], engines)
    engine = engine or str(raw.get("engine") or "").strip() or table_engine
    rules = row_rules(engine, gpu)
    kv_text = str(raw.get("kv_precision") or "").strip()
    kv_precision = (PRECISION_ALIASES.get(kv_text.lower(), kv_text.lower()) if kv_text else
                    engine_kv_precision(precision) if engine is None else
                    rules.kv_precision(precision, None, WEIGHT_ONLY_KV_PRECISION))
    if kv_text and kv_text != kv_precision:
        named_as = (*named_as, ("kv_precision", kv_text))
    conc = str(raw.get("concurrency") or "").strip()
    if table_mt is None:
        table_mt = rules.max_num_tokens  # the engine's default where the benchmark's build is not known
    return Row(
        id=rid, model=model, gpu=gpu, named_as=named_as, precision=precision, kv_precision=kv_precision,
        metric=str(raw["metric"]).strip(), value=_float_field(raw, "value"),
        concurrency=_int_field(raw, "concurrency") if conc else None,
        unit=str(raw.get("unit") or "").strip(), source=source,
        num_requests=_optional_positive(raw, "num_requests", requests_of(source, ints["isl"], ints["osl"], known)),
        engine_max_batch=_optional_positive(raw, "max_batch_size", table_mb),
        engine_max_tokens=_optional_positive(raw, "max_num_tokens", table_mt),
        engine=engine, rules=rules,
        **ints,
    )


def row_rules(engine: str | None, gpu: str) -> Rules:
    """The rules of ``engine`` on the chip ``gpu`` (PHYSICS if None; an unknown name is an
    InputError listing the known ones; a chip the catalog lacks: the profile's base rules)."""
    if engine is None:
        return PHYSICS
    try:
        memory_GiB = load_chip(gpu).memory_capacity_GiB
    except InputError:
        return rules_of(engine)
    return rules_of(engine, gpu, memory_GiB)


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --- the split ------------------------------------------------------------------------------------
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
        write_json_atomic(path, data)
        Path(path).chmod(0o644)
    return data


def read_split(split_file: str | Path) -> dict[str, str]:
    """row id -> "fit" | "held-out" from a split file (InputError unless it holds lists of ids)."""
    data = read_json(split_file, what="split file")
    expected = '{"fit": [ids], "held_out": [ids]}'
    if not isinstance(data, dict) or "fit" not in data or "held_out" not in data:
        raise InputError("not a split file", file=split_file, expected=expected)
    for key in ("fit", "held_out"):
        ids = data[key]
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InputError("a split lists row ids (strings)", file=split_file, key=key,
                             value=type(ids).__name__ if not isinstance(ids, list) else next(i for i in ids if not isinstance(i, str)),
                             expected=expected)
    out = {i: "fit" for i in data["fit"]}
    out.update({i: "held-out" for i in data["held_out"]})
    return out


def is_hash_split(split_file: str | Path) -> bool:
    """Whether every row a split file labels is labelled as the id-hash rule (``split_of``) would."""
    return all(split_of(i) == label for i, label in read_split(split_file).items())
