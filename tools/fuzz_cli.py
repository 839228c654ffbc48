#!/usr/bin/env python
"""Fuzz codesign's command line with malformed inputs (issue 34, part 3).

Every case is one command line of ``codesign`` over one malformed input: an instance file of
each kind (grid, grid over catalog chips, mapping, placement), a catalog entry given by path, a
design file (JSON, TOML), a solution or certificate record, a measurements CSV, a split file, a
calibration TOML, or a command-line value (``--set``, ``--budget``, ``--design``, an option, a
generator parameter). A case passes when the command keeps the contract of the command line:

- exit code 0, 1, 2 or 3 (never a traceback, never a hang past ``--timeout``);
- exit code 2 comes with a message on stderr, and nothing says "Traceback";
- an input that is garbage by construction (a FIFO, a device, NaN in a number, a name that is a
  path, ``--set attention_dp=maybe``, ...) is not accepted with exit code 0;
- nothing is written outside the directories the command line names (the case's output
  directory, ``-o`` files, ``$CODESIGN_DATA``, the working directory for ``export``'s default
  file, ``$TMPDIR``).

Run::

    python tools/fuzz_cli.py                       # 1,200 cases, 2 at a time, as subprocesses
    python tools/fuzz_cli.py --cases 300 --seed 7  # another draw
    python tools/fuzz_cli.py --seed 0 --case 17 --keep /tmp/case17   # one case, its files kept

It writes ``tools/results/fuzz_cli.json``: the counts by input class and command, the exit codes,
and every failure with its reproduction (the command line and the content of every file).
Case ``i`` of seed ``s`` is drawn from ``random.Random(f"{s}:{i}")`` alone, so ``--case i``
reproduces it. ``tests/cli/test_fuzz.py`` draws from the same catalogue in-process (bounded).
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "tools" / "results" / "fuzz_cli.json"

#: tokens in arguments and file contents, replaced when a case is laid out in its directory
IN, OUT, CASE = "@IN@", "@OUT@", "@CASE@"
#: exit codes the contract allows (0 a design, 1 none, 2 bad input, 3 a failed check)
ALLOWED_EXIT = (0, 1, 2, 3)
#: the time limit given to every command that solves (seconds)
SOLVE_LIMIT = "2"

# ------------------------------------------------------------------------------------------------
# the valid inputs every case starts from
# ------------------------------------------------------------------------------------------------

#: a grid over catalog chips whose chip and workload are files given by path
GRID_BY_PATH = f"""\
name = "fuzz-by-path"
description = "a catalog-family grid whose chip and workload are files given by path"

[system]
devices = 2
scale_up_domain = 2

[hardware]
family = "catalog"
chip = "{IN}/chip.toml"

[[workloads]]
name = "main"
workload = "{IN}/workload.toml"
precision = "fp8"
input_tokens = 512
output_tokens = 128

[workloads.decisions]
tp = [1, 2]
batch = [8, 32]
"""

#: a sweep SPEC over every kind, each axis applying to some of them: 16 points of tiny solves
#: (place.toml, the placement instance, is given by a path relative to the SPEC)
SWEEP_SPEC = """\
instances = ["tiny-3d-llama8b", "dgx-llama70b-chip-choice", "tiny-pf-mapping", "place.toml"]
objectives = ["tokens_per_s", "energy_per_token_J"]
solver = "auto"
time_limit = 2
threads = 1

[grid]
"power_W <=" = [60, 700]

[substitute]
chip = ["h100-sxm", "b200"]
workload = ["llama-3.1-8b"]
"""

#: instance seeds: name -> (file text, the named instance a design or --set case uses)
INSTANCE_FILES = {
    "grid": ROOT / "instances" / "tiny-3d-llama8b.toml",
    "grid-catalog": ROOT / "instances" / "dgx-llama70b-chip-choice.toml",
    "mapping": ROOT / "instances" / "mapping" / "tiny-pf-mapping.toml",
    "placement": ROOT / "instances" / "mapping" / "tiny-placement-mixtral.toml",
}
#: named instances (by kind) the design, --set and --budget cases run on
NAMED = {
    "grid": "tiny-3d-llama8b",
    "grid-catalog": "dgx-llama70b-chip-choice",
    "grid-adp": "dgx-qwen3-235b-attention-dp",
    "mapping": "tiny-pf-mapping",
    "placement": "tiny-placement-mixtral",
}


@dataclass(repr=False)
class Seeds:
    """Valid inputs of every file type (text), and the decisions of the named instances."""

    def __repr__(self) -> str:
        return f"Seeds({len(self.files)} files)"

    files: dict[str, str]
    decisions: dict[str, dict[str, Any]]  # named instance -> its baseline design
    generator_params: dict[str, list[str]]


def build_seeds(run: Callable[[list[str], Path], tuple[int, str, str]], work: Path, *, quick: bool = False) -> Seeds:
    """The valid inputs: instance files read from the repository, solution and certificate
    records made by ``run`` (``codesign ARGS`` in ``work``), a few rows of the measurements
    (``quick``: two rows the id-hash split holds out and a split without fit rows, so that
    ``calibrate`` refuses them at once instead of fitting for seconds)."""
    work.mkdir(parents=True, exist_ok=True)
    files = {f"instance-{k}": p.read_text() for k, p in INSTANCE_FILES.items()}
    files["instance-grid-by-path"] = GRID_BY_PATH
    files["chip"] = (ROOT / "instances" / "catalog" / "chips" / "h100-sxm.toml").read_text()
    files["workload"] = (ROOT / "instances" / "catalog" / "workloads" / "llama-3.1-8b.toml").read_text()
    files["calibration"] = (ROOT / "instances" / "catalog" / "calibration.toml").read_text()
    lines = (ROOT / "validation" / "measurements.csv").read_text().splitlines()
    rows = [lines[1], lines[4]] if quick else lines[1:4]  # m0436, m0439: held out by the id-hash split
    files["csv"] = "\n".join([lines[0], *rows]) + "\n"
    ids = [line.split(",", 1)[0] for line in rows]
    fit, held = ([], ids) if quick else (ids[::2], ids[1::2])
    files["split"] = json.dumps({"method": "fuzz seed", "fit": fit, "held_out": held}, indent=2) + "\n"
    decisions: dict[str, dict[str, Any]] = {}
    for kind, name in NAMED.items():
        code, out, err = run(["show", name, "--json"], work)
        if code != 0:
            raise RuntimeError(f"codesign show {name} failed: {err}")
        decisions[kind] = json.loads(out)["baseline"]
    for kind in ("grid", "mapping", "placement"):
        name = NAMED[kind]
        sols = work / "solutions"
        code, _, err = run(["solve", name, "--save", "--out-dir", str(sols), "--quiet"], work)
        if code != 0:
            raise RuntimeError(f"codesign solve {name} failed: {err}")
        files[f"solution-{kind}"] = (sols / f"{name}.json").read_text()
        cert = work / f"{name}.cert.json"
        code, _, err = run(["certify", name, "--solutions", str(sols), "-o", str(cert), "--quiet"], work)
        if code != 0:
            raise RuntimeError(f"codesign certify {name} failed: {err}")
        files[f"certificate-{kind}"] = cert.read_text()
    files["design-grid-json"] = json.dumps({"dram_layers": 8, "tp": 2, "batch": 128}, indent=2) + "\n"
    files["design-grid-toml"] = tomli_w.dumps({"dram_layers": 8, "tp": 2, "batch": 128})
    files["design-mapping-json"] = json.dumps(decisions["mapping"], indent=2) + "\n"
    files["design-placement-json"] = json.dumps(decisions["placement"], indent=2) + "\n"
    files["design-placement-toml"] = tomli_w.dumps(decisions["placement"])
    files["sweep-spec"] = SWEEP_SPEC
    params = {kind: _generator_params(kind) for kind in ("grid", "mapping", "placement")}
    return Seeds(files, decisions, params)


def _generator_params(kind: str) -> list[str]:
    """The keyword parameters of a kind's generator (what ``generate KIND --set`` takes)."""
    import inspect

    from codesign.kinds.registry import kind_class

    return list(inspect.signature(kind_class(kind).generator).parameters)


# ------------------------------------------------------------------------------------------------
# a case
# ------------------------------------------------------------------------------------------------


@dataclass
class FileSpec:
    """One input path of a case: bytes, a directory, a FIFO, or a symlink (to ``target``)."""

    kind: str = "bytes"  # bytes | dir | fifo | symlink | absent
    content: bytes = b""
    target: str = ""
    #: this many NUL bytes and a newline after ``content``: a large file (sparse on disk), not held
    pad: int = 0


@dataclass
class Case:
    """One command line over one malformed input."""

    input_class: str
    command: str
    argv: list[str]
    files: dict[str, FileSpec] = field(default_factory=dict)
    #: paths (tokens allowed) the command may create: files, or directories ending in '/'
    allowed: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    #: the input is invalid by construction: exit code 0 is a failure
    garbage: bool = False
    note: str = ""
    #: runs in-process too (False: the case sets an environment variable read once per process,
    #: starts a dask cluster or waits for a scheduler)
    in_process: bool = True


def _b(text: str) -> bytes:
    return text.encode("utf-8")


# ------------------------------------------------------------------------------------------------
# mutations of structured data (TOML and JSON)
# ------------------------------------------------------------------------------------------------

Path_ = tuple[Any, ...]


def paths_of(data: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every key path in nested dicts and lists (not the root)."""
    out: list[Path_] = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append((*prefix, k))
            out += paths_of(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out.append((*prefix, i))
            out += paths_of(v, (*prefix, i))
    return out


def get_at(data: Any, path: Path_) -> Any:
    for p in path:
        data = data[p]
    return data


def set_at(data: Any, path: Path_, value: Any) -> None:
    get_at(data, path[:-1])[path[-1]] = value


def delete_at(data: Any, path: Path_) -> None:
    parent = get_at(data, path[:-1])
    del parent[path[-1]]


def _numeric_paths(data: Any) -> list[Path_]:
    return [p for p in paths_of(data) if isinstance(get_at(data, p), int | float) and not isinstance(get_at(data, p), bool)]


def _name_paths(data: Any) -> list[Path_]:
    return [p for p in paths_of(data) if p and p[-1] in ("name", "instance", "id") and isinstance(get_at(data, p), str)]


#: values of other types a retyped key may take (TOML: no null)
RETYPES: list[Any] = ["text", "", 0, -7, 2.5, True, False, [], [1, "a"], {}, {"x": 1}, [[1], [2]], "1e3", "true"]
#: numbers that are in no physical range
HUGE = [1e308, 1.7976931348623157e308, -1e308, 10**19, 2**63, -(2**63) - 1, 10**30, 10**18, 2**62, 2**31,
        5e-324, 1e-300, 1e30]
NEGATIVE = [-1, 0, -0.0, -1e-9, -1e9, -2**31]
#: names that are paths, or no names at all
BAD_NAMES = ["../escaped", "../../escaped", f"{CASE}/abs-escaped", "a/b", "a\\b", "", ".", "..", ".hidden",
             "x" * 5000, "sp ace", "nul\x00byte", "new\nline", "ü-名前", "con", "-rf"]
#: names that are paths and must be refused where a name becomes a file name
PATH_NAMES = ["../escaped", "../../escaped", f"{CASE}/abs-escaped", "a/b", "..", ".hidden", "nul\x00byte", "new\nline"]
DEEP = [40, 200, 1000, 100_000]


def deep_text(depth: int, fmt: str, rng: random.Random) -> str:
    """A value nested ``depth`` deep, as text (serializers recurse; this does not)."""
    if fmt == "toml" and rng.random() < 0.5:
        return "{a = " * depth + "1" + "}" * depth
    if fmt == "json" and rng.random() < 0.5:
        return '{"a": ' * depth + "1" + "}" * depth
    return "[" * depth + "1" + "]" * depth


def dump(data: Any, fmt: str) -> str:
    if fmt == "toml":
        return tomli_w.dumps(data)
    return json.dumps(data, indent=2) + "\n"


def parse(text: str, fmt: str) -> Any:
    return tomllib.loads(text) if fmt == "toml" else json.loads(text)


#: sentinel strings replaced by raw text after serialising
_RAW = "@@RAW{}@@"


def mutate_structured(text: str, fmt: str, cls: str, rng: random.Random) -> tuple[bytes, str, bool, Path_]:
    """(new content, what was done, garbage?, the key path changed) for a TOML or JSON document
    and a mutation class."""
    data = parse(text, fmt)
    paths = paths_of(data)
    raws: dict[str, str] = {}

    def raw(value_text: str) -> str:
        key = _RAW.format(len(raws))
        raws[key] = value_text
        return key

    def finish(d: Any) -> bytes:
        out = dump(d, fmt)
        for key, value in raws.items():
            out = out.replace(json.dumps(key), value) if fmt == "json" else out.replace(f'"{key}"', value)
        return _b(out)

    if cls == "delete-key":
        p = rng.choice(paths)
        delete_at(data, p)
        return finish(data), f"deleted {_show(p)}", False, p
    if cls == "retype":
        p = rng.choice(paths)
        old = get_at(data, p)
        choices = [v for v in RETYPES if type(v) is not type(old)]
        value = copy.deepcopy(rng.choice(choices))
        set_at(data, p, value)
        return finish(data), f"{_show(p)} = {value!r} (was {type(old).__name__})", False, p
    if cls == "unknown-key":
        tables = [p for p in paths if isinstance(get_at(data, p), dict)] + [()]
        p = rng.choice(tables)
        key = rng.choice(["bogus_key", "nmae", "Name", "kind2", "x" * 300])
        get_at(data, p)[key] = rng.choice([1, "a", [1]])
        return finish(data), f"added {_show((*p, key))}", True, (*p, key)
    if cls == "empty-container":
        p = rng.choice([q for q in paths if isinstance(get_at(data, q), dict | list)] or paths)
        old = get_at(data, p)
        set_at(data, p, {} if isinstance(old, dict) else [])
        return finish(data), f"{_show(p)} emptied", False, p
    if cls in ("nonfinite", "huge-number", "negative-number"):
        nums = _numeric_paths(data) or paths
        p = rng.choice(nums)
        if cls == "nonfinite":
            literal = rng.choice(["nan", "inf", "-inf"] if fmt == "toml" else ["NaN", "Infinity", "-Infinity"])
            set_at(data, p, raw(literal))
            return finish(data), f"{_show(p)} = {literal}", True, p
        if cls == "huge-number":
            if rng.random() < 0.25:
                literal = rng.choice(["9" * 5000, "1" + "0" * 400, "1e400", "-1e400"])
                if fmt == "toml" and literal.endswith("e400"):
                    literal = literal.replace("e400", "e4000")
                set_at(data, p, raw(literal))
                return finish(data), f"{_show(p)} = {literal[:20]}... ({len(literal)} characters)", False, p
            value = rng.choice(HUGE)
        else:
            value = rng.choice(NEGATIVE)
        set_at(data, p, value)
        return finish(data), f"{_show(p)} = {value!r}", False, p
    if cls == "deep-nesting":
        p = rng.choice(paths)
        depth = rng.choice(DEEP)
        set_at(data, p, raw(deep_text(depth, fmt, rng)))
        return finish(data), f"{_show(p)} = a value nested {depth} deep", depth >= 200, p
    if cls == "long-string":
        strs = [q for q in paths if isinstance(get_at(data, q), str)] or paths
        p = rng.choice(strs)
        n = rng.choice([10_000, 1_000_000])
        set_at(data, p, "x" * n)
        return finish(data), f"{_show(p)} = 'x' * {n}", False, p
    if cls == "bad-name":
        names = _name_paths(data) or [("name",)]
        p = rng.choice(names)
        value = rng.choice(BAD_NAMES)
        if not paths or p[0] not in data:
            data["name"] = value
        else:
            set_at(data, p, value)
        return finish(data), f"{_show(p)} = {value[:40]!r}", p == ("name",) and value != "con", p
    if cls == "duplicate-key":
        lines = text.splitlines(keepends=True)
        pattern = r'^\s*"[^"]+":' if fmt == "json" else r"^\s*[A-Za-z_\"][^=\[]*="
        keyed = [i for i, line in enumerate(lines) if re.match(pattern, line)]
        if fmt == "toml" and rng.random() < 0.3:
            keyed = [i for i, line in enumerate(lines) if re.match(r"^\[[^\[]", line)] or keyed
        i = rng.choice(keyed)
        lines.insert(i + 1, lines[i] if lines[i].rstrip().endswith(",") or fmt == "toml" else lines[i].rstrip() + ",\n")
        # a duplicated JSON key is legal JSON (the last wins): not garbage
        return _b("".join(lines)), f"line {i + 1} duplicated: {lines[i].strip()[:60]}", fmt == "toml", ()
    raise ValueError(cls)


def _show(p: Path_) -> str:
    out = ""
    for part in p:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)[:40]
    return out or "(root)"


STRUCTURED = ["delete-key", "duplicate-key", "retype", "unknown-key", "empty-container", "nonfinite",
              "huge-number", "negative-number", "deep-nesting", "long-string", "bad-name"]


# ------------------------------------------------------------------------------------------------
# mutations of bytes and of the file system
# ------------------------------------------------------------------------------------------------

BYTES = ["empty-file", "bad-encoding", "truncated", "byte-flip", "very-long-line", "oversized-file"]
FILESYSTEM = ["directory", "fifo", "symlink-to-device", "missing-file", "symlink-loop", "name-too-long"]


def mutate_bytes(text: str, cls: str, rng: random.Random, *, big: bool) -> tuple[FileSpec, str, bool]:
    data = _b(text)
    if cls == "empty-file":
        return FileSpec(content=rng.choice([b"", b"\n", b"   \n\n", b"\xef\xbb\xbf"])), "empty", True
    if cls == "bad-encoding":
        how = rng.choice(["utf-16", "latin-1", "random", "nul", "bom", "utf-32", "png"])
        if how == "utf-16":
            return FileSpec(content=text.encode("utf-16")), "UTF-16", True
        if how == "utf-32":
            return FileSpec(content=text.encode("utf-32")), "UTF-32", True
        if how == "latin-1":
            i = rng.randrange(len(data) + 1)
            return FileSpec(content=data[:i] + b"caf\xe9 " + data[i:]), f"latin-1 text ('caf\\xe9') at byte {i}", True
        if how == "random":
            return FileSpec(content=bytes(rng.randrange(256) for _ in range(rng.choice([16, 2048])))), "random bytes", True
        if how == "nul":
            i = rng.randrange(len(data) + 1)
            return FileSpec(content=data[:i] + b"\x00" * rng.choice([1, 64]) + data[i:]), f"NUL bytes at {i}", True
        if how == "png":
            return FileSpec(content=b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64)), "a PNG header", True
        return FileSpec(content=b"\xef\xbb\xbf" + data), "a UTF-8 byte-order mark", False
    if cls == "truncated":
        i = rng.randrange(1, max(2, len(data)))
        return FileSpec(content=data[:i]), f"cut at byte {i} of {len(data)}", False
    if cls == "byte-flip":
        b = bytearray(data)
        for _ in range(rng.choice([1, 3, 20])):
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
        return FileSpec(content=bytes(b)), "random bytes replaced", False
    if cls == "very-long-line":
        n = rng.choice([100_000, 2_000_000] if big else [100_000, 300_000])
        junk = rng.choice(["#" + "x" * n + "\n", "x" * n + "\n", "," * n + "\n"])
        return FileSpec(content=data + _b(junk)), f"a line of {n} characters appended", False
    if cls == "oversized-file":  # over every limit (16 MiB for TOML and JSON, 64 MiB for a CSV)
        n = rng.choice([66, 200] if big else [66]) * 2**20
        return FileSpec(content=data + b"#", pad=n), f"{n >> 20} MiB of NUL bytes appended", True
    raise ValueError(cls)


def fs_spec(cls: str, rng: random.Random) -> tuple[FileSpec, str]:
    if cls == "directory":
        return FileSpec(kind="dir"), "a directory"
    if cls == "fifo":
        return FileSpec(kind="fifo"), "a FIFO (named pipe) no one writes to"
    if cls == "symlink-to-device":
        dev = rng.choice(["/dev/zero", "/dev/urandom", "/dev/null", "/dev/full"])
        return FileSpec(kind="symlink", target=dev), f"a symlink to {dev}"
    if cls == "missing-file":
        return FileSpec(kind="absent"), "no such file"
    if cls == "symlink-loop":
        return FileSpec(kind="symlink", target="@SELF@"), "a symlink to itself"
    if cls == "name-too-long":
        return FileSpec(kind="long-name"), "a file name of 300 characters (the system allows 255)"
    raise ValueError(cls)


# ------------------------------------------------------------------------------------------------
# the targets: which file a case breaks and which commands read it
# ------------------------------------------------------------------------------------------------

INSTANCE_KINDS = ["grid", "grid-catalog", "mapping", "placement"]
INSTANCE_COMMANDS = ["show", "evaluate", "solve", "certify", "explain", "export", "instances", "pareto", "sensitivity",
                     "report", "breakdown", "sweep"]
#: the two metrics a frontier is drawn between, and a budget range to vary, by instance kind
PARETO_METRICS = {"mapping": ("tokens_per_s", "energy_per_token_J"), "placement": ("tokens_per_s", "energy_per_token_J")}
VARY = {"grid-catalog": "power_W <= 700..1400 step 700", "mapping": "tokens_per_s >= 100..200 step 100",
        "placement": "tokens_per_s >= 100..200 step 100"}
#: the bounded options every ``report`` case runs with (a few seconds on the tiny instances)
REPORT_BOUNDS = ["--max-points", "2", "--pareto-time-limit", SOLVE_LIMIT, "--sensitivity-points", "2",
                 "--sensitivity-time-limit", SOLVE_LIMIT, "--time-limit", SOLVE_LIMIT]
RECORD_KINDS = ["grid", "mapping", "placement"]


def instance_argv(command: str, path: str, rng: random.Random, kind: str = "grid",
                  files: dict[str, FileSpec] | None = None) -> tuple[list[str], list[str]]:
    """(argv, allowed outputs) of an instance command on ``path`` (a file or a name) of ``kind``;
    ``sweep`` adds its SPEC, naming ``path``, to ``files``."""
    if command == "show":
        return ["show", path, *rng.choice([[], ["--json"]])], []
    if command == "evaluate":
        return ["evaluate", path, *rng.choice([[], ["--json"], ["--all"]])], []
    if command == "solve":
        extra = rng.choice([[], ["--save", "--out-dir", f"{OUT}/sols"], ["--save"], ["--cross-check"], ["--json"],
                            ["--robust"], ["--solver", "brute"], ["--solver", "auto", "--json"]])
        return ["solve", path, "--time-limit", SOLVE_LIMIT, *extra], [f"{OUT}/sols/", f"{CASE}/data/"]
    if command == "certify":
        return (["certify", path, "--time-limit", SOLVE_LIMIT, "-o", f"{OUT}/cert.json", *rng.choice([[], ["--json"]])],
                [f"{OUT}/cert.json"])
    if command == "explain":
        return ["explain", path, "--time-limit", SOLVE_LIMIT], []
    if command == "export":
        if rng.random() < 0.5:
            return ["export", path], [f"{CASE}/cwd/"]
        out = f"{OUT}/m." + rng.choice(["lp", "mps"])
        return ["export", path, "-o", out], [out, out + ".json"]
    if command == "pareto":
        x, y = PARETO_METRICS.get(kind, ("tokens_per_s", "power_W"))
        plot = f"{OUT}/f.{rng.choice(['png', 'svg', 'pdf'])}"
        extra = rng.choice([[], ["--json"], ["--plot", plot]])
        return (["pareto", path, "--x", x, "--y", y, "--max-points", "3", "--time-limit", SOLVE_LIMIT, *extra],
                [plot] if extra[:1] == ["--plot"] else [])
    if command == "sensitivity":
        plot = f"{OUT}/s.{rng.choice(['png', 'svg', 'pdf'])}"
        extra = rng.choice([[], ["--json"], ["--plot", plot]])
        return (["sensitivity", path, "--vary", VARY.get(kind, "power_W <= 30..40 step 10"), "--time-limit", SOLVE_LIMIT,
                 *extra], [plot] if extra[:1] == ["--plot"] else [])
    if command == "report":
        return ["report", path, "-o", f"{OUT}/r.html", *REPORT_BOUNDS, *rng.choice([[], ["--json"]])], [f"{OUT}/r.html"]
    if command == "breakdown":
        out = f"{OUT}/b.{rng.choice(['png', 'svg', 'pdf'])}"
        return ["breakdown", path, "-o", out, *rng.choice([[], ["--json"]])], [out]
    if command == "sweep":
        if files is not None:
            files["sweep.toml"] = FileSpec(content=_b(tomli_w.dumps({"instances": [path], "time_limit": 2, "threads": 1})))
        return (["sweep", f"{IN}/sweep.toml", "--workers", "0", "--out", f"{OUT}/sw", *rng.choice([[], ["--json"]])],
                [f"{OUT}/sw/"])
    raise ValueError(command)


def _instance_case(rng: random.Random, seeds: Seeds, cls: str, big: bool) -> Case:
    kind = rng.choice([*INSTANCE_KINDS, "grid-by-path"])
    command = rng.choice(INSTANCE_COMMANDS)
    text = seeds.files[f"instance-{kind}"]
    files: dict[str, FileSpec] = {}
    if kind == "grid-by-path":
        files["chip.toml"] = FileSpec(content=_b(seeds.files["chip"]))
        files["workload.toml"] = FileSpec(content=_b(seeds.files["workload"]))
    target = "inst.toml"
    spec, note, garbage, _ = _mutated(text, "toml", cls, rng, big)
    files[target] = spec
    case = Case(cls, command, [], files, garbage=garbage, note=f"{kind} instance: {note}")
    if command == "instances":
        # a directory of named instances ($CODESIGN_INSTANCES) holding the broken file
        files.pop(target)
        files[f"named/{target}"] = spec
        files["named/catalog"] = FileSpec(kind="symlink", target=str(ROOT / "instances" / "catalog"))
        case.argv = ["instances", *rng.choice([[], ["--json"]])]
        case.env = {"CODESIGN_INSTANCES": f"{IN}/named"}
        case.in_process = False
        case.garbage = garbage and cls not in ("missing-file", "name-too-long")  # no file: an empty list
        return case
    case.argv, case.allowed = instance_argv(command, f"{IN}/{target}", rng, kind.removesuffix("-by-path"), files)
    return case


def _mutated(text: str, fmt: str, cls: str, rng: random.Random, big: bool) -> tuple[FileSpec, str, bool, Path_]:
    """(the file, what was done, garbage?, the key path changed: () for a change of bytes or of
    the file system)."""
    if cls in STRUCTURED:
        content, note, garbage, path = mutate_structured(text, fmt, cls, rng)
        return FileSpec(content=content), note, garbage, path
    if cls in BYTES:
        return (*mutate_bytes(text, cls, rng, big=big), ())
    spec, note = fs_spec(cls, rng)
    return spec, note, True, ()


def _catalog_entry_case(rng: random.Random, seeds: Seeds, cls: str, big: bool) -> Case:
    """A chip or workload file given by path in an instance."""
    which = rng.choice(["chip", "workload"])
    command = rng.choice(["show", "evaluate", "solve", "breakdown", "pareto", "sweep"])
    spec, note, garbage, _ = _mutated(seeds.files[which], "toml", cls, rng, big)
    other = "workload" if which == "chip" else "chip"
    files = {"inst.toml": FileSpec(content=_b(seeds.files["instance-grid-by-path"])), f"{which}.toml": spec,
             f"{other}.toml": FileSpec(content=_b(seeds.files[other]))}
    argv, allowed = instance_argv(command, f"{IN}/inst.toml", rng, "grid-catalog", files)
    if cls == "bad-name" or cls == "unknown-key":
        garbage = cls == "unknown-key"  # a catalog entry's name is a label, its id is checked only in the catalog
    return Case(cls, command, argv, files, allowed, garbage=garbage, note=f"{which} file by path: {note}")


def _design_case(rng: random.Random, seeds: Seeds, cls: str, big: bool) -> Case:
    kind, fmt = rng.choice([("grid", "json"), ("grid", "toml"), ("mapping", "json"), ("placement", "json"),
                            ("placement", "toml")])
    command = rng.choice(["evaluate", "certify"])
    spec, note, garbage, _ = _mutated(seeds.files[f"design-{kind}-{fmt}"], fmt, cls, rng, big)
    if cls in ("delete-key", "empty-container") or (cls == "empty-file" and fmt == "toml"):
        garbage = False  # a design file may give only some decisions (an empty TOML file: none)
    name = NAMED[kind]
    path = f"{IN}/design.{fmt}"
    argv = [command, name, "--design", path]
    allowed: list[str] = []
    if command == "certify":
        argv += ["--time-limit", SOLVE_LIMIT, "--solutions", f"{IN}/nosols", "-o", f"{OUT}/cert.json"]
        allowed = [f"{OUT}/cert.json"]
    files = {f"design.{fmt}": spec, "nosols": FileSpec(kind="dir")}
    return Case(cls, command, argv, files, allowed, garbage=garbage, note=f"{kind} design ({fmt}): {note}")


def _record_case(rng: random.Random, seeds: Seeds, cls: str, big: bool) -> Case:
    record = rng.choice(["solution", "certificate"])
    kind = rng.choice(RECORD_KINDS)
    spec, note, garbage, _ = _mutated(seeds.files[f"{record}-{kind}"], "json", cls, rng, big)
    if cls in STRUCTURED and cls not in ("nonfinite", "deep-nesting"):
        # whether an edited field fails the check is the record check's contract (issue 34,
        # part 2), not the reader's: not asserted here
        garbage = False
    if record == "solution":
        argv = ["check-solution", f"{IN}/rec.json", "--time-limit", SOLVE_LIMIT, *rng.choice([[], ["--no-prove"], ["--json"]])]
        command = "check-solution"
    else:
        argv = ["check-certificate", f"{IN}/rec.json", "--time-limit", SOLVE_LIMIT, *rng.choice([[], ["--no-prove"], ["--json"]])]
        command = "check-certificate"
    return Case(cls, command, argv, {"rec.json": spec}, [], garbage=garbage, note=f"{kind} {record}: {note}")


def mutate_csv(text: str, cls: str, rng: random.Random) -> tuple[bytes, str, bool]:
    lines = text.splitlines()
    header = lines[0].split(",")
    rows = [line.split(",") for line in lines[1:]]
    if cls == "csv-field":
        r = rng.randrange(len(rows))
        c = rng.randrange(len(header))
        value = rng.choice(["", "nan", "inf", "-inf", "-1", "0", "1e999", "9" * 30, "9" * 5000, "x" * 200_000,
                            '"unterminated', "1.5", "true", "maybe", "🙂", "../x", "  ", "1e-320"])
        rows[r][c] = value
        note = f"row {r + 1} column {header[c]} = {value[:20]!r}" + (f" ({len(value)} characters)" if len(value) > 20 else "")
        garbage = False  # a malformed row is skipped; the others still count
    elif cls == "csv-shape":
        how = rng.choice(["drop-column", "extra-column", "short-row", "long-row", "header-only", "duplicate-header",
                          "no-header", "semicolons", "crlf", "blank-rows", "quoted-newline"])
        note = how
        garbage = how in ("drop-column", "header-only", "no-header", "semicolons")
        if how == "drop-column":
            c = rng.choice([header.index(x) for x in ("model", "gpu", "tp", "metric", "value")])
            header.pop(c)
            rows = [r[:c] + r[c + 1 :] for r in rows]
            note = "a required column dropped"
        elif how == "extra-column":
            header.append("bogus")
            rows = [[*r, "1"] for r in rows]
        elif how == "short-row":
            rows[0] = rows[0][:3]
        elif how == "long-row":
            rows[0] = rows[0] + ["x"] * 50
        elif how == "header-only":
            rows = []
        elif how == "duplicate-header":
            rows.insert(0, list(header))
        elif how == "no-header":
            header = rows[0]
        elif how == "semicolons":
            return _b("\n".join(";".join(r) for r in [header, *rows]) + "\n"), note, garbage
        elif how == "crlf":
            return _b("\r\n".join(",".join(r) for r in [header, *rows]) + "\r\n"), note, garbage
        elif how == "blank-rows":
            return _b(",".join(header) + "\n\n\n" + "\n".join(",".join(r) for r in rows) + "\n" + ",,,,\n"), note, garbage
        elif how == "quoted-newline":
            rows[0][0] = '"a\nb"'
    else:
        raise ValueError(cls)
    return _b("\n".join(",".join(r) for r in [header, *rows]) + "\n"), note, garbage


def _csv_case(rng: random.Random, seeds: Seeds, cls: str, big: bool) -> Case:
    command = rng.choice(["validate", "calibrate"])
    if cls in ("csv-field", "csv-shape"):
        content, note, garbage = mutate_csv(seeds.files["csv"], cls, rng)
        spec = FileSpec(content=content)
    else:
        spec, note, garbage, _ = _mutated(seeds.files["csv"], "csv", cls, rng, big)
        if note.startswith("NUL bytes"):
            garbage = False  # a NUL is a character of its field: that row is malformed, the others count
    argv, allowed = _csv_argv(command, f"{IN}/m.csv", None, rng)
    return Case(cls, command, argv, {"m.csv": spec}, allowed, garbage=garbage, note=f"measurements CSV: {note}")


def _csv_argv(command: str, csv_path: str, split: str | None, rng: random.Random) -> tuple[list[str], list[str]]:
    if command == "validate":
        argv = ["validate", csv_path] + (["--split", split] if split else []) + rng.choice([[], ["--json"]])
        return argv, []
    argv = ["calibrate", csv_path, "--out", f"{OUT}/cal.toml", "--quiet"] + (["--split", split] if split else [])
    return argv, [f"{OUT}/cal.toml", f"{OUT}/cal.split.json"]


def _split_case(rng: random.Random, seeds: Seeds, cls: str, big: bool) -> Case:
    command = rng.choice(["validate", "calibrate"])
    if cls == "bad-name":
        cls = "retype"
    spec, note, garbage, _ = _mutated(seeds.files["split"], "json", cls, rng, big)
    if cls in ("delete-key", "empty-container", "duplicate-key", "unknown-key"):
        garbage = False
    argv, allowed = _csv_argv(command, f"{IN}/m.csv", f"{IN}/split.json", rng)
    files = {"m.csv": FileSpec(content=_b(seeds.files["csv"])), "split.json": spec}
    return Case(cls, command, argv, files, allowed, garbage=garbage, note=f"split file: {note}")


def _calibration_case(rng: random.Random, seeds: Seeds, cls: str, big: bool) -> Case:
    command = rng.choice(["metrics", "evaluate", "solve", "validate", "show", "breakdown", "pareto", "sweep"])
    spec, note, garbage, path = _mutated(seeds.files["calibration"], "toml", cls, rng, big)
    if cls in ("delete-key", "empty-container", "bad-name"):
        garbage = False  # optional tables, or a chip table emptied
    if path and path[-1] == "memory_bandwidth_cap_GBps" and note.endswith(" = inf"):
        garbage = False  # an infinite cap is no cap (codesign calibrate writes it)
    files = {"cal.toml": spec}
    if command == "metrics":
        argv, allowed = ["metrics"], []
    elif command == "validate":
        files["m.csv"] = FileSpec(content=_b(seeds.files["csv"]))
        argv, allowed = ["validate", f"{IN}/m.csv"], []
    else:
        kind = rng.choice(["grid", "grid-catalog", "mapping"])
        argv, allowed = instance_argv(command, NAMED[kind], rng, kind, files)
    where = rng.choice(["front", "back"])
    argv = ["--calibration", f"{IN}/cal.toml", *argv] if where == "front" else [*argv, "--calibration", f"{IN}/cal.toml"]
    return Case(cls, command, argv, files, allowed, garbage=garbage, note=f"calibration file: {note}")


def _sweep_spec_case(rng: random.Random, seeds: Seeds, cls: str, big: bool) -> Case:
    """A sweep's SPEC (``sweep --workers 0``: no dask cluster; its points are tiny solves)."""
    spec, note, garbage, path = _mutated(seeds.files["sweep-spec"], "toml", cls, rng, big)
    if cls in ("delete-key", "empty-container") and path[:1] != ("instances",):
        garbage = False  # every key but instances is optional
    if cls == "delete-key" and path == ("instances",):
        garbage = True  # the one required key
    files = {"spec.toml": spec, "place.toml": FileSpec(content=_b(seeds.files["instance-placement"]))}
    argv = ["sweep", f"{IN}/spec.toml", "--workers", "0"]
    if rng.random() < 0.7:
        argv += ["--out", f"{OUT}/sw"]
        allowed = [f"{OUT}/sw/"]
    else:  # the default: <SPEC's stem>-sweep beside it
        allowed = [f"{IN}/spec-sweep/"]
    argv += rng.choice([[], ["--json"]])
    return Case(cls, "sweep", argv, files, allowed, garbage=garbage, note=f"sweep SPEC: {note}")


# --- command-line values --------------------------------------------------------------------------

#: --set values no decision accepts
BAD_SET_VALUES = ["maybe", "NaN", "Infinity", "-Infinity", "1e999", "-1", "null", "[]", "{}", '{"a": 1}', "x" * 10_000,
                  "🙂", "../x", "9" * 30, "1e-320", "-0", "[1e999]", "[-1, 5]", '["pool:9:hbm"]', "[[0, 0, 0]]",
                  "yes please", "0x10", "1_000"]


def _set_case(rng: random.Random, seeds: Seeds, cls: str, big: bool) -> Case:
    kind = rng.choice(["grid", "grid-catalog", "grid-adp", "mapping", "placement"])
    name = NAMED[kind]
    command = rng.choice(["evaluate", "certify"])
    decisions = list(seeds.decisions[kind])
    garbage = True
    if cls == "set-value":
        key = rng.choice(decisions)
        if kind == "grid-adp" and rng.random() < 0.5:
            key = next((d for d in decisions if d.endswith("attention_dp")), key)
        value = rng.choice(BAD_SET_VALUES)
        items = [f"{key}={value}"]
    else:  # set-syntax
        key = rng.choice(decisions)
        base = seeds.decisions[kind][key]
        items = [rng.choice(["tp", "=4", f"{key}=", "=", f"{key}==4", "nonexistent=4", f"{key.upper()}=1",
                             f"{key}.x=4", f"main.{key}=1", "a" * 5000 + "=1", f"{key}={json.dumps(base)}=1",
                             " = ", f"{key} = {json.dumps(base)}"])]
        if items[0] == f"{key} = {json.dumps(base)}":
            garbage = False  # spaces around the '=' are stripped: the baseline's value
    argv = [command, name, *[x for item in items for x in ("--set", item)]]
    allowed: list[str] = []
    if command == "certify":
        argv += ["--time-limit", SOLVE_LIMIT, "--solutions", f"{IN}/nosols"]
    return Case(cls, command, argv, {"nosols": FileSpec(kind="dir")}, allowed, garbage=garbage,
                note=f"{name}: --set {items[0][:60]!r}")


#: budgets: (text, refused on every instance)
BUDGETS: list[tuple[str, bool]] = [
    ("", True), (" ", True), ("x", True), ("power_W", True), ("power_W <=", True), ("<= 5", True),
    ("power_W <= nan", True), ("power_W <= inf", True), ("power_W <= 1e999", True), ("power_W <= -1e999", True),
    ("power_W < 5", True), ("power_W == 5", True), ("power_W <= 1 <= 2", True), ("1 <= 2", True),
    ("power_W * power_W <= 4", True), ("power_W / 0 <= 1", True), ("power_W / power_W <= 1", True),
    ("tokens_per_s >= 0", True), ("tokens_per_s >= -5", True), ("tokens_per_s <= 5", True),
    ("tokens_per_s + tpot_s >= 1", True), ("nope.tpot_s <= 1", True), ("(" * 200 + "power_W" + ")" * 200 + " <= 5", False),
    ("(" * 10_000 + "power_W" + ")" * 10_000 + " <= 5", True), ("power_W" + " + power_W" * 3000 + " <= 5", True),
    ("__import__('os').system('touch " + CASE + "/pwned') <= 1", True), ("power_W <= 10**400", True),
    ("power_W <= 1" + "0" * 5000, True), ("power_W <= 5\x01", True), ("lambda: 1 <= 2", True),
    ("power_W <= True", True), ("power_W <= 1e308 * 10", True), ("temperature_C <= 80", False),
    ("pool_ports <= 2", False), ("dram_layers <= 4", False), ("main.tpot_s <= 1", False),
    ("2*power_W + dram_layers*15 <= 1600", False), ("energy_per_token_J <= 0", False), ("-power_W >= -700", False),
    ("memory_pool_B <= -1", False), ("clock_GHz >= 1.5", False), ("power_W <= 5 # comment", False),
]
#: decision metrics each grid kind lacks: a budget on them is refused (the instance has no such
#: decision), as is temperature_C on catalog chips (no thermal model: NaN)
UNDEFINED_METRICS = {
    "grid": ["pool_ports"],
    "grid-catalog": ["temperature_C", "dram_layers", "tsv_count", "tsv_pitch_um", "compute_area_mm2", "clock_GHz",
                     "sram_MiB"],
    # a mapping's budgets name tokens_per_s, time_per_token_s, tpot_s and energy_per_token_J only
    "mapping": ["power_W", "temperature_C", "pool_ports", "dram_layers", "clock_GHz", "memory_pool_B", "main"],
}


def undefined_metric(kind: str, text: str) -> bool:
    return any(re.search(rf"\b{m}\b", text) for m in UNDEFINED_METRICS.get(kind, []))


def _budget_case(rng: random.Random, seeds: Seeds, cls: str, big: bool) -> Case:
    kind = rng.choice(["grid", "grid-catalog", "mapping", "placement"])
    if cls == "budget-undefined":
        kind = rng.choice(["grid", "grid-catalog"])
        metric = rng.choice(UNDEFINED_METRICS[kind])
        text = rng.choice([f"{metric} <= 80", f"{metric} >= 1", f"2*{metric} + power_W <= 2000", f"-{metric} <= -1"])
        garbage = True
    else:
        text, garbage = rng.choice(BUDGETS)
    garbage = garbage or kind == "placement" or undefined_metric(kind, text)  # placement: no --budget
    name = NAMED[kind]
    command = rng.choice(["evaluate", "solve", "certify", "explain", "export", "pareto", "sensitivity", "report",
                          "breakdown"])
    argv, allowed = instance_argv(command, name, rng, kind) if command != "evaluate" else (["evaluate", name], [])
    argv += ["--budget", text]
    if command == "certify":
        argv += ["--solutions", f"{IN}/nosols"]
    return Case(cls, command, argv, {"nosols": FileSpec(kind="dir")}, allowed, garbage=garbage,
                note=f"{name}: --budget {text[:60]!r}" + (f" ({len(text)} characters)" if len(text) > 60 else ""))


def _values(good: str, bad: str) -> list[tuple[str, bool]]:
    """(value, garbage) pairs from space-separated lists ('' is written as '<empty>')."""
    def split(text: str) -> list[str]:
        return ["" if v == "<empty>" else v for v in text.split()]
    return [(v, False) for v in split(good)] + [(v, True) for v in split(bad)]


#: --vary ranges no instance accepts, and some that one may
BAD_VARY = ["", " ", "x", "power_W", "power_W <= 40..30 step 10", "power_W <= 30..40 step 0", "power_W <= 30..40 step -1",
            "power_W <= nan..40", "power_W <= 30..inf", "power_W <= 0..1e9 step 1", "power_W < 30..40", "power_W <= 30..40 step",
            "power_W <= 1e999..1e999", "system.nope=1..2", "system=1..2", "name=1..2", "..", "=1..2", "power_W <= ..",
            "__import__('os').system('touch " + CASE + "/pwned') <= 1..2", "power_W <= 30..40 step 1e-300",
            "power_W <= 30" + "0" * 400 + "..40", "(" * 10_000 + "power_W" + ")" * 10_000 + " <= 30..40",
            "tokens_per_s <= 1..2", "description=1..2", "workloads=1..2"]
GOOD_VARY = ["power_W <= 30..40", "area_mm2 <= 100..200 step 100", "system.devices=1..2 step 1", "power_W >= 30..40 step 10",
             "power_W <= 30..30"]

#: option values: command -> option -> (value, refused?)
OPTIONS: dict[str, dict[str, list[tuple[str, bool]]]] = {
    "solve": {"--time-limit": _values("1e-300 0.5", "-1 0 nan inf -inf 1e999 abc <empty>"),
              "--threads": _values("0 1", "-1 99999999999999999999 x 1.5"),
              "--solver": _values("cpsat", "<empty> foo pyomo: pyomo:nonexistent HIGHS pyomo:../../x"),
              "--objective": _values("tpot_s energy_per_token_J ttft_s tokens_per_s", "<empty> foo TOKENS_PER_S")},
    "certify": {"--time-limit": _values("", "-1 nan inf abc <empty>"), "--solver": _values("", "<empty> foo pyomo:"),
                "--solutions": _values("", f"{IN}/absent {IN}/file.txt /dev/null")},
    "explain": {"--time-limit": _values("0.5", "-1 nan abc 0"), "--solver": _values("", "bogus")},
    "check-certificate": {"--time-limit": _values("", "-1 nan inf"), "--solver": _values("", "bogus pyomo:")},
    "check-solution": {"--time-limit": _values("", "-1 nan inf"), "--solver": _values("", "bogus pyomo:")},
    "export": {"--format": _values("lp mps", "<empty> xyz LP"),
               "--output": _values(f"{OUT}/m.txt {OUT}/m.lp", f"{OUT}/ {IN}/file.txt/m.lp")},
    "validate": {"--by": _values("id value <empty> , model,,gpu", "nonexistent " + "x" * 1000),
                 "--split": _values("", f"{IN}/absent.json {IN}/file.txt /dev/null"),
                 "--plot": _values("", f"{IN}/file.txt/p.png {OUT}/")},
    "calibrate": {"--out": _values("c.toml", f"{OUT}/c.txt {OUT}/ {IN}/file.txt/c.toml"),
                  "--split": _values("", f"{IN}/absent.json {IN}/file.txt")},
    "metrics": {"--calibration": _values("", f"{IN}/absent.toml {IN}/file.txt /dev/null <empty> {IN}")},
    "instances": {"--calibration": _values("", f"{IN}/absent.toml /dev/zero")},
    "show": {"--calibration": _values("", f"{IN}/file.txt /dev/urandom")},
    "pareto": {"--x": _values("energy_per_token_J area_mm2", "<empty> foo power_W TOKENS_PER_S main.tpot_s.x nan"),
               "--y": _values("energy_per_token_J area_mm2", "<empty> foo tokens_per_s x.power_W"),
               "--max-points": _values("1 2 99999999999999999999", "0 -1 -99999999999999999999 x 1.5 <empty>"),
               "--time-limit": _values("0.5", "-1 0 nan inf abc"),
               "--solver": _values("brute auto highs", "<empty> foo pyomo: BRUTE"),
               "--plot": _values(f"{OUT}/f.png {OUT}/f.SVG", f"{OUT}/f.txt {OUT}/f {OUT}/ {IN}/file.txt/f.png {IN}")},
    "sensitivity": {"--vary": [(v, True) for v in BAD_VARY] + [(v, False) for v in GOOD_VARY],
                    "--workers": _values("0", "-1 -99999999999999999999 x 1.5 <empty> 1000000 99999999999999999999"),
                    "--time-limit": _values("0.5", "-1 0 nan inf abc"),
                    "--solver": _values("brute highs", "<empty> foo pyomo:"),
                    "--plot": _values(f"{OUT}/s.pdf", f"{OUT}/s.txt {OUT}/s {OUT}/ {IN}/file.txt/s.png")},
    "report": {"--output": _values(f"{OUT}/r.html {OUT}/r.HTML", f"{OUT}/r.png {OUT}/r {OUT}/ {IN}/file.txt/r.html {IN}"),
               "--x": _values("power_W", "<empty> foo"), "--y": _values("area_mm2", "foo tokens_per_s"),
               "--max-points": _values("1 99999999999999999999", "0 -1 x"),
               "--pareto-time-limit": _values("0.5", "-1 0 nan inf"),
               "--sensitivity-points": _values("2 3", "0 1 51 -1 99999999999999999999 x"),
               "--sensitivity-time-limit": _values("0.5", "-1 0 nan inf"),
               "--time-limit": _values("1", "-1 nan inf"),
               "--solver": _values("brute auto", "foo pyomo:")},
    "breakdown": {"--output": _values(f"{OUT}/b.svg {OUT}/b.PDF", f"{OUT}/b.txt {OUT}/b {OUT}/ {OUT}/.png {IN}/file.txt/b.png {IN}"),
                  "--design": _values("", f"{IN}/absent.json {IN}/file.txt {IN} /dev/null"),
                  "--set": _values("", "nonexistent=1 tp=maybe tp=-1 ="),
                  "--json": _values("<empty>", "")},
    "sweep": {"--out": _values(f"{OUT}/other", f"{IN}/file.txt {IN}/file.txt/sub"),
              "--workers": _values("0 1", "-1 -99999999999999999999 x 1.5 <empty> 1000000 99999999999999999999"),
              "--scheduler": _values("", "<empty> foo tcp:// tcp://127.0.0.1:1 tcp://256.1.1.1:8786 tcp://[::1]:1 "
                                     "inproc://nowhere tls://127.0.0.1:1 udp://127.0.0.1:8786 tcp://localhost:99999 "
                                     "tcp://-1 tcp://" + "x" * 300 + ":1"),
              "--json": _values("<empty>", "")},
}


def _option_case(rng: random.Random, seeds: Seeds, cls: str, big: bool, pick: tuple[str, str, int] | None = None) -> Case:
    """A command with one option's value from OPTIONS (``pick``: this command, option and value's
    index instead of drawn ones)."""
    command = rng.choice(sorted(OPTIONS))
    option = rng.choice(sorted(OPTIONS[command]))
    value, garbage = rng.choice(OPTIONS[command][option])
    if pick is not None:
        command, option = pick[0], pick[1]
        value, garbage = OPTIONS[command][option][pick[2]]
    files = {"file.txt": FileSpec(content=b"not what was asked for\n")}
    allowed: list[str] = []
    name = rng.choice([NAMED["grid"], NAMED["mapping"], NAMED["placement"]])
    kind = {NAMED["grid"]: "grid", NAMED["mapping"]: "mapping", NAMED["placement"]: "placement"}[name]
    if command == "sweep":
        files["place.toml"] = FileSpec(content=_b(seeds.files["instance-placement"]))
        files["spec.toml"] = FileSpec(content=_b(seeds.files["sweep-spec"]))
        argv = ["sweep", f"{IN}/spec.toml", "--workers", "0", "--out", f"{OUT}/sw"]
        allowed = [f"{OUT}/sw/"]
        if option in ("--out", "--workers"):
            argv = _drop_option(argv, option, None)
        if option == "--out":
            allowed = [f"{value}/"]
        if option == "--scheduler":
            argv = _drop_option(argv, "--workers", None)
            if rng.random() < 0.2:  # with --workers too: refused
                argv += ["--workers", "0"]
                garbage = True
        if option == "--json":
            argv.append("--json")
        elif option == "--workers" and value == "1":
            argv += ["--workers", "1"]  # a real local cluster (a few seconds)
        else:
            argv += [option, value]
        # a dask cluster started, or a well-formed scheduler address waited for (10 s): subprocesses only
        workers = argv[argv.index("--workers") + 1] if "--workers" in argv else None
        slow = (option == "--scheduler" and value.startswith("tcp://") and value.rsplit(":", 1)[-1].isdigit()) or workers == "1"
        return Case(cls, command, argv, files, allowed, garbage=garbage, note=f"sweep {option} {value[:40]!r}",
                    in_process=not slow)
    if command in ("pareto", "sensitivity", "report", "breakdown"):
        base, allowed = instance_argv(command, name, rng, kind)
        short = {"--output": "-o"}.get(option)
        if option in base or (short and short in base):
            base = _drop_option(base, option, short)
        if option == "--plot" or option == "--output":
            base, allowed = _drop_option(base, "--json", None), [value]
        if option == "--json":
            return Case(cls, command, [*base, "--json"], files, allowed, note=f"{command} --json")
        if command == "sensitivity" and option == "--vary" and kind != "grid" and value in GOOD_VARY:
            garbage = value.startswith(("power_W", "area_mm2"))  # a grid's metrics (mapping, placement: refused)
        if command == "pareto" and option in ("--x", "--y") and value in ("area_mm2", "power_W") and kind != "grid":
            garbage = True
        return Case(cls, command, [*base, option, value], files, allowed, garbage=garbage,
                    note=f"{command} on {name} {option} {value[:40]!r}")
    if command in ("solve", "certify", "explain", "export"):
        base, allowed = instance_argv(command, name, rng)
        if option in ("--time-limit", "--solver", "--format", "--output"):
            base = _drop_option(base, option, "-o" if option == "--output" else None)
        if option == "--output":
            allowed = [value, value + ".json"]
        if option == "--objective" and name != NAMED["grid"]:
            garbage = True  # --objective applies to grid instances only
        if command == "certify":
            base += ["--solutions", f"{IN}/nosols"] if option != "--solutions" else []
            files["nosols"] = FileSpec(kind="dir")
        argv = [*base, option, value]
    elif command in ("check-certificate", "check-solution"):
        record = "certificate" if command == "check-certificate" else "solution"
        files["rec.json"] = FileSpec(content=_b(seeds.files[f"{record}-{rng.choice(RECORD_KINDS)}"]))
        argv = [command, f"{IN}/rec.json", option, value]
    elif command in ("validate", "calibrate"):
        files["m.csv"] = FileSpec(content=_b(seeds.files["csv"]))
        argv, allowed = _csv_argv(command, f"{IN}/m.csv", None, rng)
        if option == "--out":
            argv = _drop_option(argv, "--out", None)
            allowed = [f"{CASE}/cwd/", value, str(Path(value).with_suffix(".split.json"))]
        if option == "--plot":
            allowed = [value]
        argv = [*argv, option, value]
    else:  # show, metrics, instances: a global option
        argv = [command, *(["tiny-3d-llama8b"] if command == "show" else []), option, value]
    return Case(cls, command, argv, files, allowed, garbage=garbage, note=f"{command} {option} {value[:40]!r}")


def _drop_option(argv: list[str], option: str, alias: str | None) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in (option, alias):
            skip = True
            continue
        out.append(a)
    return out


#: an instance name as ``generate --set name=`` must give it (the spec's rule)
NAME_RULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
GEN_VALUES = ["-1", "0", "1e999", "nan", "99999999", "x", "", "[]", "[1, 2]", "true", "null", "../escaped",
              f"{CASE}/abs-escaped", "1.5", "h100-sxm", "h100-sxm,b200", "🙂", "a/b", "9" * 30]


def _generate_case(rng: random.Random, seeds: Seeds, cls: str, big: bool) -> Case:
    kind = rng.choice(["grid", "mapping", "placement", "bogus"])
    params = seeds.generator_params.get(kind, ["devices"])
    key, value = rng.choice(params), rng.choice(GEN_VALUES)
    items = [f"{key}={value}"]
    garbage = kind == "bogus"
    if key == "name":  # (an empty name is read as none given: the generator's own)
        garbage = garbage or (value != "" and not NAME_RULE.match(value.replace(CASE, "/abs")))
    elif value in ("-1", "nan", "[]", "🙂", "../escaped", f"{CASE}/abs-escaped", "a/b", "", "1e999"):
        garbage = True
    if rng.random() < 0.2:
        items.append(rng.choice(["nonexistent=1", "devices", "="]))
        garbage = True
    out = f"{OUT}/g.toml"
    argv = ["generate", kind, "-o", out, *[x for item in items for x in ("--set", item)]]
    return Case(cls, "generate", argv, {}, [out], garbage=garbage, note=f"generate {kind} --set {' --set '.join(items)[:80]}")


# --- the catalogue --------------------------------------------------------------------------------

FILE_CLASSES = STRUCTURED + BYTES + FILESYSTEM
#: (target, input classes, case maker)
TARGETS: list[tuple[str, list[str], Callable[..., Case]]] = [
    ("instance", FILE_CLASSES, _instance_case),
    ("catalog-entry", FILE_CLASSES, _catalog_entry_case),
    ("design", FILE_CLASSES, _design_case),
    ("record", FILE_CLASSES, _record_case),
    ("csv", ["csv-field", "csv-shape", *BYTES, *FILESYSTEM], _csv_case),
    ("split", FILE_CLASSES, _split_case),
    ("calibration", FILE_CLASSES, _calibration_case),
    ("sweep-spec", FILE_CLASSES, _sweep_spec_case),
    ("set", ["set-value", "set-syntax"], _set_case),
    ("budget", ["budget-expr", "budget-undefined"], _budget_case),
    ("option", ["option-value"], _option_case),
    ("generate", ["generator-parameter"], _generate_case),
]
#: how many times a command-line value's pairs recur in COMBOS (they have one or two classes, a file
#: type has 14 to 23, and each draw picks another value, instance and command)
VALUE_WEIGHT = 6
#: every (target, class) pair, in a fixed order (a command-line value's VALUE_WEIGHT times): case i
#: is COMBOS[i % len(COMBOS)]
COMBOS: list[tuple[str, str]] = [(t, c) for t, classes, _ in TARGETS
                                 for c in classes * (VALUE_WEIGHT if t in ("set", "budget", "option", "generate") else 1)]
_MAKERS = {t: maker for t, _, maker in TARGETS}


def make_case(i: int, seed: int, seeds: Seeds, *, big: bool = True) -> Case:
    """Case ``i`` of ``seed`` (deterministic)."""
    rng = random.Random(f"{seed}:{i}")
    target, cls = COMBOS[i % len(COMBOS)]
    case = _MAKERS[target](rng, seeds, cls, big)
    case.input_class = f"{target}:{cls}"
    for rel, spec in list(case.files.items()):
        if spec.kind == "long-name":  # the argument names a file no file system holds
            long = str(Path(rel).with_name("x" * 300 + Path(rel).suffix))
            case.files[long] = FileSpec(kind="absent")
            del case.files[rel]
            case.argv = [a.replace(f"{IN}/{rel}", f"{IN}/{long}") for a in case.argv]
            case.env = {k: v.replace(f"{IN}/{rel}", f"{IN}/{long}") for k, v in case.env.items()}
            for other in case.files.values():
                if other.kind == "bytes" and _b(f"{IN}/{rel}") in other.content:
                    other.content = other.content.replace(_b(f"{IN}/{rel}"), _b(f"{IN}/{long}"))
    return case


# ------------------------------------------------------------------------------------------------
# laying a case out, running it, judging it
# ------------------------------------------------------------------------------------------------


def _sub(text: str, case_dir: Path) -> str:
    return text.replace(IN, str(case_dir / "in")).replace(OUT, str(case_dir / "out")).replace(CASE, str(case_dir))


def lay_out(case: Case, case_dir: Path) -> tuple[list[str], dict[str, str], set[Path]]:
    """Create the case's directories and files; (argv, env, the paths that were made)."""
    for d in ("in", "out", "cwd", "home", "data", "tmp"):
        (case_dir / d).mkdir(parents=True, exist_ok=True)
    made: set[Path] = set()
    for rel, spec in case.files.items():
        p = case_dir / "in" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if spec.kind == "bytes":
            p.write_bytes(_sub(spec.content.decode("utf-8", "surrogateescape"), case_dir).encode("utf-8", "surrogateescape")
                          if IN.encode() in spec.content or CASE.encode() in spec.content else spec.content)
            if spec.pad:
                os.truncate(p, p.stat().st_size + spec.pad)
                with p.open("ab") as f:
                    f.write(b"\n")
        elif spec.kind == "dir":
            p.mkdir(exist_ok=True)
        elif spec.kind == "fifo":
            os.mkfifo(p)
        elif spec.kind == "symlink":
            os.symlink(p if spec.target == "@SELF@" else _sub(spec.target, case_dir), p)
        made.add(p)
    argv = [_sub(a, case_dir) for a in case.argv]
    env = {k: _sub(v, case_dir) for k, v in case.env.items()}
    return argv, env, made


def snapshot(case_dir: Path) -> set[Path]:
    """Every non-directory path under ``case_dir`` (symlinks not followed)."""
    out: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(case_dir, followlinks=False):
        for n in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            out.add(Path(dirpath) / n)
    return out


@dataclass
class Outcome:
    code: int | None  # None: timed out
    stdout: str
    stderr: str
    seconds: float
    exception: str = ""  # in-process: an exception other than SystemExit


def judge(case: Case, case_dir: Path, before: set[Path], outcome: Outcome) -> list[str]:
    """What the case did wrong (empty: it kept the contract)."""
    problems = []
    text = outcome.stdout + outcome.stderr
    if outcome.code is None:
        problems.append(f"hang: no exit within {outcome.seconds:.0f} s")
    elif outcome.exception:
        problems.append(f"uncaught exception: {outcome.exception}")
    elif outcome.code not in ALLOWED_EXIT:
        problems.append(f"exit code {outcome.code}")
    if "Traceback" in text:
        problems.append("a traceback in the output")
    if outcome.code == 2 and not outcome.stderr.strip():
        problems.append("exit code 2 without a message on stderr")
    if outcome.code == 0 and case.garbage:
        problems.append("exit code 0 on garbage input")
    allowed = [Path(_sub(a, case_dir)) for a in case.allowed] + [case_dir / "tmp", case_dir / "home" / ".cache",
                                                                 case_dir / "home" / ".config"]
    for p in sorted(snapshot(case_dir) - before):
        if not any(p == a or a in p.parents for a in allowed):
            problems.append(f"wrote outside the directories named: {p.relative_to(case_dir)}")
    return problems


def run_subprocess(argv: list[str], env: dict[str, str], case_dir: Path, timeout: float) -> Outcome:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CODESIGN_")}
    full_env.update({"HOME": str(case_dir / "home"), "CODESIGN_DATA": str(case_dir / "data"),
                     "TMPDIR": str(case_dir / "tmp"), "COLUMNS": "200", "PYTHONHASHSEED": "0", **env})
    full_env.pop("XDG_DATA_HOME", None)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "codesign", *argv], cwd=case_dir / "cwd", env=full_env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return Outcome(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), time.monotonic() - t0)


def describe_file(spec: FileSpec, case_dir: Path) -> Any:
    """A file of a failing case as its reproduction shows it: text, base64, or (when large) its
    size, hash and head (``--case I --keep DIR`` writes it again)."""
    if spec.kind == "symlink":
        return {"symlink_to": "itself" if spec.target == "@SELF@" else _sub(spec.target, case_dir)}
    if spec.kind != "bytes":
        return {spec.kind: True}
    data = spec.content
    if spec.pad:
        return {"head": data[:400].decode("utf-8", "replace"), "then": f"{spec.pad:,} NUL bytes and a newline",
                "bytes": len(data) + spec.pad + 1}
    if len(data) <= 8192:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(data).decode()}
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "head": data[:400].decode("utf-8", "replace"), "tail": data[-200:].decode("utf-8", "replace")}


def run_case(i: int, seed: int, seeds: Seeds, root: Path, timeout: float, keep: Path | None = None) -> dict[str, Any]:
    case = make_case(i, seed, seeds)
    case_dir = keep if keep is not None else root / f"case{i}"
    argv, env, _ = lay_out(case, case_dir)
    before = snapshot(case_dir)
    outcome = run_subprocess(argv, env, case_dir, timeout)
    problems = judge(case, case_dir, before, outcome)
    result = {"case": i, "class": case.input_class, "command": case.command, "exit": outcome.code,
              "seconds": round(outcome.seconds, 2), "problems": problems}
    if problems:
        frames = re.findall(r'File "[^"]*/(codesign/[^"]+\.py)", line (\d+)', outcome.stderr)
        if frames:  # the innermost frame of codesign's own: where the exception escaped from
            result["raised_in"] = f"{frames[-1][0]}:{frames[-1][1]}"
        shown = [a if len(a) <= 300 else f"{a[:200]}... ({len(a)} characters)" for a in argv]
        result.update({
            "note": case.note,
            "reproduce": f"python tools/fuzz_cli.py --seed {seed} --case {i} --keep /tmp/fuzz-case-{i}",
            "command_line": ["codesign", *shown],
            "env": env,
            "files": {rel: describe_file(spec, case_dir) for rel, spec in case.files.items()},
            "stderr_tail": outcome.stderr[-1500:],
        })
    if keep is None:
        shutil.rmtree(case_dir, ignore_errors=True)
    return result


def _subprocess_runner(work: Path) -> Callable[[list[str], Path], tuple[int, str, str]]:
    def run(argv: list[str], cwd: Path) -> tuple[int, str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESIGN_")}
        env["CODESIGN_DATA"] = str(work / "data")
        p = subprocess.run([sys.executable, "-m", "codesign", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=600, check=False)
        return p.returncode, p.stdout, p.stderr

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1200, help="how many cases (default 1200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds after which a case is a hang (default 60)")
    ap.add_argument("--case", type=int, default=None, help="run only this case (its reproduction)")
    ap.add_argument("--keep", type=Path, default=None, help="with --case: lay the case out here and keep it")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"results JSON (default {RESULTS.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fuzz-cli-") as tmp:
        root = Path(tmp)
        seeds = build_seeds(_subprocess_runner(root / "seeds"), root / "seeds")
        if args.case is not None:
            keep = args.keep.resolve() if args.keep is not None else None
            if keep is not None and keep.exists():
                shutil.rmtree(keep)
            r = run_case(args.case, args.seed, seeds, root, args.timeout, keep)
            case = make_case(args.case, args.seed, seeds)
            print(json.dumps({**r, "note": case.note, "argv": case.argv}, indent=2, ensure_ascii=False))
            return 1 if r["problems"] else 0
        results: list[dict[str, Any]] = []
        done = 0

        def one(i: int) -> dict[str, Any]:
            return run_case(i, args.seed, seeds, root, args.timeout)

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for r in pool.map(one, range(args.cases)):
                results.append(r)
                done += 1
                if r["problems"]:
                    print(f"case {r['case']} ({r['class']}, {r['command']}): {'; '.join(r['problems'])}", flush=True)
                if done % 50 == 0:
                    print(f"{done}/{args.cases} cases, {sum(bool(x['problems']) for x in results)} failing, "
                          f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    report = summarise(results, args, time.monotonic() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(f"{report['cases']} cases, {report['failures']} failing ({report['hangs']} hangs, {report['tracebacks']} "
          f"tracebacks), {report['wall_s']:.0f} s; wrote {args.out}")
    return 1 if report["failures"] else 0


def summarise(results: list[dict[str, Any]], args: argparse.Namespace, wall: float) -> dict[str, Any]:
    by_class: dict[str, Counter] = defaultdict(Counter)
    by_command: dict[str, Counter] = defaultdict(Counter)
    by_target: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        failed = bool(r["problems"])
        for table, key in ((by_class, r["class"]), (by_command, r["command"]), (by_target, r["class"].split(":")[0])):
            table[key]["cases"] += 1
            table[key]["failures"] += failed
            table[key][f"exit {r['exit'] if r['exit'] is not None else 'timeout'}"] += 1
    failures = [r for r in results if r["problems"]]
    return {
        "command": f"python tools/fuzz_cli.py --cases {args.cases} --seed {args.seed} --jobs {args.jobs} --timeout {args.timeout:g}",
        "cases": len(results),
        "failures": len(failures),
        "hangs": sum(any(p.startswith("hang") for p in r["problems"]) for r in results),
        "tracebacks": sum(any("traceback" in p or "exception" in p for p in r["problems"]) for r in results),
        "exit_codes": dict(sorted(Counter(str(r["exit"]) for r in results).items())),
        "wall_s": round(wall, 1),
        "slowest_s": max((r["seconds"] for r in results), default=0.0),
        "by_input": {k: dict(v) for k, v in sorted(by_target.items())},
        "by_class": {k: dict(v) for k, v in sorted(by_class.items())},
        "by_command": {k: dict(v) for k, v in sorted(by_command.items())},
        "failures_raised_in": dict(sorted(Counter(r.get("raised_in", "-") for r in failures).items())),
        "failing_cases": failures,
    }


if __name__ == "__main__":
    sys.exit(main())
