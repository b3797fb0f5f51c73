"""``ddpprof memory``: bytes per rank under DDP and ZeRO for models and world sizes, or a
recorded run's measurements beside the estimate (``ddpprof.memory``). Not a client of
``ddpprof.Job``: an estimate analyzes no job, and a run's measurements are read from its
run.json alone, where loading a Job would analyze its traces first."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core import progress
from ..core.errors import UsageError
from ..memory import estimate as estimator
from ..render.output import Output, Outputs
from ..run.discover import run_files
from . import require_record_extra


@dataclass(frozen=True)
class MemoryOptions:
    """``ddpprof memory``'s options, as parsed (``ddpprof.cli``)."""

    run_paths: tuple[Path, ...]
    models: tuple[str, ...]
    model_path: Path | None
    world_sizes: tuple[int, ...]
    precisions: tuple[str, ...]
    optimizers: tuple[str, ...]


def memory(chosen: MemoryOptions, outputs: Outputs) -> Output:
    run_paths, models, model_path = list(chosen.run_paths), chosen.models, chosen.model_path
    world_sizes, precisions, optimizers = chosen.world_sizes, chosen.precisions, chosen.optimizers
    outputs.check("memory")
    if run_paths:
        if models or model_path or world_sizes or precisions or optimizers:
            raise UsageError("give RUN folders, or --model/--model-path with --world-size; "
                             "a run's model, world size, precision and optimizer are its own")
        found = estimator.find_runs(run_paths)
        outputs.check("memory", files=[f for path in found for f in run_files(path)],
                      what="a file of a run being read")
        with progress.working(outputs.quiet, "reading the runs"):
            runs = [estimator.compare_run(path) for path in found]
        worst = max(runs, key=lambda run: max(abs(r.error_pct) for r in run.ranks))
        return Output(estimator.comparison_document(runs), [estimator.comparisons_table(runs)],
                      title="ddpprof memory", notes=[
                          f"largest |error|: {max(abs(r.error_pct) for r in worst.ranks):.2f}% "
                          f"({worst.run}); estimate: {estimator.RECORDED_PRECISION} "
                          f"{estimator.RECORDED_OPTIMIZER}, as ddpprof record trains"])
    if not (models or model_path) or not world_sizes:
        raise UsageError("give --model NAME (or --model-path DIR) and --world-size N, "
                         "or recorded RUN folders")
    if model_path is not None:  # its parameters are counted on the meta device
        require_record_extra("memory --model-path")
    if model_path is not None and len(models) > 1:
        raise UsageError("--model-path counts one model: give at most one --model to name it")
    names: list[str | None] = [*models] or [None]
    with progress.working(outputs.quiet, "counting parameters"):
        labelled = [estimator.model_parameters(model, model_path) for model in names]
    estimates = [(label, estimate) for label, parameters in labelled for world in world_sizes
                 for estimate in estimator.estimate_table(
                     parameters, world, tuple(precisions or estimator.PRECISIONS),
                     tuple(optimizers or estimator.OPTIMIZERS))]
    intro = [f"{label}: Ψ = {parameters:,} parameters" for label, parameters in labelled]
    document = estimator.estimate_document(estimates)
    return Output(document, [estimator.estimates_table(document.estimates)],
                  intro=[*intro, "bytes per rank at N ranks; communication sent per rank per "
                                 "optimizer step (ring)"], title="ddpprof memory")
