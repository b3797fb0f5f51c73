"""ddpprof: record PyTorch data-parallel training under torch.profiler and measure its overlap.

From Python: ``ddpprof.Job.load(path)`` (one run, its analyzers: ``docs/api.md``) and
``ddpprof.analyze(path)`` (the ``analyze`` table as a pandas DataFrame)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas

    from .job import Job, JobSet

__version__ = "0.1.0"
__all__ = ["Job", "JobSet", "analyze"]


def analyze(path: str | Path, keep_last_step: bool = False) -> pandas.DataFrame:
    """``ddpprof.analyze(path) -> pandas.DataFrame``: see :func:`ddpprof.analysis.analyze`."""
    # ``import ddpprof`` stays light (the command line imports it first): loaded when called
    from .analysis import analyze as _analyze

    return _analyze(path, keep_last_step=keep_last_step)


def __getattr__(name: str) -> object:
    # ``ddpprof.Job`` imports the analysis only when asked for: the command line, which
    # imports this package first, does not pay for it
    if name in ("Job", "JobSet"):
        from . import job  # the facade, loaded when asked for

        return getattr(job, name)
    raise AttributeError(f"module 'ddpprof' has no attribute {name!r}")
