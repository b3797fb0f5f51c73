"""bucket_ddp_async against pytorch_ddp: samples/s side by side, repetitions interleaved.

    python benchmarks/variants.py [--model mlp-large] [--repeats 3] [--global-batch 512]

Each repetition records both variants (2 gloo ranks) one after the other, alternating which goes
first, so drift in machine load hits both alike. Throughput is ddpprof's own: samples/s over the
unprofiled steps after the first (run.json "throughput"). Target: ratio >= 0.95.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from ddpprof.record.launcher import Recording, record
from ddpprof.run.config import RunConfig

VARIANTS = ("pytorch_ddp", "bucket_ddp_async")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mlp-large")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--global-batch", type=int, default=512)
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    args = parser.parse_args()

    samples_per_s: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as out:
        for repeat in range(args.repeats):
            order = VARIANTS if repeat % 2 == 0 else tuple(reversed(VARIANTS))
            for variant in order:
                config = RunConfig(model=args.model, nproc=args.nproc, steps=args.steps,
                                   global_batch=args.global_batch,
                                   bucket_cap_mib=args.bucket_cap_mb)
                [outcome] = record(Recording([variant], config, out=Path(out) / f"rep{repeat}",
                                             quiet=True))
                if outcome.status != "complete" or outcome.manifest.throughput is None:
                    raise SystemExit(f"{variant} failed: {outcome.error}")
                speed = outcome.manifest.throughput.samples_per_s
                samples_per_s[variant].append(speed)
                print(f"repeat {repeat + 1}/{args.repeats}  {variant:<17} {speed:10,.1f} samples/s",
                      flush=True)

    medians = {v: statistics.median(s) for v, s in samples_per_s.items()}
    ratio = medians["bucket_ddp_async"] / medians["pytorch_ddp"]
    print(f"\n{args.model}, {args.nproc} gloo ranks, global batch {args.global_batch}, "
          f"{args.repeats} interleaved repeats (median samples/s)")
    for variant in VARIANTS:
        print(f"  {variant:<17} {medians[variant]:10,.1f}   "
              f"(min {min(samples_per_s[variant]):,.1f}, max {max(samples_per_s[variant]):,.1f})")
    print(f"  ratio bucket_ddp_async / pytorch_ddp = {ratio:.3f}  (target >= 0.95)")


if __name__ == "__main__":
    main()
