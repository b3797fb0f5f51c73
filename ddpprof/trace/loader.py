"""Decode one rank's Chrome trace into flat numpy columns, reading only the fields ddpprof uses.

Every form PyTorch has written is accepted: Kineto's object (``traceEvents`` plus
``distributedInfo``), the bare array, gzip or plain, the legacy autograd profiler's events (no
category), old category names. msgspec decodes the JSON straight into small typed structs
(unknown fields are skipped without being built); an event whose values have unexpected types
is decoded alone, leniently, so one odd event never rejects a trace. Everything after that is
numpy. Times are kept exactly as written: rounding, where asked for, is the analysis's choice.

A large file is decoded in slices of about 1 MiB on several processes, cut where a cheap guess
puts the boundaries between events (see :func:`_guess_slices`): nothing reads the whole file
before decoding starts. A guess that does not hold always makes some slice undecodable, and
the exact way (the whole document validated, the array scanned by ``jsonscan``) takes over.
"""

from __future__ import annotations

import contextlib
import gc
import math
import mmap
import multiprocessing
import os
import pickle
import re
import secrets
import tempfile
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from itertools import compress
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..errors import NotATrace, TraceError
from . import classify, jsonscan, storage
from .events import CommArgs, ProcessGroup, RankTrace
from .storage import Location

__all__ = ["TraceError", "load", "read_bytes"]

#: Refuse to inflate a gzip member beyond this many bytes (a "gzip bomb" would otherwise end
#: in a MemoryError); ``DDPPROF_MAX_TRACE_BYTES`` overrides it.
DEFAULT_MAX_TRACE_BYTES = 16 * 1024**3
_UTF8_BOM = b"\xef\xbb\xbf"
_JSON_BLANKS = b" \t\r\n"           # JSON's whitespace; bytes.strip() would take more


#: The value of an id or stream argument that the event does not have: one object, so that
#: absence is an identity test, and negative, so that it reads as "no id" in an int64 column.
_ABSENT = -(2**63)


class _Args(msgspec.Struct, frozen=True, gc=False):
    # Fields in the order Kineto writes them: msgspec tries the field after the last one it
    # matched first, so decoding is faster in that order (about 5%).
    external_id: int | float | str | None = msgspec.field(name="External id", default=_ABSENT)
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw(b"null"))
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b"null"))
    stream: int | float | str | None = _ABSENT
    correlation: int | float | str | None = _ABSENT
    old_external_id: int | float | str | None = msgspec.field(name="external id",
                                                              default=_ABSENT)
    collective: Any = msgspec.field(name="Collective name", default=None)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    dtype: Any = None
    group_size: Any = msgspec.field(name="Group size", default=None)
    group: Any = msgspec.field(name="Process Group Name", default=None)
    group_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)
    sequence: Any = msgspec.field(name="Seq", default=None)
    thread_label: Any = msgspec.field(name="name", default=None)


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: str | None = None             # in Kineto's order, as ``_Args``
    cat: str | None = None
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: int | float | None = None
    dur: int | float | None = None
    args: _Args = _NO_ARGS            # ``"args": null`` is rare: the lenient decoder reads it


class _DistributedInfo(msgspec.Struct, gc=False):
    rank: Any = None
    world_size: Any = None
    backend: Any = None
    pg_config: Any = None


class _TraceFile(msgspec.Struct, gc=False):
    # Kept as raw bytes at first: the events are decoded a slice at a time (see ``_slices``).
    traceEvents: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    distributedInfo: Any = None


_OBJECT_DECODER = msgspec.json.Decoder(_TraceFile)
_ARRAY_DECODER = msgspec.json.Decoder(list[_Event])
_EVENT_DECODER = msgspec.json.Decoder(_Event)
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_LENIENT_DECODER = msgspec.json.Decoder(Any)
_RAW_ARRAY_DECODER = msgspec.json.Decoder(msgspec.Raw)
#: Events are decoded in slices of about this many bytes: small enough that one slice's Python
#: objects stay in the CPU's caches while its columns are pulled out of them (a third faster
#: than 8 MiB slices), and only one slice's objects exist at a time.
SLICE_BYTES = 1024 * 1024
#: Slices are handed out to the decoding processes this many at a time (one merge each).
SLICES_PER_TASK = 8
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
#: ``ph`` values of events with a duration; legacy traces may omit ``ph`` altogether.
_COMPLETE = frozenset({"X", None})


def max_trace_bytes() -> int:
    try:
        return int(os.environ.get("DDPPROF_MAX_TRACE_BYTES", DEFAULT_MAX_TRACE_BYTES))
    except ValueError:
        return DEFAULT_MAX_TRACE_BYTES


def _map(path: Location) -> bytes | mmap.mmap:
    """A local file mapped read-only (no copy into Python bytes: the pages stay in the page
    cache, shared with forked workers); a URL or an empty or unmappable file read as bytes."""
    if isinstance(path, Path):
        try:
            with path.open("rb") as file:
                if os.fstat(file.fileno()).st_size > 0:
                    return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            pass  # a FIFO, /proc file, ...: storage.read_bytes reads it or names the error
    return storage.read_bytes(path)


def read_bytes(path: Location) -> bytes | mmap.mmap:
    """The file's JSON bytes, inflated if it is gzip, never more than :func:`max_trace_bytes`:
    a read-only map of a plain local file, else bytes."""
    raw = _map(path)
    if not len(raw):
        raise TraceError(path, "empty file")
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(raw, path, max_trace_bytes())
        if not raw.strip():
            raise TraceError(path, "empty file")
    if raw[:3] == _UTF8_BOM:
        # Editors and PowerShell on Windows (Out-File, Set-Content) write one when a trace is
        # re-saved; Python's json.loads of bytes (HTA's reader) skips it too, msgspec does not.
        raw = raw[3:]
    return raw


def _inflater() -> tuple[Any, type[Exception]]:
    """isal's gzip inflater (about 2-3x zlib's speed) where installed, else zlib's; both take
    the same calls."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib, zlib.error
    return isal_zlib, isal_zlib.error


def _gunzip(packed: bytes | mmap.mmap, path: Location, limit: int) -> bytes:
    """Inflate every gzip member, stopping with a TraceError past ``limit`` bytes."""
    library, library_error = _inflater()
    pieces, size, data = [], 0, memoryview(packed)
    try:
        while len(data):
            inflater = library.decompressobj(16 + zlib.MAX_WBITS)
            while len(data):
                chunk = inflater.decompress(data, 64 * 1024 * 1024)
                size += len(chunk)
                if size > limit:
                    raise TraceError(path, f"inflates to more than {limit / 1024**3:.1f} GiB "
                                           "(set DDPPROF_MAX_TRACE_BYTES to allow more)")
                pieces.append(chunk)
                data = memoryview(inflater.unconsumed_tail)
                if inflater.eof:
                    break
            if not inflater.eof:
                raise TraceError(path, "truncated or corrupt gzip (ends before its last "
                                       "block)")
            data = memoryview(inflater.unused_data.lstrip(b"\x00"))
    except (zlib.error, library_error) as error:
        raise TraceError(path, f"truncated or corrupt gzip ({error})") from None
    return b"".join(pieces)


def _first_byte(raw: bytes | mmap.mmap) -> bytes:
    """The document's first byte that is not a blank (empty where there is none)."""
    head = bytes(raw[:64]).lstrip()[:1]
    if not head:  # more than 64 blanks first: rare, and a copy is then acceptable
        head = bytes(raw).lstrip()[:1]
    return head


def decode(raw: bytes | mmap.mmap, path: Location) -> tuple[memoryview, _DistributedInfo | None]:
    """The bytes of the ``traceEvents`` array (validated JSON) and ``distributedInfo``, for the
    object form and the bare-array form of a Chrome trace."""
    head = _first_byte(raw)
    try:
        if head == b"[":
            return memoryview(_RAW_ARRAY_DECODER.decode(raw)), None
        if head != b"{":
            raise TraceError(path, "not a trace (not a JSON object or array)")
        document = _OBJECT_DECODER.decode(raw)
    except msgspec.ValidationError as error:
        raise TraceError(path, f"not a trace ({error})") from None
    except msgspec.DecodeError as error:
        repaired = _non_finite_as_null(raw) if "invalid character" in str(error) else None
        if repaired is not None:
            return decode(repaired, path)
        problem = "truncated JSON" if "truncated" in str(error).lower() else "invalid JSON"
        raise TraceError(path, f"{problem} ({error})") from None
    events = document.traceEvents
    if memoryview(events)[:1] != b"[":
        raise NotATrace(path, "not a trace (no traceEvents array)")
    info = document.distributedInfo
    info = msgspec.convert(info, _DistributedInfo) if isinstance(info, dict) else None
    return memoryview(events), info


#: A bare non-finite number as a JSON value: Kineto wrote ``"memory bandwidth (GB/s)": inf``
#: for a zero-length memcpy (pytorch/kineto issue 105), Python's json writes ``NaN`` and
#: ``Infinity``. Neither is JSON, and one such argument would otherwise refuse the whole trace.
#: Strings are matched too, and kept as they are, so that text such as a name ``"a,inf]"``
#: is never changed.
_NON_FINITE = re.compile(rb'("(?:[^"\\]++|\\.)*+")|([:,\[]\s*)-?(?:inf|nan|infinity)'
                         rb"(?=\s*[,}\]])", re.IGNORECASE)


def _non_finite_as_null(raw: bytes) -> bytes | None:
    """``raw`` with every bare non-finite number replaced by ``null`` (read as absent, as any
    value that makes no sense is), or None where it has none."""
    count = 0

    def repair(match: re.Match[bytes]) -> bytes:
        nonlocal count
        if match.group(1) is not None:
            return match.group(1)
        count += 1
        return match.group(2) + b"null"

    repaired = _NON_FINITE.sub(repair, raw)
    return repaired if count else None


#: Where a key ``"traceEvents"`` is followed by its array: the guess of ``_events_start``.
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
#: What usually separates two events: ``}`` then a comma, then ``{``. Inside a string or an
#: event's arguments it would be a wrong cut, which a slice's decoding always catches.
_BETWEEN_EVENTS = re.compile(rb"\}\s*(,)\s*\{")


class _WrongGuess(Exception):
    """The quick way to find the events and cut them did not hold: do it the exact way."""


def _events_start(raw: bytes | mmap.mmap) -> int:
    """Where the events array opens, guessed without a pass over the file: the first byte of a
    bare array, else the ``[`` of the first ``"traceEvents": [`` (checked by
    :func:`_check_document` once the array's end is known)."""
    head = _first_byte(raw)
    if head == b"[":
        return raw.find(b"[")
    found = _EVENTS_KEY.search(raw) if head == b"{" else None
    if found is None:
        raise _WrongGuess
    return found.end() - 1


def _guess_slices(array: memoryview, target: int | None = None
                  ) -> list[tuple[int, int | None]]:
    """Cuts like :func:`_slices`, each at the first ``},{`` past the next ``target`` bytes,
    with no pass over the file; ``array`` runs from the array's ``[`` to the end of the file,
    and the last piece's end is None: it ends at the array's closing bracket, which its
    decoder finds. A cut that falls inside a string or an event's arguments leaves the slice
    before it unterminated, and so undecodable, whatever the bytes: the first slice starts at
    a true boundary, and so, in turn, does each one after a slice that decodes."""
    target = target or SLICE_BYTES
    pieces: list[tuple[int, int | None]] = []
    start = 1
    while start + target < len(array):
        found = _BETWEEN_EVENTS.search(array, start + target)
        if found is None:
            break
        pieces.append((start, found.start(1)))
        start = found.start(1) + 1
    pieces.append((start, None))
    return pieces


def _check_document(raw: bytes | mmap.mmap, start: int, end: int) -> _DistributedInfo | None:
    """``distributedInfo``, once the rest of the document (with a random marker in place of
    the events array ``raw[start:end + 1]``) decodes as a trace whose ``traceEvents`` is that
    marker: so the array found was the top-level one. Raises :class:`_WrongGuess`
    otherwise."""
    view = memoryview(raw)
    if not bytes(view[:start]).strip(_JSON_BLANKS):   # a bare array: only blanks after it
        if bytes(view[end + 1:]).strip(_JSON_BLANKS):
            raise _WrongGuess
        return None
    # A value no trace can hold in its own traceEvents: drawn afresh for every load.
    marker = b'"ddpprof-' + secrets.token_hex(16).encode() + b'"'
    try:
        document = _OBJECT_DECODER.decode(b"".join((view[:start], marker, view[end + 1:])))
    except msgspec.MsgspecError:
        raise _WrongGuess from None
    if bytes(document.traceEvents) != marker:
        raise _WrongGuess
    info = document.distributedInfo
    return msgspec.convert(info, _DistributedInfo) if isinstance(info, dict) else None


def _slices(array: memoryview, target: int | None = None) -> list[tuple[int, int]]:
    """Offsets that cut the bytes of a JSON array into pieces of whole elements, each about
    ``target`` bytes, at the commas between top-level elements (found by a string-aware scan,
    so compact and pretty JSON alike). Where the scan finds nothing to cut, one piece."""
    target = target or SLICE_BYTES
    last = len(array) - 1                     # the closing ']'
    if last - 1 <= target:
        return [(1, last)]
    ends = jsonscan.object_ends(array)
    if ends is None:
        return [(1, last)]
    pieces, start = [], 1                     # just after '['
    while start + target < last:
        index = int(np.searchsorted(ends, start + target))
        comma = None
        while comma is None and index < ends.size:
            comma = jsonscan.comma_after(array, int(ends[index]))
            index += 1
        if comma is None:
            break
        pieces.append((start, comma))
        start = comma + 1
    pieces.append((start, last))
    return pieces


def rank_from_name(path: Location) -> int | None:
    match = _RANK_IN_NAME.search(storage.name(path))
    return int(match.group(1)) if match else None


def _id(value: Any) -> int | None:
    """An id argument as HTA reads it (``int(value)``), or None where absent, negative or not a
    number. Ids of 2**63 and above wrap around (mod 2**64) so that they stay distinct in
    int64 (they are compared for equality only)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if number < 0:
        return None
    number %= 2**64
    return number - 2**64 if number >= 2**63 else number


def _ids(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(ids, present) columns; -1 and False where an id is absent, negative or not a number."""
    try:
        column = np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # null, odd strings, huge ints: rare
        ids = list(map(_id, values))     # ids of 2**63 and above wrap to negative numbers
        return (np.array([-1 if i is None else i for i in ids], dtype=np.int64),
                np.array([i is not None for i in ids], dtype=bool))
    present = column >= 0
    return np.where(present, column, -1), present


def _streams(values: list[Any]) -> np.ndarray:
    """``args.stream`` as HTA reads it: ``int(value)``; -1 where that fails, is negative, or
    is beyond int64 (no device has such a stream)."""
    try:
        column = np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        column = np.array([_stream(v) for v in values], dtype=np.int64)
    return np.where(column >= 0, column, -1)


def _stream(value: Any) -> int:
    number = _id(value)
    return -1 if number is None or number < 0 or int(value) >= 2**63 else number


def _number(value: Any) -> int | float | None:
    """A number as the strict decoder gives it (an int stays an int); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


class _Columns:
    """Per-event columns, filled slice by slice; names and threads are interned as they come."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.categories: dict[str | None, int] = {}
        self.pids: dict[Any, int] = {}
        self.tids: dict[Any, int] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in (
            "ts", "dur", "name", "category", "pid", "tid", "stream", "correlation",
            "has_correlation", "external_id")}
        self.comm_args: dict[int, CommArgs] = {}
        self.grad_bytes: dict[int, int] = {}
        self.matmul_flops: dict[int, float] = {}
        self.wants_args: list[bool] = []      # by name code: keep this event's call arguments
        self.ts_all_integers = True
        self.ts_low, self.ts_high, self.ts_missing = math.inf, -math.inf, False
        self.dropped = 0
        self.count = 0
        self.closing: int | None = None       # see ``_decode_pieces``
        self.values = self.objects = 0        # elements of the array, and objects among them

    def add(self, events: list[_Event]) -> None:
        # One list comprehension per field (the fastest way from structs to lists in CPython:
        # faster than ``attrgetter`` and ``zip``), interning through C-level ``map``, and every
        # test after that in numpy: a Python loop over events would cost more than the decoding.
        if not events:
            return
        phases = [e.ph for e in events]
        categories = [e.cat for e in events]
        ts_all = [e.ts for e in events]
        ts = np.array(ts_all, dtype=np.float64)           # an absent or null ts reads as NaN
        dur = np.array([e.dur for e in events], dtype=np.float64)
        has_ts, has_dur = ~np.isnan(ts), ~np.isnan(dur)
        if has_ts.any():
            self.ts_low = min(self.ts_low, float(ts[has_ts].min()))
            self.ts_high = max(self.ts_high, float(ts[has_ts].max()))
        self.ts_missing = self.ts_missing or not has_ts.all()
        phase_table: dict[str | None, int] = {}
        phase_code = _intern(phase_table, phases)
        self._read_thread_names(events, phase_code, phase_table.get("M"))
        # Complete events with a start and a duration; the profiler's own "Trace" span,
        # metadata, instants, counters and flow arrows go before they cost anything more.
        complete = np.isin(phase_code, [phase_table[p] for p in _COMPLETE if p in phase_table])
        keep = complete & has_ts & has_dur
        if "Trace" in categories:
            keep &= np.array([c != "Trace" for c in categories], dtype=bool)
        if "X" in phase_table:
            self.dropped += int(np.count_nonzero((phase_code == phase_table["X"]) & ~(
                has_ts & has_dur)))
        if not keep.all():
            kept = keep.tolist()
            events, categories, ts_all = (list(compress(values, kept)) for values in (
                events, categories, ts_all))
            ts, dur = ts[keep], dur[keep]
        if not events:
            return
        # HTA's ts column is float64, and so rounded, if any event's ts is not a JSON integer
        self.ts_all_integers = self.ts_all_integers and float not in set(map(type, ts_all))
        names = [e.name for e in events]
        args = [e.args for e in events]
        name_code = _intern(self.names, names)
        if len(self.wants_args) < len(self.names):
            self.wants_args += [classify.keeps_call_arguments(name) for name in
                                list(self.names)[len(self.wants_args):]]
        correlation, has_correlation = _ids([a.correlation for a in args])
        external_ids = [a.external_id for a in args]
        old_external_ids = [a.old_external_id for a in args]
        if old_external_ids.count(_ABSENT) < len(old_external_ids):  # legacy traces
            external_ids = [old if new is _ABSENT else new
                            for new, old in zip(external_ids, old_external_ids, strict=True)]
        collectives = [a.collective for a in args]
        columns = {
            "ts": ts, "dur": dur, "name": name_code,
            "category": _intern(self.categories, categories),
            # pid and tid interned apart (no tuple per event), paired up in ``load``
            "pid": _intern(self.pids, [e.pid for e in events]),
            "tid": _intern(self.tids, [e.tid for e in events]),
            "stream": _streams([a.stream for a in args]),
            "correlation": correlation,
            "has_correlation": has_correlation,
            "external_id": _ids(external_ids)[0],
        }
        wanted = np.array(self.wants_args, dtype=bool)[name_code]
        if collectives.count(None) < len(collectives):
            wanted |= np.array([c is not None for c in collectives], dtype=bool)
        self.comm_args.update((self.count + i, _comm_args(args[i]))
                              for i in np.flatnonzero(wanted).tolist())
        grad_code = self.names.get(classify.GRAD_READY)
        if grad_code is not None:
            for i in np.flatnonzero(name_code == grad_code).tolist():
                size = _bytes_from_shapes(args[i])
                if size is not None:
                    self.grad_bytes[self.count + i] = size
        for name, first in classify.MATMUL_OPS.items():
            code = self.names.get(name)
            for i in np.flatnonzero(name_code == code).tolist() if code is not None else ():
                flops = _matmul_flops(args[i], first)
                if flops is not None:
                    self.matmul_flops[self.count + i] = flops
        for key, values in columns.items():
            self.parts[key].append(values)
        self.count += len(events)

    def _read_thread_names(self, events: list[_Event], phase_code: np.ndarray,
                           metadata_code: int | None) -> None:
        if metadata_code is None:
            return
        for i in np.flatnonzero(phase_code == metadata_code).tolist():
            event = events[i]
            if event.name == "thread_name":
                label = event.args.thread_label
                self.thread_names[(event.pid, event.tid)] = label if isinstance(
                    label, str) else ""

    def extend(self, other: _Columns) -> None:
        """Append ``other`` (decoded elsewhere, with its own interning tables)."""
        remap = {
            "name": _intern(self.names, list(other.names)),
            "category": _intern(self.categories, list(other.categories)),
            "pid": _intern(self.pids, list(other.pids)),
            "tid": _intern(self.tids, list(other.tids)),
        }
        for key, arrays in other.parts.items():
            self.parts[key] += [remap[key][a] for a in arrays] if key in remap else arrays
        self.comm_args.update((self.count + i, args) for i, args in other.comm_args.items())
        self.grad_bytes.update((self.count + i, size) for i, size in other.grad_bytes.items())
        self.matmul_flops.update((self.count + i, f) for i, f in other.matmul_flops.items())
        self.thread_names.update(other.thread_names)
        self.ts_all_integers = self.ts_all_integers and other.ts_all_integers
        self.ts_low, self.ts_high = min(self.ts_low, other.ts_low), max(self.ts_high,
                                                                        other.ts_high)
        self.ts_missing = self.ts_missing or other.ts_missing
        self.dropped += other.dropped
        self.count += other.count
        self.closing = other.closing if other.closing is not None else self.closing
        self.values += other.values
        self.objects += other.objects

    def column(self, key: str, dtype=np.float64) -> np.ndarray:
        parts = self.parts[key]
        return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def _intern(table: dict[Any, int], values: list[Any]) -> np.ndarray:
    """Codes of ``values`` in ``table``, adding the values it does not have yet (in order)."""
    # One C-level pass: a missing key is given the next code by the defaultdict itself.
    lookup = defaultdict(None, table)
    lookup.default_factory = lookup.__len__
    codes = np.fromiter(map(lookup.__getitem__, values), np.int32, len(values))
    table.update(lookup)
    return codes


# ---- lenient decoding: an event whose values have unexpected types ------------------------

def _lenient_event(item: dict[str, Any]) -> _Event:
    """An event from an object with fields of unexpected types: such a field reads as absent
    (names and ids as text); the rest as the strict decoder reads them."""
    name = item.get("name", "")
    args = item.get("args")
    return _Event(
        name=name if isinstance(name, str) else _text(name),
        ph=item.get("ph") if isinstance(item.get("ph"), str) else None,
        cat=item.get("cat") if isinstance(item.get("cat"), str) else None,
        ts=_number(item.get("ts")), dur=_number(item.get("dur")),
        pid=_hashable(item.get("pid", 0)), tid=_hashable(item.get("tid", 0)),
        args=_lenient_args(args) if isinstance(args, dict) else _NO_ARGS)


def _lenient_args(args: dict[str, Any]) -> _Args:
    def scalar(key: str) -> int | float | str | None:
        if key not in args:
            return _ABSENT
        value = args[key]          # given but not a number or text: None, as msgspec's null
        return value if isinstance(value, int | float | str) and not isinstance(
            value, bool) else None

    return _Args(stream=scalar("stream"), correlation=scalar("correlation"),
                 external_id=scalar("External id"), old_external_id=scalar("external id"),
                 input_dims=msgspec.Raw(msgspec.json.encode(args.get("Input Dims"))),
                 input_type=msgspec.Raw(msgspec.json.encode(args.get("Input type"))),
                 collective=args.get("Collective name"), in_nelems=args.get("In msg nelems"),
                 out_nelems=args.get("Out msg nelems"), dtype=args.get("dtype"),
                 group_size=args.get("Group size"), group=args.get("Process Group Name"),
                 group_ranks=args.get("Process Group Ranks"), sequence=args.get("Seq"),
                 thread_label=args.get("name"))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _hashable(value: Any) -> int | str:
    return value if isinstance(value, int | str) and not isinstance(value, bool) else _text(value)


class _NotUTF8(ValueError):
    """An odd event (read leniently) holds text that is not UTF-8."""


def _decode_slice(data: bytes) -> tuple[list[_Event], int, int]:
    """The events of a slice, with its number of values and of objects among them. Where some
    value is not an event of the expected types, each value is decoded alone, and only the odd
    ones leniently: every event reads the same whatever slice it falls in."""
    try:
        events = _ARRAY_DECODER.decode(data)
        return events, len(events), len(events)
    except msgspec.ValidationError:
        pass
    items = _RAW_LIST_DECODER.decode(data)
    events = []
    for item in items:
        try:
            events.append(_EVENT_DECODER.decode(item))
            continue
        except msgspec.ValidationError:
            pass
        try:
            value = _LENIENT_DECODER.decode(item)
        except UnicodeDecodeError as error:
            raise _NotUTF8(str(error)) from None
        if isinstance(value, dict):
            events.append(_lenient_event(value))
    return events, len(items), len(events)


Pieces = list[tuple[int, int | None]]       # (start, end) offsets of slices in an array


def _decode_pieces(array: memoryview, pieces: Pieces) -> _Columns:
    """Decode pieces of ``array``; a piece without an end runs to the array's closing
    bracket (its offset is kept as ``closing``)."""
    columns = _Columns()
    for start, end in pieces:
        if end is None:
            end = jsonscan.closing_bracket(array, start)
            if end is None:
                raise _WrongGuess
            columns.closing = end
        events, values, objects = _decode_slice(b"".join((b"[", array[start:end], b"]")))
        columns.values += values
        columns.objects += objects
        columns.add(events)
    return columns


def _decode_guessed(raw: bytes | mmap.mmap, workers: int) -> tuple[_Columns,
                                                                   _DistributedInfo | None]:
    """The events decoded in slices cut where :func:`_events_start` and :func:`_guess_slices`
    guess (the common case: no pass over the file before decoding). Raises
    :class:`_WrongGuess` where a guess fails, or where the file has any problem: the exact way
    then names it."""
    start = _events_start(raw)
    array = memoryview(raw)[start:]
    try:
        columns = _decode_in_parallel(array, _guess_slices(array), workers)
    except (msgspec.MsgspecError, OverflowError, TypeError, ValueError):
        raise _WrongGuess from None
    if columns.closing is None:       # no piece reached the end: cannot happen, but be sure
        raise _WrongGuess
    return columns, _check_document(raw, start, start + columns.closing)


def _decode_events(array: memoryview, path: Location, workers: int) -> _Columns:
    """Decode the events slice by slice, on ``workers`` forked processes when that helps."""
    pieces = _slices(array)
    try:
        if len(pieces) == 1:
            return _decode_pieces(array, pieces)
        try:
            return _decode_in_parallel(array, pieces, workers)
        except msgspec.DecodeError:
            pass  # a cut fell inside an event after all: decode the array whole
        return _decode_pieces(array, [(1, len(array) - 1)])
    except msgspec.DecodeError as error:
        raise TraceError(path, f"invalid JSON ({error})") from None
    except _NotUTF8 as error:
        raise TraceError(path, f"invalid JSON (text that is not UTF-8: {error})") from None
    except (OverflowError, TypeError, ValueError) as error:
        raise TraceError(path, f"not a trace (a number out of range: {error})") from None


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while events are decoded: the decoded lists hold
    no cycles, and each collection would walk all of them (a third of the columnizing time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _take_pieces(array: memoryview, pieces: Pieces, taken: Any,
                 keep: Callable[[int, _Columns], object]) -> None:
    """Decode runs of :data:`SLICES_PER_TASK` pieces, one run at a time, until none is left,
    each handed to ``keep`` with the index of its first piece. ``taken`` counts the pieces
    handed out, shared by every decoding process: each takes the next run when it is free, so
    a late start or a slow piece evens out."""
    while True:
        with taken.get_lock():
            index = taken.value
            taken.value = index + SLICES_PER_TASK
        if index >= len(pieces):
            return
        try:
            keep(index, _decode_pieces(array, pieces[index:index + SLICES_PER_TASK]))
        except BaseException:
            taken.value = len(pieces)              # the others stop after their run
            raise


def _decode_in_parallel(array: memoryview, pieces: Pieces, workers: int) -> _Columns:
    """Decode ``pieces`` on this process and ``workers - 1`` forked ones (see
    :func:`_fork_decoder`), which read the parent's bytes in place."""
    workers = min(workers, -(-len(pieces) // SLICES_PER_TASK))
    if workers <= 1 or not hasattr(os, "fork"):
        return _decode_pieces(array, pieces)
    taken = multiprocessing.get_context("fork").Value("q", 0)
    children: list[_Child] = []
    done: dict[int, _Columns] = {}
    try:
        for _ in range(workers - 1):
            children.append(_fork_decoder(array, pieces, taken))
        _take_pieces(array, pieces, taken, done.__setitem__)
        while children:
            done.update(children.pop(0).result())
    finally:
        taken.value = len(pieces)                  # an error here: the children stop soon
        for child in children:
            child.abandon()
    merged = _Columns()
    for index in range(0, len(pieces), SLICES_PER_TASK):
        merged.extend(done.pop(index))
    return merged


class _Spill:
    """What a forked decoder decoded, written run by run, while it works, to a file shared
    with the parent (anonymous: it goes with the last descriptor). The arrays go raw (pickle's
    out-of-band buffers), so the parent maps them instead of reading them through a pipe and
    copying them: nothing but a small index is left to send at the end."""

    def __init__(self, descriptor: int) -> None:
        self.file = open(descriptor, "wb", closefd=False)  # noqa: SIM115 - closed by the owner
        self.index: list[tuple[int, int, int, list[tuple[int, int]]]] = []

    def write(self, key: int, columns: _Columns) -> None:
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(columns, protocol=5, buffer_callback=buffers.append)
        spans = []
        for buffer in buffers:
            raw = buffer.raw()
            spans.append((self.file.tell(), raw.nbytes))
            self.file.write(raw)
        self.index.append((key, self.file.tell(), len(head), spans))
        self.file.write(head)

    @staticmethod
    def read(descriptor: int, index: list[tuple[int, int, int, list[tuple[int, int]]]]
             ) -> dict[int, _Columns]:
        if not index:
            return {}
        # a private map: the arrays read from it are writable, and the file is never changed
        view = memoryview(mmap.mmap(descriptor, 0, access=mmap.ACCESS_COPY))
        return {key: pickle.loads(view[at:at + size],
                                  buffers=[view[a:a + n] for a, n in spans])
                for key, at, size, spans in index}


def _spill_descriptor() -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create("ddpprof-columns", os.MFD_CLOEXEC)
    with tempfile.TemporaryFile() as file:     # already unlinked: a duplicate keeps it alive
        return os.dup(file.fileno())


class _Child:
    """A forked decoder: its pid, the read end of its pipe, and its spill file."""

    def __init__(self, pid: int, reading: int, spill: int) -> None:
        self.pid, self.reading, self.spill = pid, reading, spill

    def result(self) -> dict[int, _Columns]:
        """What it decoded, once it has ended (its error raised here)."""
        try:
            with open(self.reading, "rb") as pipe:
                outcome = pickle.load(pipe)
        except (EOFError, pickle.UnpicklingError):
            outcome = None
        finally:
            _, status = os.waitpid(self.pid, 0)
        try:
            if isinstance(outcome, BaseException):
                raise outcome
            if outcome is None or status != 0:
                raise _DecoderDied(f"a decoding process ended without its result "
                                   f"({_ended(status)}; out of memory? try --jobs 1)")
            return _Spill.read(self.spill, outcome)
        finally:
            os.close(self.spill)

    def abandon(self) -> None:
        os.close(self.reading)
        os.close(self.spill)
        os.waitpid(self.pid, 0)


def _fork_decoder(array: memoryview, pieces: Pieces, taken: Any) -> _Child:
    """A forked child that takes pieces as this process does, spills what it decoded (see
    :class:`_Spill`), sends the spill's index (or the exception that stopped it) through a
    pipe, and leaves with ``os._exit``: no interpreter shutdown to wait for. A plain ``fork``
    rather than a process pool: nothing to start but the child."""
    spill = _spill_descriptor()
    reading, writing = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        os.close(writing)
        return _Child(pid, reading, spill)
    status = 1
    try:
        from ..record.process import die_with_parent

        die_with_parent(parent)    # a parent killed outright (SIGKILL) takes the child along
        os.close(reading)
        spilled = _Spill(spill)
        try:
            _take_pieces(array, pieces, taken, spilled.write)
            spilled.file.flush()
            outcome: Any = spilled.index
        except BaseException as error:  # sent to the parent, and raised there
            outcome = error
        with open(writing, "wb") as pipe:
            pickle.dump(outcome, pipe, protocol=pickle.HIGHEST_PROTOCOL)
        status = 0
    finally:
        os._exit(status)


class _DecoderDied(RuntimeError):
    """A forked decoder ended without sending its columns (killed, most often for memory)."""


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


#: The last trace loaded here and the identity of its file: ``analyze`` reads rank 0 again
#: for its bucket-cap advice, and decoding a large trace twice would cost as much as the
#: whole analysis. One entry, dropped before any other file is decoded, so a process never
#: holds more than the one trace it works on.
_LAST: tuple[tuple[Any, ...], RankTrace] | None = None


def _identity(path: Location) -> tuple[Any, ...] | None:
    """What tells a local file's content apart: a rewrite changes its size, times or inode."""
    if not isinstance(path, Path):
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (str(path.resolve()), found.st_dev, found.st_ino, found.st_size,
            found.st_mtime_ns, found.st_ctime_ns)


def load(path: Location, workers: int = 1) -> RankTrace:
    """Load ``path`` (``.json``, ``.json.gz``, object or bare-array form) as one rank's
    events, decoding large files on up to ``workers`` processes. The rank is
    ``distributedInfo.rank``, else a number in the file name (``rank3``, ``worker_3``), else
    None (the run decides). The result is shared with the next load of the same unchanged
    file: callers only read it."""
    global _LAST
    identity, last = _identity(path), _LAST      # one read: threads may replace it
    if last is not None and identity is not None and last[0] == identity:
        return last[1]
    _LAST = None
    trace = _load(path, workers)
    if identity is not None and identity == _identity(path):
        _LAST = (identity, trace)
    return trace


def _decode_either_way(raw: bytes | mmap.mmap, path: Location, workers: int
                       ) -> tuple[_Columns, _DistributedInfo | None]:
    """The guessed way, else the exact way (which names any problem)."""
    try:
        return _decode_guessed(raw, workers)
    except _WrongGuess:
        array, info = decode(raw, path)
        return _decode_events(array, path, workers), info


def _load(path: Location, workers: int) -> RankTrace:
    raw = read_bytes(path)
    with _collector_paused():
        try:
            columns, info = _decode_either_way(raw, path, workers)
        except _DecoderDied as error:
            raise TraceError(path, str(error)) from None
        except RecursionError:       # msgspec's limit on nesting, on either way
            raise TraceError(path, "not a trace (JSON nested too deeply)") from None
    del raw
    if columns.values and not columns.objects:
        raise TraceError(path, "not a trace (traceEvents holds no event objects)")
    start = columns.column("ts")
    end = start + columns.column("dur")
    if not (np.all(np.isfinite(start)) and np.all(np.isfinite(end))):
        raise TraceError(path, "not a trace (timestamps out of range)")
    thread_id, threads = _pair_threads(columns)
    rank, source = _rank(info, path)
    return RankTrace(
        path=path, rank=rank, rank_source=source,
        world_size=_positive_int(info.world_size) if info else None,
        backend=info.backend if info and isinstance(info.backend, str) else None,
        process_groups=_process_groups(info.pg_config if info else None),
        names=list(columns.names), name_id=columns.column("name", np.int32),
        category=list(columns.categories), category_id=columns.column("category", np.int32),
        start_us=start, end_us=end, thread_id=thread_id, threads=threads,
        thread_names=columns.thread_names, stream=columns.column("stream", np.int64),
        correlation=columns.column("correlation", np.int64),
        has_correlation=columns.column("has_correlation", bool),
        external_id=columns.column("external_id", np.int64),
        timestamps_are_integers=columns.ts_all_integers,
        ts_range=(columns.ts_low, columns.ts_high) if columns.ts_low <= columns.ts_high
        else (0.0, 0.0), ts_missing=columns.ts_missing,
        comm_args=columns.comm_args, grad_bytes=columns.grad_bytes,
        matmul_flops=columns.matmul_flops, dropped_events=columns.dropped)


def _rank(info: _DistributedInfo | None, path: Location) -> tuple[int | None, str | None]:
    declared = _non_negative_int(info.rank) if info else None
    if declared is not None:
        return declared, "distributedInfo"
    from_name = rank_from_name(path)
    return (from_name, "file name") if from_name is not None else (None, None)


def _non_negative_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return number if 0 <= number < 2**31 else None


def _positive_int(value: Any) -> int | None:
    number = _non_negative_int(value)
    return number if number else None


def _process_groups(config: Any) -> list[ProcessGroup]:
    groups = []
    for entry in config if isinstance(config, list) else []:
        if isinstance(entry, dict) and entry.get("pg_name") is not None:
            groups.append(ProcessGroup(str(entry["pg_name"]), _positive_int(entry.get("pg_size")),
                                       _rank_list(entry.get("ranks"))))
    return groups


def _rank_list(value: Any) -> tuple[int, ...] | None:
    """A list of ranks, given as a list or as its text (``"[0, 1, 2]"``)."""
    if isinstance(value, str):
        try:
            value = msgspec.json.decode(value.encode())
        except msgspec.DecodeError:
            return None
    if isinstance(value, list) and all(_non_negative_int(v) is not None for v in value):
        return tuple(int(v) for v in value)
    return None


def _pair_threads(columns: _Columns) -> tuple[np.ndarray, list[tuple[Any, Any]]]:
    """Thread codes for (pid, tid) pairs, from the separately interned pids and tids."""
    pids, tids = list(columns.pids), list(columns.tids)
    pair = columns.column("pid", np.int32).astype(np.int64) * len(tids) + columns.column(
        "tid", np.int32)
    if len(pids) * len(tids) <= 1 << 24:  # a table of every (pid, tid): no sort
        present = np.zeros(max(len(pids) * len(tids), 1), dtype=bool)
        present[pair] = True
        pairs = np.flatnonzero(present)
        code = np.zeros(present.size, dtype=np.int32)
        code[pairs] = np.arange(pairs.size, dtype=np.int32)
        code = code[pair]
    else:
        pairs, code = np.unique(pair, return_inverse=True)
    return code.astype(np.int32), [(pids[p // len(tids)], tids[p % len(tids)])
                                   for p in pairs.tolist()]


DTYPE_BYTES = {
    "float": 4, "float32": 4, "float16": 2, "half": 2, "bfloat16": 2, "double": 8,
    "float64": 8, "int": 4, "int32": 4, "long": 8, "int64": 8, "long int": 8, "short": 2,
    "int16": 2, "signed char": 1, "int8": 1, "unsigned char": 1, "uint8": 1, "bool": 1,
    "c10::half": 2, "c10::bfloat16": 2, "c10::complex<float>": 8, "c10::complex<double>": 16,
    "byte": 1, "char": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1, "uint16": 2, "uint32": 4, "uint64": 8,
}


def dtype_bytes(name: Any) -> int | None:
    return DTYPE_BYTES.get(name.lower()) if isinstance(name, str) else None


def _message_bytes(nelems: Any, dtype: Any) -> int | None:
    element = dtype_bytes(dtype)
    if element is None or isinstance(nelems, bool) or not isinstance(nelems, int):
        return None
    size = nelems * element
    return size if 0 <= size < 2**62 else None


_NO_COMM_ARGS = CommArgs()


def _comm_args(args: _Args) -> CommArgs:
    if (args.input_dims is _NO_ARGS.input_dims and args.collective is None
            and args.in_nelems is None and args.out_nelems is None and args.group is None
            and args.group_size is None and args.group_ranks is None
            and args.sequence is None):
        return _NO_COMM_ARGS     # most often: a wait op or a gradient without shapes
    in_bytes = _message_bytes(args.in_nelems, args.dtype)
    if in_bytes is None:
        in_bytes = _bytes_from_shapes(args)
    ranks = _rank_list(args.group_ranks)
    collective = args.collective if isinstance(args.collective, str) else None
    group = None if args.group is None else _text(args.group)
    return CommArgs(collective=collective, in_bytes=in_bytes,
                    out_bytes=_message_bytes(args.out_nelems, args.dtype),
                    group_size=_positive_int(args.group_size) or (len(ranks) if ranks else None),
                    group=group, group_ranks=ranks, sequence=_non_negative_int(args.sequence))


def _bytes_from_shapes(args: _Args) -> int | None:
    """Sum over tensor inputs of numel × element size, from ``Input Dims`` / ``Input type``
    (a tensor list records no element type, so it is not counted)."""
    try:
        dims = msgspec.json.decode(args.input_dims)
        types = msgspec.json.decode(args.input_type)
    except msgspec.DecodeError:
        return None
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    total = 0
    for shape, type_name in zip(dims, types, strict=False):
        element = dtype_bytes(type_name) if isinstance(type_name, str) else None
        if element is None:
            continue
        numel = _numel(shape)
        if numel is not None:
            total += numel * element
    return total if 0 < total < 2**62 else None


def _matmul_flops(args: _Args, first: int) -> float | None:
    """2·M·K·N (times the batch of a batched product) from the two factors' ``Input Dims``."""
    try:
        dims = msgspec.json.decode(args.input_dims)
    except msgspec.DecodeError:
        return None
    if not isinstance(dims, list) or len(dims) < first + 2:
        return None
    a, b = dims[first], dims[first + 1]
    if _numel(a) is None or _numel(b) is None or len(a) != len(b) or len(a) not in (2, 3):
        return None
    return 2.0 * math.prod(a) * b[-1]


def _numel(shape: Any) -> int | None:
    if isinstance(shape, list) and shape and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        return math.prod(shape)
    return None
