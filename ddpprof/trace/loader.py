"""Decode one rank's Chrome trace into flat numpy arrays, reading only the fields ddpprof uses.

msgspec decodes the JSON straight into small typed structs (unknown fields are skipped without
being built), which is what makes large traces cheap; everything after that is numpy.
"""

from __future__ import annotations

import gzip
import math
import re
import zlib
from dataclasses import dataclass, field
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


class _Args(msgspec.Struct, gc=False):
    stream: int | float | str | None = None
    correlation: int | float | str | None = None
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b"null"))
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw(b"null"))
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_nelems: int | None = msgspec.field(name="In msg nelems", default=None)
    dtype: str | None = None
    group_size: int | None = msgspec.field(name="Group size", default=None)
    thread_label: str | None = msgspec.field(name="name", default=None)


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    cat: str | None = None
    ts: int | float | None = None
    dur: int | float | None = None
    pid: int | str = 0
    tid: int | str = 0
    args: _Args | None = None


class _DistributedInfo(msgspec.Struct, gc=False):
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None


class _TraceFile(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None  # noqa: N815 (the format's name)
    distributedInfo: _DistributedInfo | None = None  # noqa: N815


_OBJECT_DECODER = msgspec.json.Decoder(_TraceFile)
_ARRAY_DECODER = msgspec.json.Decoder(list[_Event])
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


def decode(raw: bytes, path: Path) -> tuple[list[_Event], _DistributedInfo | None]:
    """The events and distributedInfo of a Chrome trace, object or bare-array form."""
    head = raw.lstrip()[:1]
    try:
        if head == b"[":
            return _ARRAY_DECODER.decode(raw), None
        if head != b"{":
            raise TraceError(path, "not a trace (not a JSON object or array)")
        document = _OBJECT_DECODER.decode(raw)
    except msgspec.ValidationError as error:
        raise TraceError(path, f"not a trace ({error})") from None
    except msgspec.DecodeError as error:
        problem = "truncated JSON" if "truncated" in str(error).lower() else "invalid JSON"
        raise TraceError(path, f"{problem} ({error})") from None
    if document.traceEvents is None:
        raise TraceError(path, "not a trace (no traceEvents)")
    return document.traceEvents, document.distributedInfo


def rank_from_name(path: Path) -> int | None:
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


def _as_int(value: Any) -> int:
    """An integer argument, or -1 where it is absent or not a number (as HTA reads it)."""
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _snap(start: np.ndarray, duration: np.ndarray,
          ts_is_float: bool) -> tuple[np.ndarray, np.ndarray]:
    """HTA 0.5.0 rounds every event inward to whole microseconds (start up, end down) when the
    trace's timestamps are not all JSON integers, i.e. nanosecond-resolution Kineto output;
    integer-µs traces are used as they are. Reproduced so that unions match HTA's."""
    end = start + duration
    if ts_is_float:
        start, end = np.ceil(start), np.floor(end)
    return start, end


def load(path: Path) -> RankTrace:
    """Load ``path`` (``.json``, ``.json.gz``, object or bare-array form) as one rank."""
    events, info = decode(read_bytes(path), path)
    rank = info.rank if info and info.rank is not None else rank_from_name(path)
    if rank is None:
        raise TraceError(path, "no rank: no distributedInfo.rank and none in the file name "
                               "(rank3, rank-3, worker_3, ...)")

    # HTA keeps events with a category and a duration, minus the "Trace" span.
    names: dict[str, int] = {}
    categories: dict[str, int] = {}
    threads: dict[tuple[Any, Any], int] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    kept: list[_Event] = []
    ts_is_float = False
    for event in events:
        ts = event.ts
        if ts is None or isinstance(ts, float):  # pandas would make the column float64
            ts_is_float = True
        if event.dur is None or event.cat is None or event.cat == "Trace" or ts is None:
            if event.ph == "M" and event.name == "thread_name" and event.args is not None:
                thread_names[(event.pid, event.tid)] = event.args.thread_label or ""
            continue
        kept.append(event)

    n = len(kept)
    name_id = np.fromiter((names.setdefault(e.name, len(names)) for e in kept), np.int32, n)
    category_id = np.fromiter((categories.setdefault(e.cat, len(categories)) for e in kept),
                              np.int32, n)
    thread_id = np.fromiter((threads.setdefault((e.pid, e.tid), len(threads)) for e in kept),
                            np.int32, n)
    ts = np.fromiter((e.ts for e in kept), np.float64, n)
    dur = np.fromiter((e.dur for e in kept), np.float64, n)
    if not (np.all(np.isfinite(ts)) and np.all(np.isfinite(dur))):
        raise TraceError(path, "not a trace (non-finite timestamps)")
    start, end = _snap(ts, dur, ts_is_float)
    stream = np.fromiter((-1 if e.args is None or e.args.stream is None else
                          _as_int(e.args.stream) for e in kept), np.int64, n)
    correlation = np.fromiter((-1 if e.args is None or e.args.correlation is None else
                               _as_int(e.args.correlation) for e in kept), np.int64, n)
    comm_args = {i: _comm_args(e.args) for i, e in enumerate(kept)
                 if e.args is not None and _may_describe_comm(e)}
    return RankTrace(
        path=path, rank=rank, world_size=info.world_size if info else None,
        backend=info.backend if info else None, names=list(names), name_id=name_id,
        category=list(categories), category_id=category_id, start_us=start, end_us=end,
        thread_id=thread_id, threads=list(threads), thread_names=thread_names, stream=stream,
        correlation=correlation, comm_args=comm_args)


def _may_describe_comm(event: _Event) -> bool:
    name = event.name
    return (event.args.collective is not None or name.startswith(("gloo:", "nccl:", "c10d::"))
            or name == "record_param_comms")


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
    return total or None
