"""Progress is drawn only where someone watches: stderr a terminal, not --quiet, not CI."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from ddpprof.core import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("quiet", "ci", "tty", "shown"), [
    (False, "", True, True), (True, "", True, False), (False, "true", True, False),
    (False, "", False, False)])
def test_when_progress_is_shown(quiet, ci, tty, shown, monkeypatch):
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(sys, "stderr", Terminal() if tty else io.StringIO())
    assert progress.shown(quiet) is shown


def test_a_recording_draws_its_steps_then_one_line(monkeypatch, tmp_path):
    monkeypatch.delenv("CI", raising=False)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    log = tmp_path / "launcher.log"
    log.write_text("ddpprof-step 2/3\n")
    shown = progress.Progress(quiet=False, total=1)
    shown.start("simple_ddp", tmp_path / "run", 2)
    shown.follow(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"]), log,
                 3)
    shown.finish("complete", 1234.0, None)
    lines = [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line)
             for line in terminal.getvalue().splitlines() if "complete" in line]
    assert len(lines) == 1 and lines[0].startswith(f"[1/1] simple_ddp (2 ranks) -> {tmp_path}")
    assert "1,234 samples/s" in lines[0]
    assert "\x1b[" in terminal.getvalue()   # the bar was drawn, and erased


def test_quiet_draws_nothing(monkeypatch, tmp_path):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    silent = progress.Progress(quiet=True, total=1)
    silent.start("single", tmp_path, 1)
    silent.follow(subprocess.Popen([sys.executable, "-c", "pass"]), tmp_path / "log", 3)
    silent.finish("complete", None, None)
    assert terminal.getvalue() == ""
