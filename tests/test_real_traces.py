"""Every folder of real traces that other tools wrote is analyzed, and its numbers are checked
against the reference numbers those tools published (``tests/fixtures/real-traces/README.md``
and ``tests/fixtures/hta-gpu/``). HTA itself is run live in ``test_hta_parity.py``."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from share_reference import reference_shares

from ddpprof.analysis import AnalysisOptions, analyze_paths
from ddpprof.metrics.breakdown import device_breakdown
from ddpprof.trace import classify
from ddpprof.trace.loader import load

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REAL = FIXTURES / "real-traces"
FOLDERS = sorted(p for p in [*REAL.glob("*"), *(FIXTURES / "hta-gpu").glob("*"),
                              *(FIXTURES / "ddpprof-h100").glob("*")] if p.is_dir())


def analyzed(folder: Path, **options):
    analysis = analyze_paths([folder], AnalysisOptions(jobs=1, **options))
    assert not analysis.errors, analysis.errors
    return analysis.runs


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_every_shared_folder_is_analyzed(folder, ddpprof_cli, tmp_path):
    out = tmp_path / "out.json"
    # the plain reference counts communication by name only (docs/metrics.md)
    result = ddpprof_cli("analyze", str(folder), "--json", str(out), "--per-step",
                         "--no-structural-comm")
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert document["runs"] and not document["errors"]
    for run in document["runs"]:
        for rank in run["per_rank"]:
            assert rank["overlap_pct"] is None or 0 <= rank["overlap_pct"] <= 100
            # each share against its own definition, computed from the raw JSON by the plain
            # second implementation in share_reference.py, where it covers the trace
            expected = reference_shares(Path(rank["path"]))
            if expected is None:
                continue
            for share, value in expected.items():
                assert rank[share] == (None if value is None else pytest.approx(value, abs=1e-6)), (
                    run["run"], rank["rank"], share)


#: Folders the plain reference covers (CPU traces; GPU traces with at most one step and no
#: host collectives): the test above checks every share of these against it (at least these:
#: a fixture added later may be covered too).
REFERENCE_COVERS = {"hta-rank-unavailable", "hta-simple-add", "tbplugin-micro-gloo-cpu",
                    "tbplugin-micro-nccl-user-annotation", "tracelens-b200-eager-ws8",
                    "tracelens-h100-bert-small", "tracelens-h100-qwen1.5-0.5b"}


def test_the_reference_covers_the_folders_it_should():
    covered = {folder.name for folder in FOLDERS for trace in folder.glob("*.json*")
               if trace.name != "run.json" and reference_shares(trace) is not None}
    assert covered >= REFERENCE_COVERS


def by_rank(run) -> dict[int, object]:
    return {r.rank: r.breakdown for r in run.ranks}


# ---- HolisticTraceAnalysis's published numbers ----------------------------------------------

def test_hta_simple_add_matches_hta():
    [run] = analyzed(REAL / "hta-simple-add")
    b = run.ranks[0].breakdown   # integer-µs trace: both modes agree
    assert (round(b.idle_pct, 2), round(b.compute_pct, 2), round(b.non_compute_pct, 2)) == (
        99.70, 0.06, 0.24)


def test_mtia_matches_htas_own_test_in_compat_mode():
    [run] = analyzed(REAL / "hta-mtia-single-rank", hta_compat=True)
    b = run.ranks[0].breakdown
    window = 13_328_347
    assert b.compute_pct == pytest.approx(100 * 7_305_596 / window, abs=0.1)
    assert b.idle_pct == pytest.approx(100 * 5_648_827 / window, abs=0.1)
    assert b.non_compute_pct == pytest.approx(100 * 373_924 / window, abs=0.1)


@pytest.mark.parametrize("folder", ["two-rank", "nccl-data"])
def test_hta_gpu_fixtures_match_htas_expected_numbers_in_compat_mode(folder):
    expected = json.loads((FIXTURES / "hta-gpu" / "hta-0.5.0-expected.json").read_text())[folder]
    [run] = analyzed(FIXTURES / "hta-gpu" / folder, hta_compat=True)
    got = by_rank(run)
    for row in expected["temporal"]:
        b = got[row["rank"]]
        assert b.compute_pct == pytest.approx(row["compute_time_pctg"], abs=0.01)
        assert b.idle_pct == pytest.approx(row["idle_time_pctg"], abs=0.01)
        assert b.non_compute_pct == pytest.approx(row["non_compute_time_pctg"], abs=0.01)
    for row in expected["overlap"]:
        assert got[row["rank"]].overlap_pct == pytest.approx(row["comp_comm_overlap_pctg"],
                                                             abs=0.01)


def test_b200_default_reads_device_records_and_compat_is_hta():
    """tests/fixtures/real-traces/README.md: HTA default 12.02, with HTA_DISABLE_NS_ROUNDING=1
    12.84, which counts torch.compile's Triton launch ops (host records with a ``stream``
    argument) as device work; the default reads the device records alone, as the plain
    reference does (``share_reference.py``), below HTA's by those ops' share."""
    [exact] = analyzed(REAL / "tracelens-b200-eager-ws8", structural_comm=False)
    [compat] = analyzed(REAL / "tracelens-b200-eager-ws8", hta_compat=True)
    expected = reference_shares(Path(exact.ranks[0].path))
    assert expected is not None
    assert exact.ranks[0].breakdown.compute_pct == pytest.approx(expected["compute_pct"],
                                                                 abs=1e-6)
    assert expected["compute_pct"] < 12.84 - 0.05
    assert compat.ranks[0].breakdown.compute_pct == pytest.approx(12.02, abs=0.005)
    # the one NCCL kernel: an all-gather of 25,136 bf16 per rank over 8 ranks
    gather = exact.ranks[0].collectives["all_gather"]
    assert gather.calls == 1 and gather.bytes_per_call == 25_136 * 2 * 8
    assert exact.missing_ranks == [(1, 7)]


def test_b200_symmetric_memory_all_reduces_are_communication_by_structure():
    """The 73 ``multimem_all_reduce_kernel`` launches come from ``symm_mem::multimem_all_reduce_``
    host ops: communication by structure. Expected from the raw JSON, plainly: those kernels
    join the NCCL all-gather in the communication lane and leave compute."""
    path = REAL / "tracelens-b200-eager-ws8" / "eager_trace.json.gz"
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
              if e.get("ph") == "X"]
    host_ops = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    symm = [e for e in events if e.get("cat") == "cpu_op"
            and e["name"].startswith("symm_mem::multimem_all_reduce_")]
    found = [e for e in events if e.get("cat") == "kernel" and (launch := host_ops.get(
        e["args"].get("correlation"))) is not None and any(
        s["tid"] == launch["tid"] and s["ts"] <= launch["ts"] <= s["ts"] + s["dur"]
        for s in symm)]
    assert len(found) == 73 and {e["name"].split("<")[0] for e in found} == {
        "void (anonymous namespace)::multimem_all_reduce_kernel"}
    [named] = analyzed(REAL / "tracelens-b200-eager-ws8", structural_comm=False)
    [structural] = analyzed(REAL / "tracelens-b200-eager-ws8")
    before, after = named.ranks[0].breakdown, structural.ranks[0].breakdown
    found_us = sum(e["dur"] for e in found)        # one stream: they never overlap
    assert after.window_us == before.window_us
    # (to 10 ns: ends are start + dur in float64 at a large start, rounded there)
    assert after.comm_us == pytest.approx(before.comm_us + found_us, abs=0.01)
    assert after.compute_us == pytest.approx(before.compute_us - found_us, abs=0.01)
    reduces = structural.ranks[0].collectives["all_reduce"]
    assert reduces.calls == 73 and "all_reduce" not in named.ranks[0].collectives
    assert any("73 kernels" in n and "symm_mem::multimem_all_reduce_" in n
               for n in structural.notes)
    assert not any("look like communication" in n for n in structural.notes)
    assert any("look like communication" in n for n in named.notes)


# ---- TraceLens's gpu_timeline ---------------------------------------------------------------

def tracelens_csv(folder: Path) -> dict[str, float]:
    with open(folder / "tracelens_gpu_timeline.csv") as handle:
        return {row["type"]: float(row["percent"]) for row in csv.DictReader(handle)}


def test_bert_equals_tracelens_where_the_definitions_coincide():
    """bert-small has no memsets, no GPU syncs and no unlinked kernels: the three ways TraceLens
    defines things differently do not arise, so every share is the same."""
    reference = tracelens_csv(REAL / "tracelens-h100-bert-small")
    [run] = analyzed(REAL / "tracelens-h100-bert-small")
    b = run.ranks[0].breakdown
    assert b.compute_pct == pytest.approx(reference["computation_time"], abs=1e-6)
    assert b.idle_pct == pytest.approx(reference["idle_time"], abs=1e-6)
    assert b.non_compute_pct == pytest.approx(reference["exposed_memcpy_time"], abs=1e-6)


def test_qwen_equals_tracelens_on_tracelens_event_set():
    """TraceLens counts only kernel/memcpy/memset events linked to a host launch (509 of
    qwen's 1707 device events ran before the window and are not), and counts memsets as
    computation. Given that event set and that classification, ddpprof's definitions give
    TraceLens's numbers; on the whole trace they give HTA's (91.50 % compute)."""
    folder = REAL / "tracelens-h100-qwen1.5-0.5b"
    reference = tracelens_csv(folder)
    trace = load(next(folder.glob("*.json.gz")))
    category = np.array(trace.category, dtype=object)[trace.category_id]
    stream = classify.streams(trace)
    launched = np.isin(trace.correlation, trace.correlation[(stream < 0)
                                                           & trace.has_correlation])
    counted = np.isin(category, ["kernel", "gpu_memcpy", "gpu_memset"]) & launched & (
        stream >= 0)
    start, end = trace.start_us[counted], trace.end_us[counted]
    is_compute = np.isin(category[counted], ["kernel", "gpu_memset"])
    b = device_breakdown(start, end, is_compute, np.zeros(start.size, dtype=bool))
    assert b.compute_pct == pytest.approx(reference["computation_time"], abs=1e-6)
    assert b.idle_pct == pytest.approx(reference["idle_time"], abs=1e-6)
    [run] = analyzed(folder)
    assert run.ranks[0].breakdown.compute_pct == pytest.approx(91.50, abs=0.005)


# ---- tb_plugin's TestDistributed ------------------------------------------------------------

def test_tbplugin_gloo_cpu_equals_tb_plugin():
    """steps_to_overlap = [compute − overlap, overlap, comm − overlap, other], whole trace as
    one step: the same definitions as ddpprof's CPU lanes, so all four agree."""
    [run] = analyzed(REAL / "tbplugin-micro-gloo-cpu")
    expected = {0: (47, 74, 35, 0), 1: (36, 64, 34, 12)}
    for rank, b in by_rank(run).items():
        got = (b.compute_us - b.overlap_us, b.overlap_us, b.comm_us - b.overlap_us, b.idle_us)
        assert got == expected[rank]


def test_tbplugin_gloo_gpu_agrees_where_the_windows_coincide():
    """Compute (the kernel), communication (the host gloo spans) and their overlap agree;
    tb_plugin's window starts at the first CPU op, ddpprof's (HTA's rule) at the first device
    or host-collective event: the difference is all "other"/idle before it."""
    [run] = analyzed(REAL / "tbplugin-micro-gloo-gpu")
    expected = {0: (31, 70, 39, 16, 16), 1: (16, 54, 44, 32, 20)}   # ..., tb other, lead
    for rank, b in by_rank(run).items():
        compute_only, overlap, comm_only, other, lead = expected[rank]
        assert (b.compute_us - b.overlap_us, b.overlap_us, b.comm_us - b.overlap_us) == (
            compute_only, overlap, comm_only)
        assert b.idle_us == other - lead


@pytest.mark.parametrize(("folder", "broadcast", "all_reduce"), [
    ("tbplugin-micro-nccl", (1, 212_480), (1, 8_196_000)),
    ("tbplugin-micro-gloo-gpu", (3, 212_480), (2, 8_196_000)),
    ("tbplugin-micro-gloo-cpu", (3, 212_480), (2, 8_196_000)),
])
def test_tbplugin_comm_ops_calls_and_bytes(folder, broadcast, all_reduce):
    [run] = analyzed(REAL / folder)
    for rank in run.ranks:
        stats = rank.collectives
        assert (stats["broadcast"].calls, stats["broadcast"].bytes_per_call) == broadcast
        assert (stats["all_reduce"].calls, stats["all_reduce"].bytes_per_call) == all_reduce


def test_communication_is_found_in_all_four_micro_traces():
    for folder in ("tbplugin-micro-nccl", "tbplugin-micro-gloo-gpu",
                   "tbplugin-micro-gloo-cpu", "tbplugin-micro-nccl-user-annotation"):
        [run] = analyzed(REAL / folder)
        assert all(r.breakdown.comm_us > 0 and "all_reduce" in r.collectives
                   for r in run.ranks), folder


def test_rank_unavailable_is_a_cpu_run_of_rank_0():
    [run] = analyzed(REAL / "hta-rank-unavailable")
    [rank] = run.ranks
    assert (rank.kind, rank.rank) == ("cpu", 0)
    assert any("no rank" in note for note in run.notes)
