"""Flight Recorder in a recorded run: where the dumps go, what the launcher sets, and how it asks
the ranks for their buffers before it gives up on them (no torch: the launcher imports it).

PyTorch's Flight Recorder keeps a ring buffer of each rank's last collectives (process group,
sequence id, op, sizes, dtypes, state, the Python stack that called it). ``ddpprof record``
turns it on in every rank (``TORCH_FR_BUFFER_SIZE``, ``--fr-buffer-size``) and each rank dumps
it into ``<run>/fr/`` (``workloads/flight_recorder.py``) when it fails, when torchrun stops it,
and when the launcher asks (``request_dumps``) before killing torchrun. The files are
PyTorch's own dump format (a pickle), named as ``TORCH_FR_DUMP_TEMP_FILE`` names them (a
prefix, then the rank), so that PyTorch's ``fr_trace`` reads the folder as it is; on NCCL the
same prefix is given to PyTorch, whose watchdog then dumps there on a timeout.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

#: The run folder's subfolder that holds the dumps.
FR_DIR = "fr"
#: A dump's name is this prefix and the rank (``fr/rank_3``), as TORCH_FR_DUMP_TEMP_FILE makes
#: them: PyTorch's ``fr_trace`` infers the prefix from names ending in the rank.
DUMP_PREFIX = "rank_"
_DUMP_NAME = re.compile(rf"^{DUMP_PREFIX}(\d+)$")
#: The signal that asks a rank for its dump without stopping it.
DUMP_SIGNAL = signal.SIGUSR1
#: How long the launcher waits for the ranks' dumps after asking, before it kills them.
DUMP_WAIT_S = 5.0


def dump_name(rank: int) -> str:
    return f"{DUMP_PREFIX}{rank}"


def dump_rank(name: str) -> int | None:
    """The rank of a dump file named by ``dump_name``, else None."""
    match = _DUMP_NAME.match(name)
    return int(match.group(1)) if match else None


def environment(buffer_size: int, backend: str, run_dir: Path) -> dict[str, str]:
    """What the ranks' environment gets: Flight Recorder on with ``buffer_size`` entries (off at
    0), and, on NCCL, PyTorch's own dump on a timeout into the run's ``fr/`` under the same
    names."""
    if buffer_size <= 0:
        return {"TORCH_FR_BUFFER_SIZE": "0"}
    env = {"TORCH_FR_BUFFER_SIZE": str(buffer_size)}
    if backend == "nccl":
        env |= {"TORCH_FR_DUMP_TEMP_FILE": str(run_dir.resolve() / FR_DIR / DUMP_PREFIX),
                "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
    return env


def dumps_in(run_dir: Path) -> list[str]:
    """The dumps in a run folder, as paths relative to it (``fr/rank_0``), by rank."""
    folder = run_dir / FR_DIR
    if not folder.is_dir() or folder.is_symlink():
        return []
    found = [(rank, entry.name) for entry in folder.iterdir()
             if (rank := dump_rank(entry.name)) is not None and entry.is_file()
             and not entry.is_symlink()]
    return [f"{FR_DIR}/{name}" for _, name in sorted(found)]


def request_dumps(pids: list[int], run_dir: Path, wait_s: float = DUMP_WAIT_S) -> None:
    """Ask the ranks ``pids`` for their dumps (``DUMP_SIGNAL``) and wait until each has
    written one since the request, or ``wait_s`` passes: what the launcher does before it
    kills ranks that would otherwise take their buffers with them."""
    asked = time.time()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, DUMP_SIGNAL)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        fresh = 0
        for name in dumps_in(run_dir):
            with contextlib.suppress(OSError):
                fresh += (run_dir / name).stat().st_mtime >= asked
        if fresh >= len(pids):
            return
        time.sleep(0.1)
