"""Each input read once, and work in proportion to the input: every trace is opened once per
``analyze`` (advice included), ``analyze`` and ``simulate`` cover the same steps of a run, and
many runs or many steps cost work in proportion to their number (counted, not timed)."""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from trace_builders import span, step, write_trace

from ddpprof.advice.bucket_cap import cap_advice_for_runs
from ddpprof.analysis import AnalysisOptions, analyze_paths
from ddpprof.analysis.options import REPLAYED_STEPS
from ddpprof.cli import main
from ddpprof.metrics import intervals as iv
from ddpprof.simulate.output import to_json_document
from ddpprof.simulate.run import simulate_run
from ddpprof.trace.last_step import LastStep

FLOAT = {"Input type": ["float"]}
MANIFEST = {"schema_version": 3, "status": "complete", "config": {
    "variant": "bucket_ddp_async", "nproc": 2, "backend": "gloo", "grad_accum": 1,
    "bucket_cap_mb": 25.0}}


def training_step(number: int, base: float, rank: int = 0) -> list[dict]:
    """A 1000 µs step of a bucketed run on gloo: forward, a backward producing two gradients
    (1 KiB, 4 KiB), each all-reduced as it is ready (two sizes: a cost model can be fitted),
    the optimizer."""
    events = [step(number, base, base + 1000),
              span("aten::mm", base + 10, base + 200),
              span("autograd::engine::evaluate_function: MmBackward0", base + 200, base + 500)]
    for ready, numel, took in ((300, 256, 40), (500, 1024, 90)):
        events += [span("torch::autograd::AccumulateGrad", base + ready - 20, base + ready,
                        **{"Input Dims": [[numel]], **FLOAT}),
                   span("c10d::allreduce_", base + ready + 1, base + ready + 3),
                   span("gloo:all_reduce", base + ready + 5, base + ready + 5 + took + rank,
                        tid=9, **{"Input Dims": [[numel]], **FLOAT})]
    events.append(span("Optimizer.step#AdamW.step", base + 700, base + 800,
                       cat="user_annotation"))
    return events


def write_run(folder: Path, steps: int = 4, ranks: int = 2) -> Path:
    for rank in range(ranks):
        events = [e for s in range(steps) for e in training_step(s, 1000 * s, rank)]
        write_trace(folder / f"rank{rank}.json", events, rank=rank, world_size=ranks)
    (folder / "run.json").write_text(json.dumps(MANIFEST))
    return folder


@pytest.fixture
def count_opens(monkeypatch, tmp_path):
    """From the call on, every JSON file opened (``open`` or ``os.open``), in this process and
    in the processes it forks, is logged (one line per open) to a file; the call returns a
    function that counts them by path."""
    log = tmp_path / "opened.log"

    def start():
        original = io.open
        original_os_open = os.open

        def note(file) -> None:
            if isinstance(file, str | Path) and str(file).endswith(".json"):
                descriptor = original_os_open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                os.write(descriptor, f"{Path(file).resolve()}\n".encode())
                os.close(descriptor)

        def logging_open(file, *args, **kwargs):
            note(file)
            return original(file, *args, **kwargs)

        def logging_os_open(file, *args, **kwargs):
            note(file)
            return original_os_open(file, *args, **kwargs)

        # The loader reads with os.open and pread; JSON inputs and the rest with open.
        monkeypatch.setattr(io, "open", logging_open)
        monkeypatch.setattr("builtins.open", logging_open)
        monkeypatch.setattr(os, "open", logging_os_open)
        return lambda: Counter(log.read_text().splitlines()) if log.exists() else Counter()

    return start


def _ddpprof(*args: str) -> int:
    """``ddpprof ARGS`` in this process; its exit status."""
    try:
        main([*args, "--quiet"])
    except SystemExit as exit:
        return int(exit.code or 0)
    return 0


def _analyze(*args: str) -> int:
    return _ddpprof("analyze", *args)


@pytest.mark.parametrize("command", [
    ["analyze", "--jobs", "1"], ["analyze", "--jobs", "2"],
    ["analyze", "--jobs", "2", "--critical-path"], ["critical-path"]],
    ids=["analyze", "analyze on 2 processes", "analyze --critical-path", "critical-path"])
def test_each_trace_is_opened_once(command, tmp_path, count_opens):
    run = write_run(tmp_path / "run")
    opened = count_opens()
    assert _ddpprof(*command, str(run), "--json", str(tmp_path / "a.out")) == 0
    if "critical-path" in " ".join(command):
        document = json.loads((tmp_path / "a.out").read_text())
        steps = document.get("critical_path", document).get("steps")
        assert len(steps) == 3   # the graphs were built (4 steps, the last dropped)
    traces = {str((run / f"rank{r}.json").resolve()) for r in (0, 1)}
    assert {path: n for path, n in opened().items() if path in traces} == dict.fromkeys(
        traces, 1)
    # and the run got the bucket-cap advice, whose simulation takes rank 0's trace too
    analysis = analyze_paths([run], AnalysisOptions(jobs=1, replay_graphs=True))
    assert cap_advice_for_runs(analysis.runs)


def test_a_rank_naming_fewer_steps_than_the_run_is_read_once_too(tmp_path, count_opens):
    """Rank 1's trace names one ProfilerStep, rank 0's three: the run drops its last step, and
    rank 1 is analyzed so, from its one read."""
    run = write_run(tmp_path / "run", steps=3)
    write_trace(run / "rank1.json", training_step(0, 0, rank=1), rank=1, world_size=2)
    opened = count_opens()
    [result] = analyze_paths([run], AnalysisOptions(jobs=2)).runs
    assert [r.last_step for r in result.ranks] == [LastStep.DROPPED] * 2
    assert sorted(n for path, n in opened().items() if "rank" in Path(path).name) == [1, 1]


def test_analyze_and_simulate_cover_the_same_steps(tmp_path):
    run = write_run(tmp_path / "run", steps=4, ranks=1)
    for keep in (False, True):
        [analyzed] = analyze_paths([run], AnalysisOptions(jobs=1, per_step=True,
                                                          keep_last_step=keep)).runs
        simulation = simulate_run(run, [1.0], [2], bandwidth_gbps=1.0, latency_us=10.0,
                                  keep_last_step=keep)
        steps = [row.step for row in analyzed.ranks[0].per_step]
        assert steps == simulation.steps
        assert to_json_document(simulation).steps == steps
        assert steps == [f"ProfilerStep#{n}" for n in range(4 if keep else 3)]


def _counting(monkeypatch, module, name: str) -> Counter:
    """Calls of ``module.name``, and the elements of the arrays they were given."""
    counts: Counter = Counter()
    original = getattr(module, name)

    def counted(*args, **kwargs):
        counts["calls"] += 1
        counts["elements"] += sum(a[0].size if isinstance(a, tuple) else 0 for a in args)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return counts


def test_the_simulators_work_is_bounded_in_the_steps(tmp_path, monkeypatch):
    """A long trace is replayed on at most ``REPLAYED_STEPS`` of its steps, spread over the
    window, each a constant number of times (one per row; caps making the same buckets
    once)."""
    import ddpprof.simulate.steps as module

    replays = {}
    for steps in (10, 40):
        run = write_run(tmp_path / f"run{steps}", steps=steps, ranks=1)
        counts = Counter()
        original = module.replay_edited
        monkeypatch.setattr(module, "replay_edited",
                            lambda *a, counts=counts, original=original, **k:
                            counts.update(["replays"]) or original(*a, **k))
        simulation = simulate_run(run, [1.0, 25.0], [2, 4], bandwidth_gbps=1.0,
                                  latency_us=10.0)
        assert len(simulation.steps) == min(steps - 1, REPLAYED_STEPS)
        replays[steps] = counts["replays"] / len(simulation.steps)
        monkeypatch.undo()
    assert replays[40] == replays[10]


def test_analyze_per_step_work_grows_with_the_steps(tmp_path, monkeypatch):
    from ddpprof.metrics import breakdown

    work = {}
    for steps in (10, 40):
        run = tmp_path / f"run{steps}"
        write_trace(run / "rank0.json", [e for s in range(steps)
                                          for e in training_step(s, 1000 * s)], world_size=1)
        intersect = _counting(monkeypatch, iv, "intersect")
        host = _counting(monkeypatch, breakdown, "host_breakdown")
        [result] = analyze_paths([run], AnalysisOptions(jobs=1, per_step=True)).runs
        assert len(result.ranks[0].per_step) == steps - 1
        work[steps] = intersect["elements"] + host["elements"]
        monkeypatch.undo()
    assert work[40] <= 4.5 * work[10]


def test_many_rankless_traces_list_the_folder_once(tmp_path, monkeypatch):
    """A folder of rankless traces is one run per trace: the folder is listed once, not once
    per run (the advice used to discover each run's folder again)."""
    listed = {}
    for count in (3, 12):
        folder = tmp_path / f"many{count}"
        for k in range(count):
            write_trace(folder / f"model_{chr(ord('a') + k)}.json", [
                e for s in range(3) for e in training_step(s, 1000 * s)], rank=None)
        calls = Counter()
        original = os.scandir

        def scandir(path=".", _original=original, _calls=calls):
            _calls["scandir"] += 1
            return _original(path)

        monkeypatch.setattr(os, "scandir", scandir)
        code = _analyze(str(folder), "--jobs", "1", "--json", str(tmp_path / "a.out"))
        monkeypatch.undo()
        assert code == 0
        assert len(json.loads((tmp_path / "a.out").read_text())["runs"]) == count
        listed[count] = calls["scandir"]
    assert listed[12] == listed[3]


@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 30)), max_size=12),
       st.integers(-60, 90), st.integers(0, 60))
def test_interval_window_is_the_intersection_with_one_interval(spans, lo, width):
    intervals = iv.union(np.array([s for s, _ in spans], dtype=float),
                         np.array([s + w for s, w in spans], dtype=float))
    expected = iv.intersect(intervals, (np.array([float(lo)]), np.array([float(lo + width)])))
    got = iv.window(intervals, lo, lo + width)
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])


def test_a_rank_with_no_step_in_a_run_of_steps_is_one_line(tmp_path):
    run = write_run(tmp_path / "run", steps=3)
    write_trace(run / "rank1.json", [span("aten::mm", 0, 10)], rank=1, world_size=2)
    analysis = analyze_paths([run], AnalysisOptions(jobs=1))
    [problem] = analysis.errors
    assert problem.error == (f"{run / 'rank1.json'}: no ProfilerStep, while the run's other "
                             "traces name two or more: its ranks have no steps in common")
