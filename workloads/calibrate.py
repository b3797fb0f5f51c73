"""The all-reduce sweep that ``ddpprof calibrate`` launches on every rank through torchrun.

    python -m workloads.calibrate OUT/.calibrate.json

For each size (``ddpprof.simulate.calibrate.Sweep``): ``warmup_iters`` untimed all-reduces, then
``iters`` timed ones, each after a barrier so that every rank starts it together, timed on each
rank (CUDA events on GPU, ``perf_counter`` on CPU); each call's time is the maximum over ranks.
Rank 0 writes ``OUT/.calibrate_result.json`` for the launcher; a rank that fails writes
``OUT/.errors/rank<r>.json`` first, as the training worker does.
"""

from __future__ import annotations

if __name__ == "__main__":
    # Before anything slow: die with torchrun, and stop now if it (or ddpprof) is already gone.
    from ddpprof.record.process import die_with_launcher

    die_with_launcher()

import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

import msgspec
import torch
import torch.distributed as dist

from ddpprof.core.units import MIB
from ddpprof.run.folder import RunFolder
from ddpprof.simulate.calibrate import SWEEP_CONFIG, SWEEP_RESULT, Sweep, SweepResult

from .train import _device_for, _device_name, errors_recorded


def time_all_reduce(buffer: torch.Tensor, calls: int, device: torch.device) -> list[float]:
    """Each call's time on this rank, in µs, each started after a barrier."""
    times = []
    for _ in range(calls):
        dist.barrier()
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            dist.all_reduce(buffer)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            began = time.perf_counter()
            dist.all_reduce(buffer)
            times.append((time.perf_counter() - began) * 1e6)
    return times


def run(sweep: Sweep, folder: RunFolder) -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = _device_for(sweep.backend, local_rank)
    dist.init_process_group(sweep.backend, timeout=timedelta(seconds=sweep.timeout_s),
                            device_id=device if device.type == "cuda" else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    storage = torch.ones(max(sweep.sizes_bytes) // 4, dtype=torch.float32, device=device)
    slowest: list[list[float]] = []
    for index, size in enumerate(sweep.sizes_bytes):
        buffer = storage[:size // 4]
        time_all_reduce(buffer, sweep.warmup_iters, device)
        mine = torch.tensor(time_all_reduce(buffer, sweep.iters, device), dtype=torch.float64,
                            device=device)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)  # a call ends when its last rank does
        slowest.append(mine.tolist())
        if rank == 0:
            print(f"ddpprof-step {index + 1}/{len(sweep.sizes_bytes)}", flush=True)
    devices: list = [None] * world
    dist.all_gather_object(devices, _device_name(device))
    if rank == 0:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            os.cpu_count() or 1
        result = SweepResult(world_size=world, hostname=socket.gethostname(), cores=cores,
                             devices=devices, threads_per_rank=torch.get_num_threads(),
                             torch_version=str(torch.__version__), times_us=slowest)
        folder.write_text(SWEEP_RESULT, msgspec.json.encode(result).decode())
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit(f"usage: python -m workloads.calibrate OUT/{SWEEP_CONFIG}")
    config_path = Path(args[0])
    with errors_recorded(config_path.parent) as folder:
        sweep = msgspec.json.decode(folder.read_bytes(config_path.name, MIB),
                                    type=Sweep)
        run(sweep, folder)


if __name__ == "__main__":
    main()
