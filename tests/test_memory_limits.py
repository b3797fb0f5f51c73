"""What inflating a trace may take is bounded by the memory this process may really use (the
least of what is available, its cgroup's ``memory.max`` and its address-space limit, ``ulimit
-v``: ``processes.memory_room``), and a trace that would need more is one line, exit 2; a
gzip bomb of blanks is named so (not "an empty file", after inflating gigabytes); work that
runs out of memory anyway is one line through the parent, never a traceback. Each test
failed on the code before (a ``MemoryError`` traceback, 8 GiB held, "empty file")."""

from __future__ import annotations

import resource
import subprocess
import sys
import zlib
from pathlib import Path

from test_faults import assert_one_line

from ddpprof.core.errors import TraceError


def _bomb(path: Path, head: bytes, blank_gib: int) -> Path:
    """A gzip member of ``head`` then ``blank_gib`` GiB of spaces (a few MB of file): one
    block of spaces compressed once and repeated (a full flush makes blocks that stand
    alone); its trailer is left wrong, as no reader gets that far."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = [packer.compress(head), packer.flush(zlib.Z_FULL_FLUSH)]
    block = packer.compress(b" " * (64 << 20)) + packer.flush(zlib.Z_FULL_FLUSH)
    data += [block] * (blank_gib * 16)
    data.append(packer.flush())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(data))
    return path


def _ddpprof(*args: str, address_space: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    return subprocess.run([sys.executable, "-m", "ddpprof.cli", *args], capture_output=True,
                          text=True, timeout=300, preexec_fn=limit, env={
                              "CI": "true", "PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"})


def test_a_bomb_under_an_address_space_limit_is_one_line(tmp_path):
    """8 GiB inflated under ``ulimit -v`` 4 GiB: the code before ended in MemoryError
    tracebacks from its workers."""
    bomb = _bomb(tmp_path / "run" / "rank0.json.gz", b'{"traceEvents": [', 8)
    result = _ddpprof("analyze", str(bomb.parent), address_space=4 << 30)
    assert_one_line(result, 2, "rank0.json.gz", "ulimit -v")


def test_a_bomb_of_blanks_is_named_so_without_inflating_it_all(tmp_path):
    """8 GiB of spaces: the code before held all of it, then called the file empty."""
    bomb = _bomb(tmp_path / "run" / "rank0.json.gz", b" ", 8)
    result = _ddpprof("analyze", str(bomb), address_space=4 << 30)
    assert_one_line(result, 2, "rank0.json.gz", "of blanks before any JSON")


def test_a_rank_that_runs_out_of_memory_is_its_error_not_a_traceback(tmp_path, monkeypatch):
    from ddpprof.analysis import runs
    from ddpprof.analysis.options import AnalysisOptions

    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(runs, "load", exhausted)
    outcome = runs._load_and_analyze(tmp_path / "rank0.json", AnalysisOptions(), False)
    assert isinstance(outcome.error, TraceError)
    assert "ran out of memory" in str(outcome.error)
