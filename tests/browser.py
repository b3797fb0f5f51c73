"""Pages checked in a real browser (Debian's chromium, which scripts/test.sh installs as root):
each page is opened at each width in one headless Chromium, and ``chart_checks.js`` looks at
every chart as drawn."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--allow-file-access-from-files", "--virtual-time-budget=10000",
         "--window-size=1500,2000"]
CHECKS = (Path(__file__).resolve().parent / "chart_checks.js").read_text()


def check_pages(pages: dict[str, Path], widths: tuple[int, ...], scratch: Path
                ) -> dict[str, dict[str, object]]:
    """``{"NAME@WIDTH": {"errors": ..., "charts": [{chart, problems}]}}`` for every page at
    every width, all in one browser run (each page in a frame that wide)."""
    frames = "\n".join(
        f'<iframe data-name="{html.escape(name)}@{width}" src="{path.resolve().as_uri()}" '
        f'style="width:{width}px;height:2400px;border:0;display:block"></iframe>'
        for name, path in pages.items() for width in widths)
    harness = scratch / "harness.html"
    harness.write_text(f"""<!DOCTYPE html><html><head><meta charset="utf-8">
<script>{CHECKS}</script></head><body>{frames}
<script>
var frames = document.querySelectorAll("iframe"), results = {{}}, left = frames.length;
frames.forEach(function (frame) {{
  frame.addEventListener("load", function () {{
    frame.contentWindow.ddpprofDrawAll();   // each chart is drawn when seen: draw them all
    setTimeout(function () {{
      var root = frame.contentDocument.documentElement;
      results[frame.dataset.name] = {{errors: root.getAttribute("data-js-errors"),
                                      figures: root.querySelector("body").dataset.figures,
                                      charts: checkCharts(frame.contentWindow)}};
      if (--left === 0) {{
        document.body.setAttribute("data-results", JSON.stringify(results));
      }}
    }}, 2000);
  }});
}});
</script></body></html>""")
    dom = subprocess.run([BROWSER, *FLAGS, f"--user-data-dir={scratch / 'profile'}",
                          "--dump-dom", harness.as_uri()], capture_output=True, text=True,
                         timeout=900)   # minutes only on a machine others load heavily
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'data-results="([^"]*)"', dom.stdout)
    assert found is not None, dom.stdout[-2000:] + dom.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))
