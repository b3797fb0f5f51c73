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
import os
import re
import stat
from dataclasses import dataclass
from typing import Any

from ..core.errors import signal_name
from ..core.units import MIB
from ..run.folder import RunFolder
from ..run.manifest import RunError

ERRORS_DIR = ".errors"
#: How much of the end of torchrun's log is searched for its report.
LOG_TAIL_BYTES = 256 * 1024
#: A rank's error file holds one message and one traceback.
ERROR_FILE_BYTES = 4 * MIB
_ERROR_FILE = re.compile(r"^rank\d+\.json$")

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


def rank_errors(folder: RunFolder) -> dict[int, dict[str, Any]]:
    """The errors ranks wrote before exiting, by rank (read without following links)."""
    errors: dict[int, dict[str, Any]] = {}
    if folder.kind(ERRORS_DIR) is None:
        return errors
    try:
        written = folder.subfolder(ERRORS_DIR)
    except OSError:
        return errors
    with written:
        for name in sorted(os.listdir(written.fd)):
            if not _ERROR_FILE.match(name):
                continue
            try:
                error = json.loads(written.read_bytes(name, ERROR_FILE_BYTES))
                errors[int(error["rank"])] = error
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return errors


def read_log_tail(folder: RunFolder, name: str) -> str:
    """The last ``LOG_TAIL_BYTES`` of a log in ``folder`` (never through a link)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(name, flags, dir_fd=folder.fd)
    except OSError:
        return ""
    with os.fdopen(descriptor, "rb") as log:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            return ""
        log.seek(max(0, found.st_size - LOG_TAIL_BYTES))
        return log.read(LOG_TAIL_BYTES).decode("utf-8", "replace")


def run_error(folder: RunFolder, log_name: str, returncode: int) -> RunError:
    """The error of a run whose torchrun exited with ``returncode``."""
    log_text = read_log_tail(folder, log_name)
    errors = rank_errors(folder)
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
