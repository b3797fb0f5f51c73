"""Progress of long work on stderr, drawn by rich: a bar per recording (the step rank 0 last
reported) and one over the ranks of ``analyze``. Silent under ``--quiet``, under ``CI=true``,
and whenever stderr is not a terminal (a log file gets no carriage returns)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

_STEP_LINE = re.compile(rb"ddpprof-step (\d+)/(\d+)")


def quiet_by_environment() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def shown(quiet: bool) -> bool:
    """Whether progress is drawn: asked for, not under CI, and stderr is a terminal."""
    return not quiet and not quiet_by_environment() and sys.stderr.isatty()


def _console() -> Console:
    from rich.console import Console  # rich: 50-170 ms, off a command's start until it prints

    return Console(stderr=True, highlight=False)


def _bar(console: Console) -> Any:
    # rich: 50-170 ms, off a command's start until it prints
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    return RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, transient=True)


class Progress:
    """One line per recorded run ``[k/total] label ... status in 12.3s``, and while it runs a
    bar over its steps."""

    def __init__(self, quiet: bool, total: int) -> None:
        self.live = shown(quiet)
        self.total = total
        self.index = 0
        self._label = ""
        self._started = 0.0
        self._console = _console() if self.live else None

    def start(self, label: str, run_dir: Path, world_size: int) -> None:
        self.index += 1
        self._started = time.monotonic()
        self._label = (f"[{self.index}/{self.total}] {label} ({world_size} rank"
                       f"{'s' * (world_size != 1)}) -> {run_dir}")

    def follow(self, process: subprocess.Popen[Any], log_path: Path, steps: int,
               on_tick: Callable[[], None] = lambda: None) -> None:
        """Wait for ``process``, calling ``on_tick`` four times a second; while it runs, a
        bar shows the step rank 0 last reported."""
        if self._console is None:
            while process.poll() is None:
                on_tick()
                time.sleep(0.25)
            return
        from rich.markup import escape  # rich: 50-170 ms, off a command's start until it prints

        with _bar(self._console) as bar:
            task = bar.add_task(escape(f"{self._label}: {phase(0, steps)}"), total=steps)
            while process.poll() is None:
                on_tick()
                done = _last_step(log_path)
                bar.update(task, completed=done,
                           description=escape(f"{self._label}: {phase(done, steps)}"))
                time.sleep(0.25)

    def finish(self, status: str, samples_per_s: float | None, error: str | None) -> None:
        if self._console is None:
            return
        elapsed = time.monotonic() - self._started
        detail = error or (f"{samples_per_s:,.0f} samples/s" if samples_per_s else "")
        self._console.print(f"{self._label}  {status} in {elapsed:.1f}s  {detail}".rstrip(),
                            markup=False, soft_wrap=True)


def phase(done: int, steps: int) -> str:
    """What a recording is doing, from the last step rank 0 reported: torchrun starting the
    ranks (nothing reported yet), a step, or the traces being written after the last one."""
    if done <= 0:
        return "starting ranks"
    if done < steps:
        return f"step {done + 1} of {steps}"
    return "writing traces"


@contextmanager
def working(quiet: bool, what: str) -> Iterator[None]:
    """A spinner saying ``what`` is being done, on stderr while the block runs (silent as
    every progress display is: ``shown``)."""
    if not shown(quiet):
        yield
        return
    from rich.markup import escape  # rich: 50-170 ms, off a command's start until it prints

    with _console().status(escape(what)):
        yield


@contextmanager
def ranks(quiet: bool) -> Iterator[tuple[Callable[[int, int, Any], None],
                                         Callable[[int, int], None]]]:
    """``(on_run, on_rank)`` for ``ddpprof.analysis.analyze_paths``: a bar over the ranks of
    the run being analyzed, gone when the block ends."""
    if not shown(quiet):
        yield (lambda index, total, run: None), (lambda done, total: None)
        return
    from rich.markup import escape  # rich: 50-170 ms, off a command's start until it prints

    with _bar(_console()) as bar:
        task = bar.add_task("analyzing", total=None)

        def on_run(index: int, total: int, run: Any) -> None:
            bar.update(task, description=escape(f"[{index + 1}/{total}] {run.name}"),
                       completed=0, total=len(run.traces))

        def on_rank(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield on_run, on_rank


def _last_step(log_path: Path) -> int:
    try:
        with open(log_path, "rb") as log:
            log.seek(max(0, log_path.stat().st_size - 4096))
            matches = _STEP_LINE.findall(log.read())
    except OSError:
        return 0
    return int(matches[-1][0]) if matches else 0
