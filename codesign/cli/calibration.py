"""Commands of the calibration product: ``validate`` (the model against measurements) and
``calibrate`` (fit the per-chip-family calibration)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from codesign.cli.common import JsonOpt, _emit_json, app, err, handles_errors, out
from codesign.errors import InputError
from codesign.jsonio import dumps


@app.command("validate")
@handles_errors
def validate_cmd(
    csv: Annotated[Path, typer.Argument(help="measurements CSV (schema of shared/validation/measurements.csv)")],
    by: Annotated[str, typer.Option("--by", help="comma-separated row fields to group by")] = "model,gpu",
    split: Annotated[Path | None, typer.Option("--split", help="fit/held-out split JSON (labels rows)")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="write a predicted-vs-measured PNG")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Predict measured inference performance with the model; report per-row error and MAPE.

    Rows follow shared/validation/measurements.csv's schema; optional columns num_requests and kv_precision. Models and GPUs may be catalog ids, Hugging Face repositories or nvidia-smi names (the report lists the names it read as ids)."""
    from codesign import validate as v

    if not csv.exists():
        raise InputError("measurements file not found", file=csv)
    if split is not None and not split.exists():
        raise InputError("split file not found", file=split,
                         suggestion="`codesign calibrate CSV --out FILE` writes FILE's split beside it")
    kwargs = {} if split is None else {"split_file": split}
    report = v.run_validation(csv, tuple(x.strip() for x in by.split(",") if x.strip()), **kwargs)
    if not report.rows:
        reasons = "; ".join(f"{s['id']}: {s['reason']}" for s in report.skipped[:3])
        raise InputError("the file has no rows" if not report.skipped else
                         f"no row of the file could be predicted ({len(report.skipped)} skipped; {reasons}"
                         f"{' ...' if len(report.skipped) > 3 else ''})",
                         file=csv, expected="rows of known models, chips and metrics (README of shared/validation)")
    if plot_path is not None:
        v.plot(report, plot_path)
    if as_json:
        _emit_json(report.as_dict())
    else:
        out.print(v.format_report(report), highlight=False, soft_wrap=True)


@app.command("calibrate")
@handles_errors
def calibrate_cmd(
    csv: Annotated[Path, typer.Argument(help="measurements CSV")],
    split: Annotated[Path | None, typer.Option(
        "--split", help="fit/held-out split JSON; only 'fit' rows are used (default: every row by its id's hash)")] = None,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="write a calibration TOML here (chips not fitted keep the calibration in use); "
                      "use it with `codesign --calibration FILE ...`")] = None,
    write: Annotated[bool, typer.Option("--write", help="update the shipped calibration.toml")] = False,
    fit_host: Annotated[bool, typer.Option(
        "--fit-host", help="also fit the host time per sequence of a step (engines with a Python scheduler; VALIDATION.md §6.3)")] = False,
    fit_8bit: Annotated[bool, typer.Option(
        "--fit-8bit/--no-fit-8bit", help="fit the FP8/INT8 tensor rate's own compute efficiency for chip families whose "
                                         "fit rows run at both an 8-bit and a wider precision (VALIDATION.md §5.15); "
                                         "the default, --no-fit-8bit: one compute efficiency for every "
                                         "precision")] = False,
    fit_overlap: Annotated[bool, typer.Option(
        "--fit-overlap", help="also fit the overlap of a step's compute and memory streams per family (0..1) instead "
                              "of holding it at 0, the streams adding (VALIDATION.md §5.17)")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Fit the per-chip-family calibration on the fit rows of a split (documented in VALIDATION.md)."""
    from codesign import validate as v
    from codesign.model.hardware import calibration_path, shipped_calibration_path

    for f in (csv, split):
        if f is not None and not f.exists():
            raise InputError("file not found", file=f)
    if write and out_file is not None:
        raise InputError("--write and --out are exclusive", expected="one of them: the shipped file or your own")
    if out_file is not None and out_file.suffix != ".toml":
        raise InputError("the calibration must be a .toml file", file=out_file)
    if out_file is not None and out_file.resolve() == shipped_calibration_path().resolve():
        raise InputError("--out names the shipped calibration", file=out_file,
                         suggestion="use --write to update the shipped file, or give --out a file of your own")
    made_split = None
    if split is None and out_file is not None:
        # the split the fit uses (every row by its id's hash), kept beside the calibration so that
        # `codesign validate --split` reports the rows it did not see
        split = made_split = out_file.with_suffix(".split.json")
        v.make_split(csv, split)
    # your own file: only the families your rows measure are fitted; every other chip keeps the
    # calibration in use (no pooled fit, which the shipped file gives GPUs without measurements)
    fitted = v.fit_calibration(csv, split, write=True if write else None, pooled=bool(write) or out_file is None,
                               variant=v.Variant(fit_host=fit_host, fit_8bit=fit_8bit, fit_overlap=fit_overlap))
    if not fitted:
        if made_split is not None:
            made_split.unlink(missing_ok=True)
        rows, bad = v.read_rows(csv)
        reasons = sorted({v.skip_reason(r) or "no row of this family is in the split's fit half" for r in rows}
                         | {b["reason"] for b in bad})
        raise InputError("no row can be fitted", file=csv, value=reasons[:5],
                         expected="rows of a known model and chip with a supported metric, half of them in the split's fit set")
    if out_file is not None:
        v.write_calibration(fitted, out_file, csv_path=csv, split_file=split, base=calibration_path())
    if as_json:
        _emit_json(fitted)
    else:
        out.print_json(dumps(fitted))
        if out_file is not None:
            err.print(f"wrote {out_file} and the split it was fitted on, {split}; check it on the other rows with "
                      f"`codesign --calibration {out_file} validate {csv} --split {split}`, then use it with "
                      f"`codesign --calibration {out_file} solve|evaluate|certify ...`", soft_wrap=True)
