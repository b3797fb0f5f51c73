"""One module per ``ddpprof`` command: what it does between the parsed options and the
``ddpprof.render.output.Output`` that ``ddpprof.cli`` prints and writes. Checks of the outputs
(never onto an input, never inside a run being recorded) happen here, before any work."""

from __future__ import annotations

import importlib.util

from ..core.errors import UsageError

RECORD_EXTRA = "pip install 'ddpprof[record]'"


def require_record_extra(command: str) -> None:
    """``record``, ``bench``, ``sweep`` and ``calibrate`` train or launch with PyTorch, which
    the plain install leaves out: one line naming the extra, exit 2."""
    missing = [name for name in ("torch", "transformers")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"{command} needs {' and '.join(missing)}, which the plain install "
                         f"leaves out: {RECORD_EXTRA}")
