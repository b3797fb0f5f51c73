"""Where ranks are analyzed: local processes (the default), or a Dask cluster.

Either way each rank is loaded and analyzed where it runs and only its small result comes
back, so the caller's memory does not grow with the traces. Locally at most ``jobs`` traces
are in memory at once; on a cluster the workers read the traces from where they are (a shared
folder or a bucket).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from ..errors import UsageError

#: How long a Dask analysis waits with no worker left before it gives up, rather than hang.
NO_WORKER_TIMEOUT_S = float(os.environ.get("DDPPROF_DASK_NO_WORKER_TIMEOUT_S", 30))

Progress = Callable[[int, int], None]   # (done, total)
Lost = Callable[[Any, str], Any]         # (item, why) -> the item's result


class LocalExecutor:
    """Up to ``jobs`` processes; a single task runs here, where it may use the cores itself."""

    def __init__(self, jobs: int | None) -> None:
        self.cores = jobs or os.cpu_count() or 1

    def map(self, function: Callable[..., Any], items: Sequence[Any], *args: Any,
            on_done: Progress | None = None, on_lost: Lost) -> list[Any]:
        """``function(item, *args)`` for every item, in order; ``on_lost(item, reason)`` gives
        the result of an item whose process died."""
        workers = min(len(items), self.cores)
        if workers <= 1:
            results = []
            for done, item in enumerate(items, 1):
                results.append(function(item, *args, decode_workers=self.cores))
                if on_done:
                    on_done(done, len(items))
            return results
        results = [None] * len(items)
        with ProcessPoolExecutor(max_workers=workers) as pool:
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


class DaskExecutor:
    """Tasks on a Dask distributed cluster at ``address`` (``tcp://host:8786``)."""

    def __init__(self, address: str) -> None:
        try:
            from distributed import Client
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


@contextmanager
def executor_for(scheduler: str | None, jobs: int | None) -> Iterator[Any]:
    if not scheduler:
        yield LocalExecutor(jobs)
        return
    executor = DaskExecutor(scheduler)
    try:
        yield executor
    finally:
        executor.close()
