"""Where ranks are analyzed: local processes (the default), or a Dask cluster.

Either way each rank is loaded and analyzed where it runs and only its small result comes
back, so the caller's memory does not grow with the traces. On a cluster the workers read the
traces from where they are (a shared folder or a bucket).

Locally at most ``jobs`` traces are in memory at once, and ``jobs`` is capped (with a note on
stderr) by the cores this process may use and by the memory available over the memory one rank
needs (:func:`rank_memory_bytes`), so ``--jobs 10000`` never starts more processes than the
machine can run. Every worker dies with this process (``PR_SET_PDEATHSIG``): a parent killed
by SIGKILL or the OOM killer leaves no worker behind.
"""

from __future__ import annotations

import multiprocessing
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..core import io
from ..core.errors import UsageError
from ..core.processes import die_with_parent, memory_room, usable_cores

#: How long a Dask analysis waits with no worker left before it gives up, rather than hang.
NO_WORKER_TIMEOUT_S = float(os.environ.get("DDPPROF_DASK_NO_WORKER_TIMEOUT_S", 30))

Progress = Callable[[int, int], None]   # (done, total)
Lost = Callable[[Any, str], Any]         # (item, why) -> the item's result


class LocalExecutor:
    """Up to ``jobs`` processes (capped, see the module's docstring); a single task runs here,
    where it may use the cores itself."""

    def __init__(self, jobs: int | None) -> None:
        self.jobs = jobs
        self.cores = usable_cores()
        self.told = False         # the cap is said once

    def workers_for(self, items: Sequence[Any]) -> int:
        """How many processes analyze ``items``: ``jobs`` (default: the cores), capped by the
        cores and the memory, never more than there are items. A cap below what was asked for
        is said on stderr."""
        wanted = self.jobs or self.cores
        workers, reason = min(wanted, self.cores), "the cores this process may use"
        needs = [rank_memory_bytes(item) for item in items]
        if self.jobs is None and all(needs) and sum(needs) - RANK_BASE_BYTES * len(needs) \
                < SMALL_INPUT_BYTES:
            return 1   # starting processes would take longer than the whole analysis here
        need = max(needs, default=0)
        available = available_memory_bytes()
        if need and available is not None and available // need < workers:
            workers = max(1, available // need)
            reason = (f"{available >> 20:,} MiB of memory available, about {need >> 20:,} MiB "
                      "per rank")
        if workers < min(wanted, len(items)) and (self.jobs or workers < self.cores) \
                and not self.told:
            self.told = True
            print(f"ddpprof: note: {workers} rank(s) analyzed at a time, not {wanted} "
                  f"({reason})", file=sys.stderr, flush=True)
        return min(workers, len(items))

    def map(self, function: Callable[..., Any], items: Sequence[Any], *args: Any,
            on_done: Progress | None = None, on_lost: Lost) -> list[Any]:
        """``function(item, *args)`` for every item, in order; ``on_lost(item, reason)`` gives
        the result of an item whose process died."""
        workers = self.workers_for(items)
        if workers <= 1:
            results = []
            for done, item in enumerate(items, 1):
                results.append(function(item, *args, decode_workers=min(
                    self.jobs or self.cores, self.cores)))
                if on_done:
                    on_done(done, len(items))
            return results
        results = [None] * len(items)
        context = multiprocessing.get_context()
        # A worker forked from this process checks that it still is its parent.
        parent = os.getpid() if context.get_start_method() == "fork" else None
        with ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                 initializer=die_with_parent, initargs=(parent,)) as pool:
            futures = {pool.submit(function, item, *args): i for i, item in enumerate(items)}
            for done, future in enumerate(as_completed(futures), 1):
                index = futures[future]
                try:
                    results[index] = future.result()
                except BrokenProcessPool:
                    results[index] = on_lost(items[index], "the process analyzing it died "
                                                           "(out of memory?)")
                if on_done:
                    on_done(done, len(items))
        return results


#: What one rank's analysis needs besides its trace: the interpreter, numpy and the code.
RANK_BASE_BYTES = 64 * 1024**2
#: How much a gzip trace is assumed to inflate where its trailer does not tell.
GZIP_RATIO = 10


#: Local traces of less than this, all together (inflated), are analyzed in this process by
#: default: a worker process costs more to start (its imports) than they take to analyze.
SMALL_INPUT_BYTES = 16 << 20


def rank_memory_bytes(item: Any) -> int:
    """About the most memory analyzing the local trace ``item`` takes, from its size alone (0
    for a URL, whose size is not asked for): a base, plus its JSON's size (the decoded columns
    and one slice's objects take about half that: 155 MiB in all for a 211 MiB trace), plus
    the inflated JSON again for gzip (held while it is decoded; its size is read from the gzip
    trailer, which holds it modulo 4 GiB)."""
    if not isinstance(item, Path):
        return 0
    try:  # a stat, not an open, where the size is all it needs: the trace is opened once
        status = item.stat()
    except OSError:
        return 0
    if not stat.S_ISREG(status.st_mode):
        return 0
    if not item.name.endswith(".gz"):
        return RANK_BASE_BYTES + status.st_size
    try:
        fd, status = io.open_regular(item)
    except UsageError:
        return 0
    try:
        trailer = os.pread(fd, 4, max(0, status.st_size - 4))
    except OSError:
        return RANK_BASE_BYTES
    finally:
        os.close(fd)
    inflated = int.from_bytes(trailer, "little") if len(trailer) == 4 else 0
    if inflated < status.st_size:          # more than 4 GiB, or not gzip at all
        inflated = status.st_size * GZIP_RATIO
    return RANK_BASE_BYTES + 2 * inflated


def available_memory_bytes() -> int | None:
    """Memory this process may still use (``processes.memory_room``: what is available, its
    cgroup's limit, its address-space limit); None where none can be read."""
    room = memory_room()
    return room[0] if room else None


class DaskExecutor:
    """Tasks on a Dask distributed cluster at ``address`` (``tcp://host:8786``)."""

    def __init__(self, address: str) -> None:
        try:
            from distributed import Client  # Dask: optional (--scheduler)
        except ImportError:
            raise UsageError("--scheduler needs Dask: pip install 'ddpprof[cluster]'") from None
        try:
            self.client = Client(address, timeout="20s", set_as_default=False)
        except (OSError, TimeoutError) as error:
            raise UsageError(f"--scheduler {address}: cannot reach the Dask scheduler "
                             f"({error})") from None
        self.address = address

    def close(self) -> None:
        self.client.close()

    def map(self, function: Callable[..., Any], items: Sequence[Any], *args: Any,
            on_done: Progress | None = None, on_lost: Lost) -> list[Any]:
        """As :meth:`LocalExecutor.map`; a task whose worker died, or that no worker is left
        to run, is ``on_lost``: never a hang."""
        futures = [self.client.submit(function, item, *args, pure=False) for item in items]
        pending, idle_since = set(futures), None
        while pending:
            time.sleep(0.05)
            done = {future for future in pending if future.done()}
            pending -= done
            if on_done and done:
                on_done(len(futures) - len(pending), len(futures))
            if not pending:
                break
            if self.client.scheduler_info().get("workers"):
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > NO_WORKER_TIMEOUT_S:
                for future in pending:
                    future.cancel()
                break
        results = []
        for item, future in zip(items, futures, strict=True):
            if future.status == "finished":
                results.append(future.result())
            elif future.status == "error":
                error = future.exception()
                if type(error).__name__ != "KilledWorker":
                    raise error
                results.append(on_lost(item, "the Dask worker analyzing it died"))
            else:
                results.append(on_lost(item, f"no Dask worker left at {self.address} for "
                                             f"{NO_WORKER_TIMEOUT_S:g} s"))
        return results


#: Where ranks are analyzed: local processes, or a Dask cluster.
Executor = LocalExecutor | DaskExecutor


@contextmanager
def executor_for(scheduler: str | None, jobs: int | None) -> Iterator[Executor]:
    if not scheduler:
        yield LocalExecutor(jobs)
        return
    executor = DaskExecutor(scheduler)
    try:
        yield executor
    finally:
        executor.close()
