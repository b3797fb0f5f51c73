"""ddpprof: record PyTorch data-parallel training under torch.profiler and measure its overlap."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas

__version__ = "0.1.0"


def analyze(path: str | Path, keep_last_step: bool = False) -> pandas.DataFrame:
    """``ddpprof.analyze(path) -> pandas.DataFrame``: see :func:`ddpprof.analysis.analyze`."""
    from .analysis import analyze as _analyze

    return _analyze(path, keep_last_step=keep_last_step)
