"""The profiled training loop that ``ddpprof record`` launches on every rank through torchrun.

    python -m workloads.train RUN_FOLDER/.config.json

The one argument is the run configuration (``ddpprof.run.config.RunConfig``) that the
launcher wrote into the run folder; everything is written beside it. Each rank writes its Chrome
trace as ``rank<r>.pt.trace.json.gz``; rank 0 writes ``.worker_result.json`` (per-step times
and losses) for the launcher to fold into ``run.json``. A rank that fails writes
``.errors/rank<r>.json`` first, so the launcher can name it.
"""

from __future__ import annotations

if __name__ == "__main__":
    # Before anything slow: die with torchrun, and stop now if it (or ddpprof) is already gone.
    import signal

    from ddpprof.record.process import die_with_launcher

    die_with_launcher()
    # The launcher's request for a Flight Recorder dump must not kill a rank still starting.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)

import gc
import gzip
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from pathlib import Path

import msgspec
import torch
import torch.distributed as dist

from ddpprof.core.processes import usable_cores
from ddpprof.core.units import MIB
from ddpprof.record.failure import ERRORS_DIR
from ddpprof.record.measurements import WORKER_RESULT, WorkerResult
from ddpprof.run.config import CONFIG_FILE, RunConfig
from ddpprof.run.folder import RunFolder
from ddpprof.run.manifest import BucketRecord, RunMeasurements
from ddpprof.variants import VARIANTS, make_variant
from ddpprof.variants.base import COLLECTIVE_HOOKS, DataParallel

from .data import BatchSource, build_data, checkpoint_tokenizer, shard
from .faults import Injection, RankContext, RankFaults, from_env
from .flight_recorder import FlightRecorder, dump_on_error
from .memory import MemoryProbe, ProfiledPeaks, gather_figures
from .models import build_model, compute_loss, count_parameters

#: Test seam: "RANK:STEP" makes that rank raise at that step, to exercise failure handling.
FAIL_AT_ENV = "DDPPROF_FAIL_AT"


def trace_file_name(rank: int) -> str:
    # TensorBoard's profiler plugin lists files named <worker>.pt.trace.json(.gz).
    return f"rank{rank}.pt.trace.json.gz"


class StepClock:
    """Intervals bracketed by ``start``/``stop``, without a host sync per step: CUDA events on
    GPU (read after the loop), ``perf_counter`` on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def _mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    start = stop = _mark

    def durations_s(self) -> list[float]:
        starts, stops = self.marks[0::2], self.marks[1::2]
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(starts, stops, strict=True)]
        return [b - a for a, b in zip(starts, stops, strict=True)]


def train(model: DataParallel, optimizer: torch.optim.Optimizer, data: BatchSource, *,
          steps: int, global_batch: int, grad_accum: int, rank: int,
          device: torch.device, clock: StepClock | None = None,
          sync_clock: StepClock | None = None, delay_rank: int = -1, delay_ms: float = 0.0,
          faults: Injection | None = None, on_step_end=lambda step: None
          ) -> list[torch.Tensor]:
    """Run ``steps`` optimizer steps; return each step's local loss (a detached tensor, so the
    loop never waits on the device for it). Each rank trains on the shard of every global batch
    that the variant gives it (``model.data_shard()``: ranks of one tensor-parallel group share
    one). ``sync_clock`` brackets each step's ``finish_gradient_sync``: for the blocking
    variants, that is the communication time. ``delay_rank`` sleeps ``delay_ms`` at the start
    of every step (``--inject-delay``). ``faults`` (``--fault``) are called at their hooks
    (``workloads.faults.Injection``)."""
    micro_batch = global_batch // grad_accum
    shard_index, shard_count = model.data_shard()
    fail_rank, fail_step = _planned_failure()
    delay_s = delay_ms / 1e3 if rank == delay_rank else 0.0
    faults = faults or Injection()
    replaced = faults.replaces_gradient_sync
    losses = []
    for step in range(steps):
        # The step's own work only: what ``on_step_end`` does (the profiler exporting a trace,
        # a progress line) must not land in any step's time.
        if clock:
            clock.start()
        if (rank, step) == (fail_rank, fail_step):
            raise RuntimeError(f"injected failure at step {step} ({FAIL_AT_ENV})")
        if delay_s:
            with torch.profiler.record_function("ddpprof::injected_delay"):
                time.sleep(delay_s)
        faults.step_starts(step)
        step_loss = torch.zeros((), device=device)
        for micro in range(grad_accum):
            batch = shard(data.global_batch(step * grad_accum + micro, micro_batch),
                          shard_index, shard_count)
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            faults.before_forward(step)
            syncs = micro == grad_accum - 1 and not replaced
            with nullcontext() if syncs else model.no_sync():
                loss = compute_loss(model, batch) / grad_accum
                loss.backward()
            step_loss += loss.detach()
        if sync_clock:
            sync_clock.start()
        if replaced:
            faults.sync_gradients(model)
        else:
            model.finish_gradient_sync()
        if sync_clock:
            sync_clock.stop()
        model.optimizer_step(optimizer)
        optimizer.zero_grad(set_to_none=True)
        if clock:
            clock.stop()
        losses.append(step_loss)
        on_step_end(step)
    return losses


def bucket_records(model: DataParallel) -> list[BucketRecord] | None:
    """``run.json``'s ``buckets``: each gradient collective's parameters, by name, with their
    positions in the model's registration order, their gradient bytes and dtypes."""
    buckets = model.gradient_buckets()
    if buckets is None:
        return None
    names = model.parameter_names()
    position = {key: index for index, key in enumerate(names)}
    records = []
    for params in buckets:
        sizes = [model.gradient_bytes(p) for p in params]
        records.append(BucketRecord(
            params=[names[id(p)] for p in params],
            param_index=[position[id(p)] for p in params], param_bytes=sizes,
            bytes=sum(sizes),
            param_dtypes=[str(p.dtype).removeprefix("torch.") for p in params]))
    return records


def _inject_delay(spec: str | None) -> dict[str, int | float]:
    """``RANK:MS`` (``RunConfig.inject_delay``) as ``train``'s arguments."""
    if not spec:
        return {}
    rank, ms = spec.split(":")
    return {"delay_rank": int(rank), "delay_ms": float(ms)}


def _planned_failure() -> tuple[int, int]:
    spec = os.environ.get(FAIL_AT_ENV)
    if not spec:
        return -1, -1
    rank, step = spec.split(":")
    return int(rank), int(step)


def every_group_times_out(timeout_s: float) -> None:
    """Give the groups a variant made (a device mesh's) the run's ``--timeout-s``: c10d gives
    them its default (30 minutes on gloo), so a collective stuck in one of them would outlast
    the timeout the world group has."""
    timeout = timedelta(seconds=timeout_s)
    for group in list(dist.distributed_c10d._world.pg_map):
        dist.distributed_c10d._set_pg_timeout(timeout, group)


def _device_for(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


def export_trace_into(folder: RunFolder, name: str, prof: torch.profiler.profile) -> None:
    """Write the profiler's Chrome trace as ``folder/name`` (gzip). The profiler writes plain
    JSON to a private temporary folder first; the run folder only ever sees the finished file,
    renamed into place (``ddpprof.run.folder``)."""
    with tempfile.TemporaryDirectory(prefix="ddpprof-trace-") as private:
        plain = Path(private) / "trace.json"
        prof.export_chrome_trace(str(plain))
        with folder.replacing(name) as stream, open(plain, "rb") as source, \
                gzip.GzipFile(filename="", mode="wb", fileobj=stream, compresslevel=6) as packed:
            shutil.copyfileobj(source, packed, 4 * MIB)


def run(config: RunConfig, folder: RunFolder) -> None:
    distributed = VARIANTS[config.variant].distributed
    rank = int(os.environ.get("RANK", 0)) if distributed else 0
    local_rank = int(os.environ.get("LOCAL_RANK", 0)) if distributed else 0
    device = _device_for(config.backend, local_rank)
    if distributed:
        dist.init_process_group(config.backend, timeout=timedelta(seconds=config.timeout_s),
                                device_id=device if device.type == "cuda" else None)
    world_size = dist.get_world_size() if distributed else 1
    if distributed and config.fr_buffer_size:
        FlightRecorder(folder, rank).install()
    grad_accum = config.grad_accum or 1

    torch.manual_seed(config.seed + rank)  # the broadcast from rank 0 must make ranks agree
    module, info = build_model(config.model, config.model_path)
    module.to(device)
    model = make_variant(config.variant, module, bucket_cap_mib=config.bucket_cap_mib,
                         gradient_as_bucket_view=config.gradient_as_bucket_view, tp=config.tp)
    if distributed:
        every_group_times_out(config.timeout_s)
    optimizer = model.make_optimizer(torch.optim.AdamW, lr=config.lr)
    memory = MemoryProbe(model, optimizer, device, sample_at_step=config.steps - 1)
    data = build_data(is_language_model=info.is_language_model, vocab_size=info.vocab_size,
                      seq_len=config.seq_len, data_path=config.data,
                      tokenizer_path=config.tokenizer or checkpoint_tokenizer(config.model_path),
                      seed=config.seed)

    peaks = ProfiledPeaks(None, None)

    def export_trace(prof: torch.profiler.profile) -> None:
        nonlocal peaks
        peaks = memory.profiled(prof)
        export_trace_into(folder, trace_file_name(rank), prof)

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=config.wait, warmup=config.warmup,
                                         active=config.active, repeat=1),
        on_trace_ready=export_trace,
        record_shapes=True,
        profile_memory=True,
    ) if config.profile else None

    def on_step_end(step: int) -> None:
        memory.step_starts(step + 1)   # where the profiler's next step starts
        if profiler is not None:
            profiler.step()
        if rank == 0:
            print(f"ddpprof-step {step + 1}/{config.steps}", flush=True)

    clock, sync_clock = StepClock(device), StepClock(device)
    faults = RankFaults(from_env(), RankContext(rank, local_rank, world_size, model, device,
                                                config.seed))
    if faults.hooks_collectives:
        COLLECTIVE_HOOKS.append(faults.before_collective)
    memory.step_starts(0)
    try:
        with profiler if profiler is not None else nullcontext():
            losses = train(model, optimizer, data, steps=config.steps,
                           global_batch=config.global_batch, grad_accum=grad_accum, rank=rank,
                           device=device, clock=clock, sync_clock=sync_clock, faults=faults,
                           on_step_end=on_step_end, **_inject_delay(config.inject_delay))
    finally:
        faults.close()

    # Everything below runs after profiling, so averaging the loss cannot show up in a trace.
    memory_per_rank = gather_figures(memory.figures(rank, peaks), distributed)
    mesh = model.mesh_record()
    step_losses = torch.stack(losses).float()
    step_times = torch.tensor(clock.durations_s(), dtype=torch.float64, device=device)
    sync_times = torch.tensor(sync_clock.durations_s(), dtype=torch.float64, device=device)
    devices = [_device_name(device)]
    if distributed:
        dist.all_reduce(step_losses, op=dist.ReduceOp.SUM)
        step_losses /= world_size
        # The mean over ranks, not the slowest rank's: the ranks wait for each other at every
        # collective, so over consecutive steps each rank's steps last as long as the period;
        # a step's maximum over ranks would add that step's jitter between them every time
        # (up to 21% on 3 ranks sharing 2 cores, against the traces' step period).
        dist.all_reduce(step_times, op=dist.ReduceOp.SUM)
        step_times /= world_size
        dist.all_reduce(sync_times, op=dist.ReduceOp.MAX)
        devices = [None] * world_size
        dist.all_gather_object(devices, _device_name(device))
    if rank == 0:
        measured = RunMeasurements(
            parameters=count_parameters(module), world_size=world_size, devices=devices,
            threads_per_rank=torch.get_num_threads(), host_cores=usable_cores(),
            wall_s_over_ranks="mean",
            torch_version=str(torch.__version__), collectives_per_sync=model.collectives_per_sync(),
            seq_len=config.seq_len if info.is_language_model else None)
        result = WorkerResult(
            measured=measured, memory=memory_per_rank, buckets=bucket_records(model), mesh=mesh,
            step_wall_s=step_times.tolist(), step_sync_s=sync_times.tolist(),
            step_loss=step_losses.tolist())
        folder.write_text(WORKER_RESULT, msgspec.json.encode(result).decode())
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


@contextmanager
def errors_recorded(run_dir: Path) -> Iterator[RunFolder]:
    """Opens the run folder as the launcher left it (``RunFolder.for_rank``) and writes any
    error but an interrupt to its errors folder, where ``record`` finds the failing rank, then
    raises it again."""
    folder = RunFolder.for_rank(run_dir)
    try:
        yield folder
    except BaseException as error:
        if not isinstance(error, KeyboardInterrupt):
            dump_on_error(error)
            _write_error(folder, error)
        raise
    finally:
        folder.close()


def _write_error(folder: RunFolder, error: BaseException) -> None:
    rank = int(os.environ.get("RANK", 0))
    with folder.subfolder(ERRORS_DIR) as errors:
        errors.write_text(f"rank{rank}.json", msgspec.json.encode({
        "rank": rank,
        "time": time.time(),
        "error": f"{type(error).__name__}: {error}".strip().splitlines()[0],
        "traceback": traceback.format_exc(),
        }).decode())


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit(f"usage: python -m workloads.train RUN_FOLDER/{CONFIG_FILE}")
    config_path = Path(args[0])
    with errors_recorded(config_path.parent) as folder:
        run(RunConfig.from_json(folder.read_bytes(config_path.name, MIB)), folder)
        # Variants' hooks hold reference cycles; freed at interpreter shutdown, a gloo rank now
        # and then aborts ("terminate called without an active exception").
        gc.collect()


if __name__ == "__main__":
    main()
