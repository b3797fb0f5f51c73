"""What-if replays of a step graph: the recorded graph replayed with some of its work made
faster or a rank delayed, and the step time that results. Pure; definitions in
``docs/critical-path.md``.

* ``--faster CLASS=PCT``: every compute node whose name is in the class
  (``classify.WORK_CLASSES``: ``gemm``, ``compute``) takes ``PCT`` % less time
  (``duration × (1 − PCT/100)``).
* ``--faster-network PCT``: every collective's transfer takes ``PCT`` % less time.
* ``--rank-delay RANK=US``: the rank starts its step ``US`` µs later (negative: sooner, but
  never before the earliest rank's start). The step length is measured from the home rank's
  replayed start, so a delayed rank that ends the step counts from its own later start.

Gaps (untraced CPU time, launch latency, idle) are kept as recorded; waits are not (they are
re-derived from when the awaited collectives end), which is what makes a faster collective or
a late rank move the other ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..trace.classify import WORK_CLASSES
from .model import NodeKind, StepGraph
from .path import replay, step_length_us


@dataclass(frozen=True)
class Edit:
    """One change to replay: ``kind`` is ``faster``, ``faster-network`` or ``rank-delay``."""

    kind: str
    target: str          # the work class (faster), the rank (rank-delay), or ""
    amount: float        # percent (faster, faster-network) or µs (rank-delay)

    @property
    def label(self) -> str:
        if self.kind == "faster":
            return f"{self.target} {self.amount:g}% faster"
        if self.kind == "faster-network":
            return f"network {self.amount:g}% faster"
        return f"rank {self.target} {self.amount:+g} µs at the start"


def parse_edit(option: str, text: str) -> Edit:
    """``--faster gemm=20``, ``--faster-network 30``, ``--rank-delay 1=-500``: one line of
    error naming the option when the value is not understood."""
    try:
        if option == "faster-network":
            edit = Edit(option, "", float(text))
        else:
            target, _, amount = text.partition("=")
            edit = Edit(option, target.strip(), float(amount))
    except ValueError:
        raise UsageError(f"--{option} {text!r}: expected "
                         f"{'PCT' if option == 'faster-network' else 'NAME=NUMBER'}") from None
    if option == "faster" and edit.target not in WORK_CLASSES:
        raise UsageError(f"--faster {text!r}: the class is one of {', '.join(WORK_CLASSES)}")
    if option != "rank-delay" and not 0 <= edit.amount < 100:
        raise UsageError(f"--{option} {text!r}: the percentage must be in [0, 100)")
    if option == "rank-delay" and not edit.target.isdigit():
        raise UsageError(f"--rank-delay {text!r}: RANK must be a rank number")
    if not np.isfinite(edit.amount):
        raise UsageError(f"--{option} {text!r}: not a finite number")
    return edit


def edited_step_us(graph: StepGraph, edits: list[Edit]) -> float:
    """The step length (``path.step_length_us``) of ``graph`` replayed with all of ``edits``
    applied together."""
    c = graph.columns()
    duration, release = c.duration.copy(), c.release.copy()
    kind = np.array([node.kind for node in graph.nodes], dtype=object)
    rank = np.array([node.rank for node in graph.nodes], dtype=np.int64)
    for edit in edits:
        if edit.kind == "faster":
            pattern = WORK_CLASSES[edit.target]
            picked = (kind == NodeKind.COMPUTE) & np.array(
                [bool(pattern.search(node.name)) for node in graph.nodes], dtype=bool)
            duration[picked] *= 1 - edit.amount / 100
        elif edit.kind == "faster-network":
            duration[kind == NodeKind.COMMUNICATION] *= 1 - edit.amount / 100
        else:
            picked = (rank == int(edit.target)) & ~np.isnan(release)
            release[picked] = np.maximum(release[picked] + edit.amount, graph.origin_us)
    return step_length_us(graph, replay(graph, c, duration_us=duration, release_us=release))
