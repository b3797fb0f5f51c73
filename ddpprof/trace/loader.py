"""Decode one rank's Chrome trace into flat numpy arrays, reading only the fields ddpprof uses.

msgspec decodes the JSON straight into small typed structs (unknown fields are skipped without
being built), which is what makes large traces cheap; everything after that is numpy.
"""

from __future__ import annotations

import gzip
import math
import multiprocessing
import re
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import compress
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..errors import UsageError


class TraceError(UsageError):
    """A trace file that cannot be analyzed; the message starts with the file's path."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem

    def __reduce__(self):  # so that it crosses from a worker process intact
        return type(self), (self.path, self.problem)


class _Args(msgspec.Struct, frozen=True, gc=False):
    stream: int | float | str | None = None
    correlation: int | float | str | None = None
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b"null"))
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw(b"null"))
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_nelems: int | None = msgspec.field(name="In msg nelems", default=None)
    dtype: str | None = None
    group_size: int | None = msgspec.field(name="Group size", default=None)
    thread_label: str | None = msgspec.field(name="name", default=None)


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    name: str = ""
    cat: str | None = None
    ts: int | float | None = None
    dur: int | float | None = None
    pid: int | str = 0
    tid: int | str = 0
    args: _Args | None = _NO_ARGS


class _DistributedInfo(msgspec.Struct, gc=False):
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None


class _TraceFile(msgspec.Struct, gc=False):
    # Kept as raw bytes at first: the events are decoded a slice at a time (see ``_slices``).
    traceEvents: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    distributedInfo: _DistributedInfo | None = None


_OBJECT_DECODER = msgspec.json.Decoder(_TraceFile)
_ARRAY_DECODER = msgspec.json.Decoder(list[_Event])
_RAW_ARRAY_DECODER = msgspec.json.Decoder(msgspec.Raw)
#: Events are decoded in slices of about this many bytes, so that only one slice's Python
#: objects exist at a time: memory stays near the file's size however many events it has.
SLICE_BYTES = 16 * 1024 * 1024
#: The autograd op that finishes a parameter's gradient: where its post-accumulate hook fires.
GRAD_READY = "torch::autograd::AccumulateGrad"
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


@dataclass
class CommArgs:
    """What an event says about the collective it belongs to (any field may be unknown)."""

    collective: str | None = None
    bytes_per_call: int | None = None
    group_size: int | None = None


@dataclass
class RankTrace:
    """One rank's events. Times are microseconds; ``-1`` means "none" in integer columns."""

    path: Path
    rank: int
    world_size: int | None
    backend: str | None
    names: list[str]              # name table; ``name_id`` indexes it
    name_id: np.ndarray           # int32
    category: list[str]           # category table; ``category_id`` indexes it
    category_id: np.ndarray       # int32
    start_us: np.ndarray          # float64, after HTA-compatible rounding (see ``_snap``)
    end_us: np.ndarray            # float64
    thread_id: np.ndarray         # int32 index into ``threads``
    threads: list[tuple[Any, Any]]  # (pid, tid)
    thread_names: dict[tuple[Any, Any], str]
    stream: np.ndarray            # int64, -1 for host events
    correlation: np.ndarray       # int64, -1 when absent
    comm_args: dict[int, CommArgs] = field(default_factory=dict)  # by event index
    grad_bytes: dict[int, int] = field(default_factory=dict)  # AccumulateGrad: its gradient

    @property
    def n_events(self) -> int:
        return int(self.start_us.size)


def read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise TraceError(path, f"cannot be read ({error.strerror})") from None
    if not raw:
        raise TraceError(path, "empty file")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as error:
            raise TraceError(path, f"truncated or corrupt gzip ({error})") from None
        if not raw.strip():
            raise TraceError(path, "empty file")
    return raw


def decode(raw: bytes, path: Path) -> tuple[memoryview, _DistributedInfo | None]:
    """The bytes of the ``traceEvents`` array (validated JSON) and ``distributedInfo``, for the
    object form and the bare-array form of a Chrome trace."""
    head = raw.lstrip()[:1]
    try:
        if head == b"[":
            return memoryview(_RAW_ARRAY_DECODER.decode(raw)), None
        if head != b"{":
            raise TraceError(path, "not a trace (not a JSON object or array)")
        document = _OBJECT_DECODER.decode(raw)
    except msgspec.ValidationError as error:
        raise TraceError(path, f"not a trace ({error})") from None
    except msgspec.DecodeError as error:
        problem = "truncated JSON" if "truncated" in str(error).lower() else "invalid JSON"
        raise TraceError(path, f"{problem} ({error})") from None
    events = document.traceEvents
    if memoryview(events)[:1] != b"[":
        raise TraceError(path, "not a trace (no traceEvents array)")
    return memoryview(events), document.distributedInfo


_WHITESPACE = frozenset(b" \t\r\n")


def _slices(array: memoryview, target: int = SLICE_BYTES) -> list[tuple[int, int]]:
    """Offsets that cut the bytes of a JSON array of objects into pieces of whole events, each
    about ``target`` bytes, at ``},`` + line break + ``{``. A line break cannot occur inside a
    JSON string, so the only risk is a cut inside a nested array of objects; both sides of such
    a cut are unbalanced and fail to decode, and the caller then decodes the array whole."""
    data = np.frombuffer(array, dtype=np.uint8)
    last = data.size - 1                      # the closing ']'
    pieces, start = [], 1                     # just after '['
    while start + target < last:
        cut = _boundary(data, start + target, last)
        if cut is None:
            break
        comma, next_event = cut
        pieces.append((start, comma))
        start = next_event
    pieces.append((start, last))
    return pieces


def _boundary(data: np.ndarray, begin: int, last: int) -> tuple[int, int] | None:
    """The first ``}`` ``,`` newline ``{`` (with any whitespace) after ``begin``: the comma's
    position and the next event's first byte."""
    window = 1 << 16
    while begin < last:
        for newline in np.flatnonzero(data[begin:min(begin + window, last)] == 10) + begin:
            before = int(newline) - 1
            while data[before] in _WHITESPACE:
                before -= 1
            if data[before] != ord(","):
                continue
            closing = before - 1
            while data[closing] in _WHITESPACE:
                closing -= 1
            after = int(newline) + 1
            while after < last and data[after] in _WHITESPACE:
                after += 1
            if data[closing] == ord("}") and data[after] == ord("{"):
                return before, after
        begin += window
    return None


def rank_from_name(path: Path) -> int | None:
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


def _as_int(value: Any) -> int:
    """An integer argument, or -1 where it is absent, not a number or beyond int64."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return -1
    return number if -(2**63) <= number < 2**63 else -1


def _snap(start: np.ndarray, duration: np.ndarray,
          ts_is_float: bool) -> tuple[np.ndarray, np.ndarray]:
    """HTA 0.5.0 rounds every event inward to whole microseconds (start up, end down) when the
    trace's timestamps are not all JSON integers, i.e. nanosecond-resolution Kineto output;
    integer-µs traces are used as they are. Reproduced so that unions match HTA's."""
    end = start + duration
    if ts_is_float:
        start, end = np.ceil(start), np.floor(end)
    return start, end


class _Columns:
    """Per-event columns, filled slice by slice; names and threads are interned as they come."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.categories: dict[str | None, int] = {}
        self.pids: dict[Any, int] = {}
        self.tids: dict[Any, int] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in (
            "ts", "dur", "name", "category", "pid", "tid", "stream", "correlation")}
        self.comm_args: dict[int, CommArgs] = {}
        self.grad_bytes: dict[int, int] = {}
        self.name_is_comm: list[bool] = []
        self.ts_is_float = False
        self.count = 0

    def add(self, events: list[_Event]) -> None:
        # One list comprehension per column, and interning through C-level ``map``: several
        # times faster than a Python loop over events, which would cost more than the decoding.
        ts_all = [e.ts for e in events]
        # HTA's column is float64, and so rounded, if any event's ts is not a JSON integer
        self.ts_is_float = self.ts_is_float or any(t.__class__ is not int for t in ts_all)
        ts = np.array(ts_all, dtype=np.float64)
        dur = np.array([e.dur for e in events], dtype=np.float64)
        categories = [e.cat for e in events]
        self._read_thread_names(events, categories)
        # HTA keeps events with a category, a start and a duration, minus the "Trace" span;
        # the rest (flow arrows, metadata, instants) is dropped before it costs anything more.
        keep = ~np.isnan(ts) & ~np.isnan(dur)
        keep &= np.array([c is not None and c != "Trace" for c in categories], dtype=bool)
        if not keep.all():
            mask = keep.tolist()
            events = list(compress(events, mask))
            categories = list(compress(categories, mask))
            ts, dur = ts[keep], dur[keep]
        names = _intern(self.names, [e.name for e in events])
        args = [e.args or _NO_ARGS for e in events]
        if len(self.name_is_comm) < len(self.names):
            self.name_is_comm += [_names_comm(name) for name in
                                  list(self.names)[len(self.name_is_comm):]]
        columns = {
            "ts": ts, "dur": dur, "name": names,
            "category": _intern(self.categories, categories),
            # pid and tid interned apart (no tuple per event), paired up in ``load``
            "pid": _intern(self.pids, [e.pid for e in events]),
            "tid": _intern(self.tids, [e.tid for e in events]),
            "stream": _integers([a.stream for a in args]),
            "correlation": _integers([a.correlation for a in args]),
        }
        declared = np.array([a.collective is not None for a in args], dtype=bool)
        comm = np.flatnonzero(declared | np.array(self.name_is_comm, dtype=bool)[names])
        self.comm_args.update((self.count + int(i), _comm_args(args[i])) for i in comm)
        grad_code = self.names.get(GRAD_READY)
        if grad_code is not None:
            for i in np.flatnonzero(names == grad_code):
                size = _bytes_from_shapes(args[i])
                if size is not None:
                    self.grad_bytes[self.count + int(i)] = size
        for key, values in columns.items():
            self.parts[key].append(values)
        self.count += len(events)

    def _read_thread_names(self, events: list[_Event], categories: list[str | None]) -> None:
        for event in compress(events, [c is None for c in categories]):  # "ph": "M" events
            if event.name == "thread_name" and event.args is not None:
                self.thread_names[(event.pid, event.tid)] = event.args.thread_label or ""

    def extend(self, other: _Columns) -> None:
        """Append ``other`` (decoded elsewhere, with its own interning tables)."""
        remap = {
            "name": _intern(self.names, list(other.names)),
            "category": _intern(self.categories, list(other.categories)),
            "pid": _intern(self.pids, list(other.pids)),
            "tid": _intern(self.tids, list(other.tids)),
        }
        self.name_is_comm = [_names_comm(name) for name in self.names]
        for key, arrays in other.parts.items():
            self.parts[key] += [remap[key][a] for a in arrays] if key in remap else arrays
        self.comm_args.update((self.count + i, args) for i, args in other.comm_args.items())
        self.grad_bytes.update((self.count + i, size) for i, size in other.grad_bytes.items())
        self.thread_names.update(other.thread_names)
        self.ts_is_float = self.ts_is_float or other.ts_is_float
        self.count += other.count

    def column(self, key: str) -> np.ndarray:
        parts = self.parts[key]
        return np.concatenate(parts) if parts else np.empty(0)


def _intern(table: dict[Any, int], values: list[Any]) -> np.ndarray:
    """Codes of ``values`` in ``table``, adding the values it does not have yet."""
    for value in dict.fromkeys(values):
        table.setdefault(value, len(table))
    return np.fromiter(map(table.__getitem__, values), np.int32, len(values))


def _integers(values: list[Any]) -> np.ndarray:
    """Integer arguments as HTA reads them (``int(value)``), exactly; -1 where absent, not a
    number, or beyond int64."""
    try:
        return np.array([-1 if v is None else v for v in values], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # strings, floats, huge ints: rare
        return np.array([_as_int(v) for v in values], dtype=np.int64)


#: The array being decoded, for forked workers to read without copying.
_SHARED: memoryview | None = None


def _decode_pieces(pieces: list[tuple[int, int]]) -> _Columns:
    assert _SHARED is not None
    columns = _Columns()
    for start, end in pieces:
        columns.add(_ARRAY_DECODER.decode(b"".join((b"[", _SHARED[start:end], b"]"))))
    return columns


def _decode_events(array: memoryview, path: Path, workers: int) -> _Columns:
    """Decode the events slice by slice, on ``workers`` forked processes when that helps."""
    global _SHARED
    pieces = _slices(array)
    _SHARED = array
    try:
        if len(pieces) == 1:
            return _decode_pieces(pieces)
        try:
            return _decode_in_parallel(pieces, workers)
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass  # a cut fell inside an event after all: decode the array whole
        return _decode_pieces([(1, len(array) - 1)])
    except msgspec.ValidationError as error:
        raise TraceError(path, f"not a trace ({error})") from None
    except msgspec.DecodeError as error:
        raise TraceError(path, f"invalid JSON ({error})") from None
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


def load(path: Path, workers: int = 1) -> RankTrace:
    """Load ``path`` (``.json``, ``.json.gz``, object or bare-array form) as one rank,
    decoding large files on up to ``workers`` processes."""
    raw = read_bytes(path)
    array, info = decode(raw, path)
    rank = info.rank if info and info.rank is not None else rank_from_name(path)
    if rank is None:
        raise TraceError(path, "no rank: no distributedInfo.rank and none in the file name "
                               "(rank3, rank-3, worker_3, ...)")
    columns = _decode_events(array, path, workers)
    del array, raw
    start, end = _snap(columns.column("ts"), columns.column("dur"), columns.ts_is_float)
    if not (np.all(np.isfinite(start)) and np.all(np.isfinite(end))):
        raise TraceError(path, "not a trace (timestamps out of range)")
    thread_id, threads = _pair_threads(columns)
    return RankTrace(
        path=path, rank=rank, world_size=info.world_size if info else None,
        backend=info.backend if info else None, names=list(columns.names),
        name_id=columns.column("name"), category=list(columns.categories),
        category_id=columns.column("category"), start_us=start, end_us=end,
        thread_id=thread_id, threads=threads, thread_names=columns.thread_names,
        stream=columns.column("stream"), correlation=columns.column("correlation"),
        comm_args=columns.comm_args, grad_bytes=columns.grad_bytes)


def _pair_threads(columns: _Columns) -> tuple[np.ndarray, list[tuple[Any, Any]]]:
    """Thread codes for (pid, tid) pairs, from the separately interned pids and tids."""
    pids, tids = list(columns.pids), list(columns.tids)
    pair = columns.column("pid").astype(np.int64) * len(tids) + columns.column("tid")
    present = np.zeros(max(len(pids) * len(tids), 1), dtype=bool)
    present[pair] = True
    pairs = np.flatnonzero(present)
    code = np.zeros(present.size, dtype=np.int32)
    code[pairs] = np.arange(pairs.size, dtype=np.int32)
    return code[pair], [(pids[p // len(tids)], tids[p % len(tids)]) for p in pairs.tolist()]


def _names_comm(name: str) -> bool:
    return name.startswith(("gloo:", "nccl:", "c10d::")) or name == "record_param_comms"


DTYPE_BYTES = {
    "float": 4, "float32": 4, "float16": 2, "half": 2, "bfloat16": 2, "double": 8,
    "float64": 8, "int": 4, "int32": 4, "long": 8, "int64": 8, "long int": 8, "short": 2,
    "int16": 2, "signed char": 1, "int8": 1, "unsigned char": 1, "uint8": 1, "bool": 1,
    "c10::half": 2, "c10::bfloat16": 2, "c10::complex<float>": 8, "c10::complex<double>": 16,
    "byte": 1, "char": 1,
}


def dtype_bytes(name: str | None) -> int | None:
    return DTYPE_BYTES.get(name.lower()) if name else None


def _comm_args(args: _Args) -> CommArgs:
    size = None
    if args.in_nelems is not None and dtype_bytes(args.dtype):
        size = args.in_nelems * dtype_bytes(args.dtype)
        size = size if 0 <= size < 2**62 else None
    else:
        size = _bytes_from_shapes(args)
    return CommArgs(args.collective, size, args.group_size)


def _bytes_from_shapes(args: _Args) -> int | None:
    """Sum over tensor inputs of numel × element size, from ``Input Dims`` / ``Input type``."""
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
        if element is None or not isinstance(shape, list) or not shape:
            continue
        if all(isinstance(d, int) for d in shape):
            total += math.prod(shape) * element
    return total if 0 < total < 2**62 else None
