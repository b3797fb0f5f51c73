"""``ddpprof.Job``: each analyzer against numbers worked out on paper from a tiny two-rank
trace, its cache, its frozen results, their tables, and a real GPU trace."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import ddpprof
from ddpprof import job as job_module
from ddpprof.advice.rules import EXPOSED_PCT, NO_OVERLAP_PCT
from ddpprof.core.errors import UsageError
from ddpprof.graph.path import COMMUNICATION, COMPUTE, HOST, WAITING
from ddpprof.graph.whatif import Edit
from tests.trace_builders import (
    GRADIENT_100KB,
    gloo_reduce,
    span,
    step,
    two_buckets,
    write_trace,
)

FIXTURES = Path(__file__).parent / "fixtures"
#: 100,000 bytes of float32, on a group of both ranks
ALL_REDUCE = {**GRADIENT_100KB, "Group size": 2}


def _run(folder: Path, scale: float = 1.0) -> Path:
    """Two gloo ranks, ProfilerSteps 0-100, 100-200 and 200-300 (the last dropped), times
    multiplied by ``scale``. Rank 0: mm 10-60 and 110-160, all-reduces 40-90 and 140-190.
    Rank 1: mm 10-70 and 110-170, all-reduces 50-90 and 150-190 (it arrives last)."""
    for rank, (mm_end, reduce_start) in enumerate([(60, 40), (70, 50)]):
        events = [step(s, 100 * s * scale, 100 * (s + 1) * scale) for s in range(3)]
        for o in (0, 100):
            events += [span("aten::mm", (o + 10) * scale, (o + mm_end) * scale),
                       span("gloo:all_reduce", (o + reduce_start) * scale, (o + 90) * scale,
                            cat="user_annotation", tid=2, **ALL_REDUCE)]
        write_trace(folder / f"rank{rank}.json", events, rank=rank, world_size=2)
    return folder


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> ddpprof.Job:
    return ddpprof.Job.load(_run(tmp_path_factory.mktemp("job") / "run"), jobs=1)


def test_breakdown_by_hand(job):
    """Window: steps 0-200. Rank 0: compute 10-60, 110-160 = 100 (50 %); communication
    40-90, 140-190 = 100, of which 40-60, 140-160 beside compute = 40 (overlap 40 %), 60
    exposed (30 %); busy 10-90, 110-190 = 160, idle 40 (20 %). Rank 1: compute 120 (60 %),
    communication 80, overlap 50-70, 150-170 = 40 (50 %), exposed 40 (20 %), idle 40."""
    result = job.breakdown()
    assert result.last_step == "dropped"
    first, second = result.ranks
    assert (first.rank, first.kind, first.steps, first.window_us) == (0, "cpu", 2, 200)
    assert (first.compute_us, first.comm_us, first.overlap_us, first.exposed_comm_us,
            first.idle_us) == pytest.approx((100, 100, 40, 60, 40))
    assert (first.compute_pct, first.overlap_pct, first.exposed_comm_pct,
            first.idle_pct) == pytest.approx((50, 40, 30, 20))
    assert (second.compute_pct, second.overlap_pct, second.exposed_comm_pct,
            second.idle_pct) == pytest.approx((60, 50, 20, 20))
    frame = result.to_pandas()
    assert list(frame["rank"]) == [0, 1]
    assert {"window_us", "compute_pct", "non_compute_pct", "idle_pct", "overlap_pct",
            "exposed_comm_pct"} <= set(frame.columns)


def test_overlap_and_collectives_by_hand(job):
    """Each rank's all-reduces overlap as its whole communication does (40 %, 50 %). Rank 0:
    2 calls of 50 µs, 100,000 bytes each: 200,000 bytes in 100 µs = 2 GB/s, and on a group of
    2 the bus factor 2(n-1)/n is 1; rank 1: 2 calls of 40 µs, 2.5 GB/s."""
    overlap = job.overlap()
    assert [r.rank for r in overlap.ranks] == [0, 1]
    assert [r.overlap_pct for r in overlap.ranks] == pytest.approx([40, 50])
    assert [dict(r.by_kind) for r in overlap.ranks] == [
        {"all_reduce": pytest.approx(40)}, {"all_reduce": pytest.approx(50)}]
    assert list(overlap.to_pandas().columns)[-1] == "all_reduce_overlap_pct"
    rows = job.collectives().rows
    assert [(r.rank, r.collective, r.calls) for r in rows] == [(0, "all_reduce", 2),
                                                                (1, "all_reduce", 2)]
    assert [value for r in rows for value in (
        r.total_us, r.mean_us, r.bytes_per_call, r.algbw_gbps, r.busbw_gbps, r.overlap_pct)
    ] == pytest.approx([100, 50, 100_000, 2.0, 2.0, 40, 80, 40, 100_000, 2.5, 2.5, 50])
    assert {"rank", "collective", "calls", "total_us", "bytes_per_call", "algbw_gbps",
            "busbw_gbps", "overlap_pct"} <= set(job.collectives().to_pandas().columns)


def test_waits_and_process_groups_by_hand(job):
    """Rank 1 arrives last (50, then 150): each transfer runs from its arrival to 90 (190),
    40 µs; rank 0 waits 10 µs a call, which rank 1 caused. Over 2 steps: rank 0 waits 20 and
    transfers 80; rank 1 waits 0, transfers 80 and caused 20."""
    waits = job.waits()
    assert waits.slowest_rank == 1
    assert [value for w in waits.ranks for value in (
        w.rank, w.wait_us, w.transfer_us, w.caused_wait_us, w.matched_calls)
    ] == pytest.approx([0, 20, 80, 0, 2, 1, 0, 80, 20, 2])
    assert list(waits.to_pandas()["wait_us"]) == pytest.approx([20, 0])
    groups = job.process_groups()
    (group,) = groups.groups
    # one call per step on each rank; its time is the calls' union: 50 (40) µs a step
    assert (group.ranks, group.calls_per_step) == (2, 1)
    assert [value for r in groups.ranks for value in (r.rank, r.calls, r.comm_ms_per_step)
            ] == pytest.approx([0, 2, 0.05, 1, 2, 0.04])
    assert len(groups.to_pandas()) == 1


def test_findings_say_blocking_communication(tmp_path):
    """One rank, steps of 1000 µs: mm 10-400, then an all-reduce 400-600 beside nothing.
    Overlap 0 % (below no_overlap's threshold) and exposed communication 200 of 1000 µs,
    20 % (above its floor): no_overlap, its evidence those two figures."""
    assert NO_OVERLAP_PCT > 0 and EXPOSED_PCT < 20
    events = [step(s, 1000 * s, 1000 * (s + 1)) for s in range(3)]
    for base in (0, 1000, 2000):
        events += [span("aten::mm", base + 10, base + 400),
                   gloo_reduce(base + 400, base + 600)]
    write_trace(tmp_path / "blocking" / "rank0.json", events, world_size=1)
    found = ddpprof.Job.load(tmp_path / "blocking", jobs=1).findings()
    (blocking,) = [f for f in found.findings if f.code == "no_overlap"]
    assert {e.name: e.value for e in blocking.evidence} == pytest.approx(
        {"overlap_pct": 0, "exposed_comm_pct": 20})
    assert {"code", "severity", "message", "rank"} <= set(found.to_pandas().columns)


def test_each_analyzer_computes_once(tmp_path, monkeypatch):
    job = ddpprof.Job.load(_run(tmp_path / "run"), jobs=1)
    calls = []
    real = job_module.RankBreakdown.of
    monkeypatch.setattr(job_module.RankBreakdown, "of",
                        classmethod(lambda cls, rank: calls.append(rank.rank) or real(rank)))
    first = job.breakdown()
    assert job.breakdown() is first and calls == [0, 1]
    counted = []
    real_findings = job_module.findings
    monkeypatch.setattr(job_module, "findings",
                        lambda *a, **k: counted.append(1) or real_findings(*a, **k))
    assert job.findings() is job.findings() and counted == [1]


def test_results_are_frozen(job):
    for result in (job.breakdown(), job.overlap(), job.collectives(), job.waits(),
                   job.process_groups(), job.buckets(), job.overlap_tax(), job.findings()):
        name = dataclasses.fields(result)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(result, name, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.breakdown().ranks[0].compute_pct = 0.0   # type: ignore[misc]
    with pytest.raises(AttributeError):
        job.diff(job).pair.verdict = "x"


def test_empty_answers_where_the_trace_has_none(tmp_path):
    """One rank, no collectives: no waits, no collectives, no process groups, no buckets,
    no overlap tax."""
    write_trace(tmp_path / "alone" / "rank0.json",
                [step(0, 0, 100), step(1, 100, 200), span("aten::mm", 10, 60)], world_size=1)
    alone = ddpprof.Job.load(tmp_path / "alone", jobs=1)
    assert alone.breakdown().ranks[0].compute_pct == pytest.approx(50)
    assert alone.breakdown().ranks[0].overlap_pct is None
    assert alone.waits().ranks == () and alone.waits().slowest_rank is None
    assert alone.collectives().rows == () and alone.process_groups().groups == ()
    assert alone.buckets().buckets == ()
    # the tax's rows are there, each without a figure: no op was seen beside a collective
    tax = alone.overlap_tax()
    assert (tax.compute_tax_pct, tax.comm_tax_pct) == (None, None)
    assert all(row.tax_pct is None and row.keys == 0 for row in tax.rows)
    assert alone.collectives().to_pandas().empty
    with pytest.raises(UsageError, match=r"run\.json"):
        alone.memory()


def test_buckets_by_hand(tmp_path):
    """``two_buckets``: all-reduces 320-420 and 640-740 µs of a step starting at 0, each
    launched just after its gradient (300-310, 620-630), 100,000 bytes each."""
    two_buckets(tmp_path / "bucketed")
    result = ddpprof.Job.load(tmp_path / "bucketed", jobs=1).buckets()
    assert (result.rank, result.step) == (0, "ProfilerStep#1")
    assert [value for b in result.buckets for value in (b.size_bytes, b.launched_ms, b.done_ms)
            ] == pytest.approx([100_000, 0.32, 0.42, 100_000, 0.64, 0.74])
    assert list(result.to_pandas()["launched_ms"]) == pytest.approx([0.32, 0.64])


def test_diff_and_gate_between_two_jobs(tmp_path, job):
    """The same run at twice the time scale: every step 200 µs instead of 100, so the step
    is 0.1 ms longer; its shares are the same, so the default rule (overlap) passes, and
    ``step_ms <= baseline * 1.5`` (0.2 against 0.15) fails."""
    slower = ddpprof.Job.load(_run(tmp_path / "slower", scale=2.0), jobs=1)
    diff = job.diff(slower)
    assert diff.step_delta_ms == pytest.approx(0.1)
    assert sum(diff.to_pandas()["delta_ms"]) + diff.pair.unattributed_ms == pytest.approx(0.1)
    assert job.diff(job).step_delta_ms == 0
    assert slower.gate(job).passed
    gate = slower.gate(job, ["step_ms <= baseline * 1.5"])
    assert not gate.passed
    (verdict,) = gate.verdicts
    assert (verdict.baseline, verdict.current, verdict.threshold) == pytest.approx(
        (0.1, 0.2, 0.15))
    assert list(gate.to_pandas()["verdict"]) == ["FAIL"]


def test_gate_against_an_analyze_json_file(tmp_path, job):
    from ddpprof.analysis import to_json_document
    from ddpprof.analysis.results import Analysis

    (tmp_path / "base.json").write_text(json.dumps(to_json_document(Analysis([job.run], []))))
    assert job.gate(tmp_path / "base.json", ["overlap_pct >= baseline"]).passed
    assert not job.gate(tmp_path / "base.json", ["overlap_pct >= baseline + 1"]).passed


def test_critical_path_and_simulate_on_the_hand_computed_fixture():
    """tests/test_critical_path.py works the path out: rank 1's mm (45 µs on the path),
    waiting for rank 1 18, the transfer 15, rank 0's host 9 and compute 13; GEMMs 20 %
    faster end the step at 88 µs instead of 100."""
    job = ddpprof.Job.load(FIXTURES / "critical-path" / "cpu-two-rank", jobs=1)
    (path,) = job.critical_path().steps
    assert path.step_us == pytest.approx(100)
    split = {(row.category, row.rank): row.us for row in path.split}
    assert split == pytest.approx({(COMPUTE, 1): 45, (WAITING, 1): 18, (COMMUNICATION, 0): 15,
                                   (HOST, 0): 9, (COMPUTE, 0): 13})
    assert set(job.critical_path().to_pandas().columns) >= {"step", "category", "rank", "us"}
    faster = job.simulate([Edit("faster", "gemm", 20)])
    assert faster.edits == ("gemm 20% faster",)
    assert faster.rows and {"step_ms", "world_size"} <= set(faster.to_pandas().columns)


def test_load_refuses_a_folder_of_runs_naming_them(tmp_path):
    _run(tmp_path / "runs" / "a")
    _run(tmp_path / "runs" / "b")
    with pytest.raises(UsageError, match=r"holds 2 runs \(a, b\).*Job.load_all"):
        ddpprof.Job.load(tmp_path / "runs", jobs=1)
    both = ddpprof.Job.load_all(tmp_path / "runs", jobs=1)
    assert [j.name for j in both] == ["a", "b"] and both["b"].name == "b"
    # a job's findings are the set's for its run, in the set's order
    for name in ("a", "b"):
        assert list(both[name].findings().findings) == [
            f for f in both.findings().findings if f.run == name]


def test_memory_of_a_recorded_run():
    """pytorch_ddp's run.json: 1,462,538 fp32 parameters under AdamW, replicated (world
    size 1): 16 bytes each = 23,400,608 estimated; measured params + grads + optimizer =
    5,850,152 + 5,850,152 + 11,700,336 = 23,400,640."""
    memory = ddpprof.Job.load(FIXTURES / "ddpprof-h100" / "pytorch_ddp", jobs=1).memory()
    (rank,) = memory.ranks
    assert (rank.estimated_bytes, rank.measured_bytes) == (23_400_608, 23_400_640)
    assert list(memory.to_pandas()["error_pct"]) == pytest.approx([32 / 23_400_608 * 100])


def test_a_real_gpu_trace_answers_every_analyzer():
    job = ddpprof.Job.load(FIXTURES / "hta-gpu" / "two-rank", jobs=1)
    document = json.loads(json.dumps([r.compute_pct for r in job.breakdown().ranks]))
    assert len(document) == 2 and all(0 < pct <= 100 for pct in document)
    assert job.collectives().rows and job.process_groups().groups
    assert job.waits().ranks and job.summary().ranks == 2
    for table in (job.breakdown(), job.overlap(), job.collectives(), job.waits(),
                  job.process_groups(), job.overlap_tax(), job.findings()):
        table.to_pandas()


def test_empty_tables_keep_their_columns(tmp_path):
    write_trace(tmp_path / "alone" / "rank0.json",
                [step(0, 0, 100), step(1, 100, 200), span("aten::mm", 10, 60)], world_size=1)
    alone = ddpprof.Job.load(tmp_path / "alone", jobs=1)
    assert list(alone.collectives().to_pandas().columns)[:3] == ["rank", "collective", "calls"]
    assert "wait_us" in alone.waits().to_pandas().columns
    assert {"code", "message"} <= set(alone.findings().to_pandas().columns)
