"""mkdocs hooks for the CLI reference (docs/cli.md), which mkdocs-click renders from the click
commands: two things it renders wrongly are put right in the page's HTML.

* An option without a default has click 8.3's ``UNSET`` sentinel there, which mkdocs-click
  prints as ``Sentinel.UNSET``: a flag not given is off, any other option is simply not set.
* Help text that names a placeholder in angle brackets (``reports/<name>.html``) reaches the
  page as an unknown HTML tag, which a browser hides: it is escaped.
"""

from __future__ import annotations

import re
from typing import Any

PLACEHOLDER = re.compile(r"<(name|run|out|FILE|PATH)>")
ROW = re.compile(r"<tr>.*?</tr>", re.DOTALL)
UNSET = "<code>Sentinel.UNSET</code>"


def _default(row: re.Match[str]) -> str:
    text = row.group(0)
    return text.replace(UNSET, "off" if "<td>boolean</td>" in text else "none")


def on_page_content(html: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != "cli.md":
        return html
    html = ROW.sub(_default, html)
    return PLACEHOLDER.sub(lambda m: f"&lt;{m.group(1)}&gt;", html)
