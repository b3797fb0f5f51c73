"""Bad input to ``ddpprof analyze``: one ``ddpprof: error: PATH: problem`` line, exit 2, no
traceback; odd but valid input still loads; and the loader and ``analyze_trace`` fuzzed so
that anything they cannot analyze is a ``TraceError`` and never another exception."""

from __future__ import annotations

import contextlib
import gzip
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ddpprof.analysis import AnalysisOptions
from ddpprof.analysis.rank import analyze_rank
from ddpprof.core.errors import UsageError
from ddpprof.trace.classify import step_names
from ddpprof.trace.events import RankTrace
from ddpprof.trace.last_step import LastStep
from ddpprof.trace.loader import TraceError, load

# ---- trace builders ----------------------------------------------------------------------


def _event(name: Any, ts: Any, dur: Any, cat: Any = "cpu_op", tid: Any = 1,
           **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {}, **extra}


def _cpu_events(steps: int = 2) -> list[dict[str, Any]]:
    """A gloo-like CPU rank: ProfilerSteps and ops on the training thread, the backend's
    collective span on its worker thread."""
    events = []
    for step in range(steps):
        base = 1000 * step
        events += [
            _event(f"ProfilerStep#{step}", base, 900, cat="user_annotation"),
            _event("aten::mm", base + 100, 300),
            _event("c10d::allreduce_", base + 400, 20),
            _event("gloo:all_reduce", base + 420, 300, cat="user_annotation", tid=2,
                   args={"Collective name": "allreduce", "In msg nelems": 1000,
                         "dtype": "float", "Group size": 2}),
        ]
    return events


def _trace(rank: int | None = 0, world_size: int | None = 2, events: list | None = None,
           info: bool = True) -> dict[str, Any]:
    document: dict[str, Any] = {"traceEvents": _cpu_events() if events is None else events}
    if info:
        document["distributedInfo"] = {"rank": rank, "world_size": world_size,
                                       "backend": "gloo"}
    return document


def _dumps(document: Any) -> bytes:
    return json.dumps(document).encode()


def _write(path: Path, content: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else _dumps(content))
    return path


def analyze_trace(trace: RankTrace, drop_last_step: bool, per_step: bool = False):
    """What ``ddpprof analyze`` does with one rank of a one-rank run."""
    last_step = LastStep.decide(step_names(trace), keep_last_step=not drop_last_step)
    return analyze_rank(trace, trace.rank or 0, last_step, AnalysisOptions(per_step=per_step))


def _load_then_analyze(path: Path, drop_last_step: bool = False, per_step: bool = False):
    """What ``ddpprof analyze`` does with one rank; may raise ``TraceError`` only."""
    return analyze_trace(load(path), drop_last_step, per_step)


# ---- CLI checks --------------------------------------------------------------------------


def _error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("ddpprof: error: ")]


def _assert_usage_error(result, path: Path, *problems: str) -> str:
    """Exit 2, no traceback, and an error line naming ``path`` and every one of ``problems``."""
    output = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 2, output
    assert "Traceback" not in result.stderr, output
    named = [line for line in _error_lines(result) if line.startswith(f"ddpprof: error: {path}")]
    assert any(all(p in line for p in problems) for line in named), output
    return named[0]


def _assert_clean(result) -> None:
    output = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 0, output
    assert "Traceback" not in result.stderr and not _error_lines(result), output


def _step_only_events() -> list[dict[str, Any]]:
    return [_event("ProfilerStep#0", 0, 100, cat="user_annotation"),
            _event("ProfilerStep#1", 200, 100, cat="user_annotation")]


def _gpu_events_launched_elsewhere() -> list[dict[str, Any]]:
    """A GPU rank whose only kernel has a correlation id that no host event launched (two
    steps, so that HTA's step filter applies)."""
    return [_event("ProfilerStep#0", 0, 100, cat="user_annotation"),
            _event("ProfilerStep#1", 100, 100, cat="user_annotation"),
            _event("aten::mm", 10, 50),
            _event("gemm", 20, 10, cat="kernel", tid=7,
                   args={"stream": 7, "correlation": 42})]


def _half_gzip() -> bytes:
    packed = gzip.compress(_dumps(_trace()))
    return packed[: len(packed) // 2]


BAD_FILES = [
    pytest.param("rank0.json", lambda: b"", ("empty file",), id="empty file"),
    pytest.param("rank0.json", lambda: _dumps(_trace())[:150], ("truncated JSON",),
                 id="truncated JSON"),
    pytest.param("rank0.json.gz", _half_gzip, ("truncated or corrupt gzip",),
                 id="truncated gzip"),
    pytest.param("rank0.json", lambda: b'{"a": 1}', ("not a trace", "no traceEvents"),
                 id="object without traceEvents"),
    pytest.param("rank0.json", lambda: b"[1, 2]", ("not a trace",), id="array of numbers"),
    pytest.param("rank0.json", lambda: b'"text"', ("not a trace",), id="JSON string"),
    pytest.param("rank0.json", lambda: _trace(events=[
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "C", "name": "memory", "pid": 1, "ts": 5, "args": {"bytes": 10}},
        {"ph": "i", "name": "marker", "pid": 1, "tid": 1, "ts": 7, "s": "t"}]),
        ("nothing to measure", "no complete events"), id="only metadata, counters, instants"),
    pytest.param("rank0.json", lambda: _trace(events=[]), ("nothing to measure",),
                 id="no events at all"),
    pytest.param("rank0.json", lambda: _trace(world_size=1,
                                              events=_gpu_events_launched_elsewhere()),
                 ("nothing in the analyzed window",), id="nothing in window (GPU)"),
    pytest.param(
        "rank0.json", lambda: _trace(world_size=1, events=_step_only_events()),
        ("nothing in the analyzed window",), id="nothing in window (ProfilerSteps only)"),
    pytest.param(
        "rank0.json", lambda: _trace(world_size=1, events=[
            _event("ProfilerStep#0", 0, 0, cat="user_annotation"), _event("aten::mm", 0, 0)]),
        ("nothing in the analyzed window",), id="nothing in window (zero-duration step)"),
]


@pytest.mark.parametrize(("name", "content", "problems"), BAD_FILES)
def test_bad_trace_file_is_one_error_line_and_exit_2(name, content, problems, tmp_path,
                                                     ddpprof_cli):
    path = _write(tmp_path / "run" / name, content())
    result = ddpprof_cli("analyze", str(tmp_path / "run"))
    _assert_usage_error(result, path, *problems)


def test_mixed_world_sizes(tmp_path, ddpprof_cli):
    run = tmp_path / "run"
    _write(run / "rank0.json", _trace(rank=0, world_size=2))
    _write(run / "rank1.json", _trace(rank=1, world_size=4))
    result = ddpprof_cli("analyze", str(run))
    _assert_usage_error(result, run / "rank1.json", "world size 4",
                        f"{run / 'rank0.json'} says 2", "mixed world sizes")


def test_duplicate_rank(tmp_path, ddpprof_cli):
    run = tmp_path / "run"
    _write(run / "a_rank0.json", _trace(rank=0))
    _write(run / "b_rank0.json", _trace(rank=0))
    result = ddpprof_cli("analyze", str(run))
    line = _assert_usage_error(result, run, "duplicate rank 0")
    assert "a_rank0.json" in line and "b_rank0.json" in line, line


def test_missing_ranks_are_named(tmp_path, ddpprof_cli):
    run = tmp_path / "run"
    _write(run / "rank0.json", _trace(rank=0, world_size=4))
    _write(run / "rank2.json", _trace(rank=2, world_size=4))
    result = ddpprof_cli("analyze", str(run))
    _assert_clean(result)
    notes = [line for line in result.stderr.splitlines() if line.startswith("run: ")]
    assert any("missing ranks 1, 3" in line for line in notes), result.stderr


def test_bad_run_beside_a_good_one(tmp_path, ddpprof_cli):
    _write(tmp_path / "runs" / "good" / "rank0.json", _trace(world_size=1))
    bad = _write(tmp_path / "runs" / "bad" / "rank0.json", _dumps(_trace(world_size=1))[:100])
    result = ddpprof_cli("analyze", str(tmp_path / "runs"))
    _assert_usage_error(result, bad, "truncated JSON")
    rows = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    assert "good" in rows and "bad" not in rows, result.stdout


def test_bad_rank_with_parallel_jobs(tmp_path, ddpprof_cli):
    run = tmp_path / "run"
    _write(run / "rank0.json", _trace(rank=0))
    bad = _write(run / "rank1.json", b"")
    result = ddpprof_cli("analyze", "--jobs", "2", str(run))
    _assert_usage_error(result, bad, "empty file")


def test_trace_error_survives_pickling():
    error = pickle.loads(pickle.dumps(TraceError("rank1.json", "empty file")))
    assert (str(error), error.path, error.problem) == (
        "rank1.json: empty file", Path("rank1.json"), "empty file")


def test_bare_array_gzip_and_rank_in_name_load(tmp_path, ddpprof_cli):
    """Each folder is one run of one rank; no distributedInfo, so the rank is the name's."""
    _write(tmp_path / "bare" / "rank-3.json", _cpu_events())
    _write(tmp_path / "gz" / "rank3.json.gz", gzip.compress(_dumps(_trace(info=False))))
    _write(tmp_path / "worker" / "worker_3.json", _trace(info=False))
    out = tmp_path / "out.json"
    result = ddpprof_cli("analyze", "--json", str(out),
                         *(str(tmp_path / run) for run in ("bare", "gz", "worker")))
    _assert_clean(result)
    document = json.loads(out.read_text())
    ranks = {run["run"]: [rank["rank"] for rank in run["per_rank"]] for run in document["runs"]}
    assert ranks == {"bare": [3], "gz": [3], "worker": [3]}
    assert document["errors"] == []


@pytest.mark.parametrize("name", ["rank-3.json", "rank3.json", "worker_3.json",
                                  "rank_3.json.gz"])
@pytest.mark.parametrize("form", ["object", "array"])
def test_rank_from_file_name(name, form, tmp_path):
    document: Any = _trace(info=False) if form == "object" else _cpu_events()
    raw = _dumps(document)
    path = _write(tmp_path / name, gzip.compress(raw) if name.endswith(".gz") else raw)
    trace = load(path)
    assert (trace.rank, trace.world_size) == (3, None)
    assert _load_then_analyze(path).steps == 2


def test_distributed_info_rank_wins_over_name(tmp_path):
    path = _write(tmp_path / "rank5.json", _trace(rank=1, world_size=8))
    assert (load(path).rank, load(path).world_size) == (1, 8)


@pytest.mark.parametrize("command", ["simulate", "gate"])
def test_a_trace_error_outside_analyze_is_bad_input(command, tmp_path, ddpprof_cli):
    """simulate and gate read a trace themselves (not through analyze's per-run error list):
    a trace they cannot read is still one line naming the file, exit 2, no traceback."""
    run = tmp_path / "run"
    _write(run / "rank0.json", b'{"traceEvents": [{"ph": "X", "na')
    baseline = tmp_path / "base.json"
    baseline.write_text(json.dumps({"schema": "ddpprof.analyze", "version": 2, "runs": [],
                                    "errors": []}))
    args = [str(run)] if command == "simulate" else [str(run), "--baseline", str(baseline)]
    result = ddpprof_cli(command, *args)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"ddpprof: error: {run / 'rank0.json'}: truncated JSON (Input data " \
                            "was truncated)\n"


# ---- numbers out of range ----------------------------------------------------------------


def _with_args(args: dict[str, Any], name: str = "gloo:all_reduce") -> dict[str, Any]:
    return _trace(world_size=1, events=[
        _event("ProfilerStep#0", 0, 100, cat="user_annotation"), _event("aten::mm", 0, 10),
        _event(name, 10, 20, cat="user_annotation", tid=2, args=args)])


_CAST = "ignore:invalid value encountered in cast:RuntimeWarning"  # see test_ids_read_exactly

OUT_OF_RANGE = [
    pytest.param(_with_args({"stream": 10**30}), id="stream above int64"),
    pytest.param(_with_args({"stream": 1e300}), id="float stream above int64"),
    pytest.param(_with_args({"stream": "9" * 30}), id="string stream above int64"),
    pytest.param(_with_args({"correlation": 10**30}), id="correlation above int64"),
    pytest.param(b'{"distributedInfo": {"rank": 0}, "traceEvents": [{"ph": "X", "cat": '
                 b'"cpu_op", "name": "x", "ts": 1' + b"0" * 400 + b', "dur": 1}]}',
                 id="timestamp above float64"),
    pytest.param(_with_args({"In msg nelems": 10**400, "dtype": "float"}),
                 id="message size above float64"),
    pytest.param(_with_args({"Input Dims": [[10**200, 10**200]], "Input type": ["float"]}),
                 id="tensor shape above float64"),
]


@pytest.mark.filterwarnings(_CAST)
@pytest.mark.parametrize("content", OUT_OF_RANGE)
def test_out_of_range_numbers_load_or_are_trace_errors(content, tmp_path):
    path = _write(tmp_path / "rank0.json", content)
    with contextlib.suppress(TraceError):
        _load_then_analyze(path)


@pytest.mark.filterwarnings(_CAST)
@pytest.mark.parametrize(("key", "value", "expected"), [
    pytest.param("correlation", 123, 123, id="small id"),
    pytest.param("stream", "7", 7, id="id as a string"),
    pytest.param("stream", "x", -1, id="not a number"),
    pytest.param("correlation", 2**53 + 1, 2**53 + 1, id="id above 2**53"),
    pytest.param("correlation", 2**63 - 1, 2**63 - 1, id="largest int64 id"),
    pytest.param("stream", 10**30, -1, id="stream above int64"),
    pytest.param("stream", "9" * 30, -1, id="string stream above int64"),
    pytest.param("correlation", 2**63, -(2**63), id="correlation 2**63 wraps"),
    pytest.param("correlation", 2**64 - 1, -1, id="largest uint64 correlation wraps"),
])
def test_ids_read_exactly(key, value, expected, tmp_path):
    """stream: the integer itself, or -1 where absent, not a number or beyond int64.
    correlation: the integer itself, ids of 2**63 and above wrapped mod 2**64 (still present,
    still distinct: they are only compared for equality)."""
    trace = load(_write(tmp_path / "rank0.json", _with_args({key: value})))
    # (a host record's stream is kept apart from devices', as launch metadata)
    column = np.maximum(trace.stream, trace.host_op_stream) if key == "stream" \
        else trace.correlation
    assert column.tolist() == [-1, -1, expected]
    if key == "correlation":
        assert trace.has_correlation.tolist() == [False, False, expected is not None]


def test_correlation_ids_above_2_63_link_kernels_to_their_launch(tmp_path):
    big = 2**63 + 12345
    events = [_event("ProfilerStep#0", 0, 100, cat="user_annotation"),
              _event("ProfilerStep#1", 100, 100, cat="user_annotation"),
              _event("cudaLaunchKernel", 10, 5, cat="cuda_runtime", args={"correlation": big}),
              _event("gemm", 20, 30, cat="kernel", tid=7,
                     args={"stream": 7, "correlation": big}),
              _event("cudaLaunchKernel", 110, 5, cat="cuda_runtime",
                     args={"correlation": big + 1}),
              _event("gemm", 120, 30, cat="kernel", tid=7,
                     args={"stream": 7, "correlation": big + 1})]
    result = _load_then_analyze(_write(tmp_path / "rank0.json", _trace(world_size=1,
                                                                         events=events)),
                                drop_last_step=True)
    # the last step's kernel (launched at 110) is dropped, the first one kept: 30 µs of gemm
    assert result.breakdown.window_us == 30 and result.breakdown.compute_us == 30


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_end_overflowing_to_infinity_is_rejected(tmp_path):
    path = _write(tmp_path / "rank0.json", _trace(world_size=1, events=[
        _event("ProfilerStep#0", 1e308, 1e308, cat="user_annotation"),
        _event("aten::mm", 1e308, 1e308)]))
    try:
        trace = load(path)
    except TraceError as error:
        assert "out of range" in str(error)
    else:
        assert np.all(np.isfinite(trace.end_us)), trace.end_us


def _gpu_trace_one_step() -> dict[str, Any]:
    return _trace(world_size=1, events=[
        _event("ProfilerStep#0", 0, 900, cat="user_annotation"),
        _event("cudaLaunchKernel", 10, 5, cat="cuda_runtime", args={"correlation": 1}),
        _event("gemm", 20, 100, cat="kernel", tid=7, args={"stream": 7, "correlation": 1})])


def test_per_step_with_no_analyzed_step(tmp_path):
    path = _write(tmp_path / "rank0.json", _gpu_trace_one_step())
    with contextlib.suppress(TraceError):
        _load_then_analyze(path, drop_last_step=True, per_step=True)


# ---- fuzzing -----------------------------------------------------------------------------

FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

NAMES = ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#x", "aten::mm",
         "c10d::allreduce_", "gloo:all_reduce", "nccl:all_reduce", "record_param_comms",
         "ncclKernel_AllReduce_RING_LL", "ncclDevKernel_AllGather", "Memcpy HtoD",
         "Memset (Device)", "Event Sync", "cudaLaunchKernel", "gemm", "thread_name", ""]
CATEGORIES = ["cpu_op", "user_annotation", "kernel", "gpu_memcpy", "gpu_memset",
              "cuda_runtime", "python_function", "Trace", None]

# Plausible events: right types, values that make steps, ops, kernels and collectives overlap.
_TIME = st.one_of(st.integers(-20, 3000), st.floats(-20, 3000, allow_nan=False))
_DURATION = st.one_of(st.integers(-5, 1500), st.floats(-5, 1500, allow_nan=False))
_TID = st.one_of(st.integers(1, 3), st.just("stream 7"))
_PLAUSIBLE_ARGS = st.fixed_dictionaries({}, optional={
    "stream": st.one_of(st.integers(-1, 3), st.sampled_from(["7", "x", "-1"]),
                        st.floats(-1, 3, allow_nan=False)),
    "correlation": st.one_of(st.integers(-1, 5), st.sampled_from(["2", ""])),
    "Collective name": st.sampled_from(["allreduce", "AllGather", "_allgather_base",
                                        "broadcast", "", "weird"]),
    "In msg nelems": st.integers(-5, 2**40),
    "dtype": st.sampled_from(["float", "Float", "c10::BFloat16", "nope", ""]),
    "Group size": st.integers(-2, 8),
    "Input Dims": st.recursive(st.one_of(st.integers(-3, 1000), st.none(), st.text(max_size=3)),
                               lambda inner: st.lists(inner, max_size=4), max_leaves=8),
    "Input type": st.lists(st.sampled_from(["float", "double", "c10::Half", "Scalar", ""]),
                           max_size=4),
    "name": st.text(max_size=5),
})
_STEP = st.fixed_dictionaries({
    "ph": st.just("X"), "cat": st.just("user_annotation"),
    "name": st.sampled_from(["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]),
    "ts": _TIME, "dur": _DURATION, "pid": st.just(1), "tid": st.integers(1, 2)})
_OP = st.fixed_dictionaries(
    {"ph": st.just("X"), "cat": st.sampled_from(CATEGORIES), "name": st.sampled_from(NAMES),
     "ts": _TIME, "dur": _DURATION, "pid": st.integers(0, 1), "tid": _TID},
    optional={"args": _PLAUSIBLE_ARGS})
_ANY_EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "M", "i"]), "name": st.sampled_from(NAMES)},
    optional={"cat": st.sampled_from(CATEGORIES), "ts": _TIME, "dur": _DURATION,
              "pid": st.integers(0, 1), "tid": _TID,
              "args": st.one_of(_PLAUSIBLE_ARGS, st.none())})
# Steps first, then well-formed ops, then a few events with fields missing.
_PLAUSIBLE_EVENTS = st.tuples(
    st.lists(_STEP, max_size=3), st.lists(_OP, max_size=20), st.lists(_ANY_EVENT, max_size=5)
).map(lambda parts: [event for part in parts for event in part])
_DISTRIBUTED_INFO = st.fixed_dictionaries(
    {"rank": st.integers(0, 3)},
    optional={"world_size": st.integers(1, 4), "backend": st.just("gloo")})
_PLAUSIBLE_DOCUMENTS = st.fixed_dictionaries({"traceEvents": _PLAUSIBLE_EVENTS},
                                             optional={"distributedInfo": _DISTRIBUTED_INFO})

# Odd events: any field may be missing or of any JSON type, numbers of any size.
_INT64 = st.integers(-(2**63), 2**63 - 1)
_ODD = st.one_of(st.none(), st.booleans(), _INT64, st.integers(),
                 st.floats(-1e15, 1e15, allow_nan=False, allow_infinity=False),
                 st.floats(allow_nan=False, allow_infinity=False),
                 st.text(max_size=8), st.lists(st.integers(-3, 3), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(-3, 3), max_size=2))
_ARG_KEYS = ["stream", "correlation", "Collective name", "In msg nelems", "dtype",
             "Group size", "Input Dims", "Input type", "name"]
_ODD_ARGS = st.one_of(_PLAUSIBLE_ARGS, _PLAUSIBLE_ARGS, st.none(), _ODD,
                      st.lists(_ODD, max_size=2),
                      st.fixed_dictionaries({}, optional={k: _ODD for k in _ARG_KEYS}))


@st.composite
def _odd_events(draw) -> dict[str, Any]:
    event = {}
    for key, usual in (("ph", st.sampled_from(["X", "M", "i"])),
                       ("name", st.sampled_from(NAMES)), ("cat", st.sampled_from(CATEGORIES)),
                       ("ts", st.one_of(_TIME, st.integers())),
                       ("dur", st.one_of(_DURATION, st.integers())),
                       ("pid", _INT64), ("tid", _INT64), ("args", _ODD_ARGS)):
        choice = draw(st.sampled_from(["usual"] * 6 + ["odd", "missing"]))
        if choice != "missing":
            event[key] = draw(usual if choice == "usual" else _ODD)
    return event


_ODD_DOCUMENTS = st.one_of(
    st.fixed_dictionaries(
        {"traceEvents": st.lists(_odd_events(), max_size=12)},
        optional={"distributedInfo": st.one_of(_DISTRIBUTED_INFO, _ODD, st.fixed_dictionaries(
            {}, optional={"rank": _ODD, "world_size": _ODD, "backend": _ODD}))}),
    st.lists(_odd_events(), max_size=12))

_BYTES = st.one_of(
    st.binary(max_size=300),
    st.binary(max_size=300).map(gzip.compress),
    st.binary(max_size=300).map(lambda b: gzip.compress(b)[: max(2, len(b) // 2)]),
    st.binary(max_size=300).map(lambda b: b'{"traceEvents": [' + b),
    st.binary(max_size=300).map(lambda b: b"[" + b),
    st.binary(max_size=300).map(lambda b: b"\x1f\x8b" + b),
)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _load_or_trace_error(path: Path) -> RankTrace | None:
    try:
        trace = load(path)
    except TraceError as error:
        assert error.path == path and str(error).startswith(f"{path}: ")
        return None
    assert isinstance(trace, RankTrace)
    return trace


def _analyze_or_trace_error(trace: RankTrace, drop_last_step: bool, per_step: bool) -> None:
    try:
        result = analyze_trace(trace, drop_last_step=drop_last_step, per_step=per_step)
    except TraceError as error:
        assert isinstance(error, UsageError) and str(error).startswith(f"{trace.path}: ")
        return
    assert result.rank == (trace.rank or 0)
    assert 1 <= result.steps <= max(result.total_steps, 1)
    _assert_invariants(result.breakdown)
    if per_step:
        assert len(result.per_step) == result.steps
        for row in result.per_step:
            if row.breakdown.window_us > 0:
                _assert_invariants(row.breakdown)


def _assert_invariants(b) -> None:
    """What every breakdown must satisfy, whatever the trace."""
    assert b.window_us > 0
    for part in (b.compute_us, b.non_compute_us, b.idle_us, b.comm_us, b.overlap_us,
                 b.exposed_comm_us):
        assert part >= -1e-9 * max(1.0, b.window_us), b
    assert b.compute_pct + b.non_compute_pct + b.idle_pct == pytest.approx(100, abs=1e-6)
    assert b.overlap_pct is None or -1e-9 <= b.overlap_pct <= 100 + 1e-9
    assert b.exposed_comm_us <= b.comm_us + 1e-9 * max(1.0, b.window_us)
    assert b.overlap_us + b.exposed_comm_us == pytest.approx(b.comm_us, abs=1e-6 * max(
        1.0, b.window_us))
    assert b.exposed_comm_pct <= 100 + 1e-9


@FUZZ
@given(raw=_BYTES)
def test_fuzz_load_arbitrary_bytes(raw, fuzz_dir):
    _load_or_trace_error(_write(fuzz_dir / "bytes_rank0.json", raw))


@pytest.mark.filterwarnings(_CAST)  # int64 ids near 2**63 (test_ids_read_exactly)
@FUZZ
@given(document=_ODD_DOCUMENTS, gzipped=st.booleans(), drop_last_step=st.booleans(),
       per_step=st.booleans())
def test_fuzz_odd_field_types(document, gzipped, drop_last_step, per_step, fuzz_dir):
    raw = _dumps(document)
    name = "odd_rank0.json.gz" if gzipped else "odd_rank0.json"
    trace = _load_or_trace_error(_write(fuzz_dir / name, gzip.compress(raw) if gzipped else raw))
    if trace is not None:
        _analyze_or_trace_error(trace, drop_last_step, per_step)


#: Found by this fuzz test: ProfilerSteps named only by events on a device stream, so there is
#: no host step to cut the window at.
_STEPS_ON_A_STREAM = {"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#0", "ts": 0, "dur": 0, "pid": 0,
     "tid": "stream 7", "args": {"Collective name": "allreduce", "stream": 0, "correlation": 0}},
    {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "ts": 0, "dur": 0, "pid": 0,
     "tid": "stream 7", "args": {"stream": 0, "correlation": 0}}]}


# a zero-length collective span encloses nothing: its thread's union of spans is empty
_ZERO_LENGTH_COMM_SPAN = {"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#0", "ts": 0, "dur": 0, "pid": 0,
     "tid": "stream 7"},
    {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#0", "ts": 0, "dur": 0, "pid": 0,
     "tid": "stream 7", "args": {"stream": 0, "correlation": "2"}},
    {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 0, "dur": 0, "pid": 0,
     "tid": "stream 7", "args": {"correlation": "2"}}]}


@FUZZ
@given(document=_PLAUSIBLE_DOCUMENTS, drop_last_step=st.booleans(), per_step=st.booleans())
@example(document=_STEPS_ON_A_STREAM, drop_last_step=False, per_step=False)
@example(document=_ZERO_LENGTH_COMM_SPAN, drop_last_step=False, per_step=False)
def test_fuzz_analyze_trace(document, drop_last_step, per_step, fuzz_dir):
    trace = _load_or_trace_error(_write(fuzz_dir / "plausible_rank0.json", document))
    if trace is not None:
        _analyze_or_trace_error(trace, drop_last_step, per_step)
