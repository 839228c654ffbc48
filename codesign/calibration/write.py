"""Writing a fitted calibration file (``codesign calibrate --out FILE`` or ``--write``).

A fit (``codesign.calibration.fit.fit_calibration``) gives values per chip family; the file gets
them in the ``[chips.<id>]`` table of every chip of each fitted family, ``[pooled]`` for chips of
families without measurements, and ``[fitted_on]``: the measurements file and the split it was
fitted on. Everything else (comments, ``[default]``, the tables of chips not fitted) is kept from
the file it starts from.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from codesign.calibration.fit import POOLED
from codesign.calibration.rows import SPLIT_METHOD, file_sha256, is_hash_split
from codesign.calibration.terms import CAP_FIELD, EIGHT_BIT_FIELD
from codesign.model.calibration import CalibrationSet, shipped_path


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
    """A fitted table as the file must state it. A chip's table is merged over ``[default]``
    field by field, so an optional field the fit left unset (no die cap, no 8-bit efficiency of
    its own) would take ``[default]``'s value where that sets one: the table then says so
    explicitly (a cap of inf, the 8-bit efficiency equal to the 16-bit one)."""
    out = dict(params)
    if CAP_FIELD not in out and default.get(CAP_FIELD) is not None:
        out[CAP_FIELD] = math.inf
    if EIGHT_BIT_FIELD not in out and default.get(EIGHT_BIT_FIELD) is not None:
        out[EIGHT_BIT_FIELD] = out["compute_efficiency"]
    return out


def _value(v: Any) -> str:
    return repr(float(v)) if isinstance(v, float | int) and not isinstance(v, bool) else json.dumps(v)


def _source_line(fitted: dict[str, Any], csv_path: str | Path | None, csv_sha256: str | None,
                 split_file: str | Path | None, by_hash: bool) -> str:
    src = "fitted per chip family by codesign calibrate"
    if csv_path is not None:
        src += f" on the fit rows of {Path(csv_path).name} (sha256 {csv_sha256[:12]})"
    src += f", split {Path(split_file).name}" if split_file is not None else ", split by row id"
    # the rule is recorded only when the split follows it: `validate` relabels rows by it
    src += f" ({SPLIT_METHOD})" if by_hash else " (a split of the user's own)"
    if POOLED in fitted:
        src += "; GPUs without measurements take one calibration fitted on every family's fit rows together"
    else:
        src += "; every chip not fitted keeps the calibration this file was started from"
    return src + ("; [default] (the 3D families) keeps the initial efficiency assumptions, the engine's "
                  "kv_cache_free_fraction and the stream overlap every family holds (0: the streams add); "
                  "see VALIDATION.md")


def write_calibration(fitted: dict[str, Any], path: str | Path | None = None, *, csv_path: str | Path | None = None,
                      split_file: str | Path | None = None, base: CalibrationSet | str | Path | None = None) -> Path:
    """Write fitted family values into a calibration file's ``[chips.<id>]`` tables (``[default]``
    and the chips of families not fitted are kept), atomically. ``path`` None: the shipped file.

    The file's other tables come from ``base`` (a calibration or its file) if given, else from
    ``path`` itself if it exists, else from the shipped calibration."""
    path = Path(path) if path is not None else shipped_path()
    if isinstance(base, CalibrationSet):
        base = base.path
    text0 = Path(base if base is not None else path if path.exists() else shipped_path()).read_text()
    data = tomllib.loads(text0)
    chips: dict[str, dict[str, float]] = dict(data.get("chips", {}))
    fam_of_chip: dict[str, str] = {}
    for fam, res in fitted.items():
        for c in res["chips"]:
            chips[c] = _stated(res["params"], data.get("default", {}))
            fam_of_chip[c] = fam
    csv_sha256 = file_sha256(csv_path) if csv_path is not None else None
    by_hash = split_file is None or is_hash_split(split_file)
    src = _source_line(fitted, csv_path, csv_sha256, split_file, by_hash)

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
    if not any(line.strip() == "[default]" for line in head):  # it stood after a [chips.*] table
        head += ["", "[default]", *[f"{k} = {_value(v)}" for k, v in data["default"].items()]]
    at = next((i for i, line in enumerate(head) if line.startswith("source")), None)
    if at is None:  # before the first table
        at = next((i for i, line in enumerate(head) if line.strip().startswith("[")), len(head))
        head.insert(at, "")
    else:
        del head[at]
    lines = [*head[:at], f"source = {json.dumps(src)}", *head[at:]]
    if csv_path is not None:  # what `validate` reads to relabel this file's rows (FittedOn)
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", "# what the [chips.*] values were fitted on (codesign calibrate)", "[fitted_on]",
                  f"csv = {json.dumps(Path(csv_path).name)}", f"csv_sha256 = {json.dumps(csv_sha256)}",
                  f"split = {json.dumps(Path(split_file).name if split_file is not None else 'by row id')}",
                  f"split_rule = {json.dumps('id-hash' if by_hash else 'own')}"]
    # what a chip with no table of its own or of its family takes (CalibrationSet.for_chip)
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
                  f"[{POOLED}]", *[f"{k} = {_value(v)}" for k, v in pooled.items()]]
    for cid in sorted(chips):
        lines.append("")
        if cid in fam_of_chip:
            res = fitted[fam_of_chip[cid]]
            what = ("no measurements: all measured families pooled" if fam_of_chip[cid] == POOLED
                    else f"family {fam_of_chip[cid]}")
            lines.append(f"# {what}: fit MAPE {res['fit_mape_pct']:.1f} % on {res['n_fit']} rows, "
                         f"held-out MAPE {res['held_out_mape_pct']:.1f} % on {res['n_held_out']} rows")
        lines.append(f"[chips.{cid}]")
        lines += [f"{k} = {_value(v)}" for k, v in chips[cid].items()]
    _write_atomic(path, "\n".join(lines) + "\n")
    return path


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in its directory, keeping an existing
    file's permissions; never a file that does not read back as TOML."""
    tomllib.loads(text)
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
