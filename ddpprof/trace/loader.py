"""Load one rank's Chrome trace as flat numpy columns (:func:`load`).

Every form PyTorch has written is accepted: Kineto's object (``traceEvents`` plus
``distributedInfo``), the bare array, gzip or plain, the legacy autograd profiler's events (no
category), old category names. Times are kept exactly as written: rounding, where asked for,
is the analysis's choice. The work is done by these modules, in order:

* ``io``: the file's bytes, bounded (regular files only, a cap on what is read, gzip inflated
  in chunks, a file that changes while it is read noticed);
* ``sliced``: the events decoded in slices of about 1 MiB, with quick cuts, else by the
  whole-document decode (``document``), on several processes (``parallel``);
* ``decode_events``: a run of events into typed structs, odd events read leniently;
* ``columns``: the events' fields as numpy columns; ``args``: what their arguments mean;
* ``cache``: the last trace kept for the next load of the same unchanged file.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..core import io
from ..core.errors import TraceError
from ..core.storage import Location
from . import args as meaning
from . import cache, classify
from .columns import Columns
from .document import DistributedInfo
from .events import RankTrace
from .names import MAX_NAME_CHARS, shorten
from .parallel import DecoderDied
from .sliced import DEFAULT_SLICING, Slicing, decode_events

__all__ = ["Slicing", "TraceError", "load"]


def load(path: Location, workers: int = 1, slicing: Slicing = DEFAULT_SLICING) -> RankTrace:
    """Load ``path`` (``.json``, ``.json.gz``, object or bare-array form; a local path or a
    URL) as one rank's events, decoding large files on up to ``workers`` processes. The rank
    is ``distributedInfo.rank``, else a number in the file name (``rank3``, ``worker_3``),
    else None (the run decides). The result is shared with the next load of the same
    unchanged file (see ``cache``): callers only read it. Every problem is a TraceError."""
    limit = io.max_trace_bytes()
    with io.opened(path, limit, io.MAX_TRACE_BYTES_ENV) as stored:
        identity = stored.identity() if isinstance(stored, io.FileBytes) else None
        shared = cache.get(identity)
        if shared is not None:
            return shared
        cache.clear()
        data = io.json_bytes(stored, limit)
        with _collector_paused():
            try:
                columns, info = decode_events(data, path, workers, slicing)
            except DecoderDied as error:
                raise TraceError(path, str(error)) from None
            except RecursionError:       # msgspec's limit on nesting, either way
                raise TraceError(path, "not a trace (JSON nested too deeply)") from None
        del data
        stored.check_unchanged()
    trace = _rank_trace(path, columns, info)
    cache.keep(identity, trace)
    return trace


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


def _rank_trace(path: Location, columns: Columns, info: DistributedInfo | None) -> RankTrace:
    if columns.values and not columns.objects:
        raise TraceError(path, "not a trace (traceEvents holds no event objects)")
    start = columns.column("ts")
    end = start + columns.column("dur")
    if not (np.all(np.isfinite(start)) and np.all(np.isfinite(end))):
        raise TraceError(path, "not a trace (timestamps out of range)")
    thread_id, threads = _pair_threads(columns)
    rank, source = _rank(info, path)
    stream, host_op_stream = _device_streams(columns)
    names = [shorten(name) for name in columns.names]
    return RankTrace(
        path=path, rank=rank, rank_source=source,
        world_size=meaning.positive_int(info.world_size) if info else None,
        backend=info.backend if info and isinstance(info.backend, str) else None,
        process_groups=meaning.process_groups(info.pg_config if info else None),
        names=names, name_id=columns.column("name", np.int32),
        shortened_names=sum(len(name) > MAX_NAME_CHARS for name in columns.names),
        category=list(columns.categories), category_id=columns.column("category", np.int32),
        start_us=start, end_us=end, thread_id=thread_id, threads=threads,
        thread_names={key: shorten(label) for key, label in columns.thread_names.items()},
        stream=stream, host_op_stream=host_op_stream,
        correlation=columns.column("correlation", np.int64),
        has_correlation=columns.column("has_correlation", bool),
        external_id=columns.column("external_id", np.int64),
        timestamps_are_integers=columns.ts_all_integers,
        ts_range=(columns.ts_low, columns.ts_high) if columns.ts_low <= columns.ts_high
        else (0.0, 0.0), ts_missing=columns.ts_missing,
        comm_args=columns.comm_args, grad_bytes=columns.grad_bytes,
        matmul_flops=columns.matmul_flops, dropped_events=columns.dropped,
        has_schema_version=info is not None and info.schema_version is not None)


def _device_streams(columns: Columns) -> tuple[np.ndarray, np.ndarray]:
    """``args.stream`` split by what holds it: device records keep it as their stream; host
    records (``classify.is_host_record``) keep it apart, as launch metadata."""
    raw = columns.column("stream", np.int64)
    host_table = np.array([classify.is_host_record(c) for c in columns.categories] or [True])
    host = host_table[columns.column("category", np.int32)] if raw.size else np.zeros(0, bool)
    return np.where(host, -1, raw), np.where(host, raw, -1)


def _rank(info: DistributedInfo | None, path: Location) -> tuple[int | None, str | None]:
    declared = meaning.non_negative_int(info.rank) if info else None
    if declared is not None:
        return declared, "distributedInfo"
    from_name = meaning.rank_from_name(path)
    return (from_name, "file name") if from_name is not None else (None, None)


def _pair_threads(columns: Columns) -> tuple[np.ndarray, list[tuple[Any, Any]]]:
    """Thread codes for (pid, tid) pairs, from the separately interned pids and tids."""
    pids, tids = list(columns.pids), list(columns.tids)
    pair = columns.column("pid", np.int32).astype(np.int64) * len(tids) + columns.column(
        "tid", np.int32)
    if len(pids) * len(tids) <= 1 << 24:  # a table of every (pid, tid): no sort
        present = np.zeros(max(len(pids) * len(tids), 1), dtype=bool)
        present[pair] = True
        pairs = np.flatnonzero(present)
        code: np.ndarray = np.zeros(present.size, dtype=np.int32)
        code[pairs] = np.arange(pairs.size, dtype=np.int32)
        code = code[pair]
    else:
        pairs, code = np.unique(pair, return_inverse=True)
    return code.astype(np.int32), [(pids[p // len(tids)], tids[p % len(tids)])
                                   for p in pairs.tolist()]
