"""Accumulating decoded events into numpy columns, one run of events at a time.

:class:`Columns` takes each run of decoded events (:meth:`Columns.add`), keeps the complete
events (``ph: X``) with a start and a duration, and appends their fields as arrays: names,
categories, pids and tids are interned into small tables as they come, ids and streams are
read as HTA reads them, and the arguments that matter (collectives, gradient sizes, matmul
FLOPs) are kept by event index. Columns built on several processes are merged in order
(:meth:`Columns.extend`), each with its own interning tables remapped.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from itertools import compress
from typing import Any

import numpy as np

from . import args as meaning
from . import classify
from .decode_events import ABSENT, Args, Event
from .events import CommArgs
from .work_names import MATMUL_OPS

#: ``ph`` values of events with a duration; legacy traces may omit ``ph`` altogether.
_COMPLETE = frozenset({"X", None})
#: The category of the profiler's own span over the whole trace: not an event of the job.
PROFILER_SPAN = "Trace"
_PARTS = ("ts", "dur", "name", "category", "pid", "tid", "stream", "correlation",
          "has_correlation", "external_id")


class Columns:
    """Per-event columns, filled run by run; names and threads are interned as they come."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.categories: dict[str | None, int] = {}
        self.pids: dict[Any, int] = {}
        self.tids: dict[Any, int] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in _PARTS}
        self.comm_args: dict[int, CommArgs] = {}
        self.grad_bytes: dict[int, int] = {}
        self.matmul_flops: dict[int, float] = {}
        self.wants_args: list[bool] = []      # by name code: keep this event's call arguments
        self.ts_all_integers = True
        self.ts_low, self.ts_high, self.ts_missing = math.inf, -math.inf, False
        self.dropped = 0
        self.count = 0
        #: Where the events array closes (an offset in the document), once a run that ends
        #: it has been decoded (see ``ddpprof.trace.sliced``).
        self.closing: int | None = None
        self.values = self.objects = 0        # elements of the array, and objects among them

    def add(self, events: list[Event]) -> None:
        """Add a run of decoded events (``ddpprof.trace.scanned`` adds a scanned run the same
        way, through the same helpers)."""
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
        self.note_times(ts)
        phase_table: dict[str | None, int] = {}
        phase_code = intern(phase_table, phases)
        if "M" in phase_table:
            self.read_thread_names(list(compress(events, (phase_code == phase_table["M"])
                                                 .tolist())))
        # metadata, instants, counters and flow arrows go before they cost anything more
        keep = self.kept(
            np.isin(phase_code, [phase_table[p] for p in _COMPLETE if p in phase_table]),
            phase_code == phase_table.get("X", -1), ts, dur,
            np.array([c == PROFILER_SPAN for c in categories], dtype=bool)
            if PROFILER_SPAN in categories else None)
        if not keep.all():
            kept = keep.tolist()
            events = list(compress(events, kept))
            categories = list(compress(categories, kept))
            ts_all = list(compress(ts_all, kept))
            ts, dur = ts[keep], dur[keep]
        if not events:
            return
        # HTA's ts column is float64, and so rounded, if any event's ts is not a JSON integer
        self.ts_all_integers = self.ts_all_integers and float not in set(map(type, ts_all))
        args = [e.args for e in events]
        name_code = intern(self.names, [e.name for e in events])
        self.note_names()
        correlation, has_correlation = ids([a.correlation for a in args])
        external_ids = [a.external_id for a in args]
        old_external_ids = [a.old_external_id for a in args]
        if old_external_ids.count(ABSENT) < len(old_external_ids):  # legacy traces
            external_ids = [old if new is ABSENT else new
                            for new, old in zip(external_ids, old_external_ids, strict=True)]
        collectives = [a.collective for a in args]
        self.keep_arguments(name_code, args, np.array([c is not None for c in collectives],
                                                      dtype=bool)
                            if collectives.count(None) < len(collectives) else None)
        self.append({
            "ts": ts, "dur": dur, "name": name_code,
            "category": intern(self.categories, categories),
            # pid and tid interned apart (no tuple per event), paired up by the loader
            "pid": intern(self.pids, [e.pid for e in events]),
            "tid": intern(self.tids, [e.tid for e in events]),
            "stream": streams([a.stream for a in args]),
            "correlation": correlation,
            "has_correlation": has_correlation,
            "external_id": ids(external_ids)[0],
        })

    def kept(self, complete: np.ndarray, declared_complete: np.ndarray, ts: np.ndarray,
             dur: np.ndarray, profiler_span: np.ndarray | None) -> np.ndarray:
        """Which events of a run are kept: complete ones (``complete``: ``ph`` "X" or none)
        with a start and a duration (NaN: none), but the profiler's own span
        (``profiler_span``: category "Trace"; None: no such event). Those that declare
        themselves complete (``ph: X``) without a start or a duration are counted as dropped."""
        has_times = ~np.isnan(ts) & ~np.isnan(dur)
        self.dropped += int(np.count_nonzero(declared_complete & ~has_times))
        keep = complete & has_times
        result: np.ndarray = keep if profiler_span is None else keep & ~profiler_span
        return result

    def note_times(self, ts: np.ndarray) -> None:
        """The range of the run's timestamps (NaN: absent), kept or not."""
        has_ts = ~np.isnan(ts)
        if has_ts.any():
            self.ts_low = min(self.ts_low, float(ts[has_ts].min()))
            self.ts_high = max(self.ts_high, float(ts[has_ts].max()))
        self.ts_missing = self.ts_missing or not has_ts.all()

    def read_thread_names(self, metadata: list[Event]) -> None:
        """Threads' names from metadata events (``ph: M``), the last one for a thread kept."""
        for event in metadata:
            if event.name == "thread_name":
                label = event.args.thread_label
                self.thread_names[(event.pid, event.tid)] = label if isinstance(
                    label, str) else ""

    def note_names(self) -> None:
        """Which of the names interned so far keep their events' call arguments."""
        if len(self.wants_args) < len(self.names):
            self.wants_args += [classify.keeps_call_arguments(name) for name in
                                list(self.names)[len(self.wants_args):]]

    def argument_rows(self, name_code: np.ndarray) -> np.ndarray:
        """Which of these kept events (by name code) :meth:`keep_arguments` may read the
        arguments of, a collective's aside."""
        rows = np.array(self.wants_args, dtype=bool)[name_code]
        for name in (classify.GRAD_READY, *MATMUL_OPS):
            code = self.names.get(name)
            if code is not None:
                rows |= name_code == code
        result: np.ndarray = rows
        return result

    def keep_arguments(self, name_code: np.ndarray, args: Sequence[Args] | Mapping[int, Args],
                       collective: np.ndarray | None) -> None:
        """Keep what the arguments of the run's kept events say (``args[i]`` for event ``i``;
        a mapping need hold only :meth:`argument_rows` and the collectives): collectives
        (events that declare one, and those whose name keeps them), gradients' bytes and
        matrix products' FLOPs, by event index."""
        wanted = np.array(self.wants_args, dtype=bool)[name_code]
        if collective is not None:
            wanted |= collective
        self.comm_args.update((self.count + i, meaning.comm_args(args[i]))
                              for i in np.flatnonzero(wanted).tolist())
        grad_code = self.names.get(classify.GRAD_READY)
        if grad_code is not None:
            for i in np.flatnonzero(name_code == grad_code).tolist():
                size = meaning.bytes_from_shapes(args[i])
                if size is not None:
                    self.grad_bytes[self.count + i] = size
        for name, first in MATMUL_OPS.items():
            code = self.names.get(name)
            for i in np.flatnonzero(name_code == code).tolist() if code is not None else ():
                flops = meaning.matmul_flops(args[i], first)
                if flops is not None:
                    self.matmul_flops[self.count + i] = flops

    def append(self, columns: dict[str, np.ndarray]) -> None:
        """The kept events' columns (every key of ``_PARTS``)."""
        for key, values in columns.items():
            self.parts[key].append(values)
        self.count += len(columns["ts"])

    def extend(self, other: Columns) -> None:
        """Append ``other`` (decoded elsewhere, with its own interning tables)."""
        remap = {
            "name": intern(self.names, list(other.names)),
            "category": intern(self.categories, list(other.categories)),
            "pid": intern(self.pids, list(other.pids)),
            "tid": intern(self.tids, list(other.tids)),
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

    def column(self, key: str, dtype: Any = np.float64) -> np.ndarray:
        parts = self.parts[key]
        return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def intern(table: dict[Any, int], values: list[Any]) -> np.ndarray:
    """Codes of ``values`` in ``table``, adding the values it does not have yet (in order)."""
    # One C-level pass: a missing key is given the next code by the defaultdict itself.
    lookup = defaultdict(None, table)
    lookup.default_factory = lookup.__len__
    codes = np.fromiter(map(lookup.__getitem__, values), np.int32, len(values))
    table.update(lookup)
    return codes


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


def ids(values: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids, present) columns; -1 and False where an id is absent, negative or not a number."""
    try:
        column = np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # null, odd strings, huge ints: rare
        found = list(map(_id, values))     # ids of 2**63 and above wrap to negative numbers
        return (np.array([-1 if i is None else i for i in found], dtype=np.int64),
                np.array([i is not None for i in found], dtype=bool))
    present = column >= 0
    return np.where(present, column, -1), present


def streams(values: Sequence[Any] | np.ndarray) -> np.ndarray:
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
