""""What to change": every rule on synthetic traces that trigger it and traces that must not,
and per-bucket attribution worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trace_builders import kernel, launch, span, step, write_trace

from ddpprof.advice import CapAdvice, CapReplay, findings
from ddpprof.analysis import AnalysisOptions, analyze_paths

FLOAT = {"Input type": ["float"]}


def grad(start: float, end: float, numel: int) -> dict:
    return span("torch::autograd::AccumulateGrad", start, end,
                **{"Input Dims": [[numel]], **FLOAT})


def reduce(start: float, end: float, numel: int, tid: int = 9) -> dict:
    return span("gloo:all_reduce", start, end, cat="user_annotation", tid=tid,
                **{"Input Dims": [[numel]], **FLOAT})


def cpu_run(folder: Path, body, ranks: int = 1, manifest: dict | None = None) -> Path:
    """Three 1000 µs steps (the last dropped); ``body(base, rank)`` gives a step's events."""
    for rank in range(ranks):
        events = [step(s, 1000 * s, 1000 * (s + 1)) for s in range(3)]
        for s in range(3):
            events += body(1000 * s, rank)
        write_trace(folder / f"rank{rank}.json", events, rank=rank, world_size=ranks)
    if manifest is not None:
        (folder / "run.json").write_text(json.dumps(manifest))
    return folder


def codes(folder: Path, advice: CapAdvice | None = None) -> dict[str, object]:
    [run] = analyze_paths([folder], AnalysisOptions(jobs=1)).runs
    return {f.code: f for f in findings([run], {run.name: advice} if advice else None)}


def backward(base: float, late_launch: bool, launch_at: float = 510) -> list[dict]:
    """Backward from 100 to 500: four gradients of 1000 floats (4000 B) ready at 200, 300, 400,
    500; then either one all-reduce of all 16000 B at ``launch_at`` (after backward), or four
    launched as each gradient is ready."""
    events = [span("aten::mm", base + 20, base + 100)]
    events += [grad(base + t - 10, base + t, 1000) for t in (200, 300, 400, 500)]
    if late_launch:
        events.append(reduce(base + launch_at, base + 700, 4000))
    else:
        events += [reduce(base + t + 5, base + t + 60, 1000) for t in (200, 300, 400, 500)]
    return events


def test_bucket_timeline_by_hand(tmp_path):
    folder = cpu_run(tmp_path / "run", lambda base, rank: backward(base, late_launch=False))
    [run] = analyze_paths([folder]).runs
    timeline = run.ranks[0].buckets
    # the middle of the two analyzed steps; times from its start
    assert timeline.step == "ProfilerStep#1" and timeline.backward_end_ms == 0.5
    assert timeline.first_gradient_ms == 0.2
    rows = timeline.buckets
    assert [(b.ready_ms, b.launched_ms, b.done_ms) for b in rows] == [
        (0.2, 0.205, 0.26), (0.3, 0.305, 0.36), (0.4, 0.405, 0.46), (0.5, 0.505, 0.56)]
    # only the last sticks out after backward (ends at 0.5 ms): 0.055 ms of it
    assert [round(b.exposed_ms, 6) for b in rows] == [0, 0, 0, 0.055]
    assert all(b.gradients == 1 and b.size_bytes == 4000 for b in rows)


def test_one_bucket_matched_to_its_four_gradients(tmp_path):
    folder = cpu_run(tmp_path / "run", lambda base, rank: backward(base, late_launch=True))
    [run] = analyze_paths([folder]).runs
    [bucket] = run.ranks[0].buckets.buckets
    assert (bucket.gradients, bucket.size_bytes, bucket.ready_ms) == (4, 16000, 0.5)
    assert bucket.exposed_ms == pytest.approx(0.19)


RECORDED = {"status": "complete", "schema_version": 3, "config": {"variant": "bucket_ddp_async",
                                                                  "grad_accum": 1}}


def test_bucket_cap_too_large(tmp_path):
    # a foreign trace (no run.json): the mechanism, not ddpprof's flag
    foreign = codes(cpu_run(tmp_path / "foreign", lambda b, r: backward(b, late_launch=True)))
    assert "DDP's bucket_cap_mb=" in foreign["bucket_cap_too_large"].message
    assert "--" not in foreign["bucket_cap_too_large"].message
    late = codes(cpu_run(tmp_path / "late", lambda b, r: backward(b, late_launch=True),
                         manifest=RECORDED))
    finding = late["bucket_cap_too_large"]
    assert "--bucket-cap-mib" in finding.message
    # launched at 510 µs, backward from the first gradient (200) to the last (500): 103.3 %
    assert {e.name: e.value for e in finding.evidence}["first_launch_into_backward"] == 103.3
    assert "starts only after backward's last gradient, so none of it overlaps" in \
        finding.message
    # with the simulator's prediction, the cap it names and its gain
    advice = CapAdvice(half_bandwidth_bytes=None,
                       replay=CapReplay(current_cap_mib=25, best_cap_mib=1, current_step_ms=10,
                                        best_step_ms=8))
    advised = codes(tmp_path / "late", advice)["bucket_cap_too_large"]
    assert "--bucket-cap-mib 1 " in advised.message
    assert advised.estimated_gain_pct == pytest.approx(20)
    # launched at 450, before the last gradient: (450 − 200) / (500 − 200) = 83 %
    inside = codes(cpu_run(tmp_path / "inside", lambda b, r: backward(b, True, launch_at=450),
                           manifest=RECORDED))["bucket_cap_too_large"]
    assert "starts 83% into backward, so little can overlap" in inside.message
    early = codes(cpu_run(tmp_path / "early", lambda b, r: backward(b, late_launch=False)))
    assert "bucket_cap_too_large" not in early


def test_latency_bound(tmp_path):
    def many(base: float, rank: int) -> list[dict]:
        return [span("aten::mm", base + 10, base + 900),
                *(reduce(base + 10 + 80 * i, base + 60 + 80 * i, 1000) for i in range(10))]

    folder = cpu_run(tmp_path / "small", many)
    advice = CapAdvice(half_bandwidth_bytes=1e6)   # 4 kB calls vs 1 MB
    found = codes(folder, advice)["latency_bound"]
    assert {e.name: e.value for e in found.evidence}["mean_bytes_per_call"] == 4000
    assert "latency_bound" not in codes(folder, CapAdvice(10_000))
    # no cost model: 4,000 B calls against the 64 KiB floor, said so, at medium confidence
    floor = codes(folder)["latency_bound"]
    evidence = {e.name: e.value for e in floor.evidence}
    assert (evidence["half_bandwidth_bytes"], evidence["half_bandwidth_from"]) == (65536, "floor")
    assert floor.confidence == "medium" and "no cost model for this run" in floor.message


def test_latency_bound_on_a_foreign_trace_fits_its_own_transfers(tmp_path):
    """No run.json: no replay, and the half-bandwidth size comes from a fit over rank 0's
    transfers. 2 ranks arriving together, 8 all-reduces a step alternating 4000 B in 100 µs
    and 8000 B in 104 µs (traffic = size on 2 ranks): t = 96 µs + traffic / (1000 B/µs), so
    α·β = 96,000 B, and the 6000 B mean call is below a quarter of it."""
    from ddpprof.advice.bucket_cap import cap_advice_for_runs

    def calls(base: float, rank: int) -> list[dict]:
        return [reduce(base + 10 + 110 * i, base + 10 + 110 * i + (104 if i % 2 else 100),
                       2000 if i % 2 else 1000) for i in range(8)]

    folder = cpu_run(tmp_path / "foreign", calls, ranks=2)
    [run] = analyze_paths([folder], AnalysisOptions(jobs=1)).runs
    advice = cap_advice_for_runs([run])[run.name]
    assert advice.replay is None
    assert advice.half_bandwidth_bytes == pytest.approx(96_000)
    found = {f.code: f for f in findings([run], {run.name: advice})}["latency_bound"]
    assert {e.name: e.value for e in found.evidence}["half_bandwidth_bytes"] == 96_000


def test_step_graphs_for_the_advice_only_for_recorded_runs(tmp_path):
    """The bucket-cap advice replays a recorded run's bucketed step; a foreign trace's findings
    name no cap, so its graphs are not built."""
    def body(base: float, rank: int) -> list[dict]:
        return backward(base, late_launch=False)

    options = AnalysisOptions(jobs=1, replay_graphs=True)
    [foreign] = analyze_paths([cpu_run(tmp_path / "foreign", body)], options).runs
    [recorded] = analyze_paths([cpu_run(tmp_path / "recorded", body, manifest=RECORDED)],
                               options).runs
    assert foreign.ranks[0].buckets is not None and recorded.ranks[0].buckets is not None
    assert foreign.ranks[0].graph_steps is None
    assert recorded.ranks[0].graph_steps is not None


def test_exposed_tail(tmp_path):
    def tail(length: float):
        def body(base: float, rank: int) -> list[dict]:
            return [span("aten::mm", base + 10, base + 500),
                    grad(base + 200, base + 250, 1000), grad(base + 450, base + 500, 1000),
                    reduce(base + 260, base + 300, 1000),
                    reduce(base + 505, base + 505 + length, 1000)]
        return body

    assert "exposed_tail" in codes(cpu_run(tmp_path / "long", tail(300)))
    assert "exposed_tail" not in codes(cpu_run(tmp_path / "short", tail(50)))


def test_straggler(tmp_path):
    """Rank 1's mm runs 200 µs longer (490 against 290 µs, one call each): rank 0 waits
    200 µs of each 1000 µs step in its all-reduce, with nothing else running: the same work,
    done 490 / 290 = 1.69× slower (tests/test_rank_findings.py has the other causes)."""
    def late(by: float):
        def body(base: float, rank: int) -> list[dict]:
            delay = by if rank == 1 else 0
            return [span("aten::mm", base + 10, base + 300 + delay),
                    reduce(base + 300 + delay, base + 600, 1000)]
        return body

    found = codes(cpu_run(tmp_path / "skewed", late(200), ranks=2))["slow_rank_contended"]
    assert found.rank == 1 and {e.name: e.value for e in found.evidence}["rank"] == 1
    assert {e.name: e.value for e in found.evidence}["slowdown"] == pytest.approx(1.69, abs=0.01)
    assert found.estimated_gain_pct == pytest.approx(20)   # rank 0 waits 200 of 1000 µs
    assert not any(f.rank is not None for f in codes(cpu_run(tmp_path / "even", late(0),
                                                             ranks=2)).values())


def test_no_overlap(tmp_path):
    def blocking(base: float, rank: int) -> list[dict]:
        return [span("aten::mm", base + 10, base + 400), reduce(base + 400, base + 600, 1000)]

    def overlapped(base: float, rank: int) -> list[dict]:
        return [span("aten::mm", base + 10, base + 600), reduce(base + 300, base + 500, 1000)]

    assert "no_overlap" in codes(cpu_run(tmp_path / "blocking", blocking))
    assert "no_overlap" not in codes(cpu_run(tmp_path / "overlapped", overlapped))


def gpu_run(folder: Path, host_busy: bool) -> Path:
    """Two steps; kernels at [10,20) and [60,70) of each with the device idle between: the
    host is either running an op through the gap or doing nothing."""
    events = [step(0, 0, 100), step(1, 100, 200)]
    for s, base in enumerate((0, 100)):
        events += [launch(base + 1, 10 * s + 1), launch(base + 50, 10 * s + 2),
                   kernel("gemm", base + 10, base + 20, 10 * s + 1),
                   kernel("gemm", base + 60, base + 70, 10 * s + 2)]
        if host_busy:
            events.append(span("aten::index_put_", base + 20, base + 60))
    write_trace(folder / "rank0.json", events, world_size=1, backend="nccl")
    return folder


def test_host_bound(tmp_path):
    found = codes(gpu_run(tmp_path / "busy", host_busy=True))["host_bound"]
    assert {e.name: e.value for e in found.evidence}["idle_pct"] == pytest.approx(66.67,
                                                                                abs=0.01)
    assert "host_bound" not in codes(gpu_run(tmp_path / "idle", host_busy=False))


def test_dataloader(tmp_path):
    def loading(length: float):
        def body(base: float, rank: int) -> list[dict]:
            return [span("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                         base + 1, base + 1 + length, cat="user_annotation"),
                    span("aten::mm", base + 200, base + 900)]
        return body

    assert "dataloader" in codes(cpu_run(tmp_path / "slow", loading(150)))
    assert "dataloader" not in codes(cpu_run(tmp_path / "fast", loading(20)))


def test_grad_accum_opportunity(tmp_path):
    def exposed(base: float, rank: int) -> list[dict]:
        return [span("aten::mm", base + 10, base + 400), reduce(base + 400, base + 800, 1000)]

    found = codes(cpu_run(tmp_path / "single_step", exposed))["grad_accum_opportunity"]
    assert found.estimated_gain_pct == pytest.approx(20)   # 40 % exposed, halved
    assert "no_sync in DDP" in found.message and "--grad-accum" not in found.message
    recorded = codes(cpu_run(tmp_path / "recorded", exposed, manifest=RECORDED))
    assert "--grad-accum 2" in recorded["grad_accum_opportunity"].message
    accumulated = cpu_run(tmp_path / "accumulated", exposed,
                          manifest={"status": "complete", "schema_version": 3, "config": {
                              "variant": "simple_ddp_ga", "grad_accum": 2}})
    assert "grad_accum_opportunity" not in codes(accumulated)


def test_findings_are_ranked_by_gain(tmp_path):
    def bad(base: float, rank: int) -> list[dict]:
        delay = 300 if rank == 1 else 0
        return [span("aten::mm", base + 10, base + 100 + delay),
                reduce(base + 100 + delay, base + 900, 1000)]

    [run] = analyze_paths([cpu_run(tmp_path / "bad", bad, ranks=2)]).runs
    gains = [f.estimated_gain_pct or 0 for f in findings([run])]
    assert len(gains) >= 2 and gains == sorted(gains, reverse=True)


def test_no_overlap_supersedes_exposed_tail(tmp_path):
    """Blocking communication: every reduction runs after backward, so the last one sticks
    out, but the cause is the blocking, not the last bucket's size: only no_overlap is said."""
    def blocking(base: float, rank: int) -> list[dict]:
        # backward's four gradients ready by 500, then their four reductions one after another,
        # 120 µs each: the last runs [865, 985), 12% of the 1000 µs step past backward
        events = [e for e in backward(base, late_launch=False) if e["name"] == "aten::mm"
                  or "AccumulateGrad" in e["name"]]
        return events + [reduce(base + 505 + 120 * i, base + 625 + 120 * i, 1000)
                         for i in range(4)]

    found = codes(cpu_run(tmp_path / "blocking", blocking))
    assert "no_overlap" in found and "exposed_tail" not in found


def test_bucket_cap_too_small(tmp_path):
    """Eight gradients of 1000 floats ready every 100 µs, each reduced alone (4000 B a call):
    with a half-bandwidth size of 100 kB every bucket is below it; it hides latency_bound
    (the same eight calls, below a quarter of it)."""
    def small(base: float, rank: int) -> list[dict]:
        events = [span("aten::mm", base + 10, base + 900)]
        for k in range(8):
            ready = base + 100 * (k + 1)
            events += [grad(ready - 10, ready, 1000), reduce(ready + 5, ready + 60, 1000)]
        return events

    folder = cpu_run(tmp_path / "small", small)
    found = codes(folder, CapAdvice(half_bandwidth_bytes=100_000))
    assert "latency_bound" not in found
    numbers = {e.name: e.value for e in found["bucket_cap_too_small"].evidence}
    assert (numbers["buckets_per_step"], numbers["mean_bucket_bytes"]) == (8, 4000)
    assert numbers["recommended_cap_mib"] == 0.38        # 4 × 100 kB
    assert "bucket_cap_too_small" not in codes(folder, CapAdvice(half_bandwidth_bytes=3000))


def test_comm_bound(tmp_path):
    """mm 10-110 (forward and backward), the all-reduce 60-560 on gloo's thread, then the
    optimizer 560-760: 500 µs of communication against 100 µs of the work a batch brings
    (300 µs of compute less the optimizer's 200), 450 µs exposed (45% of the step). It
    hides grad_accum_opportunity. With 700 µs of mm, the work outweighs it."""
    def body(mm_us: float):
        def events(base: float, rank: int) -> list[dict]:
            return [span("aten::mm", base + 10, base + 10 + mm_us),
                    reduce(base + 60, base + 560, 1000),
                    span("Optimizer.step#AdamW.step", base + 560, base + 760,
                         cat="user_annotation"),
                    span("aten::add_", base + 560, base + 760)]
        return events

    found = codes(cpu_run(tmp_path / "small", body(100)))
    assert "grad_accum_opportunity" not in found and "no_overlap" not in found
    numbers = {e.name: e.value for e in found["comm_bound"].evidence}
    assert (numbers["comm_ms_per_step"], numbers["forward_backward_ms_per_step"]) == (0.5, 0.1)
    assert numbers["exposed_comm_pct"] == 45.0 and found["comm_bound"].severity == "high"
    assert "comm_bound" not in codes(cpu_run(tmp_path / "large", body(700)))


def test_host_bound_on_cpu(tmp_path):
    """mm 0-400, then tiny adds of 5 µs each, 1 µs apart: 100 of them make one stretch of
    tiny ops from 400 to 999 µs (the gaps between them included), 59.9% of the 1000 µs step;
    10 of them are no stretch (it takes 20 in a row)."""
    def tiny(count: int):
        def body(base: float, rank: int) -> list[dict]:
            return [span("aten::mm", base, base + 400),
                    *(span("aten::add", base + 400 + 6 * k, base + 405 + 6 * k)
                      for k in range(count))]
        return body

    found = codes(cpu_run(tmp_path / "many", tiny(100)))["host_bound"]
    numbers = {e.name: e.value for e in found.evidence}
    assert numbers["tiny_op_calls_per_step"] == 100
    assert numbers["tiny_op_stretches_ms_per_step"] == pytest.approx(0.599)
    assert numbers["share_of_step"] == pytest.approx(59.9)
    assert "host_bound" not in codes(cpu_run(tmp_path / "few", tiny(10)))
