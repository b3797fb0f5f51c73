"""Reading the JSON documents commands take as input (``gate --baseline``, ``simulate
--measured``): regular files only, read up to a cap, so that a FIFO, a device or a file that
never ends is one line naming it, never a hang or a read until memory runs out.

The cap is ``DDPPROF_MAX_JSON_BYTES`` (default 256 MiB: an analysis of a thousand runs is a few
MiB).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import UsageError, describe_os_error

DEFAULT_MAX_JSON_BYTES = 256 * 2**20


def max_json_bytes() -> int:
    try:
        return max(1, int(os.environ.get("DDPPROF_MAX_JSON_BYTES", DEFAULT_MAX_JSON_BYTES)))
    except ValueError:
        raise UsageError("DDPPROF_MAX_JSON_BYTES: not a whole number of bytes") from None


def read_json_bytes(path: Path) -> bytes:
    """The bytes of ``path``; a ``UsageError`` naming it when it is not a regular file, cannot
    be read, or holds more than the cap."""
    limit = max_json_bytes()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise UsageError(describe_os_error(path, error)) from None
    with os.fdopen(fd, "rb") as stream:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UsageError(f"{path}: not a regular file")
            data = stream.read(limit + 1)
        except OSError as error:
            raise UsageError(describe_os_error(path, error)) from None
    if len(data) > limit:
        raise UsageError(f"{path}: more than {limit:,} bytes (DDPPROF_MAX_JSON_BYTES)")
    return data
