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

from collections.abc import Iterator

import numpy as np

__all__ = ["CHUNK_BYTES", "closing_bracket", "element_commas", "object_ends"]

#: Bytes scanned at a time: the temporaries are a few times this, whatever the file's size.
CHUNK_BYTES = 8 * 1024 * 1024

_QUOTE, _BACKSLASH, _COMMA = ord('"'), ord("\\"), ord(",")
_WHITESPACE = frozenset(b" \t\r\n")


def _escaped(data: np.ndarray, quotes: np.ndarray, backslashes: np.ndarray) -> np.ndarray:
    """Which of ``quotes`` (positions in ``data``) follow an odd run of backslashes; the
    ``backslashes`` are all of those in the same stretch, usually none."""
    after_backslash = np.intersect1d(quotes, backslashes + 1, assume_unique=True)
    escaped = np.zeros(quotes.size, dtype=bool)
    if after_backslash.size == 0:
        return escaped
    # Rare in traces (a quote inside a kernel or argument name): count the run in Python.
    odd = []
    for position in after_backslash.tolist():
        run = 1
        while position - run - 1 >= 0 and data[position - run - 1] == _BACKSLASH:
            run += 1
        odd.append(run % 2 == 1)
    escaped[np.searchsorted(quotes, after_backslash)] = odd
    return escaped


def _depths(data: np.ndarray, begin: int, depth: int, chunk_bytes: int
            ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For each chunk from ``begin`` (outside any string, at nesting ``depth``): the offsets of
    the brackets outside strings, their steps (+1 opens, -1 closes) and the depth after each.
    Last, one empty triple if the bytes end inside a string. Stops early where the depth
    would go below 0."""
    in_string = False           # carried across chunks: inside a string at the chunk's start
    for low in range(begin, data.size, chunk_bytes):
        chunk = data[low:low + chunk_bytes]
        quotes = np.flatnonzero(chunk == _QUOTE) + low
        # from one byte back: a quote at the chunk's start may be escaped by the byte before
        back = max(low - 1, 0)
        backslashes = np.flatnonzero(data[back:low + chunk_bytes] == _BACKSLASH) + back
        if backslashes.size and quotes.size:
            quotes = quotes[~_escaped(data, quotes, backslashes)]
        # ``{ } [ ]`` and, from the same cheap bit test, ``Y _ y DEL``, weeded out next
        brackets = np.flatnonzero((chunk & 0xD9) == 0x59)
        kinds = chunk[brackets]
        keep = (kinds == ord("{")) | (kinds == ord("}")) | (kinds == ord("[")) | (
            kinds == ord("]"))
        brackets, kinds = brackets[keep] + low, kinds[keep]
        # A bracket is inside a string when an odd number of real quotes precede it in this
        # chunk, counting from the carried state.
        outside = np.searchsorted(quotes, brackets) % 2 == (1 if in_string else 0)
        brackets, kinds = brackets[outside], kinds[outside]
        # ``{`` and ``[`` have bit 1 set, ``}`` and ``]`` do not: +1 or -1
        steps = ((kinds >> 1) & 1).astype(np.int64) * 2 - 1
        after = depth + np.cumsum(steps)
        yield brackets, steps, after
        if after.size:
            if after.min() < 0:
                return
            depth = int(after[-1])
        in_string = in_string != (quotes.size % 2 == 1)
    if in_string:
        yield _NONE, _NONE, _NONE


_NONE = np.empty(0, dtype=np.int64)


def object_ends(array: memoryview | bytes | np.ndarray,
                chunk_bytes: int = CHUNK_BYTES) -> np.ndarray | None:
    """Offsets just past the closing bracket of each object or array that is an element of the
    JSON array held in ``array`` (its first byte ``[``), in order; None if the bytes do not
    scan as one balanced array (the caller then does not slice)."""
    data = array if isinstance(array, np.ndarray) else np.frombuffer(array, dtype=np.uint8)
    found: list[np.ndarray] = []
    depth = 0
    for brackets, steps, after in _depths(data, 0, 0, chunk_bytes):
        if brackets is _NONE or (after.size and after.min() < 0):
            return None
        found.append(brackets[(after == 1) & (steps < 0)] + 1)
        if after.size:
            depth = int(after[-1])
    if depth != 0:
        return None
    return np.concatenate(found) if found else np.empty(0, dtype=np.int64)


def closing_bracket(array: memoryview | bytes, begin: int,
                    chunk_bytes: int = 1024 * 1024) -> int | None:
    """The offset of the bracket that closes the array or object ``begin`` lies in (at its top
    level, outside any string), or None where the bytes end first. Scans only as far as it."""
    data = np.frombuffer(array, dtype=np.uint8)
    for brackets, _, after in _depths(data, begin, 1, chunk_bytes):
        closes = np.flatnonzero(after == 0)
        if closes.size:
            return int(brackets[closes[0]])
    return None


def comma_after(data: memoryview | bytes, end: int) -> int | None:
    """The offset of the comma that follows an element ending at ``end`` (blanks skipped), or
    None where the array ends there instead."""
    position, size = end, len(data)
    while position < size and data[position] in _WHITESPACE:
        position += 1
    return position if position < size and data[position] == _COMMA else None


def element_commas(array: memoryview | bytes, chunk_bytes: int = CHUNK_BYTES
                   ) -> np.ndarray | None:
    """Offsets of the commas that follow top-level objects and arrays (for tests and small
    inputs: one Python step per element)."""
    ends = object_ends(array, chunk_bytes)
    if ends is None:
        return None
    commas = [comma_after(array, int(end)) for end in ends]
    return np.array([c for c in commas if c is not None], dtype=np.int64)
