"""Render a ``codesign report`` page in headless Chromium and save a screenshot (a check that the
page renders in a real browser: issue 30).

    python tools/screenshot_report.py report.html -o report.png [--width 1200] [--height 3000]
    python tools/screenshot_report.py --instance tiny-3d-llama8b -o report.png   # writes the report first

Chromium runs without network, sync or a profile of its own (a temporary one); exit 2 when no
Chromium is installed (``apt-get install chromium``), 1 when it fails to write the screenshot.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


def screenshot(page: Path, png: Path, *, width: int = 1200, height: int = 3000, timeout: float = 120.0) -> Path:
    """Render ``page`` (a local HTML file) to ``png``; RuntimeError when Chromium is missing or fails."""
    browser = find_chromium()
    if browser is None:
        raise RuntimeError("no Chromium found (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="codesign-chromium-") as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
               f"--user-data-dir={profile}", f"--screenshot={png.resolve()}", f"--window-size={width},{height}",
               page.resolve().as_uri()]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0 or not png.is_file() or png.stat().st_size == 0:
        raise RuntimeError(f"chromium exited {r.returncode} without a screenshot:\n{r.stderr[-2000:]}")
    return png


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", nargs="?", type=Path, help="the report's .html file")
    ap.add_argument("--instance", help="write `codesign report INSTANCE` first (to the page path or a temporary file)")
    ap.add_argument("-o", "--output", type=Path, required=True, help="the screenshot, .png")
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--height", type=int, default=3000)
    args = ap.parse_args(argv)
    if find_chromium() is None:
        print("no Chromium found (apt-get install chromium)", file=sys.stderr)
        return 2
    page = args.page
    if args.instance:
        page = page or Path(tempfile.mkdtemp(prefix="codesign-report-")) / f"{args.instance}.html"
        subprocess.run([sys.executable, "-m", "codesign", "report", args.instance, "-o", str(page), "-q"], check=True)
    if page is None or not page.is_file():
        print(f"no report page: {page}", file=sys.stderr)
        return 2
    try:
        screenshot(page, args.output, width=args.width, height=args.height)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"wrote {args.output} ({args.width}x{args.height}) from {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
