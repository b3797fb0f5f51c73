"""Fault injection: each class of failure a hostile user or a flaky cluster causes, reproduced.

Slow ones launch torchrun (a long mlp-tiny recording, stopped by the fault); the rest need no
run. Every test here failed on the code before issue 9 was fixed. docs/guarantees.md lists
what is covered.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import math
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from trace_builders import kernel, launch, span, step, write_trace

from ddpprof.core.atomic import json_text, write_text
from ddpprof.core.errors import UsageError
from ddpprof.record import folders
from ddpprof.run.manifest import Owner, effective_status, read_manifest

LINUX = sys.platform.startswith("linux")
linux_only = pytest.mark.skipif(not LINUX, reason="reads /proc and relies on prctl")


def ddpprof(*args: str, cwd: Path | None = None, timeout: float = 120,
            env: dict | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddpprof.cli", *args], cwd=cwd,
                          env={**os.environ, "CI": "true", **(env or {})}, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=preexec_fn)


def assert_one_line(result: subprocess.CompletedProcess, code: int, *parts: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    for part in parts:
        assert part in result.stderr, result.stderr


# --- processes -----------------------------------------------------------------------------

def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start ticks) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), fields[0], int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """Every process below ``root``: pid -> start ticks (to tell it from a reused pid)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := _stat(int(entry))) is not None:
            children.setdefault(info[0], []).append(int(entry))
    found, todo = {}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if (info := _stat(child)) is not None:
                found[child] = info[2]
                todo.append(child)
    return found


def alive(processes: dict[int, int]) -> list[int]:
    living = []
    for pid, ticks in processes.items():
        info = _stat(pid)
        if info is not None and info[2] == ticks and info[1] != "Z":
            living.append(pid)
    return living


def alive_after(processes: dict[int, int], seconds: float) -> list[int]:
    """The processes still alive once ``seconds`` have passed (returns as soon as none is)."""
    deadline = time.monotonic() + seconds
    while (living := alive(processes)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return living


def _kill(processes: dict[int, int]) -> None:
    for pid in alive(processes):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def rank_pid(processes: dict[int, int], rank: int) -> int:
    for pid in processes:
        with contextlib.suppress(OSError):
            if f"RANK={rank}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return pid
    raise AssertionError(f"no rank {rank} among {processes}")


LONG_RUN = ["record", "--variant", "simple_ddp", "--model", "mlp-tiny", "--global-batch", "16",
            "--steps", "1000000", "--wait", "1", "--warmup", "1", "--active", "1",
            "--timeout-s", "60"]


@contextlib.contextmanager
def long_recording(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path, dict[int, int]]]:
    """``ddpprof record`` of a run that would last hours, in a session of its own; yields once
    the ranks are training, with every process under it. Whatever the test does, nothing it
    started outlives it."""
    run_dir = tmp_path / "out" / "simple_ddp"
    record = subprocess.Popen([sys.executable, "-m", "ddpprof.cli", *LONG_RUN,
                               "--out", str(tmp_path / "out")],
                              env={**os.environ, "CI": "true"}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    family: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 180
        log = run_dir / "launcher.log"
        while not (log.is_file() and "ddpprof-step 3/" in log.read_text(errors="replace")):
            assert record.poll() is None, record.communicate()
            assert time.monotonic() < deadline, "the ranks never started training"
            time.sleep(0.2)
        family = descendants(record.pid)
        assert len(family) == 3, family  # torchrun and two ranks
        yield record, run_dir, family
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGKILL)
        _kill(family)
        record.communicate()


@linux_only
@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_record_stops_every_process_and_marks_the_run_interrupted(signum, tmp_path):
    with long_recording(tmp_path) as (record, run_dir, family):
        os.kill(record.pid, signum)
        _, stderr = record.communicate(timeout=60)
        assert alive_after(family, 5) == []
    name = signal.Signals(signum).name
    assert record.returncode == 128 + signum
    assert stderr == f"ddpprof: error: interrupted by {name}; {run_dir} marked interrupted\n"
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "interrupted"
    assert manifest["error"]["signal"] == name
    # each rank dumped its Flight Recorder buffer on the signal torchrun passed on
    assert manifest["fr_dumps"] == ["fr/rank_0", "fr/rank_1"]


@linux_only
@pytest.mark.slow
def test_sigkill_to_the_process_group_of_record_takes_the_ranks(tmp_path):
    with long_recording(tmp_path) as (record, run_dir, family):
        os.killpg(record.pid, signal.SIGKILL)  # a CI timeout: no chance to clean up
        record.wait(timeout=30)
        assert alive_after(family, 10) == []
    # the manifest could not be finished, but its owner is gone: it reads as interrupted
    manifest = read_manifest(run_dir / "run.json")
    assert manifest.status == "running" and manifest.owner.pid == record.pid
    assert effective_status(manifest) == "interrupted"


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@linux_only
@pytest.mark.slow
def test_killing_torchrun_fails_the_run_and_no_rank_writes_after(tmp_path):
    with long_recording(tmp_path) as (record, run_dir, family):
        [torchrun] = [pid for pid in family if _stat(pid)[0] == record.pid]
        os.kill(torchrun, signal.SIGKILL)
        _, stderr = record.communicate(timeout=60)
        assert alive(family) == []  # gone before record exits, not just eventually
        before = _listing(run_dir)
        time.sleep(2)
        assert _listing(run_dir) == before
    assert record.returncode == 1
    assert "simple_ddp (torchrun was killed by SIGKILL;" in stderr
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["error"]["message"] == "torchrun was killed by SIGKILL"


@linux_only
@pytest.mark.slow
def test_a_killed_rank_is_the_one_named_not_the_survivor(tmp_path):
    with long_recording(tmp_path) as (record, run_dir, family):
        os.kill(rank_pid(family, 1), signal.SIGKILL)
        _, stderr = record.communicate(timeout=120)
        assert alive_after(family, 5) == []
    assert record.returncode == 1
    # rank 0 fails too ("Connection reset by peer"), but rank 1 is where it started
    assert "simple_ddp (rank 1: killed by SIGKILL (see launcher.log);" in stderr
    manifest = json.loads((run_dir / "run.json").read_text())
    assert (manifest["status"], manifest["error"]["rank"]) == ("failed", 1)


@pytest.mark.slow
def test_a_rendezvous_endpoint_that_never_answers_times_out(tmp_path):
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept_and_stay_silent() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept_and_stay_silent, daemon=True).start()
    port = server.getsockname()[1]
    started = time.monotonic()
    record = subprocess.Popen(
        [sys.executable, "-m", "ddpprof.cli", "record", "--variant", "simple_ddp", "--model",
         "mlp-tiny", "--global-batch", "16", "--nproc", "1", "--nnodes", "2",
         "--rdzv-endpoint", f"127.0.0.1:{port}", "--timeout-s", "5", "--out", str(tmp_path)],
        env={**os.environ, "CI": "true"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    try:
        _, stderr = record.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGKILL)
        server.close()
        for connection in held:
            connection.close()
    assert record.returncode == 1, stderr
    assert time.monotonic() - started < 60
    assert (f"the rendezvous at 127.0.0.1:{port} did not start the ranks within 5 s "
            "(--timeout-s)") in stderr
    assert json.loads((tmp_path / "simple_ddp" / "run.json").read_text())["status"] == "failed"


@linux_only
def test_a_rank_whose_launcher_is_gone_exits_at_once():
    """A rank started after torchrun died finds itself adopted: it must not train on."""
    probe = ("from ddpprof.record.process import die_with_launcher\n"
             "die_with_launcher()\nprint('training')")

    def start(launcher: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              env={**os.environ, "DDPPROF_LAUNCHER_PID": str(launcher)},
                              timeout=60)

    # the probe's parent is this test; its grandparent, this test's parent, is "the launcher"
    assert start(os.getppid()).stdout == "training\n"
    orphaned = start(os.getpid())
    assert (orphaned.returncode, orphaned.stdout) == (1, "")


# --- outputs -------------------------------------------------------------------------------

@pytest.fixture
def calibration_run(tmp_path) -> Path:
    """A trace simulate can calibrate from with --latency-us/--bandwidth-gbps given."""
    grads = [span("torch::autograd::AccumulateGrad", 300 + 100 * i, 350 + 100 * i,
                  **{"Input Dims": [[1000 * (i + 1)]], "Input type": ["float"]})
             for i in range(3)]
    events = [step(0, 0, 1000), step(1, 1000, 2000), *grads,
              span("autograd::engine::evaluate_function: AddmmBackward0", 250, 700),
              kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 400, 450, 1), launch(395, 1)]
    write_trace(tmp_path / "run" / "rank0.json", events)
    return tmp_path / "run"


SIMULATE_GIVEN = ["--latency-us", "10", "--bandwidth-gbps", "1", "--world-size", "2"]


def memory_device(tmp_path: Path, name: str, minor: int) -> Path:
    """As root, a private node of /dev/<name> (the same device), so that a broken writer
    cannot replace the machine's own; elsewhere /dev/<name> itself, which is safe then."""
    node = tmp_path / name
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except OSError:
        return Path("/dev") / name
    return node


@linux_only
def test_json_to_dev_null_leaves_the_device_alone(calibration_run, tmp_path):
    null = memory_device(tmp_path, "null", 3)
    result = ddpprof("simulate", str(calibration_run), *SIMULATE_GIVEN, "--json", str(null))
    assert result.returncode == 0, result.stderr
    assert stat.S_ISCHR(os.stat(null).st_mode) and os.stat(null).st_rdev == os.makedev(1, 3)


def test_json_to_standard_output(calibration_run):
    result = ddpprof("simulate", str(calibration_run), *SIMULATE_GIVEN, "--json", "-")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # stdout holds the JSON and nothing else
    # a trace of no known variant: its own configuration, at the one world size asked
    assert document["schema"] == "ddpprof.simulate" and len(document["rows"]) == 1
    assert "cost model" in result.stderr  # the table and the narration moved to stderr


def test_json_through_a_symlink_writes_its_target(calibration_run, tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    result = ddpprof("simulate", str(calibration_run), *SIMULATE_GIVEN, "--json", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["schema"] == "ddpprof.simulate"


def test_json_to_a_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    write_text(fifo, '{"a": 1}\n')
    reader.join(timeout=10)
    assert received == [b'{"a": 1}\n'] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_json_to_a_folder_is_one_line_before_any_work(calibration_run, tmp_path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    result = ddpprof("simulate", str(calibration_run), *SIMULATE_GIVEN, "--json", str(folder))
    assert_one_line(result, 2, f"--json {folder}: is a folder, not a file")
    assert result.stdout == ""  # nothing was computed and printed first


def test_record_json_to_a_folder_is_refused_before_launching(tmp_path):
    result = ddpprof("record", "--variant", "single", "--model", "mlp-tiny", "--out",
                     str(tmp_path / "out"), "--json", str(tmp_path))
    assert_one_line(result, 2, f"--json {tmp_path}: is a folder, not a file")
    assert not (tmp_path / "out").exists()


def _drop_root_privileges() -> None:
    """preexec_fn: as root, give up the capabilities that ignore file permissions."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            os._exit(99)


def test_html_into_a_read_only_folder_is_one_line(calibration_run, tmp_path):
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    as_root = os.geteuid() == 0
    result = ddpprof("simulate", str(calibration_run), *SIMULATE_GIVEN, "--html-out",
                     str(read_only / "page.html"),
                     preexec_fn=_drop_root_privileges if as_root else None)
    if result.returncode == 99:
        pytest.skip("cannot drop root's capabilities here, so no folder is read-only to root")
    assert_one_line(result, 2, f"--html-out {read_only / 'page.html'}: Permission denied")
    assert list(read_only.iterdir()) == []


@linux_only
def test_a_full_disk_is_one_line_naming_the_file(calibration_run, tmp_path):
    full = memory_device(tmp_path, "full", 7)  # every write: "No space left on device"
    result = ddpprof("simulate", str(calibration_run), *SIMULATE_GIVEN, "--json", str(full))
    assert_one_line(result, 2, f"{full}: No space left on device")
    assert stat.S_ISCHR(os.stat(full).st_mode)


def test_a_name_too_long_is_one_line(calibration_run, tmp_path):
    path = tmp_path / ("x" * 300 + ".json")
    result = ddpprof("simulate", str(calibration_run), *SIMULATE_GIVEN, "--json", str(path))
    assert_one_line(result, 2, "File name too long")


@pytest.mark.parametrize(("name", "problem"), [
    ("..", "'..' is not a folder name"), (".", "'.' is not a folder name"),
    ("", "'' is not a folder name"), ("a/b", "'a/b' must be one folder name"),
    ("../../x", "'../../x' must be one folder name"),
    (".hidden", "a name starting with '.' is hidden from analyze"),
])
def test_name_is_one_path_component(name, problem, tmp_path):
    out = tmp_path / "deep" / "out"
    result = ddpprof("record", "--variant", "single", "--model", "mlp-tiny", "--out", str(out),
                     "--name", name)
    assert_one_line(result, 2, "Invalid value for '--name'", problem)
    assert list(tmp_path.iterdir()) == []  # nothing created, inside --out or above it


def test_a_second_recorder_into_a_folder_in_use_is_refused(tmp_path):
    run_dir = tmp_path / "out" / "single"
    run_dir.mkdir(parents=True)
    with open(run_dir / folders.LOCK_NAME, "a+") as lock:  # what a running recorder holds
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = ddpprof("record", "--variant", "single", "--model", "mlp-tiny", "--out",
                         str(tmp_path / "out"), "--steps", "1", "--wait", "0", "--warmup", "0",
                         "--active", "1")
    assert_one_line(result, 2, f"{run_dir}: in use by another ddpprof record")
    assert not (run_dir / "run.json").exists()


def _fake_run(folder: Path, variant: str, status: str = "complete", **manifest) -> None:
    write_trace(folder / "rank0.pt.trace.json.gz", [step(0, 0, 10)])
    (folder / "launcher.log").write_text("")
    (folder / "run.json").write_text(json.dumps(
        {"schema_version": 2, "status": status, "config": {"variant": variant}, **manifest}))


def test_rerecording_a_name_replaces_the_runs_it_held_whole(tmp_path):
    """`--variant a,b --name X`, then one variant `--name X`: analyze of X must not go on
    reading the old per-variant subfolders (and ignore the new run beside them)."""
    target = tmp_path / "X"
    for variant in ("simple_ddp", "pytorch_ddp"):
        _fake_run(target / variant, variant)
    (target / "notes.txt").write_text("mine")
    with folders.claim([target]) as locks:
        folders.clear_previous(target, locks)
    left = sorted(str(p.relative_to(target)) for p in target.rglob("*"))
    assert left == [".ddpprof.lock", "notes.txt", "pytorch_ddp", "pytorch_ddp/.ddpprof.lock",
                    "simple_ddp", "simple_ddp/.ddpprof.lock"]


def test_rerecording_over_a_foreign_trace_is_refused(tmp_path):
    _fake_run(tmp_path / "out" / "single", "single")
    foreign = tmp_path / "out" / "single" / "from-another-tool.json"
    foreign.write_text("{}")
    result = ddpprof("record", "--variant", "single", "--model", "mlp-tiny", "--out",
                     str(tmp_path / "out"))
    assert_one_line(result, 2, f"{foreign}: not written by ddpprof record")
    assert (tmp_path / "out" / "single" / "run.json").is_file()  # nothing was removed


def test_an_obstacle_where_run_json_goes_is_refused_before_launching(tmp_path):
    obstacle = tmp_path / "out" / "single" / "run.json"
    obstacle.mkdir(parents=True)
    result = ddpprof("record", "--variant", "single", "--model", "mlp-tiny", "--out",
                     str(tmp_path / "out"))
    assert_one_line(result, 2, f"{obstacle}: in the way of the run's own run.json")


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@linux_only
def test_a_running_manifest_whose_owner_is_gone_reads_interrupted_and_may_be_replaced(
        tmp_path):
    target = tmp_path / "run"
    gone = Owner.current()
    gone.pid = _dead_pid()
    _fake_run(target, "single", status="running", owner={
        "pid": gone.pid, "hostname": gone.hostname, "start_ticks": gone.start_ticks,
        "boot_id": gone.boot_id})
    assert effective_status(read_manifest(target / "run.json")) == "interrupted"
    with folders.claim([target]) as locks:
        folders.clear_previous(target, locks)
    assert not (target / "run.json").exists()


@linux_only
def test_a_running_manifest_whose_owner_lives_stays_running_and_in_use(tmp_path):
    target = tmp_path / "run"
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        me = Owner.current()
        ticks = _stat(owner.pid)[2]
        _fake_run(target, "single", status="running", owner={
            "pid": owner.pid, "hostname": me.hostname, "start_ticks": ticks,
            "boot_id": me.boot_id})
        assert effective_status(read_manifest(target / "run.json")) == "running"
        with pytest.raises(UsageError, match="in use: still being recorded by pid"), \
                folders.claim([target]) as locks:
            folders.clear_previous(target, locks)
        # the same pid with another start time is a later process: the owner is gone
        (target / "run.json").write_text(json.dumps({"status": "running", "owner": {
            "pid": owner.pid, "hostname": me.hostname, "start_ticks": ticks - 1,
            "boot_id": me.boot_id}}))
        assert effective_status(read_manifest(target / "run.json")) == "interrupted"
    finally:
        owner.kill()
        owner.wait()


def test_a_manifest_of_the_wrong_shape_is_one_line_naming_the_field(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"status": "complete", "config": {"world_size": "two"}}))
    with pytest.raises(UsageError) as error:
        read_manifest(path)
    assert str(error.value) == f"{path}: config.world_size: expected int | null, got str"
    path.write_text(json.dumps({"status": "complete", "steps": [
        {"step": 0, "phase": "wait"}, {"step": "1", "phase": "wait"}]}))
    with pytest.raises(UsageError, match=r"steps\[1\].step: expected int, got str"):
        read_manifest(path)


def test_json_documents_are_standard_json(tmp_path):
    text = json_text({"ceiling": math.inf, "f": -math.inf, "x": math.nan, "ok": 1.5})
    assert json.loads(text) == {"ceiling": None, "f": None, "x": None, "ok": 1.5}
    assert "Infinity" not in text and "NaN" not in text


# --- options -------------------------------------------------------------------------------

RECORD = ["record", "--variant", "single", "--model", "mlp-tiny"]


@pytest.mark.parametrize(("args", "message"), [
    (["--bucket-cap-mb", "nan"], "Invalid value for '--bucket-cap-mib': 'nan' is not a finite"),
    (["--bucket-cap-mb", "inf"], "Invalid value for '--bucket-cap-mib': 'inf' is not a finite"),
    (["--bucket-cap-mb", "-1"], "Invalid value for '--bucket-cap-mib': '-1' is not > 0"),
    (["--timeout-s", "nan"], "Invalid value for '--timeout-s': 'nan' is not a finite"),
    (["--timeout-s", "0"], "Invalid value for '--timeout-s': '0' is not > 0"),
    (["--timeout-s", "-1"], "Invalid value for '--timeout-s': '-1' is not > 0"),
    (["--timeout-s", "1e9"], "Invalid value for '--timeout-s': '1e9' is not > 0 and <= 604800"),
    (["--seed", str(2**64)], "Invalid value for '--seed'"),
    (["--seed", "-1"], "Invalid value for '--seed'"),
    (["--lr", "nan"], "Invalid value for '--lr': 'nan' is not a finite"),
    (["--steps", "0"], "Invalid value for '--steps'"),
    (["--nproc", "0"], "Invalid value for '--nproc'"),
    (["--wait", "-1"], "Invalid value for '--wait'"),
    (["--grad-accum", "0"], "Invalid value for '--grad-accum'"),
    (["--rdzv-endpoint", "host"], "Invalid value for '--rdzv-endpoint'"),
    (["--rdzv-endpoint", "host:99999"], "Invalid value for '--rdzv-endpoint'"),
    (["--node-rank", "1"], "--node-rank 1 is not below --nnodes 1"),
])
def test_record_numeric_options(args, message, tmp_path):
    result = ddpprof(*RECORD, "--out", str(tmp_path / "out"), *args)
    assert_one_line(result, 2, message)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--bandwidth-gbps", "nan", "--latency-us", "1"], "'--bandwidth-gbps': 'nan' is not a"),
    (["--bandwidth-gbps", "inf", "--latency-us", "1"], "'--bandwidth-gbps': 'inf' is not a"),
    (["--bandwidth-gbps", "1", "--latency-us", "nan"], "'--latency-us': 'nan' is not a"),
    (["--bandwidth-gbps", "1", "--latency-us", "-inf"], "'--latency-us': '-inf' is not a"),
    (["--bucket-cap-mb", "1,nan"], "'--bucket-cap-mib': 'nan' is not a finite"),
    (["--world-size", "2,0"], "Invalid value for '--world-size'"),
])
def test_simulate_numeric_options(args, message, calibration_run):
    assert_one_line(ddpprof("simulate", str(calibration_run), *args), 2, message)


@pytest.mark.parametrize(("command", "message"), [
    (["bench", "--nproc", "1,nan"], "Invalid value for '--nproc'"),
    (["bench", "--repeats", "0"], "Invalid value for '--repeats'"),
    (["bench", "--steps", "0"], "Invalid value for '--steps'"),
    (["sweep", "--bucket-cap-mb", "1,inf"], "'--bucket-cap-mib': 'inf' is not a finite"),
    (["sweep", "--global-batch", "-8"], "Invalid value for '--global-batch'"),
    (["analyze", ".", "--jobs", "0"], "Invalid value for '--jobs'"),
    (["gate", ".", "--baseline", "b.json", "--tolerance", "nan"],
     "'--tolerance': 'nan' is not a finite"),
    (["gate", ".", "--baseline", "b.json", "--tolerance", "inf"],
     "'--tolerance': 'inf' is not a finite"),
])
def test_other_numeric_options(command, message, tmp_path):
    result = ddpprof(*command, cwd=tmp_path)
    assert_one_line(result, 2, message)
    assert list(tmp_path.iterdir()) == []


# --- downstream of a failure ----------------------------------------------------------------

@pytest.mark.parametrize("status", ["failed", "interrupted"])
def test_simulate_refuses_a_run_that_did_not_complete(status, calibration_run):
    (calibration_run / "run.json").write_text(json.dumps({
        "schema_version": 2, "status": status,
        "error": {"rank": 1, "message": "RuntimeError: boom"}}))
    result = ddpprof("simulate", str(calibration_run), *SIMULATE_GIVEN)
    assert_one_line(result, 2, f"the run is {status} (rank 1: RuntimeError: boom); simulate "
                               "calibrates only from a complete run")


# --- gate ----------------------------------------------------------------------------------

def _analysis(*runs: dict) -> dict:
    return {"schema": "ddpprof.analyze", "version": 2, "runs": list(runs), "errors": []}


def _row(name: str, overlap: float | None = 40.0, **fields) -> dict:
    return {"run": name, "variant": "bucket_ddp_async", "status": "complete",
            "model": "mlp-small", "world_size": 2, "global_batch": 256, "grad_accum": 1,
            "bucket_cap_mb": 25.0, "overlap_pct": overlap, "compute_pct": 60.0, **fields}


def _gate(tmp_path: Path, current: dict, baseline: dict, *args: str
          ) -> subprocess.CompletedProcess:
    (tmp_path / "now.json").write_text(json.dumps(current))
    (tmp_path / "base.json").write_text(json.dumps(baseline))
    return ddpprof("gate", str(tmp_path / "now.json"), "--baseline",
                   str(tmp_path / "base.json"), *args)


def test_gate_a_run_without_a_variant(tmp_path):
    foreign = {"run": "trace-dump", "overlap_pct": 30.0}  # no run.json: no variant, no config
    result = _gate(tmp_path, _analysis(foreign), _analysis(dict(foreign, overlap_pct=31.0)))
    assert result.returncode == 0, result.stderr
    assert "trace-dump" in result.stdout and "all 1 checks passed" in result.stdout


def test_gate_median_counts_the_repeats_with_a_number(tmp_path):
    current = _analysis(_row("try1", 38.0), _row("try2", None), _row("try3", 42.0))
    baseline = _analysis(_row("base", 41.0))
    result = _gate(tmp_path, current, baseline, "--aggregate", "median", "--markdown",
                   str(tmp_path / "gate.md"))
    assert result.returncode == 0, result.stdout + result.stderr
    # median of 38 and 42 (the null repeat left out, and said so): 40 >= 41 - 2
    assert ("| overlap_pct >= baseline - 2 | bucket_ddp_async | 41.00 | 40.00 | 39.00 | pass "
            "| 1/1 | 2/3 |") in (tmp_path / "gate.md").read_text()


def test_gate_median_never_merges_different_models(tmp_path):
    current = _analysis(_row("a1", 40.0), _row("a2", 40.0),
                        _row("b1", 10.0, model="mlp-large"), _row("b2", 12.0, model="mlp-large"))
    baseline = _analysis(_row("a", 40.0), _row("b", 11.0, model="mlp-large"))
    # (as Markdown: the terminal's table wraps so long a name to fit its width)
    result = _gate(tmp_path, current, baseline, "--aggregate", "median", "--markdown", "-")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all 2 checks passed" in result.stdout
    assert "bucket_ddp_async [mlp-large, 2 ranks, batch 256, accum 1, 25 MiB buckets]" \
        in result.stdout


def test_gate_a_pair_of_different_configurations_is_refused(tmp_path):
    result = _gate(tmp_path, _analysis(_row("r", 40.0, global_batch=512)),
                   _analysis(_row("r", 40.0)))
    assert_one_line(result, 2, "run 'r' and baseline run 'r' differ: global_batch 512 vs 256")


def test_gate_a_fixed_rule_fails_when_the_metric_vanished(tmp_path):
    result = _gate(tmp_path, _analysis(_row("r", None)), _analysis(_row("r", 40.0)),
                   "--rule", "overlap_pct >= 30")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 of 1 checks failed" in result.stdout


@pytest.mark.parametrize("value", ["NaN", "-Infinity", "Infinity"])
def test_gate_non_finite_inputs_are_refused(value, tmp_path):
    (tmp_path / "base.json").write_text(
        json.dumps(_analysis(_row("r", 40.0))).replace("40.0", value))
    (tmp_path / "now.json").write_text(json.dumps(_analysis(_row("r", 40.0))))
    result = ddpprof("gate", str(tmp_path / "now.json"), "--baseline",
                     str(tmp_path / "base.json"))
    assert_one_line(result, 2, "base.json: run 'r': overlap_pct", "is not a finite number")


@pytest.mark.parametrize("status", ["failed", "interrupted", "running"])
def test_gate_refuses_a_run_that_did_not_complete(status, tmp_path):
    bad = _row("r", 40.0, status=status, error="rank 1: RuntimeError: boom")
    result = _gate(tmp_path, _analysis(bad), _analysis(_row("r", 40.0)))
    assert_one_line(result, 2, f"run 'r' is {status} (rank 1: RuntimeError: boom)")


def test_gate_refuses_a_recording_analyze_left_unfinished(tmp_path):
    current = _analysis(_row("r", 40.0))
    current["unfinished"] = [{"run": "q", "status": "interrupted",
                              "error": "interrupted by SIGTERM"}]
    result = _gate(tmp_path, current, _analysis(_row("r", 40.0)))
    assert_one_line(result, 2, "run 'q' is interrupted (interrupted by SIGTERM)")


def test_gate_markdown_into_a_folder_fails_before_any_verdict(tmp_path):
    (tmp_path / "md").mkdir()
    result = _gate(tmp_path, _analysis(_row("r")), _analysis(_row("r")),
                   "--markdown", str(tmp_path / "md"))
    assert_one_line(result, 2, "is a folder, not a file")
    assert "passed" not in result.stdout
