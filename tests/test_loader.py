"""The loader's reading and slicing, through its public entry points: the string-aware
boundary scan, quick cuts and the whole-document decode, slices decoded on several processes,
gzip through isal or zlib, a file read in place or bytes in memory. Small synthetic traces
only; a path is forced through ``Slicing``, never by patching the loader."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpprof.core import io, processes
from ddpprof.core.errors import TraceError
from ddpprof.trace import cache, jsonscan, parallel, sliced
from ddpprof.trace.columns import Columns
from ddpprof.trace.decode_events import Event
from ddpprof.trace.loader import Slicing, load
from ddpprof.trace.sliced import DEFAULT_SLICING

COLUMNS = ("name_id", "category_id", "start_us", "end_us", "thread_id", "stream",
           "correlation", "has_correlation", "external_id")
#: The whole-document decode in one slice on one process: no quick cut, no scan, no fork.
REFERENCE = Slicing(slice_bytes=1 << 40, quick_cuts=False, native_scan=False)
#: Quick cuts that must hold (a fallback would be an error).
QUICK_ONLY = Slicing(fall_back=False)


def _load(path: Path, workers: int = 1, slicing: Slicing = DEFAULT_SLICING):
    """A fresh decode (these tests compare decodes): the trace kept from the last load is
    dropped first."""
    cache.clear()
    return load(path, workers=workers, slicing=slicing)


def _event(i: int, name: str = "op") -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op" if i % 3 else "kernel", "name": f"{name}{i % 7}",
            "pid": i % 2, "tid": 1 + i % 3, "ts": 1000 + 10 * i, "dur": 5 + i % 4,
            "args": {"External id": i, "correlation": i + 5, "stream": 7,
                     "note": 'has {"braces"}, [brackets], commas \\ and "quotes"',
                     "nested": [{"a": [1, {"b": "]}"}]}, {"c": ",{"}]}}


def _events(count: int = 300) -> list[dict[str, Any]]:
    events = [_event(i) for i in range(count)]
    events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": 1,
                   "args": {"name": "main \u00e9\u4e2d \"thread\""}})
    return events


def _text(events: list[Any], layout: str, bare: bool = False) -> bytes:
    if layout == "compact":
        array = json.dumps(events, separators=(",", ":"), ensure_ascii=False)
    elif layout == "pretty":
        array = json.dumps(events, indent=1)
    else:  # whitespace everywhere JSON allows it
        array = "[ \n\t" + " ,\r\n  ".join(json.dumps(e, indent=3) for e in events) + " \n]"
    if bare:
        return array.encode()
    return ('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "x"}], '
            '"traceEvents": ' + array + ', "distributedInfo": {"rank": 0}}').encode()


def _write(tmp_path: Path, data: bytes, name: str = "rank0.json") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _columns(trace) -> dict[str, Any]:
    found = {key: getattr(trace, key) for key in COLUMNS}
    found.update(names=trace.names, category=trace.category, threads=trace.threads,
                 thread_names=trace.thread_names, comm=trace.comm_args)
    return found


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            assert a[key].dtype == b[key].dtype, key
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            assert a[key] == b[key], key


def _reference(path: Path) -> dict[str, Any]:
    return _columns(_load(path, slicing=REFERENCE))


def _plain_event(i: int) -> dict[str, Any]:
    """An event like Kineto's: no object inside its arguments, so no ``},{`` but between
    events."""
    event = _event(i)
    del event["args"]["nested"]
    return event


def _json_of(path: Path) -> bytes:
    """The JSON a trace holds, as the loader reads it (gzip inflated)."""
    limit = io.max_trace_bytes()
    with io.opened(path, limit, io.MAX_TRACE_BYTES_ENV) as stored:
        return bytes(io.json_bytes(stored, limit).whole())


# ---- the boundary scan ---------------------------------------------------------------------

def _elements_by_commas(data: bytes) -> list[Any]:
    commas = jsonscan.element_commas(data)
    assert commas is not None
    body = data.strip()
    cuts = [0, *(int(c) for c in commas), len(body) - 1]
    return [json.loads(body[a + 1:b]) for a, b in pairwise(cuts)]


@pytest.mark.parametrize("layout", ["compact", "pretty", "spaced"])
def test_scan_finds_every_top_level_element(layout):
    events = _events(50)
    assert _elements_by_commas(_text(events, layout, bare=True)) == events


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
def test_scan_is_independent_of_chunk_size(chunk):
    data = json.dumps([{"s": "\\\\\""}, *_events(20)], separators=(",", ":")).encode()
    reference = jsonscan.element_commas(data)
    np.testing.assert_array_equal(jsonscan.element_commas(data, chunk_bytes=chunk), reference)


def test_scan_handles_escapes_and_backslash_runs():
    values = [{"s": "a\\"}, {"s": "\\\\\""}, {"s": '\\",{'}, {"s": "x"}, ["]", ",", "\\"],
              {"\\": "}"}, [{"[": "\\\\"}]]
    data = json.dumps(values, separators=(",", ":")).encode()
    assert _elements_by_commas(data) == values


def test_scan_refuses_unbalanced_input():
    assert jsonscan.element_commas(b'[{"a": 1}, {"b": "') is None
    assert jsonscan.element_commas(b'[{"a": 1}]]') is None
    assert jsonscan.element_commas(b'[{"a": [1, 2}') is None


def test_scan_of_empty_array():
    assert jsonscan.element_commas(b"[]").size == 0


# ---- slices, workers and the fallback ------------------------------------------------------

def _scanned_slices(path: Path, target: int) -> int:
    """How many slices the whole-document decode cuts ``path``'s events into."""
    from ddpprof.trace.document import decode_document

    return len(sliced.scanned_cuts(decode_document(_json_of(path), path)[0], target))


@pytest.mark.parametrize("layout", ["compact", "pretty", "spaced"])
@pytest.mark.parametrize("bare", [False, True])
def test_columns_equal_across_slice_sizes_and_workers(tmp_path, layout, bare):
    path = _write(tmp_path, _text(_events(), layout, bare))
    reference = _reference(path)
    for slice_bytes in (300, 4096, 20_000):
        assert _scanned_slices(path, slice_bytes) > 1
        for quick in (True, False):
            for workers in (1, 2, 3):
                slicing = Slicing(slice_bytes=slice_bytes, quick_cuts=quick)
                _same(_columns(_load(path, workers, slicing)), reference)


def test_trace_events_not_first_in_the_object(tmp_path):
    events = _events(40)
    data = ('{"distributedInfo": {"rank": 3}, "traceEvents": '
            + json.dumps(events, separators=(",", ":")) + ', "x": [1, 2]}').encode()
    path = _write(tmp_path, data, "trace.json")
    trace = _load(path, 2, Slicing(slice_bytes=500))
    assert trace.rank == 3
    _same(_columns(trace), _reference(path))


@pytest.mark.parametrize("layout", ["compact", "pretty", "spaced"])
@pytest.mark.parametrize("bare", [False, True])
def test_quick_cuts_hold_on_events_like_kinetos(tmp_path, layout, bare):
    # ``fall_back=False``: the whole-document decode (and its full scan) never runs
    events = [_plain_event(i) for i in range(300)]
    path = _write(tmp_path, _text(events, layout, bare))
    reference = _reference(path)
    for slice_bytes, per_task in ((300, 1), (300, 8), (4096, 2), (1 << 20, 8)):
        for workers in (1, 2, 3):
            slicing = Slicing(slice_bytes=slice_bytes, slices_per_task=per_task,
                              fall_back=False)
            _same(_columns(_load(path, workers, slicing)), reference)


def test_quick_cuts_find_the_array_and_cut_between_events():
    data = io.MemoryBytes("t.json", _text([_plain_event(i) for i in range(50)], "pretty"))
    start = sliced.events_start(data)
    assert bytes(data.read(start - 16, 17)).endswith(b'"traceEvents": [')
    cuts = sliced.quick_cuts(data, start, 500)
    assert len(cuts) > 5 and cuts[0][0] == start + 1 and cuts[-1][1] is None
    for (begin, end), (after, _) in pairwise(cuts):
        assert bytes(data.read(end, 1)) == b"," and after == end + 1
        assert all(event["ph"] == "X" for event in json.loads(bytes(data.framed(begin, end))))


def test_spilled_columns_read_back_whole_and_writable():
    columns = Columns()
    columns.add(msgspec.json.decode(_text([_plain_event(i) for i in range(40)], "compact",
                                          bare=True), type=list[Event]))
    descriptor = parallel.spill_descriptor()
    try:
        spill = parallel.Spill(descriptor)
        spill.write(8, columns)
        spill.file.flush()
        [(key, back)] = parallel.Spill.read(descriptor, spill.index).items()
    finally:
        os.close(descriptor)
    assert key == 8 and back.names == columns.names and back.count == columns.count
    for part in ("ts", "name", "correlation"):
        np.testing.assert_array_equal(back.column(part), columns.column(part))
    back.parts["ts"][0][0] += 1              # the process's own: writable


def _children_first(children: int, then: Any = None) -> Any:
    """A ``before_task`` hook that holds the parent's first task until ``children`` forked
    decoders have each begun one (at most 10 s), then calls ``then``: on a loaded machine the
    parent could otherwise take every task before a child starts."""
    import multiprocessing

    started, parent = multiprocessing.Value("i", 0), os.getpid()
    mine: set[int] = set()

    def hook(index: int) -> None:
        if os.getpid() != parent and os.getpid() not in mine:
            mine.add(os.getpid())
            with started.get_lock():
                started.value += 1
        elif os.getpid() == parent and not mine:
            mine.add(parent)
            deadline = time.monotonic() + 10
            while started.value < children and time.monotonic() < deadline:
                time.sleep(0.005)
        if then is not None:
            then(index)
    return hook


def _decoded_by(path: Path, workers: int, slicing: Slicing) -> tuple[Any, set[int]]:
    """The trace, and the processes that decoded a task of it (reported through a pipe); the
    forked decoders each begin a task before the parent does."""
    reading, writing = os.pipe()

    def report(index: int) -> None:
        os.write(writing, f"{os.getpid()}\n".encode())

    tell = _children_first(workers - 1, report)

    try:
        trace = _load(path, workers, Slicing(**{**slicing.__dict__, "before_task": tell}))
    finally:
        os.close(writing)
    with os.fdopen(reading) as pipe:
        return trace, {int(line) for line in pipe.read().split()}


@pytest.mark.parametrize("memfd", [True, False])
def test_forked_decoders_spill_their_columns_to_the_parent(tmp_path, monkeypatch, memfd):
    if not memfd:
        monkeypatch.delattr(os, "memfd_create", raising=False)  # a temporary file instead
    elif not hasattr(os, "memfd_create"):
        pytest.skip("no memfd_create here")
    path = _write(tmp_path, _text([_plain_event(i) for i in range(400)], "pretty"))
    trace, decoders = _decoded_by(path, 3, Slicing(slice_bytes=400, slices_per_task=1))
    _same(_columns(trace), _reference(path))
    assert len(decoders) == 3 and os.getpid() in decoders
    trace.start_us[0] += 1          # columns are the process's own: writable


def test_a_wrong_quick_cut_falls_back_to_the_whole_document(tmp_path):
    # ``_event``'s arguments hold lists of objects: ``},{`` inside events, so quick cuts
    # land inside them, their slices fail to decode, and the whole-document decode takes over.
    path = _write(tmp_path, _text(_events(), "compact"))
    reference = _reference(path)
    for workers in (1, 2):
        with pytest.raises(TraceError, match="the quick cuts did not hold"):
            _load(path, workers, Slicing(slice_bytes=500, fall_back=False))
        _same(_columns(_load(path, workers, Slicing(slice_bytes=500))), reference)


@pytest.mark.parametrize("document", [
    # more arrays after the events, with brackets in their strings (Kineto's trace logs)
    '{{"traceEvents": {events}, "logs": ["a ] b", "[x]"], "traceName": "t[1].json"}}',
    # the key's text inside a string before the real key, and the key in a nested object
    '{{"note": "\\"traceEvents\\": [1]", "meta": {{"traceEvents": [2]}}, '
    '"distributedInfo": {{"rank": 3}}, "traceEvents": {events}}}',
    '{{"distributedInfo": {{"rank": 3}}, "traceEvents": {events}}}   \n',
    ' \n {events} \n',
])
def test_events_found_wherever_they_are_in_the_document(tmp_path, document):
    events = json.dumps([_plain_event(i) for i in range(200)], separators=(",", ":"))
    path = _write(tmp_path, document.format(events=events).encode(), "trace.json")
    reference = _reference(path)
    for workers in (1, 2):
        trace = _load(path, workers, Slicing(slice_bytes=700))
        _same(_columns(trace), reference)
        assert trace.rank == (3 if "rank" in document else None)


def test_a_top_level_key_twice_or_trailing_garbage_is_decided_by_the_whole_document(
        tmp_path):
    events = json.dumps([_plain_event(i) for i in range(50)])
    twice = _write(tmp_path, f'{{"traceEvents": [], "traceEvents": {events}}}'.encode())
    garbage = _write(tmp_path, f'{{"traceEvents": {events}}} x'.encode(), "g.json")
    for path in (twice, garbage):
        with pytest.raises(TraceError, match="the quick cuts did not hold"):
            _load(path, slicing=QUICK_ONLY)
    _same(_columns(_load(twice)), _reference(twice))
    with pytest.raises(TraceError, match="invalid JSON"):
        _load(garbage)


def test_a_decoder_that_dies_is_a_one_line_error(tmp_path):
    path = _write(tmp_path, _text([_plain_event(i) for i in range(300)], "compact"))
    parent = os.getpid()

    def dies_in_the_child(index: int) -> None:
        if os.getpid() != parent:
            os._exit(3)

    slicing = Slicing(slice_bytes=300, slices_per_task=1, before_task=dies_in_the_child)
    with pytest.raises(TraceError, match=r"decoding process ended .*exit status 3"):
        _load(path, 2, slicing)


_KILLED_PARENT = """
import os, signal, sys, time
from pathlib import Path
from ddpprof.trace.decode_events import Event
from ddpprof.trace.loader import Slicing, load
from ddpprof.trace.sliced import DEFAULT_SLICING
parent = os.getpid()
def stalls(index):
    if os.getpid() != parent:
        print(os.getpid(), flush=True)
        time.sleep(60)
    else:
        time.sleep(0.5)
        os.kill(parent, signal.SIGKILL)
load(Path(sys.argv[1]), workers=2, slicing=Slicing(slice_bytes=300, slices_per_task=1,
                                                   before_task=stalls))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_decoder_dies_with_its_parent(tmp_path):
    path = _write(tmp_path, _text([_plain_event(i) for i in range(300)], "compact"))
    done = subprocess.run([sys.executable, "-c", _KILLED_PARENT, str(path)], timeout=60,
                          capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL
    child = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    return processes.state_of(pid) not in (None, "Z")          # a zombie is dead


@pytest.mark.parametrize("error", [msgspec.DecodeError, OverflowError])
def test_an_error_in_a_child_decoder_reaches_the_parent(tmp_path, error):
    path = _write(tmp_path, _text([_plain_event(i) for i in range(300)], "compact"))
    reference = _reference(path)
    parent = os.getpid()

    def fails_in_the_child(index: int) -> None:
        if os.getpid() != parent:
            raise error("in the child")

    slicing = Slicing(slice_bytes=300, slices_per_task=1,
                      before_task=_children_first(1, fails_in_the_child))
    if error is msgspec.DecodeError:   # as a cut in the wrong place: decoded whole, here
        _same(_columns(_load(path, 2, slicing)), reference)
    else:
        with pytest.raises(TraceError, match="out of range: in the child"):
            _load(path, 2, slicing)


# ---- found by a hostile pass over the quick cuts: each once gave another answer than the
# whole-document decode, or than another slicing, or an exception that was not a TraceError

def _both_ways(path: Path) -> tuple[Any, Any]:
    """(whole document, one slice) and (quick cuts, 200-byte slices, 2 workers): each the
    columns or the TraceError's message."""
    def outcome(slicing: Slicing):
        try:
            trace = _load(path, 2, slicing)
        except TraceError as error:
            return str(error)
        return {**_columns(trace), "ints": trace.timestamps_are_integers, "rank": trace.rank}

    return outcome(REFERENCE), outcome(Slicing(slice_bytes=200, slices_per_task=1))


def _same_outcome(a: Any, b: Any) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
    else:
        _same(a, b)


_EVENT = b'{"ph":"X","name":"a","ts":1,"dur":1}'
_ODD = b'{"ph":"X","name":"bad","ts":"x","dur":1,"pad":"' + b"L" * 220 + b'"}'


@pytest.mark.parametrize("data", [
    b"\x0c[" + _EVENT + b"]",                                       # not JSON blanks
    b"[" + _EVENT + b"]\x0b",
    b'{"x":{"traceEvents":[' + _EVENT + b']},"traceEvents":0}',       # a nested key, and 0
    b'{"\\"traceEvents":[' + _EVENT + b'],"traceEvents":0}',         # a key holding a quote
    b'{"traceEvents":[' + _EVENT + b'],"traceEvents":0}',             # the key twice
    b'{"traceEvents":[' + _ODD + b"," + _EVENT + b"]}",               # ints stay ints
    b'{"traceEvents":[' + _ODD + b',{"ph":"X","name":"a","ts":1,"dur":1,'
    b'"args":{"External id":null,"external id":7}}]}',                # null is not absent
    b'{"traceEvents":[' + _ODD + b',{"ph":"X","name":"a","ts":1,"dur":1,"\xff":1}]}',
    b"[" + _EVENT[:-1] + b',"pad":"' + b"L" * 220 + b'"},1]',        # a slice of no objects
    b"[" + b"[" * 1000 + b"]" * 1000 + b"]",                          # too deep for msgspec
    b'{"traceEvents":[{"ph":"X","ts":1,"dur":2,"args":{"x":' + b"[" * 1000 + b"]" * 1000
    + b"}}]}",
])
def test_quick_cuts_and_whole_document_agree_on_hostile_documents(tmp_path, data):
    path = _write(tmp_path, data, "t.json")
    whole, quick = _both_ways(path)
    _same_outcome(whole, quick)


def test_a_slice_of_values_that_are_not_events_is_no_error(tmp_path):
    # the whole-document decode cuts after any object: a slice may hold only the trailing 1
    data = b"[" + _EVENT[:-1] + b',"pad":"' + b"L" * 220 + b'"},1,2]'
    path = _write(tmp_path, data, "t.json")
    assert len(sliced.scanned_cuts(memoryview(data), 100)) > 1
    assert _load(path, 2, Slicing(slice_bytes=100, quick_cuts=False)).n_events == 1
    with pytest.raises(TraceError, match="no event objects"):
        _load(_write(tmp_path, b"[1, 2, [3]]", "n.json"))


def test_a_non_finite_number_is_repaired_outside_strings_only(tmp_path):
    data = b'{"traceEvents":[{"ph":"X","name":"a,inf]","ts":1,"dur":2,"args":{"b":NaN}}]}'
    trace = _load(_write(tmp_path, data, "t.json"))
    assert trace.names == ["a,inf]"] and trace.n_events == 1


def test_whole_document_decodes_whole_when_a_scanned_cut_fails(tmp_path, monkeypatch):
    # A scanned cut is always right on valid JSON; should one not be, the array is decoded
    # whole. Wrong cuts are forced through the public cutting function.
    path = _write(tmp_path, _text(_events(), "compact"))
    reference = _reference(path)
    real = sliced.scanned_cuts
    calls: list[int] = []

    def wrong_cuts(array, target):
        cuts = real(array, 2000)
        calls.append(len(cuts))
        # move every cut 3 bytes into the next event: each slice is then invalid JSON
        return [(a + (3 if i else 0), b + 3 if i < len(cuts) - 1 else b)
                for i, (a, b) in enumerate(cuts)]

    monkeypatch.setattr(sliced, "scanned_cuts", wrong_cuts)
    for workers in (1, 2):
        _same(_columns(_load(path, workers, Slicing(quick_cuts=False))), reference)
        assert calls[-1] > 1


def test_unscannable_array_is_one_slice():
    data = memoryview(b'[{"a": 1}, {"b": "' + b"x" * 300 + b"}]")   # unbalanced: no scan
    assert sliced.scanned_cuts(data, 100) == [(1, len(data) - 1)]


def test_lenient_slice_among_strict_ones(tmp_path):
    events = _events(100)
    events[57]["args"]["stream"] = [1, 2]    # an odd type in args: that slice is lenient
    events[58]["ts"] = "soon"
    path = _write(tmp_path, _text(events, "compact"))
    _same(_columns(_load(path, 2, Slicing(slice_bytes=800))), _reference(path))


# ---- reading: in place or in memory, gzip through isal or zlib ------------------------------

def test_a_file_read_in_place_and_bytes_in_memory_decode_the_same(tmp_path):
    path = _write(tmp_path, _text(_events(), "compact"))
    decoded = []
    for quick in (True, False):
        slicing = Slicing(slice_bytes=2000, quick_cuts=quick)
        with io.opened(path, 1 << 30, None) as stored:
            assert isinstance(stored, io.FileBytes)      # read where it lies, with pread
            in_memory = io.MemoryBytes(path, bytes(stored.whole()))
            for data in (stored, in_memory):
                columns, info = sliced.decode_events(data, path, 2, slicing)
                decoded.append(({part: columns.column(part).tolist() for part in columns.parts},
                                columns.names, columns.comm_args, info))
    assert all(found == decoded[0] for found in decoded)


@pytest.mark.parametrize("use_isal", [True, False])
def test_gzip_with_and_without_isal(tmp_path, monkeypatch, use_isal):
    data = _text(_events(), "compact")
    plain = _write(tmp_path, data)
    packed = _write(tmp_path, gzip.compress(data), "rank0.json.gz")
    if use_isal:
        pytest.importorskip("isal")
    else:
        monkeypatch.setitem(sys.modules, "isal", None)   # import fails: the zlib fallback
    library, _ = io.inflater()
    assert (library.__name__ != "zlib") == use_isal
    assert _json_of(packed) == data
    _same(_columns(_load(packed)), _columns(_load(plain)))


@pytest.mark.parametrize("use_isal", [True, False])
def test_multi_member_gzip(tmp_path, monkeypatch, use_isal):
    if not use_isal:
        monkeypatch.setitem(sys.modules, "isal", None)
    data = _text(_events(50), "pretty")
    packed = gzip.compress(data[:1000]) + b"\x00\x00" + gzip.compress(data[1000:])
    assert _json_of(_write(tmp_path, packed, "t.json.gz")) == data


@pytest.mark.parametrize("use_isal", [True, False])
def test_gzip_bomb_and_truncated_gzip(tmp_path, monkeypatch, use_isal):
    if not use_isal:
        monkeypatch.setitem(sys.modules, "isal", None)
    data = _text(_events(), "compact")
    packed = gzip.compress(data)
    monkeypatch.setenv("DDPPROF_MAX_TRACE_BYTES", str(len(data) // 2))
    with pytest.raises(TraceError, match=f"inflates to more than {len(data) // 2:,} bytes"):
        _load(_write(tmp_path, packed, "bomb.json.gz"))
    monkeypatch.delenv("DDPPROF_MAX_TRACE_BYTES")
    with pytest.raises(TraceError, match="truncated or corrupt gzip"):
        _load(_write(tmp_path, packed[:len(packed) // 2], "cut.json.gz"))


def test_bad_files_are_one_line_errors(tmp_path):
    for data, message in ((b"   \n", "not a trace"), (b'{"traceEvents": [{"a": 1},',
                                                       "truncated JSON"),
                          (b"[1, 2, 3]", "no event objects")):
        with pytest.raises(TraceError, match=message):
            _load(_write(tmp_path, data, "bad.json"))
    with pytest.raises(TraceError, match="empty file"):
        _load(_write(tmp_path, b"", "empty.json"))


# ---- property: any event list, any layout, any slicing ------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8)
_generated_event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "M", "i"]), "name": st.text(max_size=8),
     "ts": st.integers(0, 10**6), "dur": st.integers(0, 10**3),
     "pid": st.one_of(st.integers(0, 3), st.text(max_size=3)), "tid": st.integers(0, 3)},
    optional={"cat": st.sampled_from(["cpu_op", "kernel", "Trace"]),
              "args": st.dictionaries(st.sampled_from(["stream", "correlation", "External id",
                                                       "x", "name"]), _json, max_size=3)})


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_generated_event, min_size=1, max_size=30),
       layout=st.sampled_from(["compact", "pretty", "spaced"]),
       slice_bytes=st.integers(20, 400))
def test_any_events_decode_alike_however_sliced(tmp_path, events, layout, slice_bytes):
    path = _write(tmp_path, _text(events, layout))
    reference = _reference(path)
    for quick in (True, False):
        for workers in (1, 2):
            slicing = Slicing(slice_bytes=slice_bytes, slices_per_task=2, quick_cuts=quick)
            _same(_columns(_load(path, workers, slicing)), reference)


def test_reload_of_an_unchanged_file_is_shared_and_a_rewrite_is_not(tmp_path):
    path = _write(tmp_path, _text(_events(30), "compact"))
    first = _load(path)
    assert load(path) is first
    path.write_bytes(_text(_events(31), "compact"))
    second = load(path)
    assert second is not first and second.start_us.size == first.start_us.size + 1
    load(_write(tmp_path, _text(_events(5), "pretty"), "other.json"))
    assert load(path) is not second          # one trace kept: the other file's
