"""ddpprof's critical path against HolisticTraceAnalysis 0.5.0's single-rank critical path
(``critical_path_analysis``), run live (``tests/hta_critical_path.py``, in its own process,
timestamps unrounded) on real single-rank fixtures, for the same step.

**HTA's path** is the longest weighted path of its graph: a node at the start and one at the
end of every host op (``cpu_op``), runtime call and kernel; edges along each thread's call
stacks, from a launch to its kernel, between consecutive kernels of a stream, and from a
kernel to a synchronisation that waited for it (only where the trace has ``cuda_sync``
events). An edge's weight is the time between its nodes, except the edges that join
consecutive top-level ops of a thread, dependencies and synchronisations (0): the untraced
time on a thread, and the time a blocking call waits, weigh nothing. HTA attributes each
weighted edge inside an op or a kernel to one event: the innermost span around that time on
its thread (an op, a runtime call, or a Python function or annotation it sits in), or the
kernel.

**The events on HTA's path, and their time**: its ``critical_path_operator`` edges of positive
weight; each is a piece ``[from, to]`` of the event HTA attributes it to, on that event's
*lane* (its stream for a kernel, else its thread). The delays HTA puts on its path between a
launch and its kernel, and between two kernels of a stream, belong to no event and are left
out.

**Coverage**: the share of that time during which ddpprof's path (``CriticalPath.pieces``:
pieces of nodes, each the innermost span of a thread at that time or a kernel, and the gaps
between them) is on the same lane in a piece of the same name. A Python function's span
(``with_stack`` traces) is not a node in ddpprof, which names that time after the innermost op
around it: an HTA piece attributed to a Python function is covered by any piece of ddpprof's
path on its lane at that time that is work, not a gap.

Neither path's length is compared: HTA's weighs neither the untraced time between a thread's
top-level ops nor the time a blocking call waits, and holds no queue inherited from the step
before; ddpprof's path tiles the step. Where HTA's path leaves a thread or a stream only by a
launch or a recorded synchronisation, ddpprof's also follows hand-offs between threads and
waits between streams that it infers: the cases below say where that makes them differ.

The fixtures compared here are those on which HTA's run (load and path) takes at most about
4 s of CPU; on the qwen1.5, nccl-data, B200 and the other modded-nanogpt fixtures ddpprof's
path covers 98.7 to 99.9% of HTA's too (measured once; they cost 3 to 5 s of HTA each).
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddpprof.graph.build import join_steps, rank_steps
from ddpprof.graph.path import COMMUNICATION, critical_path
from ddpprof.trace.loader import load

pytest.importorskip("hta", reason="HolisticTraceAnalysis is part of the test extra")
#: about 23 s of CPU in all, HTA's run (one process, seven traces) about 13 s of it
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"


@dataclass(frozen=True)
class Case:
    trace: str            # under tests/fixtures
    step: str | None      # the analyzed step compared (None: a trace with no ProfilerStep)


CASES = {
    # HTA's own critical-path test data (A100, with cuda_sync events, no ProfilerStep)
    "hta-simple-add": Case("real-traces/hta-simple-add/"
                           "benchmark_result_493459_1694039959_trace.json.gz", None),
    "h100-bert-small": Case("real-traces/tracelens-h100-bert-small/"
                            "gaunernst_bert-small-uncased__1016001.json.gz", "ProfilerStep#6"),
    "h100-zero1": Case("ddpprof-h100/zero1/rank0.pt.trace.json.gz", "ProfilerStep#4"),
    "h100-fsdp": Case("ddpprof-h100/fsdp/rank0.pt.trace.json.gz", "ProfilerStep#4"),
    # PyTorch 2.10, torch.compile: the GPU a step behind the host (ddpprof's path begins with
    # the queue the step inherited; HTA's window holds the kernels launched in the step only)
    "h100-compiled-hook": Case("real-traces/modded-nanogpt-hook-pair/hook/"
                               "modded-nanogpt-hook-gpu-rank-00-chrome-trace.json.gz",
                               "ProfilerStep#11"),
    "h100-pytorch-ddp": Case("ddpprof-h100/pytorch_ddp/rank0.pt.trace.json.gz",
                             "ProfilerStep#4"),
    "mi300-ddp-resnet": Case("real-traces/tracelens-mi300-ddp-resnet/"
                             "resnet_act_checkpoint.json.gz", "ProfilerStep#16"),
}
AGREE = ["hta-simple-add", "h100-bert-small", "h100-zero1", "h100-fsdp", "h100-compiled-hook"]
#: HTA's own test of its critical path (``tests/test_critical_path_analysis.py`` of HTA): on
#: simple_add, this annotation's second instance, with zero-weight launch edges, has 315 nodes
#: on the path, of 159 events.
HTA_OWN = {"trace": str(FIXTURES / CASES["hta-simple-add"].trace),
           "annotation": "[param|pytorch.model.alex_net|0|0|0|measure|forward]", "instance": 1,
           "zero_weight_launch_edges": True}


@dataclass(frozen=True)
class Piece:
    """A piece of ddpprof's path, absolute µs."""

    start: float
    end: float
    name: str
    lane: str
    category: str
    work: bool            # a node's time, not a gap before one


@pytest.fixture(scope="module")
def hta_paths() -> dict[str, dict]:
    """HTA's path of every case (one process: HTA's import is paid once), and of HTA_OWN."""
    jobs = [{"trace": str(FIXTURES / c.trace), "step": c.step} for c in CASES.values()]
    env = {**os.environ, "HTA_DISABLE_NS_ROUNDING": "1"}
    result = subprocess.run([sys.executable, str(HERE / "hta_critical_path.py"),
                             json.dumps([*jobs, HTA_OWN])], capture_output=True, text=True,
                            env=env, timeout=300, check=True)
    *found, own = json.loads(result.stdout.strip().splitlines()[-1])
    return {"own": own, **dict(zip(CASES, found, strict=True))}


def ddpprof_path(case: Case) -> list[Piece]:
    trace = load(FIXTURES / case.trace)
    graphs, _ = join_steps({0: rank_steps(trace, 0)})
    [graph] = [g for g in graphs if case.step is None or g.step == case.step]
    origin = graph.origin_us
    return [Piece(origin + p.start_us, origin + p.start_us + p.duration_us, p.name, p.lane,
                  p.category, not p.name.startswith(("gap before", "idle: ", "before its step")))
            for p in critical_path(graph).pieces]


def hta_pieces(hta: dict) -> list[tuple[float, float, dict, str]]:
    """The events on HTA's path: (from, to, event, lane) of each of its weighted
    ``critical_path_operator`` edges."""
    return [(e["from_us"], e["to_us"], e["event"],
             f"stream {e['event']['stream']}" if e["event"]["stream"] >= 0
             else f"thread {e['event']['tid']}")
            for e in hta["edges"] if e["type"] == "critical_path_operator" and e["weight"] > 0
            and e["event"] is not None]


def overlapping(pieces: list[Piece], a: float, b: float) -> list[Piece]:
    """The pieces (disjoint, in time order) that overlap ``[a, b]``."""
    k = max(bisect.bisect_right([p.start for p in pieces], a) - 1, 0)
    found = []
    while k < len(pieces) and pieces[k].start < b:
        if pieces[k].end > a:
            found.append(pieces[k])
        k += 1
    return found


def coverage(hta: dict, ours: list[Piece], hidden_by_communication: bool = False) -> float:
    """The share of the time of HTA's path events that ddpprof's path covers (see the
    module's docstring); with ``hidden_by_communication``, of their time outside ddpprof's
    collective transfers on another lane (work hidden behind communication)."""
    by_lane: dict[str, list[Piece]] = defaultdict(list)
    for piece in ours:
        by_lane[piece.lane].append(piece)
    transfers = [p for p in ours if p.category == COMMUNICATION and p.work]
    total = covered = 0.0
    for a, b, event, lane in hta_pieces(hta):
        total += b - a
        if hidden_by_communication:
            total -= sum(min(b, p.end) - max(a, p.start)
                         for p in overlapping(transfers, a, b) if p.lane != lane)
        python = event["cat"] == "python_function"
        covered += sum(min(b, p.end) - max(a, p.start)
                       for p in overlapping(by_lane[lane], a, b)
                       if p.name == event["name"] or (python and p.work))
    return covered / total


def test_the_reference_is_htas_own_critical_path(hta_paths):
    """The script runs HTA's code, changed only where pandas 3 needs it: on HTA's own test
    case it finds the path HTA's test expects."""
    own = hta_paths["own"]
    assert "error" not in own, own
    assert (own["nodes"], own["events"]) == (315, 159)


def window(case: Case) -> list[float]:
    """The host span of the case's step, read from the trace's JSON."""
    with gzip.open(FIXTURES / case.trace, "rt") as handle:
        [step] = [e for e in json.load(handle)["traceEvents"]
                  if e.get("cat") == "user_annotation" and e["name"] == case.step]
    return [step["ts"], step["ts"] + step["dur"]]


@pytest.mark.parametrize("name", AGREE)
def test_ddpprof_path_covers_htas(name, hta_paths):
    """HTA analyzed the step ddpprof analyzes; ddpprof's path covers at least 90% of the time
    of HTA's path events."""
    hta, case = hta_paths[name], CASES[name]
    assert "error" not in hta, hta
    if case.step is not None:
        assert hta["window_us"] == pytest.approx(window(case), abs=1e-3)
    assert coverage(hta, ddpprof_path(case)) >= 0.9


def test_the_forward_before_an_untraced_hand_off_is_on_the_path(hta_paths):
    """PyTorch DDP on one H100: nothing is traced between the main thread's forward (to
    1,986 µs into ProfilerStep#4) and the autograd thread's backward (from 6,029 µs). HTA's
    path is the main thread's forward and optimizer (it has no edge between threads);
    ddpprof's holds both too, with the hand-off between (the thread that begins in the step
    was handed its work by the step's thread, however long the untraced time between)."""
    hta, case = hta_paths["h100-pytorch-ddp"], CASES["h100-pytorch-ddp"]
    assert "error" not in hta, hta
    assert hta["window_us"] == pytest.approx(window(case), abs=1e-3)
    assert coverage(hta, ddpprof_path(case)) >= 0.9


def test_compute_hidden_behind_communication_is_off_ddpprofs_path(hta_paths):
    """The MI300X DDP rank (RCCL, no cuda_sync events): HTA has no edge between streams
    without cuda_sync events, so its path stays on the compute stream: its kernels and, as
    kernel-to-kernel delays, the time the stream sat idle between them (over 10 ms), which
    ddpprof reads as waiting for the RCCL all-reduces of another stream that its own path
    follows. The compute kernels that ran during those all-reduces are hidden behind them,
    off ddpprof's path: the definitional difference. Outside them ddpprof's path covers HTA's
    path events."""
    hta, case = hta_paths["mi300-ddp-resnet"], CASES["mi300-ddp-resnet"]
    assert "error" not in hta, hta
    assert hta["window_us"] == pytest.approx(window(case), abs=1e-3)
    ours = ddpprof_path(case)
    delays = sum(e["weight"] for e in hta["edges"]
                 if e["type"] == "critical_path_kernel_kernel_delay")
    assert delays > 10_000
    assert {lane for *_, lane in hta_pieces(hta)} == {"stream 0"}
    assert coverage(hta, ours) < 0.9
    assert coverage(hta, ours, hidden_by_communication=True) >= 0.9
