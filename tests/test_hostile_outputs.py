"""Outputs under attack, by class (each test failed on the code before its fix; found by
``benchmarks/hostile_campaign.py``):

* an output never replaces a file the command reads, whichever command and option name it
  (``gate --json`` onto a trace of the folder it analyzed overwrote it);
* a FIFO named as an output is waited on for a bounded time, never forever;
* an output that cannot be written (a full disk) is one line naming the option and the path,
  exit 2, for every output option (``critical-path --graph-json`` was a bare ``[Errno 28]``);
* what reaches a terminal, stderr or a Markdown cell holds no bidirectional override (text
  that reads otherwise than it is stored), and no URL's password.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path

import pytest
from test_faults import assert_one_line, ddpprof, memory_device
from trace_builders import gloo_reduce, grad, span, step, write_trace

from ddpprof.core import atomic
from ddpprof.render.table import markdown_text, terminal_text

MANIFEST = {"schema_version": 3, "status": "complete", "config": {
    "variant": "bucket_ddp_async", "nproc": 2, "backend": "gloo", "grad_accum": 1,
    "bucket_cap_mb": 25.0, "global_batch": 64},
    "measured": {"parameters": 1000, "world_size": 2},
    "memory": [{"rank": r, "device": "cpu", "params_bytes": 4000, "grads_bytes": 4000,
                "optimizer_bytes": 8000} for r in (0, 1)]}


def two_rank_run(folder: Path, name: str | None = None) -> Path:
    """A complete two-rank gloo run (traces and run.json) of three 1000 µs steps."""
    for rank in (0, 1):
        events = []
        for s in range(3):
            o = 1000 * s
            events += [step(s, o, o + 1000), span("aten::mm", o + 10, o + 190),
                       span("autograd::engine::evaluate_function: MmBackward0", o + 200,
                            o + 500), grad(o + 280, o + 300, 256),
                       gloo_reduce(o + 305, o + 345, 256)]
        write_trace(folder / f"rank{rank}.json", events, rank=rank)
    (folder / "run.json").write_text(json.dumps({**MANIFEST, "run": name or folder.name}))
    return folder


@pytest.mark.parametrize(("command", "option", "target"), [
    ("gate", "--json", "rank0.json"), ("gate", "--csv", "run.json"),
    ("memory", "--csv", "rank1.json"), ("memory", "--markdown", "rank0.json")])
def test_no_output_replaces_a_file_of_a_run_being_read(command, option, target, tmp_path):
    run = two_rank_run(tmp_path / "run")
    baseline = tmp_path / "baseline.json"
    assert ddpprof("analyze", str(run), "--json", str(baseline)).returncode == 0
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    args = ["--baseline", str(baseline)] if command == "gate" else []
    result = ddpprof(command, str(run), *args, option, str(run / target))
    assert_one_line(result, 2, option, target)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_write_text_refuses_a_file_this_process_read(tmp_path):
    from ddpprof.core.io import read_regular_file

    read = tmp_path / "input.json"
    read.write_text("{}")
    read_regular_file(read, 100, None)
    link = tmp_path / "link.json"
    link.symlink_to(read)
    for path in (read, link):
        with pytest.raises(OSError, match="is a file this command reads"):
            atomic.write_text(path, "overwritten")
    assert read.read_text() == "{}"


def test_a_fifo_output_no_one_reads_is_an_error_in_bounded_time(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "FIFO_WAIT_S", 0.5)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            atomic.write_text(fifo, "data")
            outcome.append(None)
        except OSError as error:
            outcome.append(error)

    thread = threading.Thread(target=write, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(10)
    if thread.is_alive():                      # unblock the writer: the test has failed
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        pytest.fail("writing to a FIFO no one reads blocked")
    assert isinstance(outcome[0], OSError) and outcome[0].errno == errno.ENXIO
    assert "no process read" in str(outcome[0]) and time.monotonic() - started < 5


def test_a_fifo_output_with_a_late_reader_is_written_whole(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read_late() -> None:
        time.sleep(0.3)
        with open(fifo, "rb") as stream:
            received.append(stream.read())

    reader = threading.Thread(target=read_late)
    reader.start()
    atomic.write_text(fifo, "x" * 300_000)      # more than a pipe holds
    reader.join(10)
    assert received == [b"x" * 300_000]


@pytest.mark.parametrize("option", ["--graph-json", "--json", "--html-out"])
def test_a_full_disk_names_the_output_option(option, tmp_path):
    run = two_rank_run(tmp_path / "run")
    full = memory_device(tmp_path, "full", 7)
    result = ddpprof("critical-path", str(run), option, str(full))
    assert_one_line(result, 2, option, f"{full}: No space left on device")


@pytest.mark.parametrize(("text", "hidden"), [
    ("a\u202eevil", "\u202e"), ("a\u2066b", "\u2066"), ("a\u200fb", "\u200f")])
def test_terminal_and_markdown_text_hold_no_bidi_override(text, hidden):
    assert hidden not in terminal_text(text) and hidden not in markdown_text(text)


def test_a_run_named_with_a_bidi_override_reaches_no_output_as_is(tmp_path):
    two_rank_run(tmp_path / "runs" / "ok\u202eevil")
    result = ddpprof("analyze", str(tmp_path / "runs"), "--markdown", str(tmp_path / "o.md"))
    assert result.returncode == 0, result.stderr
    for text in (result.stdout, result.stderr, (tmp_path / "o.md").read_text()):
        assert "\u202e" not in text


def test_a_urls_password_is_never_printed():
    from ddpprof.core.errors import without_secrets

    assert without_secrets("http://me:hunter2@host:1/x.json: cannot be read") == \
        "http://me:***@host:1/x.json: cannot be read"
    assert without_secrets("s3://bucket/x and https://host/y") == "s3://bucket/x and https://host/y"
    result = ddpprof("analyze", "http://me:hunter2@127.0.0.1:1/rank0.json", timeout=60)
    assert_one_line(result, 2, "http://me:***@127.0.0.1:1/rank0.json")
    assert "hunter2" not in result.stderr


def test_a_urls_password_reaches_no_output_file(tmp_path):
    """A trace read over HTTP with credentials in its URL: the JSON, Markdown and HTML outputs
    and the printed table name it with the password written ``***``."""
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    two_rank_run(tmp_path / "served")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "served"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://me:hunter2@127.0.0.1:{server.server_address[1]}/rank0.json"
        result = ddpprof("analyze", url, "--json", str(tmp_path / "o.json"), "--markdown",
                         str(tmp_path / "o.md"), "--html-out",
                         str(tmp_path / "o.html"), timeout=120)
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    texts = [result.stdout, result.stderr] + [
        (tmp_path / name).read_text() for name in ("o.json", "o.md", "o.html")]
    assert all("hunter2" not in text for text in texts)
    assert "me:***@127.0.0.1" in (tmp_path / "o.json").read_text()


def test_two_outputs_naming_one_file_are_refused(tmp_path):
    run = two_rank_run(tmp_path / "run")
    (tmp_path / "link.md").symlink_to(tmp_path / "out.json")
    for second in ("out.json", "link.md"):
        result = ddpprof("analyze", str(run), "--json", str(tmp_path / "out.json"),
                         "--markdown", str(tmp_path / second))
        assert_one_line(result, 2, "--json and --markdown name one file")
    assert not (tmp_path / "out.json").exists()
