"""No write through a link, and never onto a run's own files.

A run folder may sit where others can write. Every file that ``record`` and ``calibrate``
write there must not follow a link planted under its name (before the run, or swapped in while
it records), a run folder that is itself a link (or that others may write while it belongs to
someone else) is refused, and an output option never lands on what the command reads or
records. These tests plant the links (as root here and in CI, where following one would do the
most harm) and check that the link's target is untouched.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_faults import assert_one_line, ddpprof
from trace_builders import kernel, launch, span, step, write_trace

from ddpprof.core.atomic import refuse_inputs, write_text
from ddpprof.core.errors import UsageError
from ddpprof.run.folder import FOLDER_ID_ENV, RunFolder

VICTIM_TEXT = "precious: must never be written by ddpprof\n"
TINY_RUN = ["--model", "mlp-tiny", "--global-batch", "16", "--nproc", "2", "--steps", "5",
            "--wait", "1", "--warmup", "1", "--active", "2"]
NOBODY = 65534


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    return path


def untouched(victim: Path) -> bool:
    return victim.read_text() == VICTIM_TEXT


# --- the run folder, file by file -----------------------------------------------------------

def test_a_planted_lock_link_is_refused_and_its_target_kept(tmp_path, victim):
    run = tmp_path / "out" / "single"
    run.mkdir(parents=True)
    (run / ".ddpprof.lock").symlink_to(victim)
    result = ddpprof("record", "--variant", "single", *TINY_RUN, "--out", str(tmp_path / "out"))
    assert_one_line(result, 2, ".ddpprof.lock", "symbolic link")
    assert untouched(victim) and not (run / "run.json").exists()


def test_a_lock_that_is_a_fifo_is_refused_without_hanging(tmp_path):
    run = tmp_path / "out" / "single"
    run.mkdir(parents=True)
    os.mkfifo(run / ".ddpprof.lock")
    result = ddpprof("record", "--variant", "single", *TINY_RUN, "--out", str(tmp_path / "out"),
                     timeout=60)
    assert_one_line(result, 2, ".ddpprof.lock", "not a regular file")


def test_a_run_folder_that_is_a_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "single").symlink_to(elsewhere)
    result = ddpprof("record", "--variant", "single", *TINY_RUN, "--out", str(tmp_path / "out"))
    assert_one_line(result, 2, "symbolic link")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the folder to another user")
def test_a_run_folder_others_may_write_is_refused(tmp_path):
    run = tmp_path / "out" / "single"
    run.mkdir(parents=True)
    os.chown(run, NOBODY, NOBODY)
    run.chmod(0o777)
    result = ddpprof("record", "--variant", "single", *TINY_RUN, "--out", str(tmp_path / "out"))
    assert_one_line(result, 2, "writable by others", f"uid {NOBODY}")
    assert list(run.iterdir()) == []


@pytest.mark.slow
def test_links_swapped_in_while_a_run_records_are_replaced_not_followed(tmp_path, victim):
    """run.json is swapped for a link while the run records: the final manifest replaces the
    link and the target is untouched. Every other file of the run gets a planted link before
    the recording too, which the recording removes or replaces."""
    out = tmp_path / "out"
    run = out / "simple_ddp"
    run.mkdir(parents=True)
    for name in ("launcher.log", ".config.json", "rank0.pt.trace.json.gz",
                 ".worker_result.json", "run.json"):
        (run / name).symlink_to(victim)
    command = [sys.executable, "-m", "ddpprof.cli", "record", "--variant", "simple_ddp",
               "--model", "mlp-tiny", "--global-batch", "16", "--nproc", "2", "--steps", "30",
               "--wait", "1", "--warmup", "1", "--active", "2", "--out", str(out)]
    recorder = subprocess.Popen(command, env={**os.environ, "CI": "true"},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            manifest = run / "run.json"
            if manifest.is_file() and not manifest.is_symlink() \
                    and json.loads(manifest.read_text()).get("status") == "running":
                break
            time.sleep(0.05)
        else:
            pytest.fail("the run never said it was running")
        swapped = run / ".swap"
        swapped.symlink_to(victim)
        os.replace(swapped, run / "run.json")     # the manifest is now a link, mid-run
        _, stderr = recorder.communicate(timeout=180)
    finally:
        recorder.kill()
        recorder.wait()
    assert recorder.returncode == 0, stderr
    assert untouched(victim)
    manifest = run / "run.json"
    assert not manifest.is_symlink() and json.loads(manifest.read_text())["status"] == "complete"
    for name in ("launcher.log", ".config.json", "rank0.pt.trace.json.gz",
                 "rank1.pt.trace.json.gz"):
        assert (run / name).is_file() and not (run / name).is_symlink(), name


def test_a_rank_refuses_a_run_folder_that_was_replaced(tmp_path, monkeypatch):
    original = RunFolder(tmp_path / "run")
    monkeypatch.setenv(FOLDER_ID_ENV, original.identity_text)
    original.close()
    (tmp_path / "run").rename(tmp_path / "moved")
    (tmp_path / "run").mkdir()                 # another folder under the same name
    with pytest.raises(OSError, match="no longer the folder"):
        RunFolder.for_rank(tmp_path / "run")


# --- the run folder's primitives ------------------------------------------------------------

def test_replacing_a_link_replaces_the_link(tmp_path, victim):
    with RunFolder(tmp_path / "run") as folder:
        (tmp_path / "run" / "run.json").symlink_to(victim)
        folder.write_text("run.json", "{}")
    assert untouched(victim)
    assert (tmp_path / "run" / "run.json").read_text() == "{}"
    assert not (tmp_path / "run" / "run.json").is_symlink()
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["run.json"]  # no temporary left


def test_a_log_is_created_afresh_over_a_link(tmp_path, victim):
    with RunFolder(tmp_path / "run") as folder:
        (tmp_path / "run" / "launcher.log").symlink_to(victim)
        with folder.new_file("launcher.log") as log:
            log.write(b"torchrun says hello\n")
    assert untouched(victim)
    assert (tmp_path / "run" / "launcher.log").read_text() == "torchrun says hello\n"


def test_reading_back_never_follows_a_link_nor_reads_unbounded(tmp_path):
    with RunFolder(tmp_path / "run") as folder:
        (tmp_path / "run" / "zero").symlink_to("/dev/zero")
        with pytest.raises(OSError):
            folder.read_bytes("zero", 1024)
        os.mkfifo(tmp_path / "run" / "fifo")
        with pytest.raises(OSError, match="not a regular file"):
            folder.read_bytes("fifo", 1024)     # O_NONBLOCK: no wait for a writer
        folder.write_bytes("big", b"x" * 2048)
        with pytest.raises(OSError, match="larger than"):
            folder.read_bytes("big", 1024)


def test_an_errors_folder_that_is_a_link_is_refused(tmp_path, victim):
    with RunFolder(tmp_path / "run") as folder:
        (tmp_path / "run" / ".errors").symlink_to(victim.parent)
        with pytest.raises(OSError, match="not a folder"):
            folder.subfolder(".errors")
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]


# --- outputs never land on inputs -----------------------------------------------------------

@pytest.mark.parametrize("name", ["run.json", "rank0.pt.trace.json.gz"])
def test_record_outputs_inside_the_run_being_recorded_are_refused(tmp_path, name):
    out = tmp_path / "out"
    result = ddpprof("record", "--variant", "single", *TINY_RUN, "--out", str(out),
                     "--json", str(out / "single" / name))
    assert_one_line(result, 2, "--json", "being recorded")
    assert not (out / "single" / "run.json").exists()   # refused before anything ran


def test_analyze_refuses_to_write_over_a_trace_it_reads(tmp_path):
    events = [step(0, 0, 100), step(1, 100, 200), span("aten::mm", 10, 90)]
    trace = tmp_path / "run" / "rank0.json"
    write_trace(trace, events)
    before = trace.read_bytes()
    link = tmp_path / "innocent.json"
    link.symlink_to(trace)
    for target in (trace, link):
        result = ddpprof("analyze", str(tmp_path / "run"), "--json", str(target))
        assert_one_line(result, 2, "--json", "a trace being analyzed")
        assert trace.read_bytes() == before


def test_gate_markdown_never_overwrites_the_baseline(tmp_path):
    events = [step(0, 0, 1000), step(1, 1000, 2000), span("aten::mm", 10, 900),
              kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 400, 450, 1), launch(395, 1)]
    write_trace(tmp_path / "run" / "rank0.json", events)
    baseline = tmp_path / "baseline.json"
    assert ddpprof("analyze", str(tmp_path / "run"), "--json", str(baseline)).returncode == 0
    before = baseline.read_bytes()
    result = ddpprof("gate", str(tmp_path / "run"), "--baseline", str(baseline),
                     "--markdown", str(baseline))
    assert_one_line(result, 2, "--markdown", "an input of the gate")
    assert baseline.read_bytes() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to plant a link as another user")
def test_a_link_someone_else_planted_in_a_shared_folder_is_not_followed(tmp_path, victim):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)                         # sticky and world-writable, like /tmp
    link = shared / "report.json"
    link.symlink_to(victim)
    os.lchown(link, NOBODY, NOBODY)              # planted by another user
    with pytest.raises(OSError, match="refusing to follow"):
        write_text(link, "{}")
    with pytest.raises(UsageError, match="refusing to follow"):
        refuse_inputs({"--json": link})
    assert untouched(victim)


def test_a_link_of_ones_own_is_still_followed(tmp_path, victim):
    link = tmp_path / "mine.json"
    link.symlink_to(victim)
    write_text(link, "{}\n")
    assert victim.read_text() == "{}\n" and link.is_symlink()


@pytest.mark.slow
def test_calibrate_never_writes_through_its_log_or_its_lock(tmp_path, victim):
    out = tmp_path / "calibration"
    out.mkdir()
    (out / "calibrate.log").symlink_to(victim)
    (out / ".calibrate.json").symlink_to(victim)
    result = ddpprof("calibrate", "--backend", "gloo", "--nproc", "2", "--min-bytes", "256K",
                     # sizes far apart, so that the fit's bandwidth is positive on a noisy machine
                     "--max-bytes", "8M", "--warmup-iters", "1", "--iters", "3", "--out",
                     str(out), timeout=240)
    assert result.returncode == 0, result.stderr
    assert untouched(victim)
    assert stat.S_ISREG(os.lstat(out / "calibrate.log").st_mode)
    assert json.loads((out / "calibration.json").read_text())["status"] == "complete"
    (out / ".ddpprof.lock").unlink()
    (out / ".ddpprof.lock").symlink_to(victim)
    result = ddpprof("calibrate", "--backend", "gloo", "--nproc", "2", "--out", str(out))
    assert_one_line(result, 2, ".ddpprof.lock", "symbolic link")
    assert untouched(victim)
