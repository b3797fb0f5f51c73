"""The run manifest ``run.json``: configuration, per-step measurements and status.

Its ``status`` is ``running`` while torchrun runs, then ``complete`` or ``failed``; a failed run
names the error and the rank that raised it. The file is always replaced atomically.
"""

from __future__ import annotations

import statistics
from datetime import datetime, timezone
from typing import Any

MANIFEST_NAME = "run.json"
SCHEMA_VERSION = 1
#: Steps whose time stands for training speed: not profiled (wait, after the window), never the
#: first step, which pays for lazy initialisation.
UNPROFILED_PHASES = ("wait", "after", "unprofiled")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def step_phases(steps: int, wait: int, warmup: int, active: int,
                profile: bool = True) -> list[str]:
    """The profiler schedule's phase of each step (``after`` follows the one active window;
    every step is ``unprofiled`` when the run was not profiled)."""
    if not profile:
        return ["unprofiled"] * steps
    phases = ["wait"] * wait + ["warmup"] * warmup + ["active"] * active
    return (phases + ["after"] * steps)[:steps]


def step_records(wall_s: list[float], loss: list[float], phases: list[str], global_batch: int,
                 seq_len: int | None, sync_s: list[float] | None = None) -> list[dict[str, Any]]:
    """``sync_s``: time in ``finish_gradient_sync`` (all of the communication for the blocking
    variants, only the final wait for the others)."""
    records = []
    sync_s = sync_s or [None] * len(wall_s)
    for step, (seconds, step_loss, phase, sync) in enumerate(
            zip(wall_s, loss, phases, sync_s, strict=True)):
        records.append({
            "step": step,
            "phase": phase,
            "wall_s": seconds,
            "sync_s": sync,
            "samples_per_s": global_batch / seconds,
            "tokens_per_s": global_batch * seq_len / seconds if seq_len else None,
            "loss": step_loss,
        })
    return records


def throughput(records: list[dict[str, Any]], global_batch: int,
               seq_len: int | None) -> dict[str, Any]:
    """Samples/s (and tokens/s) over the unprofiled steps after the first: total samples over
    total time. Falls back to every step after the first, and says so, when there are none."""
    chosen = [r for r in records[1:] if r["phase"] in UNPROFILED_PHASES]
    includes_profiled = not chosen
    if includes_profiled:
        chosen = records[1:] or records
    seconds = sum(r["wall_s"] for r in chosen)
    samples_per_s = global_batch * len(chosen) / seconds
    active = [r["wall_s"] for r in records if r["phase"] == "active"]
    unprofiled = [r["wall_s"] for r in chosen] if not includes_profiled else []
    return {
        "samples_per_s": samples_per_s,
        "tokens_per_s": samples_per_s * seq_len if seq_len else None,
        "median_step_s": statistics.median(r["wall_s"] for r in chosen),
        "steps_used": [r["step"] for r in chosen],
        "includes_profiled_steps": includes_profiled,
        # How much slower a profiled step is than an unprofiled one.
        "profiler_overhead_ratio": (statistics.median(active) / statistics.median(unprofiled)
                                    if active and unprofiled else None),
    }
