"""The calibration: the achievable fractions of peak and the fixed overheads the model applies to
each chip family (formulations/model.md §3.6; fitted by ``codesign calibrate``, VALIDATION.md).

A calibration file holds ``[default]`` (every chip and 3D family), ``[pooled]`` (a chip of a family
without measurements) and ``[chips.<id>]`` tables that override single fields. The model never
reads a file on its own: every instance carries a :class:`CalibrationSet` (the shipped one unless
the caller passes another, ``codesign --calibration FILE``), and the model reads the calibration
of a chip with :meth:`CalibrationSet.for_chip`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from codesign import catalog
from codesign.errors import InputError, did_you_mean
from codesign.paths import catalog_dir, instances_dir
from codesign.schema import Strict, load_toml, read_input, validate

#: math formats whose peak is the 8-bit tensor rate (Calibration.compute_efficiency_8bit)
EIGHT_BIT_FORMATS = ("fp8", "int8")

#: the name a record gives the shipped calibration (any other is named by its path)
SHIPPED_NAME = "shipped"


class Calibration(Strict):
    """Achievable fractions of peak and fixed overheads of one chip (fitted by ``codesign calibrate``)."""

    compute_efficiency: float = Field(gt=0, le=1)
    #: achievable fraction of the 8-bit peak (formats EIGHT_BIT_FORMATS: the tensor cores' FP8 and
    #: INT8 rate, twice the 16-bit one) where it differs from ``compute_efficiency``: an 8-bit GEMM
    #: does half the 16-bit GEMM's time per FLOP, while its operand loads, scaling and epilogue do
    #: not halve, so it may reach a smaller fraction of its own peak (eq. 3.20c). None: the same as
    #: ``compute_efficiency``. Unset in the shipped calibration; fitted on request
    #: (``codesign calibrate --fit-8bit``) for a family with fit rows at both precisions
    compute_efficiency_8bit: float | None = Field(default=None, gt=0, le=1)
    memory_efficiency: float = Field(gt=0, le=1)
    #: the most local-memory bandwidth the die sustains whatever memory it is given (GB/s; None:
    #: no cap). By Little's law a die moves at most (bytes in flight) / (memory latency): its SMs
    #: and their kernels keep a bounded number of loads outstanding, so the same die on a faster
    #: memory reaches a smaller fraction of the peak. Achieved bandwidth = min(e x peak, cap)
    #: (eq. 3.21a); fitted per family only where the family's chips differ in memory bandwidth
    memory_bandwidth_cap_GBps: float | None = Field(default=None, gt=0, allow_inf_nan=True)
    network_efficiency: float = Field(gt=0, le=1)
    layer_overhead_us: float = Field(ge=0)
    #: software time of one ring step of a tensor-parallel collective, on top of the link's own
    #: latency and whatever the message size: the ranks hand a block on and pass a flag barrier at
    #: every step, so an all-reduce over n ranks pays it 2(n-1) times (eq. 3.13d)
    collective_step_latency_us: float = Field(ge=0)
    #: fraction of the device memory the serving runtime may use at all (u, eq. 3.21)
    usable_memory_fraction: float = Field(gt=0, le=1)
    #: memory the runtime keeps besides weights and KV cache: CUDA context, activation
    #: workspace, logits buffers (R, eq. 3.21)
    runtime_reserve_GiB: float = Field(ge=0)
    #: the engine gives the KV cache this fraction of the memory left after weights and the
    #: reserve (f, eq. 4.14a; TensorRT-LLM's free_gpu_memory_fraction). An engine setting: the
    #: same for every chip, so it is read from ``[default]`` only (chips may not override it)
    kv_cache_free_fraction: float = Field(gt=0, le=1)
    static_power_fraction: float = Field(ge=0, le=1)
    compute_power_fraction: float = Field(ge=0, le=1)
    #: fraction of the compute, local-memory and pooled-memory streams of a step that overlap
    #: (1: a roofline max; 0: the streams run one after the other, eq. 5.3)
    stream_overlap: float = Field(ge=0, le=1)
    #: host time of the serving engine per sequence of a step (scheduling, sampling, bookkeeping
    #: of each request on the CPU, not hidden behind the GPU's work; eq. 5.3). 0 unless fitted:
    #: the shipped calibration's engine (TensorRT-LLM 0.14, C++ runtime) is not fitted with it. An
    #: engine profile's own host time (``codesign.model.engines``, e.g. trtllm-1.x's) adds to it:
    #: the model charges their sum, and ``codesign calibrate --fit-host`` fits this one on top
    host_us_per_sequence: float = Field(default=0.0, ge=0)

    def compute_efficiency_at(self, fmt: str) -> float:
        """Achievable fraction of the peak of the math format ``fmt`` (the chip's format a
        precision runs at, after the precision fallback): ``compute_efficiency_8bit`` for an
        8-bit format when set, else ``compute_efficiency`` (eq. 3.20c)."""
        if fmt in EIGHT_BIT_FORMATS and self.compute_efficiency_8bit is not None:
            return self.compute_efficiency_8bit
        return self.compute_efficiency


#: calibration fields whose value may be ``inf``: no limit (a chip table states it over a
#: ``[default]`` that sets one; ``codesign calibrate`` writes it so). NaN is never a value
UNBOUNDED_FIELDS = frozenset({"memory_bandwidth_cap_GBps"})

#: calibration keys that describe the serving engine, not a chip: ``[default]`` only
ENGINE_CALIBRATION_KEYS = ("kv_cache_free_fraction",)


class FittedOn(Strict):
    """What a fitted calibration was fitted on (written by ``codesign calibrate``): the
    measurements file and how its rows were split. ``validate`` reads it to label the rows of that
    very file when no split file is given."""

    #: the measurements file's name and sha256 (hex, of its bytes)
    csv: str
    csv_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    #: the split file's name, or "by row id" when the rows were labelled by the rule itself
    split: str
    #: "id-hash": every row labelled by the hash of its id (``codesign.calibration.rows.split_of``;
    #: the rows can be relabelled without the split file); "own": a split of the user's own
    split_rule: Literal["id-hash", "own"]


#: a value of a chip-level table: checked field by field as a Calibration when the file is read
#: (``_parsed``), where only an UNBOUNDED_FIELDS field may be inf
_TableValue = Annotated[float, Field(allow_inf_nan=True)]


class CalibrationFile(Strict):
    """The schema of a calibration TOML file."""

    source: str = ""
    fitted_on: FittedOn | None = None
    default: Calibration
    #: one calibration fitted on every measured family's rows together (``codesign calibrate``):
    #: what a chip of a family without measurements takes when no table of its own or of its
    #: family exists (a chip added to the catalog after the fit, or given by path)
    pooled: dict[str, _TableValue] | None = None
    chips: dict[str, dict[str, _TableValue]] = Field(default_factory=dict)

    @field_validator("chips", "pooled")
    @classmethod
    def _chip_level_keys(cls, v: Any, info: ValidationInfo) -> Any:
        """A chip-level table sets calibration fields only, and no engine setting (those are
        ``[default]``'s); a typo would otherwise surface only when a chip first takes the table."""
        tables = {} if v is None else v if info.field_name == "chips" else {None: v}
        for name, over in tables.items():
            where = f"[chips.{name}]" if name is not None else "[pooled]"
            bad = sorted(set(over) & set(ENGINE_CALIBRATION_KEYS))
            if bad:
                raise ValueError(f"{where} sets {bad}: an engine setting, the same for every chip; set it in [default]")
            unknown = sorted(set(over) - set(Calibration.model_fields))
            if unknown:
                raise ValueError(f"{where} sets {unknown}: not calibration fields "
                                 f"(expected some of {sorted(Calibration.model_fields)})")
        return v


@dataclass(frozen=True)
class CalibrationSet:
    """One calibration file, read and checked: what an instance is evaluated under.

    Attributes:
        path: the file (resolved).
        sha256: hex digest of its bytes (solutions record it; ``check-solution`` compares).
        file: its parsed content.
        shipped: whether it is the calibration the package ships.
    """

    path: Path
    sha256: str
    file: CalibrationFile
    shipped: bool = False

    @property
    def name(self) -> str:
        """``"shipped"`` for the package's calibration, else the file's path."""
        return SHIPPED_NAME if self.shipped else str(self.path)

    @property
    def default(self) -> Calibration:
        return self.file.default

    @property
    def kv_cache_free_fraction(self) -> float:
        """The engine's KV-cache share of the memory left after weights and reserve (``[default]``)."""
        return self.file.default.kv_cache_free_fraction

    def for_chip(self, chip_or_family: str, *, stacked: bool = False) -> Calibration:
        """The default calibration overridden by the chip's (or, ``stacked``, the 3D family's) own
        entries. A catalog chip without a table of its own takes its calibration family's (the
        chip's ``family``): the table of the first chip of that family, by id, that has one; a chip
        with neither (a family without measurements, or a chip file given by path) takes
        ``[pooled]``, the fit on every measured family, when the file has one. A 3D family without
        a table of its own keeps ``[default]``: its efficiencies are design assumptions, not a GPU
        engine's."""
        cal = self.file
        over = cal.chips.get(chip_or_family)
        if over is None:
            over = _family_table(cal, chip_or_family)
        if over is None and not stacked:
            over = cal.pooled
        return Calibration.model_validate({**cal.default.model_dump(), **(over or {})})


def _family_table(cal: CalibrationFile, chip: str) -> dict[str, float] | None:
    """The calibration table a catalog chip without its own inherits from its family (None if no
    chip of the family has one, or if ``chip`` is not a catalog id)."""
    kin = _kin(catalog_dir("chips"), chip, tuple(sorted(cal.chips)))
    return None if kin is None else cal.chips[kin]


@cache
def _kin(chips: Path, chip: str, ids: tuple[str, ...]) -> str | None:
    """The first of ``ids`` in ``chip``'s calibration family, per catalog chip directory: the
    catalog reads a chip file once per path (``catalog._load_file``), so this is read once too
    (asked on every hardware table, it cost a box search ~5 % of its time in stat calls)."""
    family = catalog.chip_family(chip)  # a 3D family's id or a non-catalog chip: its own, no kin
    return next((c for c in ids if catalog.chip_family(c) == family), None)


def shipped_path() -> Path:
    """The calibration the package ships (``instances/catalog/calibration.toml``)."""
    return instances_dir() / "catalog" / "calibration.toml"


def load_calibration(path: str | Path | None = None) -> CalibrationSet:
    """The calibration file at ``path`` (None: the shipped one), read and checked; read once per
    file content (a file rewritten since is read again). A missing or invalid file is an
    InputError naming it."""
    shipped_file = shipped_path().resolve()
    # realpath, not Path.resolve: a symlink loop is read (and refused) below, not a RuntimeError here
    p = shipped_file if path is None else Path(os.path.realpath(path))
    expected = "a calibration TOML (`codesign calibrate CSV --out FILE` writes one)"
    try:
        data = read_input(p, what="calibration file", expected=expected)
    except InputError as exc:
        raise InputError(exc.message, file=path if path is not None else p, key="--calibration" if path is not None else None,
                         expected=expected) from None
    return _parsed(p, hashlib.sha256(data).hexdigest(), p == shipped_file)


def shipped() -> CalibrationSet:
    """The calibration the package ships."""
    return load_calibration(None)


@cache
def _parsed(path: Path, sha256: str, is_shipped: bool) -> CalibrationSet:
    """The checked content of ``path`` whose bytes hash to ``sha256`` (the key keeps a rewritten
    file from being served from the cache)."""
    cal = validate(CalibrationFile, load_toml(path, unbounded=UNBOUNDED_FIELDS), file=path)
    # a chip-level table over [default] is a calibration too: its values in their ranges now, not
    # when a chip first takes it
    tables = {f"chips.{name}": over for name, over in cal.chips.items()}
    if cal.pooled is not None:
        tables["pooled"] = cal.pooled
    for where, over in tables.items():
        validate(Calibration, {**cal.default.model_dump(), **over}, file=path, prefix=where)
    known = set(catalog.list_ids("chips")) | {p.stem for p in catalog_dir("families").glob("*.toml")}
    if not is_shipped:  # a copied catalog may lack a chip the shipped file calibrates
        known |= set(shipped().file.chips)
    for name in cal.chips:
        if name not in known:  # a typo would leave the chip at [pooled] without a word
            raise InputError("a calibration table names no catalog chip or 3D family", file=path,
                             key=f"chips.{name}", value=name, expected="a chip id of the catalog or a 3D family id",
                             suggestion=did_you_mean(name, sorted(known)))
    return CalibrationSet(path=path, sha256=sha256, file=cal, shipped=is_shipped)
