"""Why a run failed, naming the rank where it started.

When one rank dies, the others soon fail too ("Connection reset by peer" from gloo, a NCCL
timeout), and they may even write their errors first. torchrun knows better: it reports as the
*root cause* the first failure it observed, with the rank's exit code or signal. So the rank
named is torchrun's root cause; its message is the rank's own error (written to
``.errors/rank<r>.json`` by the worker) when it wrote one, else what torchrun saw (``killed by
SIGKILL``). Only when torchrun reports no root cause (it was killed itself, or failed before
starting the ranks) does the earliest error a rank wrote stand in.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import signal_name
from ..manifest import RunError

ERRORS_DIR = ".errors"
#: How much of the end of torchrun's log is searched for its report.
LOG_TAIL_BYTES = 256 * 1024

_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\s*\n\[\d+\]:\s*\n"
                         r"(?P<body>(?:[ \t]+.*\n?)+)")
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.MULTILINE)
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)", re.MULTILINE)
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Timeout)\b"
                             r"(?::.*)?$", re.MULTILINE)


@dataclass(frozen=True)
class RootCause:
    rank: int
    exitcode: int


def root_cause(log_text: str) -> RootCause | None:
    """torchrun's "Root Cause (first observed failure)" from its log, if it wrote one."""
    matches = list(_ROOT_CAUSE.finditer(log_text))
    if not matches:
        return None
    body = matches[-1]["body"]
    rank, exitcode = _RANK.search(body), _EXITCODE.search(body)
    if rank is None or exitcode is None:
        return None
    return RootCause(int(rank.group(1)), int(exitcode.group(1)))


def rank_errors(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The errors ranks wrote before exiting, by rank."""
    errors = {}
    for path in (run_dir / ERRORS_DIR).glob("rank*.json"):
        try:
            error = json.loads(path.read_text())
            errors[int(error["rank"])] = error
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return errors


def read_log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
            return log.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run_error(run_dir: Path, log_name: str, returncode: int) -> RunError:
    """The error of a run whose torchrun exited with ``returncode``."""
    log_text = read_log_tail(run_dir / log_name)
    errors = rank_errors(run_dir)
    cause = root_cause(log_text)
    if cause is not None:
        written = errors.get(cause.rank)
        if written is not None:
            return RunError(rank=cause.rank, message=written["error"],
                            traceback=written.get("traceback"), log=log_name)
        how = (f"killed by {signal_name(-cause.exitcode)}" if cause.exitcode < 0
               else f"exited with code {cause.exitcode} without writing an error")
        return RunError(rank=cause.rank, message=f"{how} (see {log_name})", log=log_name)
    if returncode < 0:
        return RunError(message=f"torchrun was killed by {signal_name(-returncode)}",
                        log=log_name)
    if errors:
        first = min(errors.values(), key=lambda e: e["time"])
        return RunError(rank=first["rank"], message=first["error"],
                        traceback=first.get("traceback"), log=log_name)
    exceptions = _EXCEPTION_LINE.findall(log_text)
    detail = f": {exceptions[-1].strip()}" if exceptions else ""
    return RunError(message=f"torchrun exited with code {returncode}{detail} (see {log_name})",
                    log=log_name)
