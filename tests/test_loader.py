"""The loader's reading and slicing: the string-aware boundary scan, parallel slices and their
fallback, gzip through isal or zlib, mmap versus bytes. Small synthetic traces only."""

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

from ddpprof.errors import TraceError
from ddpprof.trace import jsonscan, loader

COLUMNS = ("name_id", "category_id", "start_us", "end_us", "thread_id", "stream",
           "correlation", "has_correlation", "external_id")


@pytest.fixture(autouse=True)
def _no_shared_reload(request, monkeypatch):
    """Every load decodes (these tests compare decodes), except where the sharing is tested."""
    monkeypatch.setattr(loader, "_LAST", None)
    if "shared" not in request.node.name:
        monkeypatch.setattr(loader, "_identity", lambda path: None)


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


def _reference(path: Path, monkeypatch) -> dict[str, Any]:
    """The exact way, one worker, one slice: no guess, no scan, no parallelism."""
    with monkeypatch.context() as patch:
        patch.setattr(loader, "SLICE_BYTES", 1 << 40)
        patch.setattr(loader, "_events_start", _no_guess)
        return _columns(loader.load(path, workers=1))


def _no_guess(raw):
    raise loader._WrongGuess


def _exact_way_calls(monkeypatch) -> list[int]:
    """Counts the loads that fell back from the guessed cuts to the exact way."""
    calls: list[int] = []
    exact = loader._decode_events

    def counted(*args, **kwargs):
        calls.append(1)
        return exact(*args, **kwargs)

    monkeypatch.setattr(loader, "_decode_events", counted)
    return calls


def _plain_event(i: int) -> dict[str, Any]:
    """An event like Kineto's: no object inside its arguments, so no ``},{`` but between
    events."""
    event = _event(i)
    del event["args"]["nested"]
    return event


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

@pytest.mark.parametrize("layout", ["compact", "pretty", "spaced"])
@pytest.mark.parametrize("bare", [False, True])
def test_columns_equal_across_slice_sizes_and_workers(tmp_path, monkeypatch, layout, bare):
    path = _write(tmp_path, _text(_events(), layout, bare))
    reference = _reference(path, monkeypatch)
    for slice_bytes in (300, 4096, 20_000):
        monkeypatch.setattr(loader, "SLICE_BYTES", slice_bytes)
        assert len(loader._slices(loader.decode(loader.read_bytes(path), path)[0],
                                  slice_bytes)) > 1
        for workers in (1, 2, 3):
            _same(_columns(loader.load(path, workers=workers)), reference)


def test_trace_events_not_first_in_the_object(tmp_path, monkeypatch):
    events = _events(40)
    data = ('{"distributedInfo": {"rank": 3}, "traceEvents": '
            + json.dumps(events, separators=(",", ":")) + ', "x": [1, 2]}').encode()
    path = _write(tmp_path, data, "trace.json")
    reference = _reference(path, monkeypatch)
    monkeypatch.setattr(loader, "SLICE_BYTES", 500)
    trace = loader.load(path, workers=2)
    assert trace.rank == 3
    _same(_columns(trace), reference)


@pytest.mark.parametrize("layout", ["compact", "pretty", "spaced"])
@pytest.mark.parametrize("bare", [False, True])
def test_guessed_cuts_decode_alike_without_a_scan(tmp_path, monkeypatch, layout, bare):
    events = [_plain_event(i) for i in range(300)]
    path = _write(tmp_path, _text(events, layout, bare))
    reference = _reference(path, monkeypatch)
    exact = _exact_way_calls(monkeypatch)
    monkeypatch.setattr(jsonscan, "object_ends", None)       # the full scan must not run
    for slice_bytes, per_task in ((300, 1), (300, 8), (4096, 2), (1 << 20, 8)):
        monkeypatch.setattr(loader, "SLICE_BYTES", slice_bytes)
        monkeypatch.setattr(loader, "SLICES_PER_TASK", per_task)
        for workers in (1, 2, 3):
            _same(_columns(loader.load(path, workers=workers)), reference)
    assert not exact


@pytest.mark.parametrize("memfd", [True, False])
def test_children_spill_their_columns_to_a_file_the_parent_maps(tmp_path, monkeypatch, memfd):
    if not memfd:
        monkeypatch.delattr(os, "memfd_create", raising=False)  # a temporary file instead
    elif not hasattr(os, "memfd_create"):
        pytest.skip("no memfd_create here")
    path = _write(tmp_path, _text([_plain_event(i) for i in range(400)], "pretty"))
    reference = _reference(path, monkeypatch)
    monkeypatch.setattr(loader, "SLICE_BYTES", 400)
    monkeypatch.setattr(loader, "SLICES_PER_TASK", 1)
    spilled: list[int] = []
    read = loader._Spill.read
    monkeypatch.setattr(loader._Spill, "read", staticmethod(
        lambda descriptor, index: spilled.append(len(index)) or read(descriptor, index)))
    trace = loader.load(path, workers=3)
    _same(_columns(trace), reference)
    assert len(spilled) == 2 and sum(spilled) > 0
    trace.start_us[0] += 1          # columns are the process's own: writable


def test_a_wrong_guess_falls_back_to_the_exact_way(tmp_path, monkeypatch):
    # ``_event``'s arguments hold lists of objects: ``},{`` inside events, so guessed cuts
    # land inside them, their slices fail to decode, and the exact way takes over.
    path = _write(tmp_path, _text(_events(), "compact"))
    reference = _reference(path, monkeypatch)
    exact = _exact_way_calls(monkeypatch)
    monkeypatch.setattr(loader, "SLICE_BYTES", 500)
    for workers in (1, 2):
        _same(_columns(loader.load(path, workers=workers)), reference)
    assert len(exact) == 2


@pytest.mark.parametrize("document", [
    # more arrays after the events, with brackets in their strings (Kineto's trace logs)
    '{{"traceEvents": {events}, "logs": ["a ] b", "[x]"], "traceName": "t[1].json"}}',
    # the key's text inside a string before the real key, and the key in a nested object
    '{{"note": "\\"traceEvents\\": [1]", "meta": {{"traceEvents": [2]}}, '
    '"distributedInfo": {{"rank": 3}}, "traceEvents": {events}}}',
    '{{"distributedInfo": {{"rank": 3}}, "traceEvents": {events}}}   \n',
    ' \n {events} \n',
])
def test_events_found_wherever_they_are_in_the_document(tmp_path, monkeypatch, document):
    events = json.dumps([_plain_event(i) for i in range(200)], separators=(",", ":"))
    path = _write(tmp_path, document.format(events=events).encode(), "trace.json")
    reference = _reference(path, monkeypatch)
    monkeypatch.setattr(loader, "SLICE_BYTES", 700)
    for workers in (1, 2):
        trace = loader.load(path, workers=workers)
        _same(_columns(trace), reference)
        assert trace.rank == (3 if "rank" in document else None)


def test_a_top_level_key_twice_or_trailing_garbage_is_decided_the_exact_way(tmp_path,
                                                                             monkeypatch):
    events = json.dumps([_plain_event(i) for i in range(50)])
    exact = _exact_way_calls(monkeypatch)
    twice = _write(tmp_path, f'{{"traceEvents": [], "traceEvents": {events}}}'.encode())
    _same(_columns(loader.load(twice)), _reference(twice, monkeypatch))
    with pytest.raises(TraceError, match="invalid JSON"):
        loader.load(_write(tmp_path, f'{{"traceEvents": {events}}} x'.encode(), "g.json"))
    assert len(exact) == 2


def test_a_decoder_that_dies_is_a_one_line_error(tmp_path, monkeypatch):
    path = _write(tmp_path, _text([_plain_event(i) for i in range(300)], "compact"))
    parent, decode = os.getpid(), loader._decode_pieces

    def dies_in_the_child(array, pieces):
        if os.getpid() != parent:
            os._exit(3)
        return decode(array, pieces)

    monkeypatch.setattr(loader, "_decode_pieces", dies_in_the_child)
    monkeypatch.setattr(loader, "SLICE_BYTES", 300)
    monkeypatch.setattr(loader, "SLICES_PER_TASK", 1)
    with pytest.raises(TraceError, match=r"decoding process ended .*exit status 3"):
        loader.load(path, workers=2)


_KILLED_PARENT = """
import os, signal, sys, time
from pathlib import Path
from ddpprof.trace import loader
loader.SLICE_BYTES, loader.SLICES_PER_TASK = 300, 1
decode, parent = loader._decode_pieces, os.getpid()
def stalls(array, pieces):
    if os.getpid() != parent:
        print(os.getpid(), flush=True)
        time.sleep(60)
    else:
        time.sleep(0.5)
        os.kill(parent, signal.SIGKILL)
    return decode(array, pieces)
loader._decode_pieces = stalls
loader.load(Path(sys.argv[1]), workers=2)
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
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"   # a zombie is dead
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("error", [msgspec.DecodeError, OverflowError])
def test_an_error_in_a_child_decoder_reaches_the_parent(tmp_path, monkeypatch, error):
    path = _write(tmp_path, _text([_plain_event(i) for i in range(300)], "compact"))
    reference = _reference(path, monkeypatch)
    parent, decode = os.getpid(), loader._decode_pieces

    def fails_in_the_child(array, pieces):
        if os.getpid() != parent:
            raise error("in the child")
        return decode(array, pieces)

    monkeypatch.setattr(loader, "_decode_pieces", fails_in_the_child)
    monkeypatch.setattr(loader, "SLICE_BYTES", 300)
    monkeypatch.setattr(loader, "SLICES_PER_TASK", 1)
    if error is msgspec.DecodeError:   # a cut in the wrong place: decoded whole, here
        _same(_columns(loader.load(path, workers=2)), reference)
    else:
        with pytest.raises(TraceError, match="out of range: in the child"):
            loader.load(path, workers=2)


# ---- found by a hostile pass over the guessed way: each once gave another answer than the
# exact way, or than another slicing, or an exception that was not a TraceError

def _both_ways(path: Path, monkeypatch) -> tuple[Any, Any]:
    """(exact way, one slice) and (guessed way, 200-byte slices, 2 workers): each the columns
    or the TraceError's message."""
    def outcome():
        try:
            trace = loader.load(path, workers=2)
        except TraceError as error:
            return str(error)
        return {**_columns(trace), "ints": trace.timestamps_are_integers, "rank": trace.rank}

    with monkeypatch.context() as patch:
        patch.setattr(loader, "_events_start", _no_guess)
        patch.setattr(loader, "SLICE_BYTES", 1 << 40)
        exact = outcome()
    with monkeypatch.context() as patch:
        patch.setattr(loader, "SLICE_BYTES", 200)
        patch.setattr(loader, "SLICES_PER_TASK", 1)
        guessed = outcome()
    return exact, guessed


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
def test_guessed_and_exact_ways_agree_on_hostile_documents(tmp_path, monkeypatch, data):
    path = _write(tmp_path, data, "t.json")
    exact, guessed = _both_ways(path, monkeypatch)
    _same_outcome(exact, guessed)


def test_a_slice_of_values_that_are_not_events_is_no_error(tmp_path, monkeypatch):
    # the exact way cuts after any object: a slice may hold only the trailing ``1``
    data = b"[" + _EVENT[:-1] + b',"pad":"' + b"L" * 220 + b'"},1,2]'
    path = _write(tmp_path, data, "t.json")
    monkeypatch.setattr(loader, "_events_start", _no_guess)
    monkeypatch.setattr(loader, "SLICE_BYTES", 100)
    assert len(loader._slices(memoryview(data), 100)) > 1
    assert loader.load(path, workers=2).n_events == 1
    with pytest.raises(TraceError, match="no event objects"):
        loader.load(_write(tmp_path, b"[1, 2, [3]]", "n.json"))


def test_a_non_finite_number_is_repaired_outside_strings_only(tmp_path):
    data = b'{"traceEvents":[{"ph":"X","name":"a,inf]","ts":1,"dur":2,"args":{"b":NaN}}]}'
    trace = loader.load(_write(tmp_path, data, "t.json"))
    assert trace.names == ["a,inf]"] and trace.n_events == 1


def test_fallback_decodes_whole_when_a_slice_fails(tmp_path, monkeypatch):
    path = _write(tmp_path, _text(_events(), "compact"))
    reference = _reference(path, monkeypatch)
    monkeypatch.setattr(loader, "_events_start", _no_guess)
    real = loader._slices
    calls: list[int] = []

    def wrong_cuts(array, target=None):
        pieces = real(array, 2000)
        calls.append(len(pieces))
        # move every cut 3 bytes into the next event: each slice is then invalid JSON
        return [(a + (3 if i else 0), b + 3 if i < len(pieces) - 1 else b)
                for i, (a, b) in enumerate(pieces)]

    monkeypatch.setattr(loader, "_slices", wrong_cuts)
    fell_back: list[bool] = []
    whole = loader._decode_pieces

    def spy(array, pieces):
        fell_back.append(pieces == [(1, len(array) - 1)])
        return whole(array, pieces)

    monkeypatch.setattr(loader, "_decode_pieces", spy)
    for workers in (1, 2):
        fell_back.clear()
        _same(_columns(loader.load(path, workers=workers)), reference)
        assert fell_back[-1] and calls[-1] > 1


def test_unscannable_array_is_one_slice(monkeypatch):
    monkeypatch.setattr(jsonscan, "object_ends", lambda array: None)
    data = memoryview(json.dumps(_events(30)).encode())
    assert loader._slices(data, 100) == [(1, len(data) - 1)]


def test_lenient_slice_among_strict_ones(tmp_path, monkeypatch):
    events = _events(100)
    events[57]["args"]["stream"] = [1, 2]    # an odd type in args: that slice is lenient
    events[58]["ts"] = "soon"
    path = _write(tmp_path, _text(events, "compact"))
    reference = _reference(path, monkeypatch)
    monkeypatch.setattr(loader, "SLICE_BYTES", 800)
    _same(_columns(loader.load(path, workers=2)), reference)


# ---- reading: mmap, gzip through isal or zlib ----------------------------------------------

def test_mmap_and_bytes_read_the_same(tmp_path, monkeypatch):
    path = _write(tmp_path, _text(_events(), "compact"))
    mapped = loader.read_bytes(path)
    assert not isinstance(mapped, bytes)
    reference = _columns(loader.load(path))
    monkeypatch.setattr(loader, "_map", lambda location: location.read_bytes())
    _same(_columns(loader.load(path)), reference)


@pytest.mark.parametrize("use_isal", [True, False])
def test_gzip_with_and_without_isal(tmp_path, monkeypatch, use_isal):
    data = _text(_events(), "compact")
    plain = _write(tmp_path, data)
    packed = _write(tmp_path, gzip.compress(data), "rank0.json.gz")
    if use_isal:
        pytest.importorskip("isal")
    else:
        monkeypatch.setitem(sys.modules, "isal", None)   # import fails: the zlib fallback
    library, _ = loader._inflater()
    assert (library.__name__ != "zlib") == use_isal
    assert loader.read_bytes(packed) == data
    _same(_columns(loader.load(packed)), _columns(loader.load(plain)))


@pytest.mark.parametrize("use_isal", [True, False])
def test_multi_member_gzip(tmp_path, monkeypatch, use_isal):
    if not use_isal:
        monkeypatch.setitem(sys.modules, "isal", None)
    data = _text(_events(50), "pretty")
    packed = gzip.compress(data[:1000]) + b"\x00\x00" + gzip.compress(data[1000:])
    assert loader.read_bytes(_write(tmp_path, packed, "t.json.gz")) == data


@pytest.mark.parametrize("use_isal", [True, False])
def test_gzip_bomb_and_truncated_gzip(tmp_path, monkeypatch, use_isal):
    if not use_isal:
        monkeypatch.setitem(sys.modules, "isal", None)
    data = _text(_events(), "compact")
    packed = gzip.compress(data)
    monkeypatch.setenv("DDPPROF_MAX_TRACE_BYTES", str(len(data) // 2))
    with pytest.raises(TraceError, match="inflates to more than"):
        loader.load(_write(tmp_path, packed, "bomb.json.gz"))
    monkeypatch.delenv("DDPPROF_MAX_TRACE_BYTES")
    with pytest.raises(TraceError, match="truncated or corrupt gzip"):
        loader.load(_write(tmp_path, packed[:len(packed) // 2], "cut.json.gz"))


def test_bad_files_are_one_line_errors(tmp_path):
    for data, message in ((b"   \n", "not a trace"), (b'{"traceEvents": [{"a": 1},',
                                                       "truncated JSON"),
                          (b"[1, 2, 3]", "no event objects")):
        with pytest.raises(TraceError, match=message):
            loader.load(_write(tmp_path, data, "bad.json"))
    with pytest.raises(TraceError, match="empty file"):
        loader.load(_write(tmp_path, b"", "empty.json"))


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
def test_any_events_decode_alike_however_sliced(tmp_path, monkeypatch, events, layout,
                                                 slice_bytes):
    path = _write(tmp_path, _text(events, layout))
    reference = _reference(path, monkeypatch)
    with monkeypatch.context() as patch:
        patch.setattr(loader, "SLICE_BYTES", slice_bytes)
        patch.setattr(loader, "SLICES_PER_TASK", 2)
        for workers in (1, 2):
            _same(_columns(loader.load(path, workers=workers)), reference)


def test_reload_of_an_unchanged_file_is_shared_and_a_rewrite_is_not(tmp_path):
    path = _write(tmp_path, _text(_events(30), "compact"))
    first = loader.load(path)
    assert loader.load(path) is first
    path.write_bytes(_text(_events(31), "compact"))
    second = loader.load(path)
    assert second is not first and second.start_us.size == first.start_us.size + 1
    loader.load(_write(tmp_path, _text(_events(5), "pretty"), "other.json"))
    assert loader._LAST is not None and loader._LAST[1] is not second
