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

The requests to the kernel and the reading of ``/proc`` are ``ddpprof.core.processes``'s,
shared with ``analyze``'s workers and the trace decoders.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from ..core.processes import child_pids, die_with_parent, parent_of

#: Set by ``ddpprof record`` in torchrun's environment: the ranks check that their parent's
#: parent is this process.
LAUNCHER_PID_ENV = "DDPPROF_LAUNCHER_PID"
#: How long torchrun gets to stop its ranks after a forwarded signal before it is killed.
GRACE_S = 10.0
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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
