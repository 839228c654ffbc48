"""Commands of the calibration product: ``validate`` (the model against measurements) and
``calibrate`` (fit the per-chip-family calibration)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from codesign.calibration.engine import skip_reason
from codesign.calibration.fit import FitOptions, fit_calibration
from codesign.calibration.plot import plot
from codesign.calibration.report import format_report, run_validation
from codesign.calibration.rows import make_split, read_rows
from codesign.calibration.write import write_calibration
from codesign.cli.common import (
    JsonOpt,
    Progress,
    app,
    emit_json,
    err,
    handles_errors,
    out,
    output_file,
    session,
)
from codesign.errors import InputError
from codesign.jsonio import dumps
from codesign.model.calibration import shipped_path

#: where the columns of a measurements file are documented
COLUMNS_DOC = "validation/README.md"
ENGINE_HELP = ("engine profile of every row (instances/catalog/engines/, e.g. trtllm-0.14, trtllm-1.x, vllm, "
               "sglang); default: each row's `engine` column, else its source's (benchmark_engines.toml)")


@app.command("validate")
@handles_errors
def validate_cmd(
    ctx: typer.Context,
    csv: Annotated[Path, typer.Argument(help=f"measurements CSV (columns: {COLUMNS_DOC})")],
    by: Annotated[str, typer.Option("--by", help="comma-separated row fields to group by")] = "model,gpu",
    split: Annotated[Path | None, typer.Option("--split", help="fit/held-out split JSON (labels rows)")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="write a predicted-vs-measured PNG")] = None,
    engine: Annotated[str | None, typer.Option("--engine", help=ENGINE_HELP)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Predict measured inference performance with the model; report per-row error and MAPE.

    Rows follow validation/measurements.csv's columns (validation/README.md); optional columns
    num_requests, max_batch_size, max_num_tokens and kv_precision. Models and GPUs may be catalog
    ids, Hugging Face repositories or nvidia-smi names (the report lists the names it read as ids)."""
    if not csv.exists():
        raise InputError("measurements file not found", file=csv)
    if split is not None and not split.exists():
        raise InputError("split file not found", file=split,
                         suggestion="`codesign calibrate CSV --out FILE` writes FILE's split beside it")
    if plot_path is not None:
        output_file(plot_path, option="--plot", suffixes=(".png",))
    opts = session(ctx)
    kwargs = {} if split is None else {"split_file": split}
    with Progress("validate", quiet=opts.quiet) as progress:
        report = run_validation(csv, tuple(x.strip() for x in by.split(",") if x.strip()),
                                calibration=opts.calibration, progress=progress.text, engine=engine, **kwargs)
    if not report.rows:
        reasons = "; ".join(f"{s['id']}: {s['reason']}" for s in report.skipped[:3])
        raise InputError("the file has no rows" if not report.skipped else
                         f"no row of the file could be predicted ({len(report.skipped)} skipped; {reasons}"
                         f"{' ...' if len(report.skipped) > 3 else ''})",
                         file=csv, expected=f"rows of known models, chips and metrics ({COLUMNS_DOC})")
    if plot_path is not None:
        plot(report, plot_path)
    if as_json:
        emit_json(report.as_dict())
    else:
        out.print(format_report(report), highlight=False, soft_wrap=True)


@app.command("calibrate")
@handles_errors
def calibrate_cmd(
    ctx: typer.Context,
    csv: Annotated[Path, typer.Argument(help="measurements CSV")],
    split: Annotated[Path | None, typer.Option(
        "--split", help="fit/held-out split JSON; only 'fit' rows are used (default: every row by its id's hash)")] = None,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="write a calibration TOML here (chips not fitted keep the calibration in use); "
                      "use it with `codesign --calibration FILE ...`")] = None,
    write: Annotated[bool, typer.Option("--write", help="update the shipped calibration.toml")] = False,
    fit_host: Annotated[bool, typer.Option(
        "--fit-host", help="also fit the host time per sequence of a step (engines with a Python scheduler; "
                           "VALIDATION.md)")] = False,
    fit_8bit: Annotated[bool, typer.Option(
        "--fit-8bit/--no-fit-8bit", help="fit the FP8/INT8 tensor rate's own compute efficiency for chip families whose "
                                         "fit rows run at both an 8-bit and a wider precision; the default, "
                                         "--no-fit-8bit: one compute efficiency for every precision")] = False,
    engine: Annotated[str | None, typer.Option("--engine", help=ENGINE_HELP)] = None,
    fit_overlap: Annotated[bool, typer.Option(
        "--fit-overlap", help="also fit the overlap of a step's compute and memory streams per family (0..1) instead "
                              "of holding it at 0, the streams adding")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Fit the per-chip-family calibration on the fit rows of a split (documented in VALIDATION.md)."""
    for f in (csv, split):
        if f is not None and not f.exists():
            raise InputError("file not found", file=f)
    if write and out_file is not None:
        raise InputError("--write and --out are exclusive", expected="one of them: the shipped file or your own")
    if out_file is not None and out_file.suffix != ".toml":
        raise InputError("the calibration must be a .toml file", file=out_file)
    if out_file is not None and out_file.resolve() == shipped_path().resolve():
        raise InputError("--out names the shipped calibration", file=out_file,
                         suggestion="use --write to update the shipped file, or give --out a file of your own")
    opts = session(ctx)
    made_split = None
    if split is None and out_file is not None:
        # the split the fit uses (every row by its id's hash), kept beside the calibration so that
        # `codesign validate --split` reports the rows it did not see
        split = made_split = out_file.with_suffix(".split.json")
        make_split(csv, split)
    # your own file: only the families your rows measure are fitted; every other chip keeps the
    # calibration in use (no pooled fit, which the shipped file gives GPUs without measurements)
    with Progress("calibrate", quiet=opts.quiet) as progress:
        fitted = fit_calibration(csv, split, calibration=opts.calibration, pooled=bool(write) or out_file is None,
                                 options=FitOptions(fit_host=fit_host, fit_8bit=fit_8bit, fit_overlap=fit_overlap),
                                 progress=progress.text, engine=engine)
    if not fitted:
        if made_split is not None:
            made_split.unlink(missing_ok=True)
        rows, bad = read_rows(csv, engine=engine)
        reasons = sorted({skip_reason(r) or "no row of this family is in the split's fit half" for r in rows}
                         | {b["reason"] for b in bad})
        raise InputError("no row can be fitted", file=csv, value=reasons[:5],
                         expected="rows of a known model and chip with a supported metric, half of them in the split's "
                                  "fit set")
    if write:
        write_calibration(fitted, None, csv_path=csv, split_file=split)
    if out_file is not None:
        # chips not fitted keep the calibration in use
        base = opts.calibration if opts.calibration is not None else shipped_path()
        write_calibration(fitted, out_file, csv_path=csv, split_file=split, base=base)
    if as_json:
        emit_json(fitted)
    else:
        out.print_json(dumps(fitted))
        if out_file is not None:
            err.print(f"wrote {out_file} and the split it was fitted on, {split}; check it on the other rows with "
                      f"`codesign validate {csv} --split {split} --calibration {out_file}`, then use it with "
                      f"`codesign solve|evaluate|certify ... --calibration {out_file}`", soft_wrap=True)
