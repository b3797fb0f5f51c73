"""The native scan (``ddpprof/trace/_scan.c``) against the Python decoder it speeds up: on
every run of events it takes, the columns are the Python decoder's, field for field and in the
same order; every run it does not take (odd types, escapes, invalid JSON) is left to the Python
decoder, untouched. Checked on hand-written events with known values, on generated events
(hypothesis), on damaged runs, and on every trace in tests/fixtures."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ddpprof.trace import cache, scanned
from ddpprof.trace.columns import Columns
from ddpprof.trace.decode_events import decode_run
from ddpprof.trace.loader import Slicing, load

FIXTURES = Path(__file__).parent / "fixtures"
PYTHON_ONLY = Slicing(native_scan=False)
#: The fuzz budget (hypothesis examples per generated test): the defaults below, unless
#: ``DDPPROF_FUZZ_EXAMPLES`` says otherwise (``scripts/sanitize-scan.sh`` sets it for the
#: sanitized build; docs/guarantees.md).
FUZZ_EXAMPLES = int(os.environ.get("DDPPROF_FUZZ_EXAMPLES") or 0)


def _budget(default: int) -> int:
    return FUZZ_EXAMPLES or default


def _python(run: bytes) -> Columns:
    columns = Columns()
    events, values, objects = decode_run(run)
    columns.values += values
    columns.objects += objects
    columns.add(events)
    return columns


def _native(run: bytes) -> Columns | None:
    columns = Columns()
    return columns if scanned.add_scanned(columns, run) else None


def _state(columns: Columns) -> dict[str, Any]:
    """Everything a Columns holds, dicts as (key, value) lists so that order counts too."""
    state: dict[str, Any] = {key: list(value.items()) for key, value in (
        ("names", columns.names), ("categories", columns.categories), ("pids", columns.pids),
        ("tids", columns.tids), ("thread_names", columns.thread_names),
        ("comm_args", columns.comm_args), ("grad_bytes", columns.grad_bytes),
        ("matmul_flops", columns.matmul_flops))}
    state.update(wants_args=columns.wants_args, ts_all_integers=columns.ts_all_integers,
                 ts_low=columns.ts_low, ts_high=columns.ts_high, ts_missing=columns.ts_missing,
                 dropped=columns.dropped, count=columns.count, values=columns.values,
                 objects=columns.objects)
    for key, parts in columns.parts.items():
        state[key] = np.concatenate(parts) if parts else None
    return state


def _same(a: Columns, b: Columns) -> None:
    left, right = _state(a), _state(b)
    assert left.keys() == right.keys()
    for key, value in left.items():
        if isinstance(value, np.ndarray):
            other = right[key]
            assert isinstance(other, np.ndarray) and value.dtype == other.dtype, key
            # bit for bit: -0.0 and 0.0 differ, NaN equals NaN
            assert value.tobytes() == other.tobytes(), key
        elif isinstance(value, float) and math.isnan(value):
            assert math.isnan(right[key]), key
        else:
            assert value == right[key], key


def _check(run: bytes, taken: bool | None = None) -> Columns | None:
    """The scan's columns are the Python decoder's wherever it takes ``run``; ``taken``: it
    must (True) or must not (False) take it."""
    native = _native(run)
    if taken is not None:
        assert (native is not None) == taken, run[:300]
    try:
        python = _python(run)
    except (msgspec.MsgspecError, ValueError, TypeError, OverflowError):
        assert native is None, "the scan took a run that the Python decoder refuses"
        return None
    if native is not None:
        _same(native, python)
    return native


def test_the_native_scan_is_built():
    """The install compiles it (a C compiler is on every CI machine): without it every trace
    would silently take the slower Python way."""
    assert scanned.AVAILABLE


# ---- hand-written events, with the values they must give -------------------------------------

def _run(*events: str) -> bytes:
    return ("[" + ",".join(events) + "]").encode()


def test_kineto_events_give_their_values():
    run = _run(
        '{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": 0, "tid": 7,'
        ' "ts": 1694039959000123.5, "dur": 12, "args": {"External id": 31, "correlation": 9,'
        ' "stream": 7, "Collective name": "allreduce", "In msg nelems": 1024,'
        ' "dtype": "Float", "Group size": 2}}',
        '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 12, "tid": 12, "ts": 100,'
        ' "dur": 50, "args": {"External id": 5, "Input Dims": [[8, 16], [16, 4]],'
        ' "Input type": ["float", "float"]}}',
        '{"ph": "M", "name": "thread_name", "pid": 12, "tid": 12, "args": {"name": "main"}}',
        '{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",'
        ' "tid": "PyTorch Profiler", "ts": 0, "dur": 1}',
        '{"ph": "X", "cat": "cpu_op", "name": "no duration", "pid": 12, "tid": 12, "ts": 3}',
        '{"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 5, "bp": "e"}')
    columns = _check(run, taken=True)
    assert columns is not None
    assert list(columns.names) == ["ncclKernel_AllReduce", "aten::mm"]
    start = np.concatenate(columns.parts["ts"])
    assert start.tolist() == [1694039959000123.5, 100.0]
    assert np.concatenate(columns.parts["correlation"]).tolist() == [9, -1]
    assert np.concatenate(columns.parts["external_id"]).tolist() == [31, 5]
    assert np.concatenate(columns.parts["stream"]).tolist() == [7, -1]
    assert columns.comm_args[0].in_bytes == 4096 and columns.comm_args[0].group_size == 2
    assert columns.matmul_flops == {1: 2.0 * 8 * 16 * 4}
    assert columns.thread_names == {(12, 12): "main"}
    assert columns.dropped == 1 and columns.values == columns.objects == 6
    assert not columns.ts_all_integers and columns.ts_low == 0.0


@pytest.mark.parametrize("text, value", [
    ("0.1", 0.1), ("-0.0", -0.0), ("-0", 0.0), ("9007199254740993", 9007199254740992.0),
    ("1234567890123.4567", 1234567890123.4567), ("12345678901234567.25", 12345678901234567.25),
    ("0.000000000000000000001", 1e-21), ("999999999999999999", 1e18)])
def test_times_are_correctly_rounded(text, value):
    run = _run(f'{{"ph": "X", "name": "a", "ts": {text}, "dur": 1}}')
    columns = _check(run, taken=True)
    assert columns is not None
    assert np.concatenate(columns.parts["ts"]).tobytes() == np.float64(value).tobytes()


@pytest.mark.parametrize("event", [
    '{"ph": "X", "name": "caf\\u00e9", "ts": 1, "dur": 1}',           # an escape
    '{"ph": "X", "name": "café", "ts": 1, "dur": 1}',                  # not ASCII
    '{"ph": "X", "name": null, "ts": 1, "dur": 1}',                    # lenient: "null"
    '{"ph": "X", "name": "a", "pid": 1.5, "ts": 1, "dur": 1}',
    '{"ph": "X", "name": "a", "ts": 1e3, "dur": 1}',
    '{"ph": "X", "name": "a", "ts": 12345678901234567890, "dur": 1}',
    '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": null}',
    '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"correlation": "7"}}',
    '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"External id": null}}',
    '{"ph": "X", "name": "a", "name": "b", "ts": 1, "dur": 1}',        # given twice
    '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "deep": ' + "[" * 70 + "]" * 70 + "}",
])
def test_outside_the_subset_the_python_decoder_decides(event):
    _check(_run(event), taken=False)


@pytest.mark.parametrize("run", [
    b'[{"ph": "X"}', b'[{"ph": "X"},]', b'[{"ph": "X"}] x', b'[{"ph": "X", "ts": 01}]',
    b'[{"ph": "X", "ts": 1.}]', b'[{"ph": "X", "a": tru}]', b'[{"ph": "X", "a": "\x01"}]',
    b'[{"ph": "X", "a": [1, 2,]}]', b'[{"ph" "X"}]', b'[{"ph": "X"} {"ph": "X"}]', b'[1]',
    b'[{"ph": "X"}, 2]', b'{"ph": "X"}', b'',
])
def test_invalid_json_is_never_taken(run):
    assert _native(run) is None


# ---- generated events -----------------------------------------------------------------------

_TEXT = st.one_of(st.sampled_from(["X", "M", "i", "f", "kernel", "cpu_op", "Trace", "", "a b",
                                   "thread_name", "aten::mm", "aten::addmm",
                                   "torch::autograd::AccumulateGrad", "c10d::allreduce_",
                                   "nccl:all_reduce", "ProfilerStep#3"]),
                  st.text(max_size=6))
_INT = st.one_of(st.integers(-3, 40), st.integers(-2**63, 2**64))
_NUMBER = st.one_of(_INT, st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([0.5, -0.0, 1694039959000123.5, 12345678901234567.25]))
_VALUE = st.one_of(st.none(), st.booleans(), _NUMBER, _TEXT)
_SHAPES = st.lists(st.lists(st.integers(0, 64), max_size=3), max_size=3)
_ARGS = st.fixed_dictionaries({}, optional={
    "External id": st.one_of(_INT, _VALUE), "external id": st.one_of(_INT, _VALUE),
    "correlation": st.one_of(_INT, _VALUE), "stream": st.one_of(_INT, _VALUE),
    "Collective name": _VALUE, "In msg nelems": _VALUE, "dtype": st.sampled_from(
        ["Float", "BFloat16", "x"]), "Group size": _VALUE, "Seq": _VALUE,
    "Input Dims": _SHAPES, "Input type": st.lists(st.sampled_from(["float", "c10::Half", ""]),
                                                  max_size=3),
    "name": _VALUE, "Process Group Ranks": st.one_of(st.just([0, 1]), _VALUE),
    "nested": st.recursive(_VALUE, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=6)})
_EVENT = st.fixed_dictionaries({}, optional={
    "ph": st.one_of(st.sampled_from(["X", "X", "X", "M", "i", "f"]), _VALUE),
    "cat": st.one_of(st.sampled_from(["kernel", "cpu_op", "Trace"]), _VALUE),
    "name": st.one_of(_TEXT, _VALUE), "pid": st.one_of(_INT, _TEXT, _VALUE),
    "tid": st.one_of(_INT, _TEXT, _VALUE), "ts": st.one_of(_NUMBER, st.none()),
    "dur": st.one_of(_NUMBER, st.none()),
    "args": st.one_of(_ARGS, _ARGS, _ARGS, _VALUE), "id": _VALUE})
_SUBSET_EVENT = st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "X", "M", "i"]), "name": st.sampled_from(
        ["aten::mm", "aten::addmm", "c10d::allreduce_", "thread_name", "k", ""]),
    "pid": st.integers(-5, 10**18 - 1), "tid": st.one_of(st.integers(0, 9), st.just("t 1")),
    # (floats as JSON writes them without an exponent: thousandths below 1e13)
    "ts": st.one_of(st.integers(0, 10**17), st.integers(0, 10**16).map(lambda v: v / 1000),
                    st.none()),
    "dur": st.one_of(st.integers(0, 10**6), st.integers(0, 10**9).map(lambda v: v / 1000))},
    optional={
    "cat": st.sampled_from(["kernel", "cpu_op", "Trace"]),
    "args": st.fixed_dictionaries({}, optional={
        "External id": st.integers(-9, 10**18 - 1), "correlation": st.integers(-9, 99),
        "stream": st.integers(-1, 20), "external id": st.integers(0, 99),
        "Input Dims": _SHAPES, "Input type": st.just(["float", "float"]),
        "name": st.sampled_from(["main", "worker"]), "Collective name": st.sampled_from(
            ["allreduce", "broadcast"])})})


def _encoded(events: list[Any], layout: int) -> bytes:
    if layout == 0:
        return json.dumps(events, separators=(",", ":")).encode()
    if layout == 1:
        return json.dumps(events, indent=1, ensure_ascii=False).encode()
    return ("[ \n\t" + " ,\r\n ".join(json.dumps(e, indent=3) for e in events) + " \n]").encode()


@settings(max_examples=_budget(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_EVENT, max_size=12), st.integers(0, 2))
@example([{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2, "args": {
    "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}}], 0)
def test_any_events_read_as_the_python_decoder_reads_them(events, layout):
    _check(_encoded(events, layout))


@settings(max_examples=_budget(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_SUBSET_EVENT, max_size=12), st.integers(0, 2))
def test_events_of_the_subset_are_taken(events, layout):
    _check(_encoded(events, layout), taken=True)


@settings(max_examples=_budget(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_SUBSET_EVENT, min_size=1, max_size=6), st.integers(0, 2), st.data())
def test_damaged_runs_are_taken_only_where_the_python_decoder_takes_them(events, layout, data):
    run = bytearray(_encoded(events, layout))
    at = data.draw(st.integers(0, len(run) - 1))
    damage = data.draw(st.sampled_from(["cut", "byte", "drop"]))
    if damage == "cut":
        run = run[:at]
    elif damage == "byte":
        run[at] = data.draw(st.sampled_from(b'{}[]",:\\ 0-.eE\x00\x7f\xc3nx'))
    else:
        del run[at]
    _check(bytes(run))


# ---- real traces ----------------------------------------------------------------------------

_TRACES = sorted(p for p in FIXTURES.rglob("*.json*")
                 if p.name != "run.json" and "expected" not in p.name)


@pytest.mark.parametrize("path", _TRACES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_fixture_loads_the_same_both_ways(path):
    cache.clear()
    native = load(path, workers=1)
    cache.clear()
    python = load(path, workers=1, slicing=PYTHON_ONLY)
    cache.clear()
    for key, value in vars(native).items():
        other = getattr(python, key)
        if isinstance(value, np.ndarray):
            assert value.dtype == other.dtype and value.tobytes() == other.tobytes(), key
        else:
            assert value == other, key


def test_without_the_extension_the_python_decoder_reads_everything(tmp_path):
    """An install without a C compiler has no ``_scan``: ddpprof still loads (the import of
    ``scanned`` does not fail) and every slice takes the Python way, to the same columns."""
    import subprocess
    import sys

    trace = FIXTURES / "hta-gpu" / "nccl-data" / "rank-0.json.gz"
    script = f"""
import importlib.abc, json, sys
class NoScan(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "ddpprof.trace._scan":
            raise ImportError("built without a C compiler")
sys.meta_path.insert(0, NoScan())
from ddpprof.trace import scanned
from ddpprof.trace.loader import load
trace = load({str(trace)!r})
print(json.dumps([scanned.AVAILABLE, trace.n_events, float(trace.start_us.sum()),
                  trace.names[:3]]))
"""
    found = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True,
                                      text=True, check=True).stdout)
    native = load(trace)
    cache.clear()
    assert found == [False, native.n_events, float(native.start_us.sum()), native.names[:3]]
