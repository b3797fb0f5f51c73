"""What ``run.json`` records of a run's speed: one record per optimizer step, and the run's
throughput over the steps that stand for training speed."""

from __future__ import annotations

import statistics

import msgspec

from ..run.manifest import BucketRecord, MemoryRow, RunMeasurements, StepRecord, Throughput
from ..variants.mesh import MeshRecord

#: Steps whose time stands for training speed: not profiled (wait, after the window), never the
#: first step, which pays for lazy initialisation.
UNPROFILED_PHASES = ("wait", "after", "unprofiled")
WORKER_RESULT = ".worker_result.json"


class WorkerResult(msgspec.Struct, kw_only=True):
    """What rank 0 hands the launcher after training (``.worker_result.json``): per-step
    measurements, reduced over ranks, and what it found of its environment."""

    measured: RunMeasurements           # run.json's ``measured``
    memory: list[MemoryRow] | None = None   # one row per rank (workloads/memory.py)
    buckets: list[BucketRecord] | None = None  # the gradient collectives of one sync
    mesh: MeshRecord | None = None          # several process groups (fsdp_tp)
    step_wall_s: list[float]            # the mean over ranks (see workloads/train.py)
    step_sync_s: list[float]            # the slowest rank's
    step_loss: list[float | None]       # the mean over ranks; None where it was not finite


def step_phases(steps: int, wait: int, warmup: int, active: int,
                profile: bool = True) -> list[str]:
    """The profiler schedule's phase of each step (``after`` follows the one active window;
    every step is ``unprofiled`` when the run was not profiled)."""
    if not profile:
        return ["unprofiled"] * steps
    phases = ["wait"] * wait + ["warmup"] * warmup + ["active"] * active
    return (phases + ["after"] * steps)[:steps]


def step_records(wall_s: list[float], loss: list[float | None], phases: list[str],
                 global_batch: int, seq_len: int | None, sync_s: list[float] | None = None
                 ) -> list[StepRecord]:
    """``sync_s``: time in ``finish_gradient_sync`` (all of the communication for the blocking
    variants, only the final wait for the others)."""
    sync: list[float | None] = [*sync_s] if sync_s else [None] * len(wall_s)
    return [StepRecord(step=step, phase=phase, wall_s=seconds, sync_s=sync_seconds,
                       samples_per_s=global_batch / seconds,
                       tokens_per_s=global_batch * seq_len / seconds if seq_len else None,
                       loss=step_loss)
            for step, (seconds, step_loss, phase, sync_seconds)
            in enumerate(zip(wall_s, loss, phases, sync, strict=True))]


def throughput(records: list[StepRecord], global_batch: int, seq_len: int | None) -> Throughput:
    """Samples/s (and tokens/s) over the unprofiled steps after the first: total samples over
    total time. Falls back to every step after the first, and says so, when there are none."""
    chosen = [r for r in records[1:] if r.phase in UNPROFILED_PHASES]
    includes_profiled = not chosen
    if includes_profiled:
        chosen = records[1:] or records
    chosen_s = [r.wall_s for r in chosen if r.wall_s is not None]   # all: step_records' own
    seconds = sum(chosen_s)
    samples_per_s = global_batch * len(chosen_s) / seconds
    active = [r.wall_s for r in records if r.phase == "active" and r.wall_s is not None]
    unprofiled = chosen_s if not includes_profiled else []
    return Throughput(
        samples_per_s=samples_per_s,
        tokens_per_s=samples_per_s * seq_len if seq_len else None,
        median_step_s=statistics.median(chosen_s),
        steps_used=[r.step for r in chosen],
        includes_profiled_steps=includes_profiled,
        # How much slower a profiled step is than an unprofiled one.
        profiler_overhead_ratio=(statistics.median(active) / statistics.median(unprofiled)
                                 if active and unprofiled else None))
