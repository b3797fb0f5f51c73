"""Process lifetimes and ``/proc``, for every part of ddpprof that starts processes.

A process ddpprof starts must not outlive it, whatever kills it (SIGKILL and the OOM killer
included): ``record``'s torchrun and ranks, ``analyze``'s pool workers and the forked trace
decoders all ask the kernel for SIGKILL when their parent exits (:func:`die_with_parent`).
The request is made by the child and is bound to the *thread* that forked it, so a child must
be started from a thread that lives as long as the work (the main thread, in ddpprof).

``/proc/<pid>/stat`` is read here and nowhere else (:func:`stat_fields`). Linux only; off Linux
the requests report that they could not be made, and ``/proc`` reads return None.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(expected_parent: int | None = None) -> bool:
    """Ask for SIGKILL when the parent exits; then, if ``expected_parent`` is given and the
    parent is no longer it (it died before the request took effect), exit at once.

    Returns whether the request could be made (False off Linux).
    """
    prctl = _prctl()
    if prctl is None or prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)
    return True


def preexec_die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets SIGKILL when this process
    exits. libc is loaded here, in the parent, so the child only makes the call."""
    prctl = _prctl()
    parent = os.getpid()

    def request() -> None:
        if prctl is not None and prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0 \
                and os.getppid() != parent:
            os._exit(1)

    return request


def become_subreaper() -> bool:
    """Adopt the orphans of this process's descendants (``PR_SET_CHILD_SUBREAPER``)."""
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (which may hold blanks and parentheses),
    so index 0 is the state (field 3), index 1 the parent's pid, index 19 the start time in
    clock ticks after boot (field 22); None where it cannot be read."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def parent_of(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[1]) if fields else None


def state_of(pid: int) -> str | None:
    """The process's state letter (``R``, ``S``, ``Z`` for a zombie...), None if gone."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def can_list_children() -> bool:
    return Path("/proc/self/stat").is_file()


def child_pids(parent: int) -> list[int]:
    """Processes whose parent is ``parent`` (Linux ``/proc``; empty elsewhere)."""
    children = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and parent_of(int(entry.name)) == parent:
                children.append(int(entry.name))
    return children


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as ``taskset`` or a container sets
    it), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def import_numpy_with_one_blas_thread() -> None:
    """Import numpy with OpenBLAS held to one thread, unless numpy is already imported or the
    user set ``OPENBLAS_NUM_THREADS``. OpenBLAS's idle threads spin on a core for a while after
    it loads and after each call (about 0.1 s of CPU each time, measured here): on two cores
    that is a core taken from the trace decoders and the analysis' threads, and ddpprof's
    matrices are too small to gain from BLAS threads. The variable is set for the import only:
    processes started later (torchrun's ranks) see the user's environment."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"       # read once, when OpenBLAS loads
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


def memory_room() -> tuple[int, str] | None:
    """The memory this process may still take, and what sets it: the least of the kernel's
    ``MemAvailable``, its cgroup's ``memory.max`` less what the cgroup uses, and its
    address-space limit (``RLIMIT_AS``, ``ulimit -v``) less its address space now; None where
    none of them can be read (not Linux)."""
    found: list[tuple[int, str]] = []
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append((int(line.split()[1]) * 1024, "the memory available"))
    if (cgroup := _cgroup_room()) is not None:
        found.append((cgroup, "its cgroup's memory.max"))
    with contextlib.suppress(OSError, ValueError, AttributeError):
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            found.append((max(0, soft - _address_space_bytes()),
                          "its address-space limit (ulimit -v)"))
    return min(found) if found else None


def _cgroup_room() -> int | None:
    """``memory.max`` less ``memory.current`` of this process's cgroup (v2), else of the
    cgroup mounted at the root (a container's own)."""
    folders = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                folders.append(Path("/sys/fs/cgroup") / line[3:].lstrip("/"))
    folders.append(Path("/sys/fs/cgroup"))
    for folder in folders:
        with contextlib.suppress(OSError, ValueError):
            limit = (folder / "memory.max").read_text().strip()
            if limit == "max":
                continue
            return max(0, int(limit) - int((folder / "memory.current").read_text()))
    return None


def _address_space_bytes() -> int:
    """This process's address space now (``VmSize``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def out_of_memory(room: tuple[int, str] | None = None) -> str:
    """What to say of work that ran out of memory (a ``MemoryError``)."""
    room = room or memory_room()
    where = f" ({room[1]} leaves {room[0] >> 20:,} MiB)" if room else ""
    return f"ran out of memory{where}; allow this process more, or give it less at a time"
