"""Decode one rank's Chrome trace into flat numpy columns, reading only the fields ddpprof uses.

Every form PyTorch has written is accepted: Kineto's object (``traceEvents`` plus
``distributedInfo``), the bare array, gzip or plain, the legacy autograd profiler's events (no
category), old category names. msgspec decodes the JSON straight into small typed structs
(unknown fields are skipped without being built); a slice whose values have unexpected types
is decoded again leniently, so one odd event never rejects a trace. Everything after that is
numpy. Times are kept exactly as written: rounding, where asked for, is the analysis's choice.
"""

from __future__ import annotations

import math
import mmap
import multiprocessing
import os
import re
import zlib
from concurrent.futures import ProcessPoolExecutor
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


class _Args(msgspec.Struct, frozen=True, gc=False):
    stream: int | float | str | None = None
    correlation: int | float | str | None = None
    external_id: int | float | str | None = msgspec.field(name="External id", default=None)
    old_external_id: int | float | str | None = msgspec.field(name="external id",
                                                              default=None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b"null"))
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw(b"null"))
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
    name: str = ""
    ph: str | None = None
    cat: str | None = None
    ts: int | float | None = None
    dur: int | float | None = None
    pid: int | str = 0
    tid: int | str = 0
    args: _Args | None = _NO_ARGS


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
_LENIENT_DECODER = msgspec.json.Decoder(list[Any])
_RAW_ARRAY_DECODER = msgspec.json.Decoder(msgspec.Raw)
#: Events are decoded in slices of about this many bytes, so that only one slice's Python
#: objects exist at a time: memory stays near the file's size however many events it has.
SLICE_BYTES = 16 * 1024 * 1024
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


def decode(raw: bytes | mmap.mmap, path: Location) -> tuple[memoryview, _DistributedInfo | None]:
    """The bytes of the ``traceEvents`` array (validated JSON) and ``distributedInfo``, for the
    object form and the bare-array form of a Chrome trace."""
    head = bytes(raw[:64]).lstrip()[:1]
    if not head:  # more than 64 blanks first: rare, and a copy is then acceptable
        head = bytes(raw).lstrip()[:1]
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
_NON_FINITE = re.compile(rb"([:,\[]\s*)-?(?:inf|nan|Infinity|NaN)(?=\s*[,}\]])",
                         re.IGNORECASE)


def _non_finite_as_null(raw: bytes) -> bytes | None:
    """``raw`` with every bare non-finite number replaced by ``null`` (read as absent, as any
    value that makes no sense is), or None where it has none."""
    repaired, count = _NON_FINITE.subn(rb"\1null", raw)
    return repaired if count else None


def _slices(array: memoryview, target: int = SLICE_BYTES) -> list[tuple[int, int]]:
    """Offsets that cut the bytes of a JSON array into pieces of whole elements, each about
    ``target`` bytes, at the commas between top-level elements (found by a string-aware scan,
    so compact and pretty JSON alike). Where the scan finds nothing to cut, one piece."""
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
        column = np.array([-1 if v is None else v for v in values], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # strings, floats, huge ints: rare
        ids = [_id(v) for v in values]
        return (np.array([-1 if i is None else i for i in ids], dtype=np.int64),
                np.array([i is not None for i in ids], dtype=bool))
    return column, column >= 0


def _streams(values: list[Any]) -> np.ndarray:
    """``args.stream`` as HTA reads it: ``int(value)``; -1 where that fails, is negative, or
    is beyond int64 (no device has such a stream)."""
    try:
        column = np.array([-1 if v is None else v for v in values], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        column = np.array([_stream(v) for v in values], dtype=np.int64)
    return np.where(column >= 0, column, -1)


def _stream(value: Any) -> int:
    number = _id(value)
    return -1 if number is None or number < 0 or int(value) >= 2**63 else number


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


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

    def add(self, events: list[_Event]) -> None:
        # One list comprehension per column, and interning through C-level ``map``: several
        # times faster than a Python loop over events, which would cost more than the decoding.
        phases = [e.ph for e in events]
        self._read_thread_names(events, phases)
        ts_all = [e.ts for e in events]
        dur_all = [e.dur for e in events]
        present = [t for t in ts_all if t is not None]
        self.ts_missing = self.ts_missing or len(present) < len(ts_all)
        if present:
            self.ts_low = min(self.ts_low, min(present))
            self.ts_high = max(self.ts_high, max(present))
        # Complete events with a start and a duration; the profiler's own "Trace" span,
        # metadata, instants, counters and flow arrows go before they cost anything more.
        keep = [ph in _COMPLETE and ts is not None and dur is not None and cat != "Trace"
                for ph, ts, dur, cat in zip(phases, ts_all, dur_all, (e.cat for e in events),
                                            strict=True)]
        self.dropped += sum(1 for ph, ts, dur in zip(phases, ts_all, dur_all, strict=True)
                            if ph == "X" and (ts is None or dur is None))
        if not all(keep):
            events = list(compress(events, keep))
            ts_all = list(compress(ts_all, keep))
            dur_all = list(compress(dur_all, keep))
        # HTA's ts column is float64, and so rounded, if any event's ts is not a JSON integer
        self.ts_all_integers = self.ts_all_integers and all(t.__class__ is int for t in ts_all)
        ts = np.array(ts_all, dtype=np.float64)
        dur = np.array(dur_all, dtype=np.float64)
        names = _intern(self.names, [e.name for e in events])
        if len(self.wants_args) < len(self.names):
            self.wants_args += [classify.keeps_call_arguments(name) for name in
                                list(self.names)[len(self.wants_args):]]
        args = [e.args or _NO_ARGS for e in events]
        correlation, has_correlation = _ids([a.correlation for a in args])
        external_id, _ = _ids([a.external_id if a.external_id is not None
                               else a.old_external_id for a in args])
        columns = {
            "ts": ts, "dur": dur, "name": names,
            "category": _intern(self.categories, [e.cat for e in events]),
            # pid and tid interned apart (no tuple per event), paired up in ``load``
            "pid": _intern(self.pids, [e.pid for e in events]),
            "tid": _intern(self.tids, [e.tid for e in events]),
            "stream": _streams([a.stream for a in args]),
            "correlation": correlation,
            "has_correlation": has_correlation,
            "external_id": external_id,
        }
        declared = np.array([a.collective is not None for a in args], dtype=bool)
        wanted = np.flatnonzero(declared | np.array(self.wants_args, dtype=bool)[names])
        self.comm_args.update((self.count + int(i), _comm_args(args[i])) for i in wanted)
        grad_code = self.names.get(classify.GRAD_READY)
        if grad_code is not None:
            for i in np.flatnonzero(names == grad_code):
                size = _bytes_from_shapes(args[i])
                if size is not None:
                    self.grad_bytes[self.count + int(i)] = size
        for name, first in classify.MATMUL_OPS.items():
            code = self.names.get(name)
            for i in np.flatnonzero(names == code) if code is not None else ():
                flops = _matmul_flops(args[i], first)
                if flops is not None:
                    self.matmul_flops[self.count + int(i)] = flops
        for key, values in columns.items():
            self.parts[key].append(values)
        self.count += len(events)

    def _read_thread_names(self, events: list[_Event], phases: list[str | None]) -> None:
        for event in compress(events, [ph == "M" for ph in phases]):
            if event.name == "thread_name" and event.args is not None:
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
        self.wants_args = [classify.keeps_call_arguments(name) for name in self.names]
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

    def column(self, key: str, dtype=np.float64) -> np.ndarray:
        parts = self.parts[key]
        return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def _intern(table: dict[Any, int], values: list[Any]) -> np.ndarray:
    """Codes of ``values`` in ``table``, adding the values it does not have yet."""
    for value in dict.fromkeys(values):
        table.setdefault(value, len(table))
    return np.fromiter(map(table.__getitem__, values), np.int32, len(values))


# ---- lenient decoding: a slice whose values have unexpected types -------------------------

def _lenient_events(items: list[Any]) -> list[_Event]:
    """Events from arbitrary JSON values: anything not shaped like an event is skipped, and a
    field of an unexpected type reads as absent (names and ids as text)."""
    events = []
    for item in items:
        if not isinstance(item, dict):
            continue
        name = item.get("name", "")
        args = item.get("args")
        events.append(_Event(
            name=name if isinstance(name, str) else _text(name),
            ph=item.get("ph") if isinstance(item.get("ph"), str) else None,
            cat=item.get("cat") if isinstance(item.get("cat"), str) else None,
            ts=_number(item.get("ts")), dur=_number(item.get("dur")),
            pid=_hashable(item.get("pid", 0)), tid=_hashable(item.get("tid", 0)),
            args=_lenient_args(args) if isinstance(args, dict) else None))
    return events


def _lenient_args(args: dict[str, Any]) -> _Args:
    def scalar(key: str) -> int | float | str | None:
        value = args.get(key)
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


class _NotEvents(ValueError):
    """A slice of ``traceEvents`` that holds values but not one event object."""


def _decode_slice(data: bytes) -> list[_Event]:
    try:
        return _ARRAY_DECODER.decode(data)
    except msgspec.ValidationError:
        items = _LENIENT_DECODER.decode(data)
        events = _lenient_events(items)
        if items and not any(isinstance(item, dict) for item in items):
            raise _NotEvents from None
        return events


#: The array being decoded, for forked workers to read without copying.
_SHARED: memoryview | None = None


def _decode_pieces(pieces: list[tuple[int, int]]) -> _Columns:
    assert _SHARED is not None
    columns = _Columns()
    for start, end in pieces:
        columns.add(_decode_slice(b"".join((b"[", _SHARED[start:end], b"]"))))
    return columns


def _decode_events(array: memoryview, path: Location, workers: int) -> _Columns:
    """Decode the events slice by slice, on ``workers`` forked processes when that helps."""
    global _SHARED
    pieces = _slices(array)
    _SHARED = array
    try:
        if len(pieces) == 1:
            return _decode_pieces(pieces)
        try:
            return _decode_in_parallel(pieces, workers)
        except msgspec.DecodeError:
            pass  # a cut fell inside an event after all: decode the array whole
        return _decode_pieces([(1, len(array) - 1)])
    except msgspec.DecodeError as error:
        raise TraceError(path, f"invalid JSON ({error})") from None
    except _NotEvents:
        raise TraceError(path, "not a trace (traceEvents holds no event objects)") from None
    except (OverflowError, TypeError, ValueError) as error:
        raise TraceError(path, f"not a trace (a number out of range: {error})") from None
    finally:
        _SHARED = None


def _decode_in_parallel(pieces: list[tuple[int, int]], workers: int) -> _Columns:
    workers = min(workers, len(pieces))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return _decode_pieces(pieces)
    share = -(-len(pieces) // workers)
    mine, *theirs = [pieces[i:i + share] for i in range(0, len(pieces), share)]
    # fork: the children read the parent's bytes in place and return compact columns, while
    # this process decodes the first share itself.
    with ProcessPoolExecutor(len(theirs), mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(_decode_pieces, group) for group in theirs]
        merged = _decode_pieces(mine)
        for future in futures:
            merged.extend(future.result())
    return merged


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
    identity = _identity(path)
    if _LAST is not None and identity is not None and _LAST[0] == identity:
        return _LAST[1]
    _LAST = None
    trace = _load(path, workers)
    if identity is not None and identity == _identity(path):
        _LAST = (identity, trace)
    return trace


def _load(path: Location, workers: int) -> RankTrace:
    raw = read_bytes(path)
    array, info = decode(raw, path)
    columns = _decode_events(array, path, workers)
    del array, raw
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


def _comm_args(args: _Args) -> CommArgs:
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
