"""How long an HTML report takes to load and draw in headless Chromium, side by side with an
empty page (the browser's own start), in one run.

    python benchmarks/report_load.py reports/traces.html [--repeats 5]

Each page is opened ``--repeats`` times, alternating with the empty page; the page records, on
itself, when its load event came (``performance.now()``; the charts in view are drawn by
then, the others as they are scrolled to), and the browser's whole run is timed too. It
prints the median of each and the page's size, and their difference: the report's own cost.
Target: the demo's report under 2 MB, open in under 1 s.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,2000"]
PROBE = """<script>
window.addEventListener("load", function () {
  var root = document.documentElement;
  root.setAttribute("data-drawn-ms", performance.now().toFixed(0));
  root.setAttribute("data-drawn", document.querySelectorAll(".main-svg").length);
});
</script></body>"""


def open_page(browser: str, page: Path, profile: Path) -> tuple[float, float | None]:
    started = time.monotonic()
    done = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}",
                           "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - started
    drawn = re.search(r'data-drawn-ms="(\d+)"', done.stdout)  # virtual time: an upper bound
    return wall, float(drawn.group(1)) / 1e3 if drawn else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("no chromium (apt-get install chromium)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        page = folder / "page.html"
        page.write_text(args.page.read_text().replace("</body>", PROBE, 1))
        empty = folder / "empty.html"
        empty.write_text("<!DOCTYPE html><html><body>" + PROBE)
        pages, blanks, drawn = [], [], []
        for _ in range(args.repeats):
            wall, at = open_page(browser, page, folder / "profile")
            pages.append(wall)
            drawn += [at] if at is not None else []
            blanks.append(open_page(browser, empty, folder / "profile")[0])
    size = args.page.stat().st_size
    print(f"{args.page}: {size / 2**20:.2f} MiB")
    print(f"browser run, median of {args.repeats}: report {statistics.median(pages):.2f} s, "
          f"empty page {statistics.median(blanks):.2f} s: the report's own "
          f"{statistics.median(pages) - statistics.median(blanks):.2f} s")
    if drawn:
        print(f"every chart drawn {statistics.median(drawn):.2f} s after navigation (median; "
              "target < 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
