"""``ddpprof bench``: the scaling table (step and epoch time, throughput, speedup against one
process, scaling efficiency, Amdahl's parallel fraction), measured with ddpprof's own
workloads.

Timed runs are unprofiled; repetitions are interleaved (every configuration once, then again),
so drift in the machine's load spreads over all of them. One extra profiled run per
configuration gives the profiler's overhead.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..core.errors import RunFailed, UsageError
from ..core.progress import Progress
from ..record.launcher import Recording, RunOutcome, record
from ..render.table import columns
from ..run.manifest import StepRecord
from ..variants import VARIANTS

#: (model, variant, process count)
Config = tuple[str, str, int]

#: The epoch the table's epoch time is for: 32,768 MNIST-shaped samples.
EPOCH_SAMPLES = 32768


def configurations(models: list[str], variants: list[str], nprocs: list[int]
                   ) -> list[Config]:
    """A variant that is not distributed (``single``) runs one process; the data-parallel
    variants run at every count."""
    return [(model, variant, n) for model in models for variant in variants for n in nprocs
            if VARIANTS[variant].distributed or n == 1]


def check_variants(variants: list[str]) -> None:
    """The scaling table runs each variant at every ``--nproc`` against ``single``: a
    tensor-parallel variant runs only where ``--tp`` divides the world size, and its speedup
    would mix two kinds of parallelism."""
    tensor_parallel = [v for v in variants if VARIANTS[v].tensor_parallel]
    if tensor_parallel:
        raise UsageError(f"--variant {tensor_parallel[0]}: bench scales data-parallel variants "
                         f"from one process; record it by name (ddpprof record --variant "
                         f"{tensor_parallel[0]} --nproc N)")


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


@dataclass(frozen=True)
class BenchRow:
    """One configuration: times over its repeats (each the median of its steps after the
    warm-up), and the scaling figures against ``single`` of the same model."""

    model: str
    variant: str
    nproc: int
    step_ms_min: float
    step_ms_median: float
    epoch_s: float                      # EPOCH_SAMPLES at the median step
    comm_ms: float | None               # blocking variants (the registry's): the sync's median
    samples_per_s: float
    speedup: float | None               # single's median step / this one's
    efficiency: float | None            # speedup / nproc
    amdahl_f: float | None              # at the largest nproc with a speedup
    amdahl_ceiling: float | None
    profiler_overhead: float | None     # median profiled step / median unprofiled step


COLUMNS = [*columns("model", "variant", "nproc", "step_ms_median", "samples_per_s",
                   "speedup", "efficiency", "comm_ms", "profiler_overhead"),
           *columns(wide=("step_ms_min", "epoch_s", "amdahl_f", "amdahl_ceiling"))]


@dataclass(frozen=True)
class BenchDocument:
    """``ddpprof bench --json``."""

    repeats: int
    warmup_steps: int
    global_batch: int
    steps: int
    rows: list[BenchRow]
    schema: str = "ddpprof.bench"
    version: int = 2


def bench(models: list[str], variants: list[str], nprocs: list[int], base: Recording,
          repeats: int, warmup_steps: int, overhead: bool) -> list[BenchRow]:
    if base.config.steps <= warmup_steps:
        raise UsageError(f"--steps {base.config.steps} leaves nothing after {warmup_steps} "
                         "warm-up steps")
    configs = configurations(models, variants, nprocs)
    samples: dict[Config, list[tuple[float | None, float | None]]] = {c: [] for c in configs}
    overheads: dict[Config, float | None] = {}
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
    return rows(configs, samples, overheads, base.config.global_batch)


def run_name(model: str, variant: str, n: int, tag: str) -> str:
    """The run folder of one timed (``r0``, ``r1``...) or ``profiled`` run under ``--out``."""
    return f"{variant}-{model}-n{n}-{tag}"


def _run(progress: Progress, base: Recording, model: str, variant: str, n: int, tag: str,
         profile: bool) -> RunOutcome:
    config = base.config.replace(model=model, nproc=n, profile=profile)
    if profile:  # a schedule that fits: its active steps against the unprofiled ones after
        config = config.replace(steps=max(config.steps, 6), wait=1, warmup=1, active=2)
    recording = Recording([variant], config, out=base.out, name=run_name(model, variant, n, tag),
                          quiet=True)
    progress.start(f"{model} {variant} x{n} ({tag})", recording.run_dir(variant), n)
    [outcome] = record(recording)
    throughput = outcome.manifest.throughput
    progress.finish(outcome.status, throughput.samples_per_s if throughput else None,
                    outcome.error)
    if outcome.status != "complete":
        raise RunFailed(f"{outcome.run_dir}: run failed ({outcome.error})")
    return outcome


def rows(configs: list[Config], samples: dict[Config, list[tuple[float | None, float | None]]],
         overheads: dict[Config, float | None], global_batch: int) -> list[BenchRow]:
    """The table from each configuration's (step s, sync s) per repeat."""
    medians: dict[Config, float] = {}
    for config in configs:
        steps = [s for s, _ in samples[config] if s is not None]
        if not steps:
            raise RunFailed(f"{config[1]} on {config[0]} x{config[2]}: no step was timed after "
                            "the warm-up")
        medians[config] = statistics.median(steps)
    single = {model: medians[(model, variant, n)] for model, variant, n in configs
              if not VARIANTS[variant].distributed}
    speedups = {c: single[c[0]] / medians[c] if c[0] in single else None for c in configs}
    largest: dict[tuple[str, str], tuple[int, float]] = {}
    for (model, variant, n), speedup in speedups.items():
        if n > 1 and speedup and n >= largest.get((model, variant), (0, 0.0))[0]:
            largest[(model, variant)] = (n, speedup)
    table = []
    for config in configs:
        model, variant, n = config
        steps = [s for s, _ in samples[config] if s is not None]
        syncs = [c for _, c in samples[config] if c is not None]
        median, speedup = medians[config], speedups[config]
        top_n, top_speedup = largest.get((model, variant), (0, 0.0))
        amdahl_f, ceiling = amdahl(top_speedup, top_n)
        table.append(BenchRow(
            model=model, variant=variant, nproc=n, step_ms_min=min(steps) * 1e3,
            step_ms_median=median * 1e3, epoch_s=EPOCH_SAMPLES / global_batch * median,
            comm_ms=statistics.median(syncs) * 1e3 if VARIANTS[variant].blocking and syncs
            else None,
            samples_per_s=global_batch / median, speedup=speedup,
            efficiency=speedup / n if speedup else None, amdahl_f=amdahl_f,
            amdahl_ceiling=ceiling, profiler_overhead=overheads.get(config)))
    return table
