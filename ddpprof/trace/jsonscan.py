"""Find the top-level element boundaries of a JSON array with numpy, compact or pretty.

The events of ``traceEvents`` are decoded in slices on several processes; a slice must hold
whole events. A cut at a line break only works for pretty-printed JSON, so this scan finds the
commas that separate the array's elements for any layout: it locates the quotes that delimit
strings (a quote preceded by an odd run of backslashes is escaped), marks what lies inside
strings by the parity of the quotes before it, and counts the nesting depth of ``{``/``[``
outside strings. A comma at depth 1 separates two elements of the outer array.

The scan is done in chunks so that its temporary arrays stay a small multiple of the chunk,
not of the file. It expects valid JSON (the caller validated it): on anything else it returns
None and the caller decodes the array whole.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CHUNK_BYTES", "element_commas"]

#: Bytes scanned at a time: the temporaries are a few times this, whatever the file's size.
CHUNK_BYTES = 8 * 1024 * 1024

_QUOTE, _BACKSLASH, _COMMA = ord('"'), ord("\\"), ord(",")
#: +1 for an opening bracket, -1 for a closing one, 0 for any other byte.
_DEPTH_STEP = np.zeros(256, dtype=np.int8)
_DEPTH_STEP[[ord("{"), ord("[")]] = 1
_DEPTH_STEP[[ord("}"), ord("]")]] = -1
_STRUCTURAL = np.zeros(256, dtype=bool)
_STRUCTURAL[[ord("{"), ord("["), ord("}"), ord("]"), _COMMA]] = True


def _escaped(data: np.ndarray, quotes: np.ndarray) -> np.ndarray:
    """Which of ``quotes`` (positions in ``data``) follow an odd run of backslashes."""
    after_backslash = quotes[(quotes > 0) & (data[np.maximum(quotes - 1, 0)] == _BACKSLASH)]
    escaped = np.zeros(quotes.size, dtype=bool)
    if after_backslash.size == 0:
        return escaped
    # Rare in traces (a quote inside a kernel or argument name): count the run in Python.
    odd = []
    for position in after_backslash.tolist():
        run = 0
        while position - run - 1 >= 0 and data[position - run - 1] == _BACKSLASH:
            run += 1
        odd.append(run % 2 == 1)
    escaped[np.searchsorted(quotes, after_backslash)] = odd
    return escaped


def element_commas(array: memoryview | bytes | np.ndarray,
                   chunk_bytes: int = CHUNK_BYTES) -> np.ndarray | None:
    """Offsets of the commas between the elements of the JSON array held in ``array`` (whose
    first non-blank byte is ``[``), in order; None if the bytes do not scan as one balanced
    array (the caller then does not slice)."""
    data = array if isinstance(array, np.ndarray) else np.frombuffer(array, dtype=np.uint8)
    found: list[np.ndarray] = []
    in_string = False           # carried across chunks: inside a string at the chunk's start
    depth = 0                   # nesting depth at the chunk's start
    for begin in range(0, data.size, chunk_bytes):
        chunk = data[begin:begin + chunk_bytes]
        quotes = np.flatnonzero(chunk == _QUOTE)
        if quotes.size:
            quotes = quotes[~_escaped(data, quotes + begin)]
        structural = np.flatnonzero(_STRUCTURAL[chunk])
        # A structural byte is inside a string when an odd number of real quotes precede it
        # in this chunk, counting from the carried state.
        before = np.searchsorted(quotes, structural)
        outside = (before % 2 == 1) if in_string else (before % 2 == 0)
        structural = structural[outside]
        kinds = chunk[structural]
        steps = _DEPTH_STEP[kinds].astype(np.int64)
        # depth just before each byte: a comma at depth 1 separates top-level elements
        depths = depth + np.cumsum(steps) - steps
        if depths.size and depths.min() < 0:
            return None
        commas = structural[(kinds == _COMMA) & (depths == 1)]
        found.append(commas + begin)
        depth += int(steps.sum())
        in_string = in_string != (quotes.size % 2 == 1)
    if in_string or depth != 0:
        return None
    return np.concatenate(found) if found else np.empty(0, dtype=np.int64)
