"""Output on a stream that cannot encode it (``PYTHONIOENCODING=ascii``, a C or Latin-1
locale): every character the stream's encoding lacks is written as ASCII that reads the same
(``─`` as ``-``, ``→`` as ``->``, ``µ`` as ``u``, ``≥`` as ``>=``, ``é`` as ``e``), never a
``UnicodeEncodeError``. :func:`install` sets this on standard output and standard error, for
everything written there: tables, notes, errors, progress."""

from __future__ import annotations

import codecs
import io
import sys
import unicodedata
from typing import Any

ERRORS = "ddpprof-ascii"
#: What ddpprof writes beyond ASCII, as ASCII.
_ASCII = {
    "→": "->", "←": "<-", "↑": "^", "↓": "v", "⇒": "=>", "µ": "u", "μ": "u", "≥": ">=",
    "≤": "<=", "≠": "!=", "≈": "~", "±": "+/-", "×": "x", "÷": "/", "·": ".", "•": "*",
    "…": "...", "−": "-", "–": "-", "—": "--", "‘": "'", "’": "'", "“": '"', "”": '"',
    "α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "τ": "tau", "σ": "sigma",
    "Σ": "sum", "Δ": "delta", "∑": "sum", "∪": "U", "⋃": "U", "∩": "^", "∖": "\\", "√": "sqrt",
    "∞": "inf", "°": "deg", "✓": "ok", "✔": "ok", "✗": "x", "✘": "x", "█": "#", "▌": "#",
    "▏": "|", "━": "-", "╸": "-", "╺": "-", "\u00a0": " ", "²": "2", "³": "3",
    "¹": "1", "⁰": "0", "⁴": "4", "⁵": "5", "⁶": "6", "⁷": "7", "⁸": "8", "⁹": "9", "⁻": "-",
    "⁺": "+",
}


def to_ascii(text: str) -> str:
    """``text`` with every character beyond ASCII written as ASCII (see the module)."""
    return "".join(_char(c) if ord(c) > 127 else c for c in text)


def _char(char: str) -> str:
    if char in _ASCII:
        return _ASCII[char]
    code = ord(char)
    if 0x2500 <= code <= 0x257F:            # box drawing: rules and table borders
        name = unicodedata.name(char, "")
        if "HORIZONTAL" in name and "VERTICAL" not in name:
            return "-"
        if "VERTICAL" in name and "HORIZONTAL" not in name:
            return "|"
        return "+"
    if 0x2800 <= code <= 0x28FF or 0x2580 <= code <= 0x259F:   # spinners, blocks
        return "#"
    plain = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode()
    return plain or "?"


def _handler(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return to_ascii(error.object[error.start:error.end]), error.end


codecs.register_error(ERRORS, _handler)


def install() -> None:
    """Standard output and standard error write what their encoding lacks as ASCII."""
    for stream in (sys.stdout, sys.stderr):
        fallback(stream)


def fallback(stream: Any) -> None:
    """``stream`` (a text stream) writes what its encoding lacks as ASCII, where it cannot
    encode what ddpprof writes."""
    encoding = getattr(stream, "encoding", None)
    if not isinstance(stream, io.TextIOWrapper) or not encoding:
        return
    try:
        "─→µ≥×é".encode(encoding)
    except UnicodeEncodeError:
        stream.reconfigure(errors=ERRORS)
    except LookupError:
        pass
