"""The last trace loaded in this process, kept for the next load of the same unchanged file.

``analyze`` reads rank 0 again for its bucket-cap advice (``ddpprof.advice.bucket_cap``), and
decoding a large trace twice would cost as much as the whole analysis. One entry, dropped
before any other file is decoded, so a process never holds more than the one trace it works
on. A file is the same when its path, device, inode, size and modification and change times
are (``ddpprof.core.io.FileBytes.identity``); a URL is never kept.
"""

from __future__ import annotations

from typing import Any

from .events import RankTrace

_last: tuple[tuple[Any, ...], RankTrace] | None = None


def get(identity: tuple[Any, ...] | None) -> RankTrace | None:
    """The trace kept for ``identity``, if it is the one kept (callers only read it)."""
    last = _last                  # one read: threads may replace it
    if identity is not None and last is not None and last[0] == identity:
        return last[1]
    return None


def keep(identity: tuple[Any, ...] | None, trace: RankTrace) -> None:
    global _last
    _last = None if identity is None else (identity, trace)


def clear() -> None:
    """Drop the trace kept, if any (before another is decoded, and in tests)."""
    global _last
    _last = None
