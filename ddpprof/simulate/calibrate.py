"""``ddpprof calibrate``: what an all-reduce costs on this machine and backend, by size.

An nccl-tests-style sweep (``all_reduce_perf -b 4K -e 256M -f 2``) launched through torchrun
with the same process ownership as ``ddpprof record`` (``ddpprof.record.launcher.run_torchrun``):
for each size, ``warmup_iters`` untimed calls, then ``iters`` timed ones, each started together
after a barrier and timed on every rank; a call's time is its slowest rank's (a collective ends
when its last rank does), and a size's time the median over its calls. From those:

* ``algbw = size / time`` and ``busbw = algbw × 2(N−1)/N`` (nccl-tests' definitions, GB/s =
  10⁹ bytes/s);
* the cost model ``t = α + traffic/β`` (``ddpprof.metrics.cost``) fitted to the medians, β
  being the bus bandwidth the model tends to for large calls.

``<out>/calibration.json`` (schema ``ddpprof.calibration``, version 2) holds them with the
machine and backend they were measured on, and (``--tax-from RUN``; version 2) the overlap tax
measured on a recorded run (``ddpprof.metrics.tax``), which ``simulate`` then replays with in
place of each run's own. It says ``running`` while the sweep runs and ends ``complete``,
``failed`` or ``interrupted``; only a complete one is ever used. Version 1 files (no tax) are
read as they are.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import stat
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import numpy as np

from ..analysis import analyze_paths
from ..core import processes
from ..core.atomic import json_text
from ..core.errors import Interrupted, RunFailed, UsageError, describe_os_error, signal_name
from ..core.json_input import read_json_bytes
from ..core.limits import MAX_BANDWIDTH_GBPS, MAX_LATENCY_US, MAX_RANKS, MIN_BANDWIDTH_GBPS
from ..core.progress import Progress
from ..core.storage import location_of
from ..core.units import MIB
from ..metrics.comm import BUS_FACTOR
from ..metrics.cost import CostModel, FitError, fit_cost, measured_curve, traffic_bytes
from ..metrics.tax import OverlapTax
from ..record import folders, process
from ..record.failure import ERRORS_DIR, run_error
from ..record.launcher import cuda_device_count, resolve_backend, run_torchrun, torchrun_command
from ..render.table import columns
from ..run import discover
from ..run.config import Launch
from ..run.folder import RunFolder
from ..run.manifest import Owner, now_iso, owner_is_gone, validation_problem

CALIBRATION_NAME = discover.CALIBRATION_NAME   # never read as a trace
SWEEP_CONFIG = ".calibrate.json"
SWEEP_RESULT = ".calibrate_result.json"
WORKER_MODULE = "workloads.calibrate"
SCHEMA = "ddpprof.calibration"
#: What rank 0 hands back: a few numbers per timed call.
MAX_RESULT_BYTES = 64 * MIB

Status = Literal["running", "complete", "failed", "interrupted"]


@dataclass(frozen=True, kw_only=True)
class Sweep(Launch):
    """What every rank of the sweep runs (``<out>/.calibrate.json``): where (a
    :class:`~ddpprof.run.config.Launch`, as a recorded run's), and which sizes how often."""

    sizes_bytes: list[int]
    warmup_iters: int
    iters: int


class SweepResult(msgspec.Struct, kw_only=True):
    """What rank 0 hands the launcher (``<out>/.calibrate_result.json``)."""

    world_size: int
    hostname: str
    cores: int
    devices: list[str]                  # one per rank
    threads_per_rank: int
    torch_version: str
    times_us: list[list[float]]         # per size, per timed call: the slowest rank's time


class Machine(msgspec.Struct, kw_only=True):
    hostname: str
    cores: int                          # usable by the ranks of node 0
    devices: list[str]
    threads_per_rank: int


#: The most sizes one sweep measures (4 KiB to 256 MiB by a factor of 2 is 17).
MAX_SWEEP_SIZES = 256
#: What a point of a calibration read back may hold: a size of at most 1 PiB, times of at
#: most 10¹² µs (11 days), bandwidths of at most 10⁶ GB/s, each finite and not negative.
PointBytes = Annotated[int, msgspec.Meta(ge=1, le=2**50)]
PointUs = Annotated[float, msgspec.Meta(ge=0, le=1e12)]
PointGbps = Annotated[float, msgspec.Meta(ge=0, le=MAX_BANDWIDTH_GBPS)]


class SweepPoint(msgspec.Struct, kw_only=True):
    size_bytes: PointBytes
    time_us: PointUs                    # median over the timed calls
    time_min_us: PointUs
    time_max_us: PointUs
    algbw_gbps: PointGbps               # size / time, 10⁹ bytes per second
    busbw_gbps: PointGbps               # algbw × 2(N−1)/N


class Fit(msgspec.Struct, kw_only=True):
    """``t = α + traffic/β`` over the points (``ddpprof.metrics.cost.fit_cost``)."""

    alpha_us: Annotated[float, msgspec.Meta(ge=0, le=MAX_LATENCY_US)]
    # β, on the traffic each rank moves (bus bandwidth)
    beta_busbw_gbps: Annotated[float, msgspec.Meta(ge=MIN_BANDWIDTH_GBPS, le=MAX_BANDWIDTH_GBPS)]
    r2: float | None


class TaxCalibration(msgspec.Struct, kw_only=True):
    """The overlap tax measured on a recorded run (``calibrate --tax-from RUN``)."""

    run: str
    tax: OverlapTax


class Calibration(msgspec.Struct, kw_only=True):
    schema: str = SCHEMA
    version: int = 2
    status: Status | None = None
    error: str | None = None
    collective: str = "all_reduce"
    backend: str | None = None
    world_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_RANKS)] | None = None
    nproc_per_node: Annotated[int, msgspec.Meta(ge=1, le=MAX_RANKS)] | None = None
    nnodes: Annotated[int, msgspec.Meta(ge=1, le=MAX_RANKS)] | None = None
    warmup_iters: Annotated[int, msgspec.Meta(ge=0)] | None = None
    iters: Annotated[int, msgspec.Meta(ge=0)] | None = None
    machine: Machine | None = None
    torch_version: str | None = None
    started: str | None = None
    finished: str | None = None
    owner: Owner | None = None
    fit: Fit | None = None
    points: Annotated[list[SweepPoint], msgspec.Meta(max_length=MAX_SWEEP_SIZES)] = \
        msgspec.field(default_factory=list)
    overlap_tax: TaxCalibration | None = None

    def cost_model(self, source: str) -> CostModel:
        """The fitted model; a ``UsageError`` naming ``source`` when the sweep found none."""
        if self.fit is None:
            raise UsageError(f"{source}: no cost model ({self.error or 'the sweep has no fit'});"
                             " give --bandwidth-gbps with --latency-us, or --calibration FILE")
        n = self.world_size or 2
        curve = measured_curve([traffic_bytes(self.collective, p.size_bytes, n, self.backend)
                                for p in self.points], [p.time_us for p in self.points])
        return CostModel(self.fit.alpha_us, self.fit.beta_busbw_gbps * 1e3, self.fit.r2,
                         len(self.points), source, curve)


def sweep_sizes(min_bytes: int, max_bytes: int, factor: float = 2.0) -> list[int]:
    """``min_bytes``, × ``factor``, ... up to ``max_bytes``, each a whole number of float32s;
    at most :data:`MAX_SWEEP_SIZES` of them, counted before any is listed."""
    if max_bytes < min_bytes:
        raise UsageError(f"--max-bytes {max_bytes} is below --min-bytes {min_bytes}")
    if factor <= 1:
        raise UsageError(f"--step-factor {factor:g} must be above 1")
    count = math.floor(math.log(max_bytes / min_bytes) / math.log(factor) + 1e-9) + 1
    if count > MAX_SWEEP_SIZES:
        raise UsageError(f"--step-factor {factor:g} from --min-bytes {min_bytes} to --max-bytes "
                         f"{max_bytes} makes {count:,} sizes, more than {MAX_SWEEP_SIZES}: take "
                         "a larger factor or a narrower range")
    sizes, size = [], float(min_bytes)
    while size <= max_bytes * (1 + 1e-9):
        sizes.append(max(4, int(size) // 4 * 4))
        size *= factor
    return list(dict.fromkeys(sizes))


def summarize(result: SweepResult, sizes: list[int]) -> tuple[list[SweepPoint], Fit]:
    """The sweep's points and the cost model fitted to their medians (a ``UsageError`` when
    the medians cannot be fitted: time not growing with size)."""
    n = result.world_size
    points = summarize_points(result, sizes)
    try:
        cost = fit_cost(np.array([traffic_bytes("all_reduce", p.size_bytes, n)
                                  for p in points]), np.array([p.time_us for p in points]),
                        "sweep")
    except FitError as error:
        raise UsageError(str(error)) from None
    return points, Fit(alpha_us=cost.alpha_us, beta_busbw_gbps=cost.beta_bytes_per_us / 1e3,
                       r2=cost.r2)


class PointRow(msgspec.Struct, kw_only=True):
    """A measured size beside the fitted model's time for it."""

    size_bytes: int
    time_us: float
    time_min_us: float
    time_max_us: float
    algbw_gbps: float
    busbw_gbps: float
    model_time_us: float


COLUMNS = columns("size_bytes", "time_us", "busbw_gbps", "model_time_us",
                  wide=("time_min_us", "time_max_us", "algbw_gbps"))


def point_rows(calibration: Calibration) -> list[PointRow]:
    """One row per size, with the fitted line's time beside the measured one."""
    cost = dataclasses.replace(calibration.cost_model("sweep"), curve=())
    n = calibration.world_size or 2
    return [PointRow(size_bytes=p.size_bytes, time_us=p.time_us, time_min_us=p.time_min_us,
                     time_max_us=p.time_max_us, algbw_gbps=p.algbw_gbps,
                     busbw_gbps=p.busbw_gbps, model_time_us=cost.time_us(p.size_bytes, n))
            for p in calibration.points]


def describe(calibration: Calibration) -> str:
    """One line: the fit, and where it was measured."""
    fit, machine = calibration.fit, calibration.machine
    assert fit is not None
    where = f" on {machine.hostname} ({machine.devices[0]})" if machine else ""
    r2 = f", R² = {fit.r2:.3f}" if fit.r2 is not None else ""
    peak = max((p.busbw_gbps for p in calibration.points), default=0.0)
    tax = ""
    if calibration.overlap_tax is not None:
        measured = calibration.overlap_tax.tax
        tax = (f"; overlap tax from {calibration.overlap_tax.run}: compute "
               f"{_pct(measured.pct('compute'))}, communication "
               f"{_pct(measured.pct('communication'))}")
    return (f"all-reduce, {calibration.backend}, {calibration.world_size} ranks{where}: "
            f"α = {fit.alpha_us:.1f} µs, β = {fit.beta_busbw_gbps:.3f} GB/s bus bandwidth"
            f"{r2}; best measured busbw {peak:.3f} GB/s{tax}")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}%"


def tax_from(run_path: Path) -> TaxCalibration:
    """The overlap tax of a recorded run (analyzed as ``analyze`` does); a ``UsageError``
    naming it when it cannot be analyzed or has none to measure."""
    analysis = analyze_paths([location_of(str(run_path))])
    if analysis.errors or analysis.unfinished or len(analysis.runs) != 1:
        problems = [*analysis.errors, *analysis.unfinished]
        problem = problems[0] if problems else None
        raise UsageError(f"--tax-from {run_path}: " + (
            problem.error if problem else f"{len(analysis.runs)} runs found "
            f"({', '.join(run.name for run in analysis.runs[:5])}"
            f"{' ...' if len(analysis.runs) > 5 else ''}); give one of them"))
    run = analysis.runs[0]
    tax = run.overlap_tax
    if tax is None or (tax.pct("compute") is None and tax.pct("communication") is None):
        raise UsageError(f"--tax-from {run_path}: no overlap tax can be measured there (no op "
                         "or collective seen both alone and overlapped)")
    return TaxCalibration(run=str(run_path), tax=tax)


def summarize_points(result: SweepResult, sizes: list[int]) -> list[SweepPoint]:
    n = result.world_size
    points = []
    for size, times in zip(sizes, result.times_us, strict=True):
        median = statistics.median(times)
        algbw = size / median / 1e3
        points.append(SweepPoint(size_bytes=size, time_us=median, time_min_us=min(times),
                                 time_max_us=max(times), algbw_gbps=algbw,
                                 busbw_gbps=algbw * BUS_FACTOR["all_reduce"](n)))
    return points


def read_calibration(path: Path) -> Calibration:
    """A ``calibration.json``; one line naming the file when it is not one."""
    try:
        calibration = msgspec.json.decode(read_json_bytes(path), type=Calibration)
    except msgspec.ValidationError as error:
        raise UsageError(f"{path}: {validation_problem(error)}") from None
    except msgspec.DecodeError as error:
        raise UsageError(f"{path}: not JSON ({error})") from None
    if calibration.schema != SCHEMA:
        raise UsageError(f"{path}: not a `ddpprof calibrate` file (schema "
                         f"{calibration.schema!r})")
    return calibration


def usable(calibration: Calibration) -> str | None:
    """Why ``calibration`` cannot be used, or None when it can: a sweep that did not finish,
    or one whose recorder died while it said ``running``."""
    status = calibration.status
    if status == "running" and calibration.owner is not None \
            and owner_is_gone(calibration.owner):
        status = "interrupted"
    if status != "complete":
        return f"the sweep is {status or 'of unknown status'}" + (
            f" ({calibration.error})" if calibration.error else "")
    if calibration.fit is None:
        return calibration.error or "the sweep has no fit"
    return None


def validate(sweep: Sweep) -> None:
    if sweep.world_size < 2:
        raise UsageError(f"--nproc {sweep.nproc} x --nnodes {sweep.nnodes}: an all-reduce "
                         "sweep needs two ranks at least")
    if sweep.node_rank >= sweep.nnodes:
        raise UsageError(f"--node-rank {sweep.node_rank} is not below --nnodes {sweep.nnodes}")
    if sweep.nnodes > 1 and not sweep.rdzv_endpoint:
        raise UsageError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT")
    if len(sweep.sizes_bytes) < 2:
        raise UsageError("the sweep needs two sizes at least to tell latency from bandwidth "
                         "(--min-bytes, --max-bytes, --step-factor)")
    if sweep.backend == "nccl" and sweep.nproc > (gpus := cuda_device_count()):
        raise UsageError(f"--backend nccl needs one GPU per rank: --nproc {sweep.nproc}, but "
                         f"{gpus} CUDA GPU(s) are visible")


def calibrate(sweep: Sweep, out: Path, quiet: bool = False,
              overlap_tax: TaxCalibration | None = None) -> Calibration:
    """Run ``sweep`` through torchrun and write ``out/calibration.json`` (node 0 only; the
    other nodes' launchers just take part), with ``overlap_tax`` if given. Raises
    ``RunFailed`` when the sweep fails and ``Interrupted`` when a signal stops it, after
    marking the file so."""
    sweep = dataclasses.replace(sweep, backend=resolve_backend(sweep.backend))
    validate(sweep)
    leader = sweep.node_rank == 0
    log = "calibrate.log" if leader else f"calibrate.node{sweep.node_rank}.log"
    target = out / CALIBRATION_NAME
    with process.SignalGuard() as guard, folders.claim([out]) as locks:
        folder = locks.folder(out)
        if (kind := folder.kind(CALIBRATION_NAME)) is not None and stat.S_ISDIR(kind):
            raise UsageError(f"{target}: a folder is in the way of the calibration file")
        calibration = Calibration(
            status="running", backend=sweep.backend, world_size=sweep.world_size,
            nproc_per_node=sweep.nproc, nnodes=sweep.nnodes, warmup_iters=sweep.warmup_iters,
            iters=sweep.iters, started=now_iso(), owner=Owner.current(),
            overlap_tax=overlap_tax)
        try:
            if leader:
                _write(folder, calibration)
            folder.unlink(SWEEP_RESULT)
            if (kind := folder.kind(ERRORS_DIR)) is not None and stat.S_ISDIR(kind):
                shutil.rmtree(ERRORS_DIR, dir_fd=folder.fd)
            else:
                folder.unlink(ERRORS_DIR)   # a file or a link in the way: never followed
            folder.write_text(SWEEP_CONFIG, msgspec.json.encode(sweep).decode())
        except OSError as error:
            raise UsageError(describe_os_error(error.filename or out, error)) from None
        processes.become_subreaper()  # only now: bad input must leave this process as it was
        progress = Progress(quiet=quiet, total=1)
        progress.start(f"all-reduce sweep, {len(sweep.sizes_bytes)} sizes", out,
                       sweep.world_size)
        launched = run_torchrun(
            torchrun_command(sweep, out, "ddpprof-calibrate", WORKER_MODULE, SWEEP_CONFIG),
            folder, log, sweep.backend, sweep.nproc, sweep.timeout_s, guard, progress,
            len(sweep.sizes_bytes))
        calibration.finished, calibration.owner = now_iso(), None
        if guard.signum is not None:
            calibration.status = "interrupted"
            calibration.error = f"interrupted by {signal_name(guard.signum)}"
        elif launched.rendezvous_expired:
            calibration.status = "failed"
            calibration.error = (f"the rendezvous did not start the ranks within "
                                 f"{sweep.timeout_s:g} s (--timeout-s)")
        elif launched.returncode != 0:
            calibration.status = "failed"
            failure = run_error(folder, log, launched.returncode)
            calibration.error = (f"rank {failure.rank}: " if failure.rank is not None
                                 else "") + failure.message
        elif leader and folder.kind(SWEEP_RESULT) is None:
            calibration.status, calibration.error = "failed", "the sweep wrote no result"
        else:
            calibration.status = "complete"
            if leader:
                try:
                    result = msgspec.json.decode(
                        folder.read_bytes(SWEEP_RESULT, MAX_RESULT_BYTES), type=SweepResult)
                except (OSError, msgspec.DecodeError, msgspec.ValidationError) as error:
                    calibration.status = "failed"
                    calibration.error = f"the sweep's result cannot be read ({error})"
                else:
                    _complete(calibration, result, sweep)
        folder.unlink(SWEEP_RESULT)
        progress.finish(calibration.status, None, calibration.error)
        if leader:
            try:
                _write(folder, calibration)
            except OSError as error:
                raise RunFailed(describe_os_error(target, error)) from None
    if guard.signum is not None:
        raise Interrupted(guard.signum, f"interrupted by {signal_name(guard.signum)}; {target} "
                                        "marked interrupted")
    if calibration.status != "complete":
        raise RunFailed(f"the all-reduce sweep failed: {calibration.error} (log: {out / log})")
    return calibration


def _complete(calibration: Calibration, result: SweepResult, sweep: Sweep) -> None:
    """The measurements, and the fit; a sweep whose times cannot be fitted stays complete
    (its points are measurements) with no fit and ``error`` saying why, so nothing uses it."""
    calibration.machine = Machine(hostname=result.hostname, cores=result.cores,
                                  devices=result.devices,
                                  threads_per_rank=result.threads_per_rank)
    calibration.torch_version = result.torch_version
    try:
        calibration.points, calibration.fit = summarize(result, sweep.sizes_bytes)
    except UsageError as error:
        calibration.points = summarize_points(result, sweep.sizes_bytes)
        calibration.error = f"no fit: {error}"


def _write(folder: RunFolder, calibration: Calibration) -> None:
    folder.write_text(CALIBRATION_NAME, json_text(msgspec.to_builtins(calibration)))
