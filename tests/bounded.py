"""Helpers of the tests of bounded inputs (``test_bounded_*.py``): the CLI run in this process
(no interpreter to start: these tests run many short commands), and a small run to read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ddpprof.core import atomic


@dataclass
class Ran:
    code: int
    out: str
    err: str


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> Ran:
    """``ddpprof ARGS`` in this process: its exit status and what it printed."""
    from ddpprof.cli import main

    capsys.readouterr()
    code = 0
    try:
        main([str(a) for a in args])
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    finally:
        atomic._INPUTS.clear()     # what one command read is no input of the next
    out, err = capsys.readouterr()
    return Ran(code, out, err)


def one_line(ran: Ran, *parts: str, code: int = 2) -> None:
    """Exit ``code``, one line on stderr holding each of ``parts``, no traceback."""
    assert ran.code == code, (ran.code, ran.out[-2000:], ran.err[-2000:])
    assert ran.err.count("\n") == 1 and "Traceback" not in ran.err, ran.err[-3000:]
    for part in parts:
        assert part in ran.err, ran.err


def edited(source: Path, target: Path, edit: Any) -> Path:
    """``target``: the JSON of ``source`` changed by ``edit`` (which changes it in place)."""
    document = json.loads(source.read_text())
    edit(document)
    target.write_text(json.dumps(document))
    return target
