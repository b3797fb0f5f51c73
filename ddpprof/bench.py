"""``ddpprof bench``: seed 000's scaling table, measured with ddpprof's own workloads.

Timed runs are unprofiled; repetitions are interleaved (every configuration once, then again),
so drift in the machine's load spreads over all of them. One extra profiled run per
configuration gives the profiler's overhead.
"""

from __future__ import annotations

import statistics
from typing import Any

from .errors import RunFailed, UsageError
from .manifest import StepRecord
from .progress import Progress
from .record.launcher import Recording, record

#: seed 000 trains on 32,768 MNIST-shaped samples per epoch
EPOCH_SAMPLES = 32768
#: variants whose communication happens wholly inside ``finish_gradient_sync``
BLOCKING = ("simple_ddp", "simple_ddp_ga")


def configurations(models: list[str], variants: list[str], nprocs: list[int]
                   ) -> list[tuple[str, str, int]]:
    """``single`` runs one process; the data-parallel variants run at every count."""
    return [(model, variant, n) for model in models for variant in variants for n in nprocs
            if variant != "single" or n == 1]


def amdahl(speedup: float, n: int) -> tuple[float | None, float | None]:
    """Parallel fraction f from S = 1 / ((1 - f) + f / n), and the ceiling 1 / (1 - f).
    None when there is no speedup to explain (n = 1, or S <= 1: Amdahl's law has no f then)."""
    if n <= 1 or speedup <= 1:
        return None, None
    f = (1 - 1 / speedup) / (1 - 1 / n)
    return f, (1 / (1 - f) if f < 1 else float("inf"))


def _median_after_warmup(steps: list[StepRecord], key: str, warmup: int) -> float | None:
    values = [getattr(s, key) for s in steps[warmup:] if getattr(s, key) is not None]
    return statistics.median(values) if values else None


def bench(models: list[str], variants: list[str], nprocs: list[int], base: Recording,
          repeats: int, warmup_steps: int, overhead: bool) -> list[dict[str, Any]]:
    if base.config.steps <= warmup_steps:
        raise UsageError(f"--steps {base.config.steps} leaves nothing after {warmup_steps} "
                         "warm-up steps")
    configs = configurations(models, variants, nprocs)
    samples: dict[tuple[str, str, int], list[tuple[float, float | None]]] = {c: [] for c in configs}
    overheads: dict[tuple[str, str, int], float | None] = {}
    progress = Progress(quiet=base.quiet, total=len(configs) * (repeats + int(overhead)))
    for repeat in range(repeats):
        for model, variant, n in configs:
            outcome = _run(progress, base, model, variant, n, f"r{repeat}", profile=False)
            steps = outcome.manifest.steps or []
            samples[(model, variant, n)].append((
                _median_after_warmup(steps, "wall_s", warmup_steps),
                _median_after_warmup(steps, "sync_s", warmup_steps)))
    if overhead:
        for model, variant, n in configs:
            outcome = _run(progress, base, model, variant, n, "profiled", profile=True)
            throughput = outcome.manifest.throughput
            overheads[(model, variant, n)] = throughput.profiler_overhead_ratio \
                if throughput else None
    return _rows(configs, samples, overheads, base.config.global_batch)


def _run(progress: Progress, base: Recording, model: str, variant: str, n: int, tag: str,
         profile: bool):
    config = base.config.replace(model=model, nproc=n, profile=profile)
    if profile:  # a schedule that fits: its active steps against the unprofiled ones after
        config = config.replace(steps=max(config.steps, 6), wait=1, warmup=1, active=2)
    recording = Recording([variant], config, out=base.out, name=f"{model}-{variant}-n{n}-{tag}",
                          quiet=True)
    progress.start(f"{model} {variant} x{n} ({tag})", recording.run_dir(variant), n)
    [outcome] = record(recording)
    throughput = outcome.manifest.throughput
    progress.finish(outcome.status, throughput.samples_per_s if throughput else None,
                    outcome.error)
    if outcome.status != "complete":
        raise RunFailed(f"{outcome.run_dir}: run failed ({outcome.error})")
    return outcome


def _rows(configs, samples, overheads, global_batch: int) -> list[dict[str, Any]]:
    rows = []
    for model, variant, n in configs:
        steps = [s for s, _ in samples[(model, variant, n)]]
        syncs = [c for _, c in samples[(model, variant, n)] if c is not None]
        median_step = statistics.median(steps)
        rows.append({
            "model": model, "variant": variant, "nproc": n,
            "step_ms_min": min(steps) * 1e3, "step_ms_median": median_step * 1e3,
            "epoch_s": EPOCH_SAMPLES / global_batch * median_step,
            "comm_ms": statistics.median(syncs) * 1e3 if variant in BLOCKING and syncs
            else None,
            "samples_per_s": global_batch / median_step,
            "profiler_overhead": overheads.get((model, variant, n)),
        })
    baseline = {r["model"]: r["step_ms_median"] for r in rows if r["variant"] == "single"}
    for row in rows:
        single = baseline.get(row["model"])
        row["speedup"] = single / row["step_ms_median"] if single else None
        row["efficiency"] = row["speedup"] / row["nproc"] if row["speedup"] else None
    largest = {}
    for row in rows:
        key = (row["model"], row["variant"])
        if row["nproc"] > 1 and row["speedup"] and row["nproc"] >= largest.get(key, (0,))[0]:
            largest[key] = (row["nproc"], row["speedup"])
    for row in rows:
        n, speedup = largest.get((row["model"], row["variant"]), (0, None))
        row["amdahl_f"], row["amdahl_ceiling"] = amdahl(speedup, n) if speedup else (None, None)
    return rows
