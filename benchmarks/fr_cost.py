"""What Flight Recorder costs a training step: ``ddpprof record`` with ``--fr-buffer-size 0``
(off) against the default (on), side by side in one run.

For each variant, ``--repeats`` pairs of recordings alternate the two settings (off then on,
then on then off, ...), so that a machine that gets busier or quieter over the run weighs on
both alike. Each recording's step time is the median over its steps after the profiled window
(the profiler is off then, so only Flight Recorder differs); the cost is the ratio of the
medians over the repeats, on to off, with the spread of the per-pair ratios.

Then, where the step times are too noisy to show it, the cost per collective: a one-rank gloo
process issuing ``--calls`` all-reduces of one element (Flight Recorder records each, with its
Python stack), with Flight Recorder off and on in alternation, ``--repeats`` times each; the
median time per call and their difference. A step's cost is that difference times the
collectives the step issues.

How to run, from the repository root::

    python benchmarks/fr_cost.py                                  # pytorch_ddp and fsdp, 4 pairs
    python benchmarks/fr_cost.py --variant simple_ddp --repeats 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEDULE = ["--steps", "40", "--wait", "1", "--warmup", "1", "--active", "2"]


def record(variant: str, buffer_size: int, out: Path, name: str, args: argparse.Namespace
           ) -> float:
    """The median step time (s) of one recording's unprofiled steps."""
    subprocess.run([sys.executable, "-m", "ddpprof.cli", "record", "--variant", variant,
                    "--model", args.model, "--global-batch", str(args.global_batch),
                    "--nproc", str(args.nproc), *SCHEDULE, "--fr-buffer-size", str(buffer_size),
                    "--out", str(out), "--name", name, "--quiet"],
                   cwd=REPO_ROOT, check=True, capture_output=True)
    manifest = json.loads((out / name / "run.json").read_text())
    steps = [s["wall_s"] for s in manifest["steps"][1:] if s["phase"] == "after"]
    return statistics.median(steps)


PER_CALL = """
import os, sys, time, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
dist.init_process_group("gloo", rank=0, world_size=1)
tensor = torch.ones(1)
for _ in range(200):
    dist.all_reduce(tensor)
started = time.perf_counter()
for _ in range(int(sys.argv[1])):
    dist.all_reduce(tensor)
print((time.perf_counter() - started) / int(sys.argv[1]))
dist.destroy_process_group()
"""


def per_call(buffer_size: int, calls: int, port: int) -> float:
    """Seconds per one-element all-reduce on one gloo rank, Flight Recorder's buffer at
    ``buffer_size``."""
    import os

    done = subprocess.run([sys.executable, "-c", PER_CALL, str(calls), str(port)],
                          env={**os.environ, "TORCH_FR_BUFFER_SIZE": str(buffer_size),
                               "OMP_NUM_THREADS": "1"},
                          check=True, capture_output=True, text=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="pytorch_ddp,fsdp")
    parser.add_argument("--model", default="mlp-small")
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--buffer-size", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--per-call-only", action="store_true")
    args = parser.parse_args()
    if not args.per_call_only:
        steps(args)
    off, on = [], []
    for repeat in range(args.repeats * 2):
        for size in ((0, args.buffer_size) if repeat % 2 == 0 else (args.buffer_size, 0)):
            (on if size else off).append(per_call(size, args.calls, 29600 + repeat))
    print(f"\nper collective (one gloo rank, {args.calls} one-element all-reduces, "
          f"{len(off)} runs each): off {1e6 * statistics.median(off):.1f} us, on "
          f"{1e6 * statistics.median(on):.1f} us, Flight Recorder adds "
          f"{1e6 * (statistics.median(on) - statistics.median(off)):.1f} us per collective")


def steps(args: argparse.Namespace) -> None:
    print(f"{'variant':<14} {'off ms':>8} {'on ms':>8} {'on/off':>7} {'pairs min-max':>15}")
    with tempfile.TemporaryDirectory(prefix="ddpprof-fr-cost-") as scratch:
        for variant in args.variant.split(","):
            off: list[float] = []
            on: list[float] = []
            for repeat in range(args.repeats):
                order = (0, args.buffer_size) if repeat % 2 == 0 else (args.buffer_size, 0)
                for size in order:
                    seconds = record(variant, size, Path(scratch), f"{variant}-{size}-{repeat}",
                                     args)
                    (on if size else off).append(seconds)
            pairs = [b / a for a, b in zip(off, on, strict=True)]
            print(f"{variant:<14} {1e3 * statistics.median(off):>8.2f} "
                  f"{1e3 * statistics.median(on):>8.2f} "
                  f"{statistics.median(on) / statistics.median(off):>7.3f} "
                  f"{min(pairs):>7.3f}-{max(pairs):.3f}", flush=True)


if __name__ == "__main__":
    main()
