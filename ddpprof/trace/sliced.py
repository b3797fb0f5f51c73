"""Decoding a trace's events in slices of about 1 MiB, two ways, on several processes.

**Quick cuts** (:func:`decode_with_quick_cuts`, the common case): nothing reads the whole file
before decoding starts. The events array is found by searching for ``"traceEvents": [`` (or
the ``[`` of a bare array), and cut at the first ``},{`` past every ``slice_bytes``; only the
last slice is scanned (``jsonscan``) for the bracket that closes the array. A cut that falls
inside a string or inside an event leaves the slice before it unterminated, so its decoding
fails whatever the bytes (the first slice starts at a true boundary, and so, in turn, does each
one after a slice that decodes). Then the rest of the document, with a random marker in place
of the array, must decode as a trace whose ``traceEvents`` is that marker: so the array found
was the top-level one. Any failure raises :class:`QuickCutsFailed`.

**Whole-document decode** (:func:`decode_whole_document`, the fallback, which names any
problem): the whole document is read and validated (``ddpprof.trace.document``), the events
array is scanned for the commas between its elements (string-aware, ``jsonscan``), and cut
there. Same result, only slower.

:class:`Slicing` holds the settings (slice size, slices per task, which ways to take, and a
hook run before each task); the defaults are what ``analyze`` uses, tests change them to force
a path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import msgspec
import numpy as np

from ..core.errors import TraceError
from ..core.io import MemoryBytes, TraceBytes
from ..core.storage import Location
from . import jsonscan
from .columns import Columns
from .decode_events import NotUTF8, decode_run
from .document import (
    OBJECT_DECODER,
    DistributedInfo,
    decode_document,
    distributed_info,
    first_byte,
)
from .parallel import Slice, decode_in_parallel
from .scanned import add_scanned

_JSON_BLANKS = b" \t\r\n"           # JSON's whitespace; bytes.strip() would take more
#: Where a key ``"traceEvents"`` is followed by its array.
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
#: What usually separates two events: ``}`` then a comma, then ``{``. Inside a string or an
#: event's arguments it would be a wrong cut, which a slice's decoding always catches.
_BETWEEN_EVENTS = re.compile(rb"\}\s*(,)\s*\{")
#: Bytes read at a time while searching; consecutive windows overlap by ``_OVERLAP_BYTES`` so
#: that a match across their border is found (one with longer blanks in it only gives a later
#: cut, or the whole-document decode).
_SEARCH_BYTES, _OVERLAP_BYTES = 16 * 1024, 256


@dataclass(frozen=True)
class Slicing:
    """How the events are cut and decoded."""

    #: Slices of about this many bytes: small enough that one slice's Python objects stay in
    #: the CPU's caches while its columns are pulled out of them (a third faster than 8 MiB
    #: slices), and only one slice's objects exist at a time.
    slice_bytes: int = 1024 * 1024
    #: Slices are handed out to the decoding processes this many at a time (one merge each).
    slices_per_task: int = 8
    #: Try the quick cuts first; False: the whole-document decode only.
    quick_cuts: bool = True
    #: Scan each slice natively where the scan takes it (``scanned``); False: the Python
    #: decoder only (the reference the native scan is tested against).
    native_scan: bool = True
    #: Where the quick cuts do not hold, fall back to the whole-document decode; False: a
    #: TraceError instead (for tests that check the quick cuts held).
    fall_back: bool = True
    #: Called in each decoding process before it decodes a task, with the index of the task's
    #: first slice (with one worker: once, with 0). Tests use it to make a decoder fail,
    #: stall or die, or to change the file while it is read.
    before_task: Callable[[int], None] | None = None


DEFAULT_SLICING = Slicing()


class QuickCutsFailed(Exception):
    """The quick cuts did not hold (or the document has a problem): decode the whole
    document, which names any problem."""


def decode_events(data: TraceBytes, path: Location, workers: int, slicing: Slicing
                  ) -> tuple[Columns, DistributedInfo | None]:
    """The events as columns and ``distributedInfo``: with quick cuts, else by the
    whole-document decode (see the module's docstring)."""
    if slicing.quick_cuts:
        try:
            return decode_with_quick_cuts(data, workers, slicing)
        except QuickCutsFailed:
            if not slicing.fall_back:
                raise TraceError(path, "the quick cuts did not hold") from None
    return decode_whole_document(data, path, workers, slicing)


def decode_slices(data: TraceBytes, native_scan: bool, slices: list[Slice]) -> Columns:
    """Decode slices of ``data``, each by the native scan where ``native_scan`` and the scan
    takes it, else by the Python decoder; a slice without an end runs to the events array's
    closing bracket (its offset is kept as ``closing``)."""
    columns = Columns()
    for start, end in slices:
        if end is None:
            rest = memoryview(data.read(start, data.size - start))
            found = jsonscan.closing_bracket(rest, 0)
            if found is None:
                raise QuickCutsFailed
            columns.closing = start + found
            run: bytes | bytearray = b"".join((b"[", rest[:found], b"]"))
        else:
            run = data.framed(start, end)
        if native_scan and add_scanned(columns, run):
            continue
        events, values, objects = decode_run(run)
        columns.values += values
        columns.objects += objects
        columns.add(events)
    return columns


def decode_with_quick_cuts(data: TraceBytes, workers: int, slicing: Slicing
                           ) -> tuple[Columns, DistributedInfo | None]:
    """The events decoded in slices cut where :func:`events_start` and :func:`quick_cuts`
    put them. Raises :class:`QuickCutsFailed` where a cut does not hold, or where the
    document has any problem."""
    start = events_start(data)
    try:
        columns = decode_in_parallel(partial(decode_slices, data, slicing.native_scan),
                                     quick_cuts(data, start, slicing.slice_bytes), workers,
                                     slicing.slices_per_task, slicing.before_task)
    except (msgspec.MsgspecError, OverflowError, TypeError, ValueError):
        raise QuickCutsFailed from None
    if columns.closing is None:       # no slice reached the end: cannot happen, but be sure
        raise QuickCutsFailed
    return columns, rest_of_document(data, start, columns.closing)


def events_start(data: TraceBytes) -> int:
    """Where the events array opens, found without a pass over the file: the first byte of a
    bare array, else the ``[`` of the first ``"traceEvents": [`` (checked by
    :func:`rest_of_document` once the array's end is known)."""
    head, at = first_byte(data)
    if head == b"[":
        return at
    found = _search(data, _EVENTS_KEY, at) if head == b"{" else None
    if found is None:
        raise QuickCutsFailed
    return found[1] - 1


def _search(data: TraceBytes, pattern: re.Pattern[bytes], start: int) -> tuple[int, int] | None:
    """(start, end of group 0 or 1) of the first match of ``pattern`` at ``start`` or later,
    read a window at a time."""
    while start < data.size:
        window = data.read(start, _SEARCH_BYTES)
        found = pattern.search(window)
        if found is not None:
            return start + found.start(), start + found.end(pattern.groups)
        if start + len(window) >= data.size:
            return None
        start += len(window) - _OVERLAP_BYTES
    return None


def quick_cuts(data: TraceBytes, start: int, target: int) -> list[Slice]:
    """Slices of the array opening at ``start``, each cut at the comma of the first ``},{``
    past the next ``target`` bytes, found without a pass over the file. The last slice's end
    is None: it ends at the array's closing bracket, which its decoder finds."""
    slices: list[Slice] = []
    begin = start + 1
    while begin + target < data.size:
        found = _search(data, _BETWEEN_EVENTS, begin + target)
        if found is None:
            break
        slices.append((begin, found[1] - 1))
        begin = found[1]
    slices.append((begin, None))
    return slices


def rest_of_document(data: TraceBytes, start: int, end: int) -> DistributedInfo | None:
    """``distributedInfo``, once the rest of the document (with a random marker in place of
    the events array ``data[start:end + 1]``) decodes as a trace whose ``traceEvents`` is that
    marker: so the array found was the top-level one. Raises :class:`QuickCutsFailed`
    otherwise."""
    before, after = data.read(0, start), data.read(end + 1, data.size - end - 1)
    if not bytes(before).strip(_JSON_BLANKS):   # a bare array: only blanks after it
        if bytes(after).strip(_JSON_BLANKS):
            raise QuickCutsFailed
        return None
    # A value no trace can hold in its own traceEvents: drawn afresh for every load.
    marker = b'"ddpprof-' + os.urandom(16).hex().encode() + b'"'
    try:
        document = OBJECT_DECODER.decode(b"".join((before, marker, after)))
    except msgspec.MsgspecError:
        raise QuickCutsFailed from None
    if bytes(document.traceEvents) != marker:
        raise QuickCutsFailed
    return distributed_info(document)


def decode_whole_document(data: TraceBytes, path: Location, workers: int, slicing: Slicing
                          ) -> tuple[Columns, DistributedInfo | None]:
    """The whole document validated, its events array scanned and cut at the commas between
    its elements, and decoded slice by slice on up to ``workers`` processes; a TraceError
    naming any problem."""
    if first_byte(data)[0] not in (b"[", b"{"):   # no need to read all of it to say so
        raise TraceError(path, "not a trace (not a JSON object or array)")
    array, info = decode_document(data.whole(), path)
    events = MemoryBytes(path, array)
    slices: list[Slice] = list(scanned_cuts(array, slicing.slice_bytes))
    decode = partial(decode_slices, events, slicing.native_scan)
    try:
        if len(slices) == 1:
            return decode(slices), info
        try:
            return decode_in_parallel(decode, slices, workers, slicing.slices_per_task,
                                      slicing.before_task), info
        except msgspec.DecodeError:
            pass  # a cut fell inside an event after all: decode the array whole
        return decode([(1, len(array) - 1)]), info
    except msgspec.DecodeError as error:
        raise TraceError(path, f"invalid JSON ({error})") from None
    except NotUTF8 as error:
        raise TraceError(path, f"invalid JSON (text that is not UTF-8: {error})") from None
    except (OverflowError, TypeError, ValueError) as error:
        raise TraceError(path, f"not a trace (a number out of range: {error})") from None


def scanned_cuts(array: memoryview, target: int) -> list[tuple[int, int]]:
    """Offsets that cut the bytes of a JSON array into slices of whole elements, each about
    ``target`` bytes, at the commas between top-level elements (found by a string-aware scan,
    so compact and pretty JSON alike). Where the scan finds nothing to cut, one slice."""
    last = len(array) - 1                     # the closing ']'
    if last - 1 <= target:
        return [(1, last)]
    ends = jsonscan.object_ends(array)
    if ends is None:
        return [(1, last)]
    slices, start = [], 1                     # just after '['
    while start + target < last:
        index = int(np.searchsorted(ends, start + target))
        comma = None
        while comma is None and index < ends.size:
            comma = jsonscan.comma_after(array, int(ends[index]))
            index += 1
        if comma is None:
            break
        slices.append((start, comma))
        start = comma + 1
    slices.append((start, last))
    return slices
