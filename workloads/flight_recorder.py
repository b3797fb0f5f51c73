"""A rank's Flight Recorder dump: its ring buffer of collectives written into the run folder's
``fr/`` (``ddpprof.record.flight_recorder`` names the files) when the rank fails, when it is
told to stop, and when the launcher asks.

* **On an error** out of the training (a collective's timeout, a peer gone), the main thread
  dumps on its way out (:meth:`FlightRecorder.dump`, from ``workloads.train``).
* **On SIGTERM, SIGINT or SIGHUP** (torchrun stopping the ranks after one failed, or an
  interrupt it forwards) the rank dumps, then exits with 128 + the signal's number.
* **On SIGUSR1** (the launcher about to kill torchrun) it dumps and goes on.

A rank hung in a collective is blocked in C++ (gloo's ``work.wait()``, which releases the
GIL): a Python signal handler would run only after the collective's timeout. So the handlers do
nothing, CPython's C-level handler writes each signal's number to a pipe
(``signal.set_wakeup_fd``), and a daemon thread reading that pipe dumps at once.

A dump is PyTorch's own format (the pickle of ``_dump_fr_trace``, with each entry's Python
stack), with two additions that PyTorch's reader ignores:

* ``pg_config`` filled from c10d's table of groups where the dump left it empty (gloo's is:
  ``{'': {'ranks': '[]'}}``), so that the groups' members are known;
* ``ddpprof``: the rank, the reason, the time, and where the main thread was when it dumped
  (what a rank that never reached a collective was doing instead).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
import time
import types
from typing import Any

import torch
import torch.distributed as dist

from ddpprof.record.flight_recorder import DUMP_SIGNAL, FR_DIR, dump_name
from ddpprof.run.folder import RunFolder

_STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Main-thread frames kept in a dump (innermost first, as Flight Recorder keeps its own).
MAX_FRAMES = 64


def _frames(frame: types.FrameType | None) -> list[dict[str, Any]]:
    found = []
    while frame is not None and len(found) < MAX_FRAMES:
        found.append({"name": frame.f_code.co_name, "filename": frame.f_code.co_filename,
                      "line": frame.f_lineno})
        frame = frame.f_back
    return found


def _raw_dump() -> dict[str, Any]:
    """``_dump_fr_trace()`` decoded. Symbolizing the entries' Python frames looks up
    ``torch._inductor``, whose import takes 10-20 s on a busy CPU (a dump must be quick: the
    rank is being stopped); where it is not imported, no frame can be inductor's, so a bare
    module stands in for the lookup."""
    stand_in = "torch._inductor" not in sys.modules and "_inductor" not in vars(torch)
    if stand_in:
        vars(torch)["_inductor"] = types.ModuleType("torch._inductor")
    try:
        data = torch._C._distributed_c10d._dump_fr_trace()
    finally:
        if stand_in:
            vars(torch).pop("_inductor", None)
    dump: dict[str, Any] = pickle.loads(data)
    return dump


def _group_table() -> dict[str, dict[str, str]]:
    """c10d's process groups this rank belongs to, as a dump's ``pg_config`` holds them."""
    table = {}
    for group, name in dict(dist.distributed_c10d._world.pg_names).items():
        with contextlib.suppress(Exception):    # a group being torn down
            table[name] = {"name": name, "desc": getattr(group, "group_desc", "undefined"),
                           "ranks": str(dist.get_process_group_ranks(group))}
    return table


#: The rank's recorder once installed (what ``dump_on_error`` dumps).
ACTIVE: FlightRecorder | None = None


def dump_on_error(error: BaseException) -> None:
    """The installed recorder's dump of an error out of the training (none if not installed),
    with the frames where the error was raised."""
    if ACTIVE is not None:
        text = (f"{type(error).__name__}: {error}".strip().splitlines() or ["error"])[0]
        trace = error.__traceback__
        while trace is not None and trace.tb_next is not None:
            trace = trace.tb_next
        with contextlib.suppress(Exception):   # the error itself must still be written
            ACTIVE.dump(f"error: {text}", final=True,
                        where=_frames(trace.tb_frame) if trace is not None else None)


class FlightRecorder:
    """This rank's dumps into ``folder``'s ``fr/``: :meth:`install` (main thread, after the
    process group exists) starts the signal thread; :meth:`dump` writes one."""

    def __init__(self, folder: RunFolder, rank: int) -> None:
        self.folder, self.rank = folder, rank
        self._lock = threading.Lock()
        self._final = False          # dumped on an error: a later stop signal adds nothing
        self._main = threading.main_thread().ident

    def install(self) -> None:
        global ACTIVE
        ACTIVE = self
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        for signum in (*_STOPPING, DUMP_SIGNAL):
            signal.signal(signum, _ignore)
        threading.Thread(target=self._watch, args=(read_end,), name="ddpprof-fr",
                         daemon=True).start()

    def dump(self, reason: str, final: bool = False,
             where: list[dict[str, Any]] | None = None) -> None:
        """Write this rank's buffer as ``fr/rank_<r>`` (atomically), with ``where`` (by default
        where the main thread is now); ``final`` for the dump of an error, after which a stop
        signal only stops the rank."""
        with self._lock:
            if self._final:
                return
            self._final = final
            dump = _raw_dump()
            groups = _group_table()
            config = {k: v for k, v in dump.get("pg_config", {}).items() if k}
            dump["pg_config"] = {**groups, **{k: v for k, v in config.items()
                                              if v.get("ranks") not in (None, "[]")}}
            if where is None:
                main = sys._current_frames().get(self._main) if self._main else None
                where = _frames(main)
            dump["ddpprof"] = {
                "rank": self.rank, "reason": reason,
                "world_size": dist.get_world_size() if dist.is_initialized() else None,
                "time_ns": time.time_ns(), "pid": os.getpid(),
                "main_thread": where}
            with self.folder.subfolder(FR_DIR) as fr:
                fr.write_bytes(dump_name(self.rank), pickle.dumps(dump, protocol=4))

    def _watch(self, read_end: int) -> None:
        while True:
            try:
                received = os.read(read_end, 64)
            except InterruptedError:
                continue
            for signum in received:
                stopping = signum in _STOPPING
                with contextlib.suppress(Exception):   # a failed dump must not keep it alive
                    self.dump(f"{signal.Signals(signum).name}", final=False)
                if stopping:
                    sys.stdout.flush()
                    os._exit(128 + signum)


def _ignore(signum: int, frame: object) -> None:
    """The Python-level handler: the wakeup pipe carries the signal to the dump thread."""
