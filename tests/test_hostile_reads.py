"""Bounded reads of hostile inputs: special files, files that never end or change while they are
read, gzip bombs, URLs that never answer, and workers that must die with their parent. Each
case is one line and exit 2 (or a note), in bounded time and memory; every subprocess runs
under a timeout, so a regression fails instead of hanging."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from trace_builders import span, step, write_trace

from ddpprof.analysis import executors
from ddpprof.core import processes
from ddpprof.core.io import size_text

LINUX = sys.platform.startswith("linux")
TIMEOUT_S = 60


def _run_folder(folder: Path) -> Path:
    write_trace(folder / "rank0.json", [step(0, 0, 100), step(1, 100, 200),
                                        span("aten::mm", 10, 60)], world_size=1)
    return folder


def _one_line(result, *texts: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    for text in texts:
        assert text in result.stderr, result.stderr


def _python(script: str, *args: str, env: dict | None = None
            ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, timeout=TIMEOUT_S, env={**os.environ, **(env or {})})


def _socket_file(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    return server


# ---- special files -----------------------------------------------------------------------

def test_special_files_in_a_folder_are_skipped_with_a_note(tmp_path, ddpprof_cli):
    run = _run_folder(tmp_path / "run")
    os.mkfifo(run / "rank1.json")
    (run / "rank2.json").symlink_to("/dev/zero")
    server = _socket_file(run / "rank3.json")
    try:
        result = ddpprof_cli("analyze", str(run), "--json", str(tmp_path / "a.json"),
                             timeout=TIMEOUT_S)
        gate = ddpprof_cli("gate", str(run), "--baseline", str(tmp_path / "a.json"),
                           timeout=TIMEOUT_S)
    finally:
        server.close()
    assert result.returncode == 0, result.stderr
    assert ("skipped rank1.json, rank2.json, rank3.json: not a regular file" in result.stderr)
    [analyzed] = json.loads((tmp_path / "a.json").read_text())["runs"]
    assert [rank["rank"] for rank in analyzed["per_rank"]] == [0]
    assert gate.returncode == 0, gate.stderr


def test_a_folder_of_special_files_only_is_one_line(tmp_path, ddpprof_cli):
    os.mkfifo(tmp_path / "rank0.json")
    _one_line(ddpprof_cli("analyze", str(tmp_path), timeout=TIMEOUT_S),
              "no trace files", "skipped rank0.json: not a regular file")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dev-null", "socket", "loop",
                                  "dangling"])
def test_a_special_file_named_directly_is_refused_in_one_line(kind, tmp_path, ddpprof_cli):
    path = tmp_path / "trace.json"
    expected = {"fifo": "not a regular file (a FIFO)",
                "dev-zero": "not a regular file (a character device)",
                "dev-null": "not a regular file (a character device)",
                "socket": "not a regular file (a socket)",
                "loop": "cannot be read (Too many levels of symbolic links)",
                "dangling": "no such file or folder (a link to nothing)"}[kind]
    server = None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        server = _socket_file(path)
    elif kind == "loop":
        path.symlink_to(path)
    else:
        path.symlink_to({"dev-zero": "/dev/zero", "dev-null": "/dev/null",
                         "dangling": tmp_path / "nowhere.json"}[kind])
    try:
        _one_line(ddpprof_cli("analyze", str(path), timeout=TIMEOUT_S), f"{path}: {expected}")
    finally:
        if server is not None:
            server.close()


_SWAPPED = """
import os, sys
from pathlib import Path
from ddpprof.core.errors import TraceError
from ddpprof.core import io
fifo, regular = Path(sys.argv[1]), Path(sys.argv[2])
real_stat = os.stat
# the check sees a regular file; the open then finds the FIFO swapped in
os.stat = lambda path, *a, **k: real_stat(regular if Path(path) == fifo else path, *a, **k)
try:
    io.open_regular(fifo)
except TraceError as error:
    print(error)
"""


def test_a_fifo_swapped_in_between_check_and_open_never_blocks(tmp_path):
    os.mkfifo(tmp_path / "trace.json")
    regular = _run_folder(tmp_path / "run") / "rank0.json"
    done = _python(_SWAPPED, str(tmp_path / "trace.json"), str(regular))
    assert done.stdout == f"{tmp_path / 'trace.json'}: not a regular file (a FIFO)\n", \
        done.stderr


def test_a_link_swapped_back_and_forth_while_loading_never_blocks(tmp_path):
    regular = _run_folder(tmp_path / "run") / "rank0.json"
    os.mkfifo(tmp_path / "fifo")
    script = """
import json, os, sys, threading
from pathlib import Path
from ddpprof.core.errors import TraceError
from ddpprof.trace import cache, loader
link, regular, fifo = (Path(a) for a in sys.argv[1:4])
stop = threading.Event()
os.symlink(regular, link)
def swap():
    while not stop.is_set():
        for target in (regular, fifo):
            os.symlink(target, str(link) + ".new")
            os.replace(str(link) + ".new", link)
threading.Thread(target=swap, daemon=True).start()
outcomes = set()
for _ in range(300):
    cache.clear()
    try:
        loader.load(link)
        outcomes.add("loaded")
    except TraceError as error:
        outcomes.add(error.problem)
stop.set()
print(json.dumps(sorted(outcomes)))
"""
    done = _python(script, str(tmp_path / "trace.json"), str(regular), str(tmp_path / "fifo"))
    assert done.returncode == 0, done.stderr
    outcomes = set(json.loads(done.stdout))
    assert outcomes <= {"loaded", "not a regular file (a FIFO)",
                        "replaced while it was opened"}, outcomes


# ---- JSON inputs: gate, simulate, calibration, run.json -------------------------------------

def test_json_inputs_that_are_special_files_are_refused_at_once(tmp_path, ddpprof_cli):
    run = _run_folder(tmp_path / "run")
    analysis = tmp_path / "a.json"
    assert ddpprof_cli("analyze", str(run), "--json", str(analysis)).returncode == 0
    os.mkfifo(tmp_path / "fifo.json")
    for special in ("/dev/zero", str(tmp_path / "fifo.json")):
        _one_line(ddpprof_cli("gate", str(run), "--baseline", special, timeout=TIMEOUT_S),
                  f"{special}: not a regular file")
        _one_line(ddpprof_cli("gate", special, "--baseline", str(analysis),
                              timeout=TIMEOUT_S), f"{special}: not a regular file")
        _one_line(ddpprof_cli("simulate", str(run), "--calibration", special,
                              timeout=TIMEOUT_S), f"{special}: not a regular file")
    result = ddpprof_cli("gate", str(run), "--baseline", str(analysis), timeout=TIMEOUT_S,
                         env={"DDPPROF_MAX_JSON_BYTES": "100"})
    _one_line(result, f"{analysis}: holds more than 100 bytes (set DDPPROF_MAX_JSON_BYTES")


def test_a_run_json_that_is_a_fifo_never_blocks(tmp_path, ddpprof_cli):
    run = _run_folder(tmp_path / "run")
    os.mkfifo(run / "run.json")
    result = ddpprof_cli("analyze", str(run), timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr


# ---- caps: endless files, gzip bombs ------------------------------------------------------

def test_a_file_larger_than_the_cap_is_refused_before_it_is_read(tmp_path, ddpprof_cli):
    huge = tmp_path / "rank0.json"
    with open(huge, "wb") as sparse:           # 1 TiB, all of it a hole: never read
        sparse.truncate(1 << 40)
    _one_line(ddpprof_cli("analyze", str(huge), timeout=TIMEOUT_S),
              f"{huge}: holds more than 16 GiB (set DDPPROF_MAX_TRACE_BYTES to allow more)")


def _bomb(members: int, member_mib: int, padding: bytes = b"") -> bytes:
    """``members`` gzip members inflating to ``member_mib`` MiB of blanks each (after a
    ``[``)."""
    member = zlib.compressobj(9, zlib.DEFLATED, 31)
    blanks = member.compress(b" " * (member_mib << 20)) + member.flush()
    first = zlib.compressobj(9, zlib.DEFLATED, 31)
    opening = first.compress(b"[") + first.flush()
    return opening + padding + (blanks + padding) * members


_PEAK = """
import resource, sys
from pathlib import Path
from ddpprof.core.errors import TraceError
from ddpprof.trace.loader import load
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load(Path(sys.argv[1]))
except TraceError as error:
    print(error)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.parametrize(("members", "member_mib", "padding"), [
    (1, 256, b""),                          # 256 MiB of blanks in 256 KiB of gzip
    (64, 1, b""),                           # many members, each under the cap
    (64, 1, b"\0" * 4096),                  # zero padding between them
], ids=["one member", "many members", "padded members"])
def test_a_gzip_bomb_stops_at_the_cap_in_bounded_memory(tmp_path, members, member_mib,
                                                        padding):
    bomb = tmp_path / "rank0.json.gz"
    bomb.write_bytes(_bomb(members, member_mib, padding))
    cap = 8 << 20
    done = _python(_PEAK, str(bomb), env={"DDPPROF_MAX_TRACE_BYTES": str(cap)})
    message, grown_mib = done.stdout.splitlines()
    assert message == (f"{bomb}: inflates to more than 8 MiB (set DDPPROF_MAX_TRACE_BYTES "
                       "to allow more)"), done.stderr
    assert int(grown_mib) < 3 * (cap >> 20), grown_mib   # the cap, a chunk and some slack


def test_sizes_in_messages_are_never_rounded_to_nothing():
    assert size_text(16 * 1024**3) == "16 GiB"
    assert size_text(100) == "100 bytes"
    assert size_text(100_000) == "100,000 bytes, about 97.6 KiB"
    assert size_text(1024**3 - 1) == "1,073,741,823 bytes, about 1,023.9 MiB"


# ---- a trace that changes while it is read -------------------------------------------------

_CHANGED = """
import os, sys, time
from pathlib import Path
from ddpprof.core.errors import TraceError
from ddpprof.trace.loader import Slicing, load
path, how, workers = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
data = path.read_bytes()
def change(index):
    if index == (0 if workers == 1 else 4):
        if how == "cut":
            os.truncate(path, len(data) // 2)
        else:
            time.sleep(0.02)             # a new modification time, the same bytes
            path.write_bytes(data)
try:
    load(path, workers, Slicing(slice_bytes=2000, slices_per_task=1, before_task=change))
    print("loaded")
except TraceError as error:
    print(error)
"""


@pytest.mark.parametrize("how", ["cut", "rewritten"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_trace_changed_while_it_is_read_is_one_line_never_a_signal(tmp_path, how,
                                                                     workers):
    path = tmp_path / "rank0.json"
    events = [span(f"aten::op{i}", 10 * i, 10 * i + 5) for i in range(2000)]
    write_trace(path, [step(0, 0, 10_000), step(1, 10_000, 20_000), *events], world_size=1)
    done = _python(_CHANGED, str(path), how, str(workers))
    assert done.returncode == 0, done.stderr            # a SIGBUS would be -7
    assert done.stdout == f"{path}: changed while it was read (rewritten, or cut short, by " \
                          "another process?)\n"


# ---- URLs ----------------------------------------------------------------------------------

@pytest.fixture
def silent_server():
    """A TCP port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for connection in [*accepted, server]:
        connection.close()


@pytest.mark.parametrize(("url", "problem"), [
    ("ftp://example.com/rank0.json", "ftp:// is not a scheme ddpprof reads"),
    ("http://[::1", "not a valid URL (Invalid IPv6 URL)"),
    ("https://host:99999/rank0.json", "not a valid URL (Port out of range"),
])
def test_a_url_ddpprof_cannot_read_is_one_line(url, problem, ddpprof_cli):
    _one_line(ddpprof_cli("analyze", url, timeout=TIMEOUT_S), f"{url}: {problem}")


@pytest.mark.parametrize("scheme", ["http", "s3"])
def test_a_store_that_never_answers_is_one_line_in_bounded_time(scheme, silent_server,
                                                                ddpprof_cli):
    pytest.importorskip("fsspec")
    if scheme == "s3":
        pytest.importorskip("s3fs")
    url = (f"http://127.0.0.1:{silent_server}/job/rank0.json" if scheme == "http"
           else "s3://bucket/job/")
    # no credentials anywhere but an endpoint that never answers (and no metadata service)
    env = {"DDPPROF_URL_TIMEOUT_S": "2", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{silent_server}",
           "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{silent_server}",
           "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent"}
    started = time.monotonic()
    result = ddpprof_cli("analyze", url, timeout=TIMEOUT_S, env=env)
    elapsed_s = time.monotonic() - started
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"ddpprof: error: {url}: "), result.stderr
    assert elapsed_s < 30, elapsed_s             # 2 s per call to the store, and start-up


# ---- workers: never too many, and they die with their parent ------------------------------

def test_jobs_are_capped_by_the_cores(tmp_path, ddpprof_cli):
    cores = executors.usable_cores()
    for rank in range(cores + 1):
        write_trace(tmp_path / f"rank{rank}.json", [step(0, 0, 100), step(1, 100, 200),
                                                     span("aten::mm", 10, 60)],
                    rank=rank, world_size=cores + 1)
    result = ddpprof_cli("analyze", str(tmp_path), "--jobs", "10000", timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert (f"ddpprof: note: {cores} rank(s) analyzed at a time, not 10000 (the cores this "
            "process may use)") in result.stderr


def test_jobs_are_capped_by_the_memory_one_rank_needs(tmp_path, monkeypatch, capsys):
    traces = []
    for rank in range(4):
        traces.append(tmp_path / f"rank{rank}.json")
        traces[-1].write_bytes(b" " * (1 << 20))
    need = executors.rank_memory_bytes(traces[0])
    assert need == executors.RANK_BASE_BYTES + (1 << 20)
    packed = tmp_path / "rank9.json.gz"
    packed.write_bytes(gzip.compress(b" " * (4 << 20)))
    assert executors.rank_memory_bytes(packed) == executors.RANK_BASE_BYTES + 2 * (4 << 20)
    monkeypatch.setattr(executors, "usable_cores", lambda: 8)
    monkeypatch.setattr(executors, "available_memory_bytes", lambda: 2 * need + 1)
    # --jobs 8 (by default 4 MiB of traces are analyzed in this process: below
    # SMALL_INPUT_BYTES a worker costs more to start than the analysis takes)
    assert executors.LocalExecutor(None).workers_for(traces) == 1
    assert executors.LocalExecutor(8).workers_for(traces) == 2
    assert "2 rank(s) analyzed at a time, not 8" in capsys.readouterr().err


_POOL = """
import os, sys, time
from ddpprof.analysis.executors import LocalExecutor
def stall(item, decode_workers=1):
    os.write(1, f"{os.getpid()}\\n".encode())   # one write: two workers share the pipe
    time.sleep(120)
LocalExecutor(2).map(stall, [1, 2, 3, 4], on_lost=lambda item, why: None)
"""


@pytest.mark.skipif(not LINUX, reason="PR_SET_PDEATHSIG is Linux's")
def test_pool_workers_die_with_a_parent_killed_outright(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", _POOL], stdout=subprocess.PIPE,
                              text=True)
    try:
        workers = [int(parent.stdout.readline()) for _ in range(2)]
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=TIMEOUT_S)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(map(_alive, workers)):
            time.sleep(0.05)
        assert not any(map(_alive, workers))
    finally:
        parent.kill()
        parent.stdout.close()


def _alive(pid: int) -> bool:
    return processes.state_of(pid) not in (None, "Z")          # a zombie is dead
