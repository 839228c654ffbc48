"""The command line: a typer app whose commands each call one library function.

Each module registers its commands on :data:`codesign.cli.common.app`, in the order ``--help``
lists them."""

from codesign.cli import calibration as _calibration  # noqa: F401  (validate, calibrate)
from codesign.cli import problems as _problems  # noqa: F401  (instances, show, evaluate, metrics, generate)
from codesign.cli import report as _report  # noqa: F401  (report, breakdown)
from codesign.cli import solving as _solving  # noqa: F401  (solve, certify, explain, check-*, export)
from codesign.cli import sweep as _sweep  # noqa: F401  (sweep)
from codesign.cli import tradeoffs as _tradeoffs  # noqa: F401  (pareto, sensitivity)
from codesign.cli.common import app


def main() -> None:
    app()


__all__ = ["app", "main"]
