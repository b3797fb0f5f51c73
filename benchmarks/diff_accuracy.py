"""How right ``ddpprof diff`` is (a benchmark, not a test): its false positives on recordings
of one configuration, and its attribution of known changes.

Records, interleaved so that the machine's drift is shared, ``bucket_ddp_async`` on
``mlp-small`` with 2 gloo ranks (``--steps 10 --active 6``: 5 analyzed steps):

* ``tune``: ``--tune`` recordings of the base configuration, on which the run-to-run prior is
  fitted (``ddpprof.diff.noise.fit_run_noise``) and on nothing else;
* ``base``: ``--report`` recordings of the base configuration, never used to fit anything;
* ``delayMS``, for each of ``--delay-ms``: ``--changed`` recordings with ``--inject-delay 1:MS``
  (rank 1 sleeps MS ms in a traced span at the start of every step): the step should grow by
  about MS, attributed to waiting for rank 1 (on rank 0) and to ``ddpprof::injected_delay``
  (on rank 1), half each in the mean over the two ranks;
* ``cap``: ``--changed`` recordings with ``--bucket-cap-mib 1`` instead of 25: more, smaller
  buckets, a change of communication only.

Then, with the prior fitted on ``tune`` only, it reports:

* false positives: the share of pairs of ``base`` recordings (every pair; also of ``delay``
  and of ``cap``) that ``diff`` calls a significant change, one recording a side, and for
  100 random draws of two disjoint triples of ``base`` recordings, three a side; each with the
  prior (these recordings are recorded like it), and without it, as ``diff`` judges runs not
  recorded like the prior (a GPU job): one a side on the steps' scatter alone, three a side
  on the repeats' spread;
* each ``base`` × ``delayMS`` pair (and 100 draws of three recordings a side): the step's
  change, whether it is detected, whether the first part named is the cause, the change
  attributed to the cause (waiting for rank 1 plus the injected span's item) and its error
  against the injected delay; the same for ``cap`` (the cause: communication, waiting and
  host communication calls; no known size);
* the prior fitted, to copy into ``DEFAULT_NOISE``.

    python benchmarks/diff_accuracy.py [--out bench-diff/] [--tune 10] [--report 14]
        [--changed 6] [--delay-ms 10,40] [--reuse]
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
from ddpprof.analysis.profile import RunProfile, run_profile  # noqa: E402
from ddpprof.diff.compare import PairDiff, diff_pair  # noqa: E402
from ddpprof.diff.noise import RunNoise, fit_run_noise  # noqa: E402
from ddpprof.run.manifest import read_manifest  # noqa: E402

#: Random draws of three recordings a side.
DRAWS = 100
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
    """Every recording, interleaved: tune, base, delay..., cap, tune, base, ..."""
    sets = {"tune": (args.tune, ["--bucket-cap-mib", "25"]),
            "base": (args.report, ["--bucket-cap-mib", "25"]),
            **{f"delay{ms:g}": (args.changed, ["--bucket-cap-mib", "25", "--inject-delay",
                                                f"1:{ms:g}"]) for ms in args.delay_ms},
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
    if kind.startswith("delay"):
        waiting = sum(p.delta_ms for p in diff.parts if p.label == "waiting for rank 1")
        injected = sum(i.delta_ms or 0 for i in diff.items if i.name == "ddpprof::injected_delay")
        return waiting + injected
    return sum(p.delta_ms for p in diff.parts
               if p.part.group in ("communication", "waiting", "host"))


def names_cause_first(diff: PairDiff, kind: str) -> bool:
    first = diff.parts[0]
    if kind.startswith("delay"):
        injected = any(i.name == "ddpprof::injected_delay" and i.part == first.label
                       for i in diff.items)
        return first.label == "waiting for rank 1" or injected
    return first.part.group in ("communication", "waiting", "host")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def known_change(base: list[RunProfile], changed: list[RunProfile], kind: str,
                 delay_ms: float | None, noise: RunNoise, level: float,
                 rng: random.Random) -> None:
    """Detection, the cause named first and the attribution's error, one recording a side
    (every pair) and three a side (``DRAWS`` random draws)."""
    for label, pairs in (
            ("one a side", [([a], [b]) for a, b in itertools.product(base, changed)]),
            ("three a side", [(rng.sample(base, 3), rng.sample(changed, 3))
                              for _ in range(DRAWS)])):
        diffs = [diff_pair(a, b, level, noise) for a, b in pairs]
        for diff in diffs:
            total = sum(p.delta_ms for p in diff.parts)
            assert abs(total - diff.step.delta_ms) <= 0.02 * abs(diff.step.delta_ms) + 1e-9
        found = [d.verdict == "significant change" for d in diffs]
        first = [names_cause_first(d, kind) for d in diffs]
        steps = [d.step.delta_ms for d in diffs]
        causes = [cause_ms(d, kind) for d in diffs]
        print(f"{kind}, {label}: {len(diffs)} pairs; step change median "
              f"{statistics.median(steps):+.2f} ms (p10 {percentile(steps, 0.1):+.2f}, p90 "
              f"{percentile(steps, 0.9):+.2f}); detected {rate(found)}; cause named first "
              f"{rate(first)}; attributed to the cause: median "
              f"{statistics.median(causes):+.2f} ms")
        if delay_ms is not None:
            errors = [abs(c - delay_ms) / delay_ms for c in causes]
            print(f"  error of the attribution against the injected {delay_ms:g} ms: median "
                  f"{100 * statistics.median(errors):.1f}%, p90 "
                  f"{100 * percentile(errors, 0.9):.1f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-diff"))
    parser.add_argument("--tune", type=int, default=10)
    parser.add_argument("--report", type=int, default=14)
    parser.add_argument("--changed", type=int, default=6)
    parser.add_argument("--delay-ms", type=lambda text: [float(v) for v in text.split(",")],
                        default=[10.0, 40.0], help="Delays to inject, ms (comma-separated).")
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
    for name in ["base", *(f"delay{ms:g}" for ms in args.delay_ms), "cap"]:
        pairs = list(itertools.combinations(profiles[name], 2))
        flags = [diff_pair([a], [b], level, noise).verdict == "significant change"
                 for a, b in pairs]
        steps_only = [diff_pair([a], [b], level, None).verdict == "significant change"
                      for a, b in pairs]
        steps = [p.step_ms for p in profiles[name]]
        print(f"false positives, {name} vs {name}, one recording a side: {rate(flags)}; "
              f"without the prior (the steps' scatter only): {rate(steps_only)} "
              f"(step {statistics.median(steps):.2f} ms, {min(steps):.2f}-{max(steps):.2f})")
    rng = random.Random(0)
    base = profiles["base"]
    triples, repeats_only = [], []
    for _ in range(DRAWS):
        chosen = rng.sample(base, 6)
        for found, prior in ((triples, noise), (repeats_only, None)):
            found.append(diff_pair(chosen[:3], chosen[3:], level, prior).verdict
                         == "significant change")
    print(f"false positives, base, three recordings a side ({DRAWS} random disjoint splits): "
          f"{rate(triples)}; without the prior (the repeats' spread only): "
          f"{rate(repeats_only)}")
    for kind in [f"delay{ms:g}" for ms in args.delay_ms] + ["cap"]:
        delay = float(kind.removeprefix("delay")) if kind.startswith("delay") else None
        known_change(base, profiles[kind], kind, delay, noise, level, rng)
    print(f"total {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
