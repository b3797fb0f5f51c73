"""GPU numbers against HTA 0.5.0 run live, in both of its timestamp modes.

* default: timestamps as recorded, equal to HTA with ``HTA_DISABLE_NS_ROUNDING=1`` within
  0.05 percentage points;
* ``--hta-compat``: HTA's defaults, ns rounding included, within 0.1 pp.

On the real traces in ``tests/fixtures/`` (HTA's own test data, TraceLens's H100/B200 traces,
MTIA) and on nanosecond traces this test builds, full of sub-µs kernels that HTA's rounding
distorts.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from trace_builders import write_trace

from ddpprof.analysis import AnalysisOptions, analyze_paths

pytest.importorskip("hta", reason="HolisticTraceAnalysis is part of the test extra")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REAL = ["hta-gpu/nccl-data", "hta-gpu/two-rank", "real-traces/hta-mtia-single-rank",
        "real-traces/hta-simple-add", "real-traces/tracelens-b200-eager-ws8",
        "real-traces/tracelens-h100-bert-small", "real-traces/tracelens-h100-qwen1.5-0.5b",
        # runs ddpprof recorded on an H100 with NCCL (one rank: no comm kernels)
        "ddpprof-h100/pytorch_ddp", "ddpprof-h100/fsdp", "ddpprof-h100/zero1"]
HERE = Path(__file__).resolve().parent


def synthetic_gpu_run(folder: Path, seed: int, ranks: int = 2) -> Path:
    """Ranks of a made-up NCCL job with float-ns timestamps: three ProfilerSteps, each with
    compute kernels (many under 1 µs), NCCL all-reduces on a second stream, memcpys and a GPU
    sync, every kernel launched from the host with a correlation id."""
    rng = np.random.default_rng(seed)
    for rank in range(ranks):
        events, correlation, t = [], 0, 1000.0 + rng.uniform(0, 5)
        for step in range(3):
            step_start = t
            for _ in range(60):
                correlation += 1
                launch = t + rng.uniform(0.5, 3)
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                               "pid": 1, "tid": 1, "ts": round(launch, 3), "dur": 1.234,
                               "args": {"correlation": correlation}})
                kind = rng.choice(["gemm", "tiny", "nccl", "memcpy"], p=[.4, .35, .15, .1])
                start = launch + rng.uniform(1, 40)
                duration = {"gemm": rng.uniform(2, 30), "tiny": rng.uniform(0.1, 1.2),
                            "nccl": rng.uniform(5, 60), "memcpy": rng.uniform(0.5, 4)}[kind]
                name = {"gemm": "sm90_xmma_gemm_bf16", "tiny": "vectorized_elementwise_kernel",
                        "nccl": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                        "memcpy": "Memcpy DtoD (Device -> Device)"}[kind]
                stream = 20 if kind == "nccl" else 7
                events.append({"ph": "X", "cat": "gpu_memcpy" if kind == "memcpy" else "kernel",
                               "name": name, "pid": 0, "tid": stream,
                               "ts": round(start, 3), "dur": round(duration, 3),
                               "args": {"stream": stream, "correlation": correlation}})
                t = launch + 1.5
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                           "pid": 1, "tid": 1, "ts": round(step_start, 3),
                           "dur": round(t - step_start, 3), "args": {}})
        write_trace(folder / f"rank{rank}.json", events, rank=rank, world_size=ranks,
                    backend="nccl")
    return folder


#: Fixtures whose host ops name a stream in their arguments (a Triton launch op of
#: ``torch.compile``): HTA counts them as device events, ddpprof does not. HTA and the default
#: are compared on a copy without those arguments; the named difference is tested apart.
HOST_OP_STREAMS = {"tracelens-b200-eager-ws8"}
#: Fixtures with a GPU-side copy (``gpu_user_annotation``) of each ProfilerStep and more than
#: one step: HTA cuts the last step at the latest start over both copies, the default at the
#: host's (docs/metrics.md). Compared on a copy without the GPU-side ones; tested apart too.
DEVICE_STEP_COPIES = {"pytorch_ddp", "fsdp", "zero1"}


def as_hta_reads_them(folder: Path, into: Path) -> Path:
    """A copy of ``folder`` (its ``run.json`` too) whose traces have ``args.stream`` taken out
    of host records (``cpu_op``) and no GPU-side ProfilerStep copies: a trace on which HTA's
    reading and the default's are defined alike."""
    into.mkdir(parents=True)
    for path in sorted(folder.glob("*.json*")):
        if path.name == "run.json":
            shutil.copy(path, into / path.name)
            continue
        if path.suffix == ".gz":
            with gzip.open(path, "rt") as handle:
                document = json.load(handle)
        else:
            document = json.loads(path.read_text())
        events = []
        for event in document["traceEvents"]:
            if event.get("cat") == "cpu_op" and isinstance(event.get("args"), dict):
                event["args"].pop("stream", None)
            if event.get("cat") == "gpu_user_annotation" \
                    and str(event.get("name", "")).startswith("ProfilerStep#"):
                continue
            events.append(event)
        document["traceEvents"] = events
        (into / path.name.removesuffix(".gz")).write_text(json.dumps(document))
    return into


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> list[Path]:
    made = tmp_path_factory.mktemp("synthetic")
    real = [FIXTURES / name for name in REAL]  # all in the repository: none may be missing
    real = [as_hta_reads_them(folder, made / folder.name)
            if folder.name in HOST_OP_STREAMS | DEVICE_STEP_COPIES else folder
            for folder in real]
    return real + [synthetic_gpu_run(made / f"seed{seed}", seed) for seed in (1, 2, 3)]


@pytest.mark.parametrize("name", [*sorted(HOST_OP_STREAMS), *sorted(DEVICE_STEP_COPIES)])
def test_what_hta_reads_differently_is_the_only_difference(tmp_path, name):
    """The default reads the fixture as its copy without host-op streams and GPU-side step
    copies; ``--hta-compat`` counts the host op as a device event and cuts the last step at
    the GPU-side copy's start, as HTA does, so there the two differ."""
    original = next(p for p in [FIXTURES / "real-traces" / name, FIXTURES / "ddpprof-h100" / name]
                    if p.is_dir())
    copy = as_hta_reads_them(original, tmp_path / name)
    assert ours(original) == ours(copy)
    assert ours(original, hta_compat=True) != ours(copy, hta_compat=True)


#: The fixtures with kernels that are communication by structure alone (the rest must equal
#: HTA with the rule on).
STRUCTURAL_COMM_FOUND = {"tracelens-b200-eager-ws8"}


def run_hta(folders: list[Path], disable_rounding: bool, keep_last_step: bool = False) -> dict:
    env = {**os.environ, "HTA_DISABLE_NS_ROUNDING": "1" if disable_rounding else "0"}
    flags = ["--keep-last-step"] if keep_last_step else []
    result = subprocess.run([sys.executable, str(HERE / "hta_reference.py"),
                             *map(str, folders), *flags], capture_output=True, text=True,
                            env=env, timeout=600, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def ours(folder: Path, **options) -> dict[int, dict[str, float | None]]:
    analysis = analyze_paths([folder], AnalysisOptions(jobs=1, **options))
    assert not analysis.errors, analysis.errors
    [run] = analysis.runs
    return {r.rank: {"compute_pct": r.breakdown.compute_pct,
                     "non_compute_pct": r.breakdown.non_compute_pct,
                     "idle_pct": r.breakdown.idle_pct, "overlap_pct": r.breakdown.overlap_pct,
                     "window_us": r.breakdown.window_us} for r in run.ranks}


def compare(expected: dict, got: dict, tolerance_pp: float, label: str) -> None:
    assert set(map(int, expected)) == set(got), label
    for rank, numbers in expected.items():
        for metric, value in numbers.items():
            if metric == "window_us":
                # float64 resolves ~2e-4 µs at Kineto's epoch timestamps (1.7e12 µs)
                assert got[int(rank)][metric] == pytest.approx(value, abs=1e-3), (
                    label, rank, metric)
            elif value is None:
                assert got[int(rank)][metric] in (None, 0.0), (label, rank, metric)
            else:
                assert got[int(rank)][metric] == pytest.approx(value, abs=tolerance_pp), (
                    label, rank, metric)


@pytest.mark.parametrize("keep_last_step", [False, True], ids=["drop-last", "keep-last"])
def test_default_equals_hta_without_rounding(folders, keep_last_step):
    reference = run_hta(folders, disable_rounding=True, keep_last_step=keep_last_step)
    for folder in folders:
        entry = reference[str(folder)]
        assert "error" not in entry, (folder, entry)
        # HTA counts communication by kernel name: the B200 trace's symmetric-memory
        # all-reduces (`multimem_all_reduce_kernel`, launched inside
        # `symm_mem::multimem_all_reduce_`), communication by structure here, are compute
        # there. Every other trace has nothing to find: the default itself equals HTA.
        found = folder.name in STRUCTURAL_COMM_FOUND
        compare(entry["ranks"], ours(folder, keep_last_step=keep_last_step,
                                     structural_comm=not found), 0.05, f"{folder.name} exact")
        if found:
            default = ours(folder, keep_last_step=keep_last_step)
            assert any(default[r]["non_compute_pct"] > numbers["non_compute_pct"] + 1.0
                       for r, numbers in ((int(k), v) for k, v in entry["ranks"].items()))


@pytest.mark.parametrize("keep_last_step", [False, True], ids=["drop-last", "keep-last"])
def test_hta_compat_equals_hta_defaults(folders, keep_last_step):
    reference = run_hta(folders, disable_rounding=False, keep_last_step=keep_last_step)
    failed = []
    for folder in folders:
        entry = reference[str(folder)]
        if "error" in entry:   # HTA's rounding breaks its own assertion on some ns traces
            failed.append(folder.name)
            continue
        compare(entry["ranks"], ours(folder, keep_last_step=keep_last_step, hta_compat=True),
                0.1, f"{folder.name} compat")
    # only the trace HTA is known to fail on (tests/fixtures/real-traces/README.md)
    assert set(failed) <= {"tracelens-h100-qwen1.5-0.5b"}, failed


def test_rounding_moves_the_numbers_on_ns_traces(folders):
    """The two modes differ where timestamps are float ns: the test would be empty if not."""
    synthetic = [f for f in folders if f.name.startswith("seed")]
    exact = ours(synthetic[0])
    rounded = ours(synthetic[0], hta_compat=True)
    assert abs(exact[0]["compute_pct"] - rounded[0]["compute_pct"]) > 0.5


def test_hta_engine_reports_htas_numbers():
    folder = FIXTURES / "hta-gpu" / "two-rank"
    [run] = analyze_paths([folder], AnalysisOptions(engine="hta", jobs=1)).runs
    expected = run_hta([folder], disable_rounding=False)[str(folder)]["ranks"]
    for rank in run.ranks:
        numbers = expected[str(rank.rank)]
        assert rank.breakdown.idle_pct == pytest.approx(numbers["idle_pct"], abs=1e-9)
        # HTA rounds its overlap percentage to 2 decimals
        assert rank.breakdown.overlap_pct == pytest.approx(numbers["overlap_pct"], abs=0.005)
