"""Atomic file writes: a reader sees the old file or the whole new one, never half of it."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only if the block succeeds.

    The temporary name keeps the final suffixes (``.json.gz``), because some writers, such as
    ``torch.profiler``'s ``export_chrome_trace``, choose compression by the name's ending.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".tmp-{os.getpid()}-", suffix=f"-{final.name}",
                                    dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp's 0600 would hide results from others
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
