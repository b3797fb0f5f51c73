"""Bytes per rank under DDP and ZeRO stages 1-3 (the ZeRO paper's memory table), for any model
and world size, and its comparison with what a recorded run measured. Pure functions; no torch.

With Ψ parameters, N ranks and ``k_p``, ``k_g``, ``k_o`` bytes per parameter of parameters,
gradients and optimizer state (:func:`bytes_per_parameter`), a rank holds

=========  ===========  ===========  ===========
stage      parameters   gradients    optimizer
=========  ===========  ===========  ===========
DDP        k_p·Ψ        k_g·Ψ        k_o·Ψ
ZeRO-1     k_p·Ψ        k_g·Ψ        k_o·⌈Ψ/N⌉
ZeRO-2     k_p·Ψ        k_g·⌈Ψ/N⌉    k_o·⌈Ψ/N⌉
ZeRO-3     k_p·⌈Ψ/N⌉    k_g·⌈Ψ/N⌉    k_o·⌈Ψ/N⌉
=========  ===========  ===========  ===========

A shard is ⌈Ψ/N⌉ elements: the ranks' shards are equal and the last is padded, which is what a
rank really holds. Mixed-precision AdamW (2 + 2 + 12) gives the paper's 16Ψ, 4Ψ + 12Ψ/N,
2Ψ + 14Ψ/N and 16Ψ/N.

Communication per rank and optimizer step, in the ring model (a reduce-scatter or an
all-gather of S bytes sends (N−1)/N·S per rank, an all-reduce twice that): DDP all-reduces the
gradients, 2(N−1)/N·Ψ·k_g; stages 1 and 2 reduce-scatter the gradients and all-gather the
parameters, (N−1)/N·Ψ·(k_g + k_p), the same when k_g = k_p; stage 3 all-gathers the parameters
before forward and again before backward and reduce-scatters the gradients,
(N−1)/N·Ψ·(2k_p + k_g), 3(N−1)/N·Ψ·bytes. Stage 3's all-gathers repeat for every micro-step of
gradient accumulation; the figure is for one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from ..core.errors import UsageError
from ..core.units import GIB, MIB
from ..grammar.options import unknown_model
from ..metrics.comm import BUS_FACTOR
from ..render.table import Column, Table, columns
from ..run.manifest import MANIFEST_NAME, MemoryRow, RunManifest, read_manifest
from ..variants import VARIANTS

PRECISIONS = ("fp32", "bf16-mixed")
OPTIMIZERS = ("adamw", "sgd-momentum", "sgd")
STAGE_NAMES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")
#: A world size beyond any real cluster: bad input, not a question.
MAX_WORLD_SIZE = 1 << 20


@dataclass(frozen=True)
class BytesPerParameter:
    params: int
    grads: int
    optimizer: int


def bytes_per_parameter(precision: str, optimizer: str) -> BytesPerParameter:
    """Bytes each parameter costs in parameters, gradients and optimizer state.

    * ``fp32``: fp32 parameters (4) and gradients (4); the optimizer updates the parameters
      themselves, so its state is only its moments: AdamW's two (8), SGD's momentum buffer (4),
      plain SGD nothing (0).
    * ``bf16-mixed``: bf16 parameters (2) and gradients (2) for forward and backward; the
      optimizer keeps an fp32 master copy (4) beside its fp32 moments: AdamW 4 + 8 = 12,
      SGD with momentum 4 + 4 = 8, plain SGD 4 (the master copy).

    ``sgd`` is ``torch.optim.SGD`` as constructed by default (momentum 0: no buffer);
    ``sgd-momentum`` is SGD with momentum.
    """
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {precision!r}: choose from {', '.join(PRECISIONS)}")
    if optimizer not in OPTIMIZERS:
        raise UsageError(f"--optimizer {optimizer!r}: choose from {', '.join(OPTIMIZERS)}")
    moments = {"adamw": 8, "sgd-momentum": 4, "sgd": 0}[optimizer]
    if precision == "fp32":
        return BytesPerParameter(4, 4, moments)
    return BytesPerParameter(2, 2, 4 + moments)


@dataclass(frozen=True)
class StageEstimate:
    """What one rank holds, and sends per optimizer step, at one ZeRO stage."""

    stage: int                    # 0 is DDP
    precision: str
    optimizer: str
    parameters: int               # Ψ
    world_size: int               # N
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    comm_bytes_per_step: float    # sent per rank, ring model
    formula: str                  # the total in units of Ψ, e.g. "2Ψ + 14Ψ/N"

    @property
    def name(self) -> str:
        return STAGE_NAMES[self.stage]

    @property
    def total_bytes(self) -> int:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


def shard_numel(parameters: int, world_size: int) -> int:
    """⌈Ψ/N⌉: the elements of one rank's shard."""
    return -(-parameters // world_size)


def _formula(replicated: int, sharded: int) -> str:
    terms = ([f"{replicated}Ψ"] if replicated else []) + ([f"{sharded}Ψ/N"] if sharded else [])
    return " + ".join(terms) or "0"


def estimate_stage(parameters: int, world_size: int, stage: int, precision: str,
                   optimizer: str) -> StageEstimate:
    if parameters < 0:
        raise UsageError(f"parameter count must not be negative, got {parameters}")
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise UsageError(f"--world-size must be between 1 and {MAX_WORLD_SIZE}, got {world_size}")
    if stage not in range(4):
        raise UsageError(f"ZeRO stage must be 0-3, got {stage}")
    per = bytes_per_parameter(precision, optimizer)
    shard = shard_numel(parameters, world_size)
    # Which of parameters, gradients, optimizer state a stage shards.
    sharded = (False, False, False) if stage == 0 else (stage >= 3, stage >= 2, True)
    sizes = [k * (shard if cut else parameters)
             for k, cut in zip((per.params, per.grads, per.optimizer), sharded, strict=True)]
    # elements each rank moves per element reduced or gathered (nccl-tests' bus factors)
    gather = BUS_FACTOR["all_gather"](world_size) * parameters
    reduce = BUS_FACTOR["all_reduce"](world_size) * parameters
    comm = {0: reduce * per.grads, 1: gather * (per.grads + per.params),
            2: gather * (per.grads + per.params), 3: gather * (per.grads + 2 * per.params)}[stage]
    ks = (per.params, per.grads, per.optimizer)
    params_bytes, grads_bytes, optimizer_bytes = sizes
    return StageEstimate(
        stage, precision, optimizer, parameters, world_size, params_bytes, grads_bytes,
        optimizer_bytes, comm,
        _formula(sum(k for k, cut in zip(ks, sharded, strict=True) if not cut),
                 sum(k for k, cut in zip(ks, sharded, strict=True) if cut)))


def estimate_table(parameters: int, world_size: int, precisions: tuple[str, ...] = PRECISIONS,
                   optimizers: tuple[str, ...] = OPTIMIZERS) -> list[StageEstimate]:
    """Every stage, for each precision and optimizer asked for."""
    return [estimate_stage(parameters, world_size, stage, precision, optimizer)
            for precision in precisions for optimizer in optimizers for stage in range(4)]


def model_parameters(model: str | None, model_path: Path | None) -> tuple[str, int]:
    """(label, Ψ) of a named model, counted from its definition without torch, or of a local
    Hugging Face checkpoint, counted on the meta device (which imports torch)."""
    # the workloads: torchrun's side, off the analysis's start
    from workloads.configs import MODEL_NAMES, checkpoint_parameter_count, model_parameter_count

    if model_path is not None:
        if not (model_path / "config.json").is_file():
            raise UsageError(f"{model_path}: not a Hugging Face checkpoint folder "
                             "(no config.json)")
        try:
            return model or model_path.name, checkpoint_parameter_count(model_path)
        except (OSError, ValueError, KeyError) as error:
            raise UsageError(f"{model_path}: cannot build its model ({error})") from None
    if model not in MODEL_NAMES:
        raise UsageError(unknown_model(str(model)))
    return model, model_parameter_count(model)


# --- a recorded run: the estimate beside what each rank measured ---------------------------

#: What ``ddpprof record`` trains (``workloads/train.py``: fp32 weights, AdamW).
RECORDED_PRECISION = "fp32"
RECORDED_OPTIMIZER = "adamw"
_MEASURED_KEYS = ("params_bytes", "grads_bytes", "optimizer_bytes")


@dataclass(frozen=True)
class RankComparison:
    rank: int
    estimated_bytes: int
    measured_bytes: int
    measured: MemoryRow           # the rank's row of run.json's ``memory``

    @property
    def error_pct(self) -> float:
        """(measured − estimated) / estimated × 100."""
        return (self.measured_bytes - self.estimated_bytes) / self.estimated_bytes * 100


@dataclass(frozen=True)
class RunComparison:
    run: str
    path: Path
    variant: str
    model: str
    estimate: StageEstimate
    ranks: list[RankComparison]


def find_runs(paths: list[Path]) -> list[Path]:
    """Each path is a run folder (it holds ``run.json``) or a folder of run folders."""
    runs = []
    for path in paths:
        if (path / "run.json").is_file():
            runs.append(path)
            continue
        found = sorted(p.parent for p in path.glob("*/run.json")) if path.is_dir() else []
        if not found:
            raise UsageError(f"{path}: no run.json in it or in its subfolders")
        runs += found
    return runs


def recorded_estimate(manifest: RunManifest) -> StageEstimate | None:
    """The estimate for a recorded run's variant, parameters and world size (fp32 AdamW, as
    ``record`` trains); None when the manifest does not say enough.

    A tensor-parallel run (``fsdp_tp``) is estimated for one rank of a tensor-parallel group:
    its model is Ψ' = ⌈Ψ_split/T⌉ + (Ψ − Ψ_split) parameters (``mesh.tp_split_parameters``
    split over the T ranks of the group, the rest whole on each), which FSDP shards over the
    N/T data-parallel ranks: ZeRO-3 at Ψ' and N/T. Its communication figure is then the
    data-parallel dimension's only (tensor parallelism's all-reduces carry activations)."""
    config, measured = manifest.config, manifest.measured
    parameters = measured.parameters if measured else None
    if config is None or config.variant not in VARIANTS or not parameters:
        return None
    world_size = config.world_size
    if VARIANTS[config.variant].tensor_parallel:
        mesh = manifest.mesh
        tp = next((dim.size for dim in mesh.dims if dim.name == "tp"), None) if mesh else None
        if mesh is None or tp is None or mesh.tp_split_parameters is None:
            return None
        split = mesh.tp_split_parameters
        parameters = shard_numel(split, tp) + parameters - split
        world_size //= tp
    return estimate_stage(parameters, world_size, VARIANTS[config.variant].zero_stage,
                          RECORDED_PRECISION, RECORDED_OPTIMIZER)


def compare_run(path: Path) -> RunComparison:
    """The run's measured steady state per rank beside the estimate for its variant's stage."""
    manifest_path = path / MANIFEST_NAME
    manifest = read_manifest(manifest_path)
    if manifest.status != "complete":
        raise UsageError(f"{manifest_path}: the run is {manifest.status!r}, not complete")
    config = manifest.config
    variant = config.variant if config else None
    if config is None or variant not in VARIANTS:
        raise UsageError(f"{manifest_path}: unknown variant {variant!r}")
    estimate = recorded_estimate(manifest)
    if estimate is None:
        raise UsageError(f"{manifest_path}: no parameter count (measured.parameters)" + (
            ", or a tensor-parallel run's 'mesh'" if VARIANTS[variant].tensor_parallel
            else ""))
    rows = manifest.memory
    if not rows:
        raise UsageError(f"{manifest_path}: no 'memory' measurements (recorded by a ddpprof "
                         "that did not measure memory?)")
    for row in rows:
        if None in (row.params_bytes, row.grads_bytes, row.optimizer_bytes):
            raise UsageError(f"{manifest_path}: memory row of rank {row.rank} lacks "
                             f"{', '.join(_MEASURED_KEYS)}")
    ranks = [RankComparison(row.rank, estimate.total_bytes,
                            sum(getattr(row, k) for k in _MEASURED_KEYS), row)
             for row in sorted(rows, key=lambda r: r.rank)]
    return RunComparison(manifest.run or path.name, path, variant, config.model, estimate,
                         ranks)


# --- rows and documents ---------------------------------------------------------------------

def _unit(largest_bytes: float) -> tuple[str, int]:
    return ("gib", GIB) if largest_bytes >= GIB else ("mib", MIB)


def _sizes(unit: str, scale: int, *keys: str, wide: bool = False) -> list[Column]:
    """Byte columns shown in ``unit`` (``params_bytes`` as ``params_mib``)."""
    return [Column(key.replace("bytes", unit), attr=key, wide=wide, scale=scale)
            for key in keys]


def estimates_table(estimates: list[StageDocument]) -> Table:
    """The estimates, sizes in GiB when one reaches a GiB."""
    unit, scale = _unit(max((e.total_bytes for e in estimates), default=0))
    return Table([*columns("model", "world_size", "precision", "optimizer"),
                  Column("stage", attr="name"), Column("formula"),
                  *_sizes(unit, scale, "total_bytes", "comm_bytes_per_step"),
                  *_sizes(unit, scale, "params_bytes", "grads_bytes", "optimizer_bytes",
                          wide=True)], estimates)


@dataclass(frozen=True)
class ComparisonRow:
    """One rank of a recorded run: the estimate beside what it measured."""

    run: str
    variant: str
    stage: str
    rank: int
    estimated_bytes: int
    measured_bytes: int
    error_pct: float
    params_bytes: int | None
    grads_bytes: int | None
    optimizer_bytes: int | None
    step_peak_rise_bytes: int | None
    peak_rss_bytes: int | None


def comparisons_table(runs: list[RunComparison]) -> Table:
    unit, scale = _unit(max((r.measured_bytes for run in runs for r in run.ranks), default=0))
    rows = [ComparisonRow(run.run, run.variant, run.estimate.name, r.rank, r.estimated_bytes,
                          r.measured_bytes, r.error_pct, r.measured.params_bytes,
                          r.measured.grads_bytes, r.measured.optimizer_bytes,
                          r.measured.step_peak_rise_bytes, r.measured.peak_rss_bytes)
            for run in runs for r in run.ranks]
    return Table([Column("run", max_width=24), *columns("variant", "stage", "rank"),
                  *_sizes(unit, scale, "estimated_bytes", "measured_bytes"), Column("error_pct"),
                  *_sizes(unit, scale, "params_bytes", "grads_bytes", "optimizer_bytes",
                          "step_peak_rise_bytes", "peak_rss_bytes", wide=True)], rows)


class StageDocument(msgspec.Struct, kw_only=True):
    """One stage's estimate for one model at one world size (a row of the table)."""

    model: str
    stage: int                       # 0 is DDP
    name: str
    precision: str
    optimizer: str
    parameters: int
    world_size: int
    formula: str
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    total_bytes: int
    comm_bytes_per_step: float

    @classmethod
    def of(cls, e: StageEstimate, model: str = "") -> StageDocument:
        return cls(model=model, stage=e.stage, name=e.name, precision=e.precision,
                   optimizer=e.optimizer, parameters=e.parameters, world_size=e.world_size,
                   formula=e.formula,
                   params_bytes=e.params_bytes, grads_bytes=e.grads_bytes,
                   optimizer_bytes=e.optimizer_bytes, total_bytes=e.total_bytes,
                   comm_bytes_per_step=e.comm_bytes_per_step)


class RankDocument(msgspec.Struct, kw_only=True):
    rank: int
    estimated_bytes: int
    measured_bytes: int
    error_pct: float
    measured: MemoryRow


class RunDocument(msgspec.Struct, kw_only=True):
    run: str
    path: str
    variant: str
    estimate: StageDocument
    ranks: list[RankDocument]


class MemoryDocument(msgspec.Struct, kw_only=True):
    """``ddpprof memory --json``: ``estimates`` for --model, or ``runs`` for recorded runs."""

    schema: str = "ddpprof.memory"
    version: int = 2
    estimates: list[StageDocument] = msgspec.field(default_factory=list)
    runs: list[RunDocument] = msgspec.field(default_factory=list)


def estimate_document(estimates: list[tuple[str, StageEstimate]]) -> MemoryDocument:
    """(model label, estimate) pairs as the ``--json`` document."""
    return MemoryDocument(estimates=[StageDocument.of(e, label) for label, e in estimates])


def comparison_document(runs: list[RunComparison]) -> MemoryDocument:
    return MemoryDocument(runs=[RunDocument(
        run=run.run, path=str(run.path), variant=run.variant,
        estimate=StageDocument.of(run.estimate, run.model),
        ranks=[RankDocument(rank=r.rank, estimated_bytes=r.estimated_bytes,
                            measured_bytes=r.measured_bytes, error_pct=r.error_pct,
                            measured=r.measured) for r in run.ranks]) for run in runs])
