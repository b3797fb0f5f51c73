"""Progress lines for long recordings, on stderr; silent under ``--quiet`` or ``CI=true``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

_STEP_LINE = re.compile(rb"ddpprof-step (\d+)/(\d+)")


def quiet_by_environment() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


class Progress:
    def __init__(self, quiet: bool, total: int) -> None:
        self.quiet = quiet or quiet_by_environment()
        self.total = total
        self.index = 0
        self.live = sys.stderr.isatty()
        self._label = ""
        self._started = 0.0

    def _write(self, text: str, end: str = "\n") -> None:
        if not self.quiet:
            sys.stderr.write(text + end)
            sys.stderr.flush()

    def start(self, variant: str, run_dir: Path, world_size: int) -> None:
        self.index += 1
        self._started = time.monotonic()
        self._label = f"[{self.index}/{self.total}] {variant} ({world_size} rank" \
                      f"{'s' if world_size > 1 else ''}) -> {run_dir}"
        if not self.live:
            self._write(self._label + " ...")

    def follow(self, process: subprocess.Popen, log_path: Path, steps: int,
               on_tick: Callable[[], None] = lambda: None) -> None:
        """Wait for ``process``, calling ``on_tick`` four times a second; on a terminal, show
        the step rank 0 last reported."""
        while process.poll() is None:
            on_tick()
            if self.live and not self.quiet:
                step = _last_step(log_path)
                elapsed = time.monotonic() - self._started
                self._write(f"\r{self._label}  step {step}/{steps}  {elapsed:5.1f}s", end="")
            time.sleep(0.25)
        if self.live and not self.quiet:
            self._write("\r\033[K", end="")

    def finish(self, status: str, samples_per_s: float | None, error: str | None) -> None:
        elapsed = time.monotonic() - self._started
        detail = f"{samples_per_s:,.0f} samples/s" if samples_per_s else ""
        if error:
            detail = error
        self._write(f"{self._label}  {status} in {elapsed:.1f}s  {detail}".rstrip())


def _last_step(log_path: Path) -> int:
    try:
        with open(log_path, "rb") as log:
            log.seek(max(0, log_path.stat().st_size - 4096))
            matches = _STEP_LINE.findall(log.read())
    except OSError:
        return 0
    return int(matches[-1][0]) if matches else 0
