"""The native scan of a run of events (``_scan.c``) added to :class:`Columns`: the fast path.

The scan reads a run of events (a JSON array of event objects) straight into arrays, in C, and
:func:`add_scanned` adds them to the columns exactly as :meth:`Columns.add` adds the events
that ``decode_events`` decoded. It takes only a strict, common subset (plain ASCII strings,
every known field of its usual type, integer ids; see the C file's header) and says None for
any other run, which is then decoded the Python way: so both ways give the same columns, and
any problem is named by the Python decoder. The few events whose arguments are kept
(collectives, gradients, matrix products) and the threads' names are decoded by msgspec, from
their own bytes, as the Python way decodes them.

Where the extension was not built (no C compiler at install), every run takes the Python way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np

from .columns import PROFILER_SPAN, Columns, ids, intern, streams
from .decode_events import ABSENT, Args, Event

_Scanned = tuple[int, tuple[bytes, ...], list[bytes], list[bytes], list[bytes], list[bytes]]
_scan: Callable[[bytes | bytearray], _Scanned | None] | None
try:
    from ._scan import scan as _scan
except ImportError:          # built without a C compiler: the Python decoder only
    _scan = None

#: The native scan is there (built at install).
AVAILABLE = _scan is not None

# The scan's columns, in the order it returns them, with their element types.
_COLUMNS = (("ph", np.int32), ("cat", np.int32), ("name", np.int32), ("pid", np.int32),
            ("tid", np.int32), ("stream", np.int64), ("correlation", np.int64),
            ("external_id", np.int64), ("old_external_id", np.int64), ("start", np.int64),
            ("end", np.int64), ("ts", np.float64), ("dur", np.float64), ("flags", np.uint8))
_TS_IS_FLOAT, _HAS_COLLECTIVE = 1, 2           # bits of ``flags`` (see _scan.c)
_EVENTS = msgspec.json.Decoder(list[Event])


def add_scanned(columns: Columns, run: bytes | bytearray) -> bool:
    """Add the events of ``run`` (a JSON array) to ``columns`` by the native scan, as
    :meth:`Columns.add` would add them decoded; False (nothing added) where the scan is not
    built or the run is outside its subset."""
    if _scan is None:
        return False
    found = _scan(run)
    if found is None:
        return False
    count, raw, ph_texts, cat_texts, name_texts, id_texts = found
    columns.values += count
    columns.objects += count
    if count:
        _add(columns, run, {key: np.frombuffer(data, dtype) for (key, dtype), data in
                            zip(_COLUMNS, raw, strict=True)},
             [t.decode() for t in ph_texts], [None, *(t.decode() for t in cat_texts)],
             [t.decode() for t in name_texts], [_id_value(t) for t in id_texts])
    return True


def _add(columns: Columns, run: bytes | bytearray, scanned: dict[str, np.ndarray],
         phases: list[str], categories: list[str | None], names: list[str],
         pid_tid_values: list[int | str]) -> None:
    ts, dur, phase = scanned["ts"], scanned["dur"], scanned["ph"]
    columns.note_times(ts)
    if "M" in phases:
        metadata = np.flatnonzero(phase == phases.index("M"))
        columns.read_thread_names(_decoded(run, scanned, metadata))
    category = scanned["cat"] + 1                  # 0: None
    x = phases.index("X") if "X" in phases else -2        # (-2: no event's code)
    keep = columns.kept((phase == -1) | (phase == x), phase == x, ts, dur,
                        category == categories.index(PROFILER_SPAN)
                        if PROFILER_SPAN in categories else None)
    if not keep.all():
        scanned = {key: values[keep] for key, values in scanned.items()}
        category = category[keep]
    if not keep.any():
        return
    columns.ts_all_integers = columns.ts_all_integers and not np.any(
        scanned["flags"] & _TS_IS_FLOAT)
    name_code = _interned(columns.names, scanned["name"], names)
    columns.note_names()
    external = scanned["external_id"]
    if np.any(scanned["old_external_id"] != ABSENT):       # legacy traces
        external = np.where(external == ABSENT, scanned["old_external_id"], external)
    correlation, has_correlation = ids(scanned["correlation"])
    collective = (scanned["flags"] & _HAS_COLLECTIVE).astype(bool)
    rows = np.flatnonzero(columns.argument_rows(name_code) | collective)
    args: dict[int, Args] = dict(zip(rows.tolist(), (e.args for e in _decoded(
        run, scanned, rows)), strict=True))
    if collective.any():
        collective[collective] = [args[i].collective is not None
                                  for i in np.flatnonzero(collective).tolist()]
    columns.keep_arguments(name_code, args, collective)
    columns.append({
        "ts": scanned["ts"], "dur": scanned["dur"], "name": name_code,
        "category": _interned(columns.categories, category, categories),
        "pid": _interned(columns.pids, scanned["pid"], pid_tid_values),
        "tid": _interned(columns.tids, scanned["tid"], pid_tid_values),
        "stream": streams(scanned["stream"]), "correlation": correlation,
        "has_correlation": has_correlation, "external_id": ids(external)[0],
    })


def _decoded(run: bytes | bytearray, scanned: dict[str, np.ndarray],
             rows: np.ndarray) -> list[Event]:
    """The events at ``rows``, decoded from their own bytes as the Python way decodes them."""
    if not rows.size:
        return []
    view = memoryview(run)
    return _EVENTS.decode(b"".join((b"[", b",".join(
        view[a:b] for a, b in zip(scanned["start"][rows].tolist(),
                                  scanned["end"][rows].tolist(), strict=True)), b"]")))


def _interned(table: dict[Any, int], local: np.ndarray, values: Sequence[Any]) -> np.ndarray:
    """``table``'s codes for the events' values ``values[local]``, the values added to it in
    order of first appearance, as :func:`intern` adds them one by one."""
    first = np.full(len(values), local.size, dtype=np.int64)
    np.minimum.at(first, local, np.arange(local.size))
    present = np.flatnonzero(first < local.size)
    order = present[np.argsort(first[present])]
    codes = np.zeros(len(values), dtype=np.int32)
    codes[order] = intern(table, [values[i] for i in order.tolist()])
    result: np.ndarray = codes[local]
    return result


def _id_value(text: bytes) -> int | str:
    """A pid or tid from the scan's table: a string's text follows its opening quote."""
    return text[1:].decode() if text[:1] == b'"' else int(text)
