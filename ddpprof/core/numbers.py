"""Numbers written as text (an option's value, a selector's rank), read in ASCII only."""

from __future__ import annotations

import re

#: Numbers in ASCII only (``int`` also takes ``'٣'`` and ``'1_000'``; ``'²'.isdigit()`` holds
#: and ``int`` refuses it), at most ``MAX_NUMBER_CHARS`` long (``int`` refuses 4,300 digits).
_WHOLE = re.compile(r"[-+]?[0-9]+")
_DECIMAL = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_NOT_FINITE = re.compile(r"[-+]?(?:nan|inf|infinity)", re.IGNORECASE)
MAX_NUMBER_CHARS = 400


def ascii_whole(text: str) -> int | None:
    """``text`` as a whole number in ASCII digits (an optional sign), else None."""
    text = text.strip()
    if len(text) > MAX_NUMBER_CHARS or not _WHOLE.fullmatch(text):
        return None
    return int(text)


def ascii_decimal(text: str) -> float | None:
    """``text`` as a number written in ASCII (``12``, ``-0.5``, ``1e-3``; ``nan`` and ``inf``
    as themselves), else None."""
    text = text.strip()
    if len(text) > MAX_NUMBER_CHARS or not (_DECIMAL.fullmatch(text)
                                            or _NOT_FINITE.fullmatch(text)):
        return None
    return float(text)
