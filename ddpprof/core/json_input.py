"""Reading the JSON documents commands take as input (``gate --baseline``, ``simulate
--measured``, ``calibration.json``, a run's ``run.json``): every one goes through
:func:`read_json_bytes`, which reads regular files only, up to a cap, as traces are read (see
``ddpprof.core.io``): a FIFO, a device, a file that never ends or one that changes while it
is read is one line naming it, never a hang or a read until memory runs out.

The cap is ``DDPPROF_MAX_JSON_BYTES`` (default 256 MiB: an analysis of a thousand runs is a few
MiB), or a smaller one a caller gives (a run manifest is at most ``MAX_MANIFEST_BYTES``).
"""

from __future__ import annotations

from pathlib import Path

from .errors import TraceError, UsageError
from .io import byte_cap, read_regular_file

DEFAULT_MAX_JSON_BYTES = 256 * 2**20
MAX_JSON_BYTES_ENV = "DDPPROF_MAX_JSON_BYTES"


def max_json_bytes() -> int:
    return byte_cap(MAX_JSON_BYTES_ENV, DEFAULT_MAX_JSON_BYTES)


def read_json_bytes(path: Path, limit: int | None = None) -> bytes:
    """The bytes of ``path``; a ``UsageError`` naming it when it is not a regular file, cannot
    be read, changes while it is read, or holds more than ``limit`` bytes (by default
    :func:`max_json_bytes`)."""
    try:
        if limit is None:
            return read_regular_file(path, max_json_bytes(), MAX_JSON_BYTES_ENV)
        return read_regular_file(path, limit, None)
    except TraceError as error:
        raise UsageError(str(error)) from None
