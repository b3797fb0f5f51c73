"""Owning the processes of a run: torchrun and the ranks die with ``ddpprof record``.

The chain is ``ddpprof record`` -> torchrun -> ranks. torchrun starts every rank in a session of
its own (``setsid``), so a signal to ddpprof's process group never reaches them. Three
mechanisms close every path (Linux; elsewhere only the forwarding of signals holds):

* **parent-death signal**: torchrun and each rank ask the kernel for SIGKILL when their parent
  exits (``PR_SET_PDEATHSIG``), and check right after asking that the parent they expect is
  still there (a parent that died before the request is caught that way). Whatever kills
  ddpprof, even SIGKILL, takes torchrun down, and torchrun takes the ranks.
* **signal forwarding** (``SignalGuard``): SIGINT, SIGTERM and SIGHUP to ddpprof are forwarded to
  torchrun, which stops its ranks; if it has not exited within ``GRACE_S``, or a second signal
  comes, it is killed.
* **subreaper**: ddpprof adopts the orphans of its descendants (``PR_SET_CHILD_SUBREAPER``), so
  after torchrun exits, any process it left behind is killed and reaped before ``run.json`` is
  finished: no rank writes into a run folder once its status is final.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..manifest import proc_stat_fields

#: Set by ``ddpprof record`` in torchrun's environment: the ranks check that their parent's
#: parent is this process.
LAUNCHER_PID_ENV = "DDPPROF_LAUNCHER_PID"
#: How long torchrun gets to stop its ranks after a forwarded signal before it is killed.
GRACE_S = 10.0
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

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


def die_with_launcher() -> None:
    """For a rank, started by torchrun, started by ``ddpprof record``: die with torchrun, and
    exit now if torchrun or the launcher is already gone. Without the launcher's pid in the
    environment (torchrun run by hand) only the parent-death signal is set."""
    parent = os.getppid()
    if not die_with_parent(parent):
        return
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher and parent_of(parent) != int(launcher):
        os._exit(1)  # torchrun died before we asked: we were adopted by someone else


def preexec_die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets SIGKILL when this process
    exits. libc is loaded here, in the parent, so the child only makes the call."""
    prctl = _prctl()
    launcher = os.getpid()

    def request() -> None:
        if prctl is not None and prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0 \
                and os.getppid() != launcher:
            os._exit(1)

    return request


def become_subreaper() -> bool:
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def parent_of(pid: int) -> int | None:
    fields = proc_stat_fields(pid)
    return int(fields[1]) if fields else None


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


def kill_and_reap_children(timeout_s: float = 10.0) -> list[int]:
    """SIGKILL and reap every child of this process (after torchrun has exited these are the
    orphans it left, adopted by this subreaper), until none is left or ``timeout_s`` passes.
    Returns the pids it killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = child_pids(os.getpid())
        if not children:
            break
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            killed.append(pid)
    return killed


class SignalGuard:
    """While active, SIGINT, SIGTERM and SIGHUP do not kill this process: the first is
    remembered and forwarded to the attached child; a second one kills the child."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.received_at: float | None = None
        self.child: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> SignalGuard:
        with contextlib.suppress(ValueError):  # only the main thread may set handlers
            for signum in FORWARDED_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

    def attach(self, pid: int) -> None:
        self.child = pid
        if self.signum is not None:  # a signal came while the child was being started
            self._send(self.signum)

    def detach(self) -> None:
        self.child = None

    def overdue(self) -> bool:
        """A signal was forwarded ``GRACE_S`` ago and the child still runs."""
        return self.received_at is not None and time.monotonic() - self.received_at > GRACE_S

    def kill_child(self) -> None:
        self._send(signal.SIGKILL)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum, self.received_at = signum, time.monotonic()
            self._send(signum)
        else:
            self.kill_child()

    def _send(self, signum: int) -> None:
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, signum)
