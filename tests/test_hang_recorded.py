"""Real hangs on CPU: gloo jobs recorded through ``ddpprof record --fault`` (2 ranks, and the
4 ranks of ``fsdp_tp``'s mesh), each left to hang, its dumps read by ``ddpprof hang``, which
must name the right rank, group, sequence id and call site; and by PyTorch's own ``fr_trace``,
whose culprit it must agree with wherever ``fr_trace`` names one.

The recordings run side by side, in one fixture: most of their time is spent importing torch
and waiting for the collective timeout (``--timeout-s 5``)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddpprof.cli import main

REPO = Path(__file__).resolve().parent.parent
TRAIN = str(REPO / "workloads" / "train.py")
HANG_FAULTS = str(REPO / "workloads" / "hang_faults.py")
TINY = ["--model", "mlp-tiny", "--global-batch", "16", "--steps", "5", "--wait", "1",
        "--warmup", "1", "--active", "1", "--timeout-s", "5"]
#: The runs recorded together: at most 6 ranks at a time on CI's 2 cores (all 16 at once,
#: beside the other test worker, let a 5 s collective timeout fire where a rank was only slow)
BATCHES = (("skip", "wrong", "size"), ("exit", "sleep", "clean"), ("group",))
#: run name: (variant, ranks, --fault or None)
RUNS = {
    "skip": ("pytorch_ddp", 2, "skip_collective:1:4"),
    "wrong": ("pytorch_ddp", 2, "wrong_collective:1:4"),
    "size": ("pytorch_ddp", 2, "size_mismatch:1:4"),
    "exit": ("pytorch_ddp", 2, "exit_mid_step:1:4"),
    "sleep": ("pytorch_ddp", 2, "sleep_past_timeout:1:4"),
    "group": ("fsdp_tp", 4, "hang_in_group:3:4"),
    "clean": ("pytorch_ddp", 2, None),
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hangs")
    for batch in BATCHES:
        started = {}
        for name in batch:
            variant, ranks, fault = RUNS[name]
            command = [sys.executable, "-m", "ddpprof.cli", "record", "--variant", variant,
                       "--nproc", str(ranks), *TINY, "--out", str(out), "--name", name,
                       "--quiet", *(["--fault", fault] if fault else [])]
            started[name] = subprocess.Popen(command, env={**os.environ, "CI": "true"},
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True)
        for name, process in started.items():
            _, stderr = process.communicate(timeout=600)
            expected = 0 if RUNS[name][2] is None else 1
            assert process.returncode == expected, f"{name}: {stderr}"
    return out


def hang(run: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    try:
        main(["hang", str(run), "--json", "-", "--quiet"])
        code = 0
    except SystemExit as exit:
        code = int(exit.code or 0)
    out, _ = capsys.readouterr()
    return code, json.loads(out)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def fr_trace(folder: Path) -> tuple[int | None, set[int], str | None]:
    """PyTorch's analyzer on ``folder``: the sequence id it reports first, the culprit ranks
    it names there (``Culprit rank`` or ``missing ranks``), and the op of the entry it took as
    the reference (its first dump's); (None, set(), None) when it names none."""
    from torch.distributed.flight_recorder.fr_trace import main as fr_main

    lines = _Lines()
    logger = logging.getLogger("Flight Recorder")
    logger.addHandler(lines)
    try:
        fr_main([str(folder), "--allow-incomplete-ranks"])
    finally:
        logger.removeHandler(lines)
    text = "\n".join(lines.lines)
    report = re.search(r"sequence number: (\d+)(.*?)(?=sequence number|\Z)", text, re.S)
    if report is None:
        return None, set(), None
    body = report.group(2)
    culprits = {int(r) for r in re.findall(r"Culprit rank (\d+)", body)}
    missing = re.search(r"missing ranks: \{([\d, ]+)\}", body)
    if missing:
        culprits |= {int(r) for r in missing.group(1).split(",")}
    op = re.search(r"collective: \w+:(\w+)", body)
    return int(report.group(1)), culprits, op.group(1) if op else None


def agrees_with_fr_trace(run: Path, hang_: dict) -> None:
    """``fr_trace`` reports the same sequence id and culprit. For a mismatch it blames the
    side that differs from the first dump it read (between two ranks, either one): then the
    rank it blames is ddpprof's culprit when its reference issued the expected call, and the
    expected rank when its reference was ddpprof's culprit."""
    seq, culprits, reference = fr_trace(run / "fr")
    assert seq == hang_["collective"]["seq"]
    ours = {c["rank"] for c in hang_["culprits"]}
    if hang_["kind"] in ("mismatch", "order") and \
            reference != hang_["collective"]["call"]["op"]:
        assert culprits == set(hang_["expected"]), (culprits, reference)
    else:
        assert culprits == ours, (culprits, reference)


def frames_in(site: dict | None, file: str) -> list[int]:
    return [f["line"] for f in (site or {}).get("frames", []) if f["file"] == file]


def test_a_skipped_collective(recorded, capsys):
    run = recorded / "skip"
    code, document = hang(run, capsys)
    hang_ = document["hang"]
    assert code == 0 and hang_["kind"] == "order" and hang_["shift"] == 1
    assert [c["rank"] for c in hang_["culprits"]] == [1]
    assert hang_["collective"]["call"]["op"] == "broadcast"
    assert hang_["collective"]["group_label"] == "world"
    assert frames_in(hang_["collective"]["site"], HANG_FAULTS)     # the skipped call
    agrees_with_fr_trace(run, hang_)


def test_all_gather_where_the_others_all_reduce(recorded, capsys):
    run = recorded / "wrong"
    code, document = hang(run, capsys)
    hang_ = document["hang"]
    assert code == 0 and hang_["kind"] == "mismatch"
    culprit = hang_["culprits"][0]
    assert culprit["rank"] == 1 and culprit["issued"]["call"]["op"] == "all_gather"
    assert hang_["collective"]["call"]["op"] == "all_reduce"
    assert frames_in(culprit["issued"]["site"], HANG_FAULTS)
    agrees_with_fr_trace(run, hang_)


def test_a_size_mismatch_names_the_sender(recorded, capsys):
    """gloo aborts the rank that receives the longer message (rank 0): it leaves no dump,
    and the sender's own break of its step names it; were both to wait instead, their dumps
    would show the mismatch directly."""
    run = recorded / "size"
    code, document = hang(run, capsys)
    hang_ = document["hang"]
    assert code == 0 and hang_["kind"] in ("deviation", "mismatch"), hang_["summary"]
    culprit = hang_["culprits"][0]
    assert culprit["rank"] == 1 and culprit["issued"]["call"]["input_sizes"] == [[5]]
    assert (hang_["pattern"] or hang_["collective"])["call"]["input_sizes"] == [[4]]
    assert frames_in(culprit["issued"]["site"], HANG_FAULTS)
    if hang_["kind"] == "deviation":
        assert document["missing_dumps"] == [0]
        assert fr_trace(run / "fr")[0] is None    # fr_trace cannot decide without rank 0
    else:
        agrees_with_fr_trace(run, hang_)


def test_a_rank_that_exits_mid_step(recorded, capsys):
    run = recorded / "exit"
    code, document = hang(run, capsys)
    hang_ = document["hang"]
    assert code == 0 and hang_["kind"] == "not_known"
    assert hang_["unknown"] == [1] and document["missing_dumps"] == [1]
    culprit = hang_["culprits"][0]
    assert culprit["rank"] == 1 and culprit["status"] in ("dead", "absent")
    assert frames_in(hang_["collective"]["site"], TRAIN)


def test_a_rank_that_sleeps_past_the_timeout(recorded, capsys):
    run = recorded / "sleep"
    code, document = hang(run, capsys)
    hang_ = document["hang"]
    assert code == 0 and hang_["kind"] == "not_reached" and hang_["missing"] == [1]
    culprit = hang_["culprits"][0]
    assert culprit["rank"] == 1 and culprit["status"] == "busy"
    assert culprit["dump_reason"] == "SIGTERM"
    assert frames_in({"frames": culprit["where"]}, HANG_FAULTS)     # asleep in the fault
    assert frames_in(hang_["collective"]["site"], TRAIN)
    agrees_with_fr_trace(run, hang_)
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["fr_dumps"] == ["fr/rank_0", "fr/rank_1"]


def test_a_hang_in_one_group_of_a_mesh(recorded, capsys):
    """Rank 3 broadcasts in its tensor-parallel group where its peer (rank 2) all-reduces:
    that group hangs first; rank 3's data-parallel peer (rank 1) then waits for it, and rank
    1's tensor-parallel peer (rank 0) for rank 1."""
    run = recorded / "group"
    code, document = hang(run, capsys)
    hang_ = document["hang"]
    assert code == 0 and [c["rank"] for c in hang_["culprits"]] == [3], hang_["summary"]
    # the mismatch first, whichever dump is the earlier: rank 3 never issued its data-parallel
    # peer's all-gather because the broadcast holds it
    assert hang_["kind"] == "mismatch", hang_["summary"]
    assert (hang_["collective"]["group_label"], hang_["collective"]["group_ranks"]) == \
        ("tp", [2, 3])
    culprit = hang_["culprits"][0]
    assert [c["rank"] for c in hang_["culprits"]] == [3] and hang_["expected"] == [2]
    assert culprit["issued"]["call"]["op"] == "broadcast"
    assert frames_in(culprit["issued"]["site"], HANG_FAULTS)
    waits = {(o["collective"]["group_label"], tuple(o["collective"]["group_ranks"])):
             [c["rank"] for c in o["culprits"]] for o in document["others"]}
    assert waits == {("dp", (1, 3)): [3], ("tp", (0, 1)): [1]}
    agrees_with_fr_trace(run, hang_)


def test_a_clean_run_has_no_hang(recorded, capsys):
    run = recorded / "clean"
    code, document = hang(run, capsys)
    assert code == 1 and document["verdict"] == "no_hang"
    assert json.loads((run / "run.json").read_text())["fr_dumps"] is None


def test_analyze_puts_the_hang_first(recorded, capsys):
    with contextlib.suppress(SystemExit):
        main(["analyze", str(recorded / "sleep"), "--json", "-", "--quiet"])
    document = json.loads(capsys.readouterr().out)
    assert document["findings"][0]["code"] == "hang"
    assert document["findings"][0]["evidence"]["culprit_ranks"] == "1"
