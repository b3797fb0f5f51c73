"""How right ``ddpprof diff`` is (a benchmark, not a test): its false positives on recordings
of one configuration, and its attribution of known changes.

Records, interleaved so that the machine's drift is shared, ``bucket_ddp_async`` on
``mlp-small`` with 2 gloo ranks (``--steps 10 --active 6``: 5 analyzed steps):

* ``tune``: ``--tune`` recordings of the base configuration, on which the run-to-run prior is
  fitted (``ddpprof.diff.noise.fit_run_noise``) and on nothing else;
* ``base``: ``--report`` recordings of the base configuration, never used to fit anything;
* ``delay``: ``--changed`` recordings with ``--rank-delay 1:MS`` (rank 1 sleeps MS ms in a
  traced span at the start of every step): the step should grow by about MS, attributed to
  waiting for rank 1 (on rank 0) and to ``ddpprof::injected_delay`` (on rank 1);
* ``cap``: ``--changed`` recordings with ``--bucket-cap-mib 1`` instead of 25: more, smaller
  buckets, a change of communication only.

Then, with the prior fitted on ``tune`` only, it reports:

* false positives: the share of pairs of ``base`` recordings (every pair; also of ``delay``
  and of ``cap``) that ``diff`` calls a significant change, one recording a side, and for
  disjoint triples of ``base`` recordings three a side;
* each ``base`` × ``delay`` pair: the step's change, the change attributed to the known cause
  (waiting for rank 1 plus the injected span's item), the error of that attribution against
  the measured change and against the injected delay, and whether the first part named is
  the cause; the same for ``cap`` (the cause: communication, waiting and host communication
  calls);
* the prior fitted, to copy into ``DEFAULT_NOISE``.

    python benchmarks/diff_accuracy.py [--out bench-diff/] [--tune 10] [--report 14]
        [--changed 6] [--delay-ms 10] [--reuse]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ddpprof.analysis import analyze_paths  # noqa: E402
from ddpprof.diff.compare import PairDiff, diff_pair  # noqa: E402
from ddpprof.diff.noise import fit_run_noise  # noqa: E402
from ddpprof.diff.profile import RunProfile, run_profile  # noqa: E402
from ddpprof.manifest import read_manifest  # noqa: E402

BASE = ["--variant", "bucket_ddp_async", "--model", "mlp-small", "--nproc", "2",
        "--global-batch", "256", "--steps", "10", "--wait", "1", "--warmup", "2",
        "--active", "6", "--backend", "gloo"]


def complete(folder: Path) -> bool:
    path = folder / "run.json"
    return path.is_file() and read_manifest(path).status == "complete"


def record(out: Path, name: str, extra: list[str], reuse: bool) -> Path:
    folder = out / name
    if reuse and complete(folder):
        return folder
    subprocess.run([sys.executable, "-m", "ddpprof.cli", "record", *BASE, *extra,
                    "--out", str(out), "--name", name, "--quiet"], check=True,
                   env={**os.environ, "CI": "true"}, stdout=subprocess.DEVNULL)
    return folder


def plan(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """Every recording, interleaved: tune, base, delay, cap, tune, base, ..."""
    sets = {"tune": (args.tune, ["--bucket-cap-mib", "25"]),
            "base": (args.report, ["--bucket-cap-mib", "25"]),
            "delay": (args.changed, ["--bucket-cap-mib", "25", "--rank-delay",
                                     f"1:{args.delay_ms:g}"]),
            "cap": (args.changed, ["--bucket-cap-mib", "1"])}
    rounds = max(count for count, _ in sets.values())
    return [(f"{name}-{k:02d}", extra) for k in range(rounds)
            for name, (count, extra) in sets.items() if k < count]


def profile(folder: Path) -> RunProfile:
    analysis = analyze_paths([folder])
    found = run_profile(analysis.runs[0])
    assert found is not None
    return found


def rate(flags: list[bool]) -> str:
    return f"{sum(flags)}/{len(flags)} = {100 * sum(flags) / len(flags):.1f}%"


def cause_ms(diff: PairDiff, kind: str) -> float:
    """The change the diff attributes to the known cause."""
    if kind == "delay":
        waiting = sum(p.delta_ms for p in diff.parts if p.label == "waiting for rank 1")
        injected = sum(i.delta_ms or 0 for i in diff.items if i.name == "ddpprof::injected_delay")
        return waiting + injected
    return sum(p.delta_ms for p in diff.parts
               if p.part.group in ("communication", "waiting", "host"))


def names_cause_first(diff: PairDiff, kind: str) -> bool:
    first = diff.parts[0]
    if kind == "delay":
        injected = any(i.name == "ddpprof::injected_delay" and i.part == first.label
                       for i in diff.items)
        return first.label == "waiting for rank 1" or injected
    return first.part.group in ("communication", "waiting", "host")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-diff"))
    parser.add_argument("--tune", type=int, default=10)
    parser.add_argument("--report", type=int, default=14)
    parser.add_argument("--changed", type=int, default=6)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--significance", type=float, default=0.95)
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    folders: dict[str, list[Path]] = {}
    for name, extra in plan(args):
        folders.setdefault(name.split("-")[0], []).append(record(args.out, name, extra,
                                                                  args.reuse))
    print(f"recorded in {time.monotonic() - started:.0f} s; load "
          f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    profiles = {name: [profile(f) for f in found] for name, found in folders.items()}
    noise = fit_run_noise(profiles["tune"], measured=f"fitted on {len(profiles['tune'])} "
                                                     "tuning recordings")
    print(f"prior fitted on tune: {noise}")
    level = args.significance
    for name in ("base", "delay", "cap"):
        pairs = list(itertools.combinations(profiles[name], 2))
        flags = [diff_pair([a], [b], level, noise).verdict == "significant change"
                 for a, b in pairs]
        steps = [p.step_ms for p in profiles[name]]
        print(f"false positives, {name} vs {name}, one recording a side: {rate(flags)} "
              f"(step {statistics.median(steps):.2f} ms, {min(steps):.2f}-{max(steps):.2f})")
    rng = random.Random(0)
    base = profiles["base"]
    triples = []
    for _ in range(40):
        chosen = rng.sample(base, 6)
        triples.append(diff_pair(chosen[:3], chosen[3:], level, noise).verdict
                       == "significant change")
    print(f"false positives, base, three recordings a side (40 random disjoint splits): "
          f"{rate(triples)}")
    for kind in ("delay", "cap"):
        found, first, errors, injected_errors = [], [], [], []
        for a, b in itertools.product(base, profiles[kind]):
            diff = diff_pair([a], [b], level, noise)
            found.append(diff.verdict == "significant change")
            first.append(names_cause_first(diff, kind))
            attributed = cause_ms(diff, kind)
            errors.append(abs(attributed - diff.step.delta_ms) / abs(diff.step.delta_ms))
            if kind == "delay":
                injected_errors.append(abs(attributed - args.delay_ms) / args.delay_ms)
            sums = abs(sum(p.delta_ms for p in diff.parts) - diff.step.delta_ms)
            assert sums <= 0.02 * abs(diff.step.delta_ms) + 1e-9, sums
        deltas = [diff_pair([a], [b], level, noise).step.delta_ms
                  for a, b in itertools.product(base, profiles[kind])]
        print(f"{kind}: {len(found)} pairs; step change median {statistics.median(deltas):+.2f} "
              f"ms; detected {rate(found)}; cause named first {rate(first)}; attribution error "
              f"against the measured change: median {100 * statistics.median(errors):.1f}%, "
              f"p90 {100 * sorted(errors)[int(0.9 * len(errors))]:.1f}%")
        if injected_errors:
            print(f"  against the injected {args.delay_ms:g} ms: median "
                  f"{100 * statistics.median(injected_errors):.1f}%, p90 "
                  f"{100 * sorted(injected_errors)[int(0.9 * len(injected_errors))]:.1f}%")
    print(f"total {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
