"""The profiled training loop that ``ddpprof record`` launches on every rank through torchrun.

Each rank writes its Chrome trace as ``rank<r>.pt.trace.json.gz``; rank 0 writes
``worker_result.json`` (per-step times and losses) for the launcher to fold into ``run.json``.
A rank that fails writes ``.errors/rank<r>.json`` first, so the launcher can name it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from ddpprof.atomic import atomic_path, write_json_atomic
from ddpprof.variants import VARIANT_NAMES, DataParallel, make_variant

from .data import BatchSource, build_data, checkpoint_tokenizer, shard
from .models import MODEL_NAMES, build_model, compute_loss, count_parameters

#: Test seam: "RANK:STEP" makes that rank raise at that step, to exercise failure handling.
FAIL_AT_ENV = "DDPPROF_FAIL_AT"
WORKER_RESULT = "worker_result.json"


def trace_file_name(rank: int) -> str:
    # TensorBoard's profiler plugin lists files named <worker>.pt.trace.json(.gz).
    return f"rank{rank}.pt.trace.json.gz"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", choices=VARIANT_NAMES, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--model-path", type=Path)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--tokenizer", type=Path)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--global-batch", type=int, required=True)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    parser.add_argument("--gradient-as-bucket-view", action="store_true")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--wait", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--active", type=int, default=3)
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="time the steps without torch.profiler")
    parser.add_argument("--out", type=Path, required=True, help="the run folder")
    return parser.parse_args(argv)


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
          steps: int, global_batch: int, grad_accum: int, rank: int, world_size: int,
          device: torch.device, clock: StepClock | None = None,
          sync_clock: StepClock | None = None,
          on_step_end=lambda step: None) -> list[torch.Tensor]:
    """Run ``steps`` optimizer steps; return each step's local loss (a detached tensor, so the
    loop never waits on the device for it). ``sync_clock`` brackets each step's
    ``finish_gradient_sync``: for the blocking variants, that is the communication time."""
    micro_batch = global_batch // grad_accum
    fail_rank, fail_step = _planned_failure()
    losses = []
    for step in range(steps):
        # The step's own work only: what ``on_step_end`` does (the profiler exporting a trace,
        # a progress line) must not land in any step's time.
        if clock:
            clock.start()
        if (rank, step) == (fail_rank, fail_step):
            raise RuntimeError(f"injected failure at step {step} ({FAIL_AT_ENV})")
        step_loss = torch.zeros((), device=device)
        for micro in range(grad_accum):
            batch = shard(data.global_batch(step * grad_accum + micro, micro_batch), rank,
                          world_size)
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            last_micro = micro == grad_accum - 1
            with nullcontext() if last_micro else model.no_sync():
                loss = compute_loss(model, batch) / grad_accum
                loss.backward()
            step_loss += loss.detach()
        if sync_clock:
            sync_clock.start()
        model.finish_gradient_sync()
        if sync_clock:
            sync_clock.stop()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if clock:
            clock.stop()
        losses.append(step_loss)
        on_step_end(step)
    return losses


def _planned_failure() -> tuple[int, int]:
    spec = os.environ.get(FAIL_AT_ENV)
    if not spec:
        return -1, -1
    rank, step = spec.split(":")
    return int(rank), int(step)


def _device_for(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


def run(args: argparse.Namespace) -> None:
    distributed = args.variant != "single"
    rank = int(os.environ.get("RANK", 0)) if distributed else 0
    local_rank = int(os.environ.get("LOCAL_RANK", 0)) if distributed else 0
    device = _device_for(args.backend, local_rank)
    if distributed:
        dist.init_process_group(args.backend, timeout=timedelta(seconds=args.timeout_s),
                                device_id=device if device.type == "cuda" else None)
    world_size = dist.get_world_size() if distributed else 1

    torch.manual_seed(args.seed + rank)  # the broadcast from rank 0 must make ranks agree
    module, info = build_model(args.model, args.model_path)
    module.to(device)
    model = make_variant(args.variant, module, bucket_cap_mb=args.bucket_cap_mb,
                         gradient_as_bucket_view=args.gradient_as_bucket_view)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    data = build_data(is_language_model=info.is_language_model, vocab_size=info.vocab_size,
                      seq_len=args.seq_len, data_path=args.data,
                      tokenizer_path=args.tokenizer or checkpoint_tokenizer(args.model_path),
                      seed=args.seed)

    trace_path = args.out / trace_file_name(rank)

    def export_trace(prof: torch.profiler.profile) -> None:
        with atomic_path(trace_path) as tmp:
            prof.export_chrome_trace(str(tmp))

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=args.wait, warmup=args.warmup, active=args.active,
                                         repeat=1),
        on_trace_ready=export_trace,
        record_shapes=True,
    ) if args.profile else None

    def on_step_end(step: int) -> None:
        if profiler is not None:
            profiler.step()
        if rank == 0:
            print(f"ddpprof-step {step + 1}/{args.steps}", flush=True)

    clock, sync_clock = StepClock(device), StepClock(device)
    with profiler if profiler is not None else nullcontext():
        losses = train(model, optimizer, data, steps=args.steps, global_batch=args.global_batch,
                       grad_accum=args.grad_accum, rank=rank, world_size=world_size,
                       device=device, clock=clock, sync_clock=sync_clock,
                       on_step_end=on_step_end)

    # Everything below runs after profiling, so averaging the loss cannot show up in a trace.
    step_losses = torch.stack(losses).float()
    step_times = torch.tensor(clock.durations_s(), dtype=torch.float64, device=device)
    sync_times = torch.tensor(sync_clock.durations_s(), dtype=torch.float64, device=device)
    devices = [_device_name(device)]
    if distributed:
        dist.all_reduce(step_losses, op=dist.ReduceOp.SUM)
        step_losses /= world_size
        dist.all_reduce(step_times, op=dist.ReduceOp.MAX)  # a step ends when its slowest rank does
        dist.all_reduce(sync_times, op=dist.ReduceOp.MAX)
        devices = [None] * world_size
        dist.all_gather_object(devices, _device_name(device))
    if rank == 0:
        write_json_atomic(args.out / WORKER_RESULT, {
            "parameters": count_parameters(module),
            "world_size": world_size,
            "devices": devices,
            "threads_per_rank": torch.get_num_threads(),
            "allreduces_per_sync": model.allreduces_per_sync(),
            "step_wall_s": step_times.tolist(),
            "step_sync_s": sync_times.tolist(),
            "step_loss": step_losses.tolist(),
            "seq_len": args.seq_len if info.is_language_model else None,
        })
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


def _write_error(out: Path, error: BaseException) -> None:
    rank = int(os.environ.get("RANK", 0))
    write_json_atomic(out / ".errors" / f"rank{rank}.json", {
        "rank": rank,
        "time": time.time(),
        "error": f"{type(error).__name__}: {error}".strip().splitlines()[0],
        "traceback": traceback.format_exc(),
    })


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.model not in MODEL_NAMES and args.model_path is None:
        sys.exit(f"unknown model {args.model!r}")
    try:
        run(args)
    except BaseException as error:
        if not isinstance(error, KeyboardInterrupt):
            _write_error(args.out, error)
        raise


if __name__ == "__main__":
    main()
