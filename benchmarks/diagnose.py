"""How often the findings name the right cause and the right rank (a benchmark, not a test):
runs recorded with a fault whose culprit is known (``ddpprof record --fault``, no marker in
the trace), each analyzed by ``ddpprof analyze`` and its findings held to the ground truth
(the fault's kind, its rank; ``workloads/faults.py`` maps each kind to the finding codes that
diagnose it).

For every model of ``--models`` and world size of ``--world-sizes`` (a *cell*), it records
``--clean`` runs without a fault (``none``) and ``--repeats`` runs of every other kind, round
by round so that the machine's drift is shared: each round records one run of every kind in
every cell. A culprit kind puts its culprit on rank (round + 1) mod world size, so that the
culprit moves between ranks. The amounts are set against the cell's clean step (the median
step of its first clean run): ``slow_data``, ``late_join`` and ``jitter`` sleep or spin
``--delay-share`` of it; ``host_bound`` adds as many tiny ops as take about that long (at
``--op-us`` each); ``cpu_contention`` pins as many busy processes beside the culprit as its
core needs to be the busiest (1, or ranks per core where the ranks outnumber the cores);
``slow_compute`` repeats each layer's input-gradient product three times more in the
culprit's backward; the bucket kinds set the cap to 1024 and 0.01 MiB.

Then it analyzes each run (``ddpprof analyze RUN --json``, timed: the time to diagnose) and
prints:

* **culprit rank accuracy**: over runs of a culprit kind, the share whose first finding that
  names a rank names the culprit;
* **cause accuracy**: the share of runs whose top finding's code (or one it names as
  possible: ``alternatives``) is one the kind expects; a clean run counts as right when no
  finding is of high severity;
* **false alarms**: clean runs with a high-severity finding, and jitter runs (no fixed
  culprit) with a finding that names a rank;
* **time to diagnose**: ``analyze``'s wall time per run (one process per run, start included);
* the **confusion table**, kind against top finding; with ``--markdown FILE`` the same as
  Markdown tables, for ``docs/findings.md``.

    python benchmarks/diagnose.py [--out bench-diagnose/] [--models mlp-small,smollm2-tiny]
        [--world-sizes 2,3] [--repeats 3] [--clean 4] [--reuse] [--backend gloo]
        [--json results.json] [--markdown table.md]

``--reuse`` keeps every run already recorded (complete) and records only the missing ones:
re-evaluate a change to the analysis without recording again. On GPUs, ``--backend nccl``
(one GPU per rank).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ddpprof.run.manifest import read_manifest  # noqa: E402
from workloads.faults import FAULT_KINDS, Fault  # noqa: E402

#: What each model trains with: its variant, bucket cap (about a quarter of its gradient
#: bytes: a few buckets, the first launched early in backward), global batch (divisible by
#: every world size here), and for a language model its sequence length. PyTorch DDP's first
#: bucket is 1 MiB whatever the cap, so a model of 0.4 MiB of gradients (smollm2-tiny) is
#: bucketed by the hand-written bucket_ddp_async, whose cap is exact.
MODELS = {
    "mlp-small": ["--variant", "pytorch_ddp", "--bucket-cap-mib", "1", "--global-batch", "192"],
    "smollm2-tiny": ["--variant", "bucket_ddp_async", "--bucket-cap-mib", "0.1",
                     "--global-batch", "24", "--seq-len", "128"],
}
#: The schedule: 16 steps of which 13 traced (12 analyzed): enough steps to tell a rank late
#: in most of them from a late rank that moves.
BASE = ["--steps", "16", "--wait", "1", "--warmup", "1", "--active", "13"]


@dataclass(frozen=True)
class Planned:
    cell: str                 # model-nWS
    model: str
    world_size: int
    kind: str
    round: int

    @property
    def culprit(self) -> int | None:
        return (self.round + 1) % self.world_size if FAULT_KINDS[self.kind].scope == "rank" \
            else None

    @property
    def name(self) -> str:
        rank = "" if self.culprit is None else f"-r{self.culprit}"
        return f"{self.kind}{rank}-{self.round:02d}"


@dataclass
class Outcome:
    """One run, recorded and diagnosed."""

    cell: str
    run: str
    kind: str
    culprit: int | None
    fault: str
    step_ms: float | None
    top_code: str | None
    top_severity: str | None
    top_alternatives: list[str]
    ranked_rank: int | None   # the rank the first finding that names one names
    named_ranks: list[int]     # every rank any finding names
    high: bool                 # a finding of high severity
    cause_right: bool
    rank_right: bool | None    # None: the kind has no culprit
    false_alarm: bool | None   # None: neither a clean nor a jitter run
    analyze_s: float
    error: str | None = None


def plan(args: argparse.Namespace) -> list[Planned]:
    kinds = [k for k in FAULT_KINDS if k in args.kinds]
    cells = [(m, n) for m in args.models for n in args.world_sizes]
    rounds = max(args.repeats, args.clean)
    planned = []
    for k in range(rounds):
        for model, size in cells:
            for kind in kinds:
                if k < (args.clean if kind == "none" else args.repeats):
                    planned.append(Planned(f"{model}-n{size}", model, size, kind, k))
    return planned


def complete(folder: Path) -> bool:
    path = folder / "run.json"
    return path.is_file() and read_manifest(path).status == "complete"


def clean_step_ms(folder: Path) -> float | None:
    throughput = read_manifest(folder / "run.json").throughput
    return 1e3 * throughput.median_step_s if throughput and throughput.median_step_s else None


def fault_spec(run: Planned, step_ms: float, args: argparse.Namespace) -> list[str]:
    """The ``--fault`` of ``run``, its amount set against the cell's clean step."""
    kind, rank = run.kind, run.culprit
    delay = max(round(args.delay_share * step_ms), 1)
    cores = os.cpu_count() or 1
    amount: float | None = {
        "slow_compute": 3, "slow_data": delay, "late_join": delay, "jitter": delay,
        "cpu_contention": max(1, math.ceil(run.world_size / cores)),
        "bucket_too_large": 1024, "bucket_too_small": 0.01, "comm_bound": 1,
        "host_bound": max(round(args.delay_share * step_ms * 1e3 / args.op_us), 1),
    }.get(kind)
    if kind == "none":
        return []
    return ["--fault", Fault(kind, rank, amount).spec if rank is not None or amount is None
            else f"{kind}::{amount:g}"]


def record(run: Planned, folder: Path, step_ms: float | None, args: argparse.Namespace
           ) -> str | None:
    """Record ``run`` into ``folder``; the error of a failed recording."""
    if args.reuse and complete(folder):
        return None
    fault = fault_spec(run, step_ms or 0.0, args) if run.kind != "none" else []
    command = [sys.executable, "-m", "ddpprof.cli", "record", *BASE, *MODELS[run.model],
               "--model", run.model, "--nproc", str(run.world_size), "--backend", args.backend,
               *fault, "--out", str(folder.parent), "--name", folder.name, "--quiet"]
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(command, env={**os.environ, "CI": "true"},
                                   stdout=subprocess.DEVNULL, stderr=errors, text=True)
        while process.poll() is None:
            if args.nice:
                share_priority(process.pid, args.nice)
            time.sleep(0.2)
        errors.seek(0)
        lines = errors.read().strip().splitlines()
    return None if process.returncode == 0 else (lines or ["?"])[-1]


def diagnose(folder: Path) -> tuple[dict, float, str | None]:
    """``ddpprof analyze``'s findings for the run in ``folder``, its wall time, and its error
    (the last line it printed) where it failed: a failure diagnoses nothing."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "analysis.json"
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "ddpprof.cli", "analyze", str(folder),
                               "--json", str(out), "--quiet"],
                              env={**os.environ, "CI": "true"}, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if done.returncode != 0 or not out.is_file():
            error = (done.stderr.strip().splitlines() or ["?"])[-1]
            return {"findings": []}, elapsed, f"analyze exit {done.returncode}: {error}"
        return json.loads(out.read_text()), elapsed, None


def judge(run: Planned, folder: Path, args: argparse.Namespace) -> Outcome:
    manifest = read_manifest(folder / "run.json")
    faults = manifest.injected_faults or []
    fault = ", ".join(f"{f.kind}:{'' if f.rank is None else f.rank}:{f.amount:g}"
                      if f.amount is not None else f.kind for f in faults) or "none"
    document, seconds, error = diagnose(folder)
    found = document["findings"]
    top = found[0] if found else None
    ranked = next((f for f in found if f.get("rank") is not None), None)
    kind = FAULT_KINDS[run.kind]
    high = any(f["severity"] == "high" for f in found)
    if run.kind == "none":
        cause = not high
    else:
        codes = {top["code"], *top.get("alternatives", [])} if top else set()
        cause = bool(codes & set(kind.expected_codes))
    culprit = kind.culprit(Fault(run.kind, run.culprit, None))
    rank_right = None if culprit is None else (ranked is not None and ranked["rank"] == culprit)
    false_alarm = (high if run.kind == "none" else
                   any(f.get("rank") is not None for f in found) if run.kind == "jitter"
                   else None)
    throughput = manifest.throughput
    return Outcome(run.cell, folder.name, run.kind, culprit, fault,
                   1e3 * throughput.median_step_s if throughput and throughput.median_step_s
                   else None, top["code"] if top else None, top["severity"] if top else None,
                   list(top.get("alternatives", [])) if top else [],
                   ranked["rank"] if ranked else None,
                   sorted({f["rank"] for f in found if f.get("rank") is not None}), high,
                   cause and error is None, rank_right, false_alarm, seconds, error)


def rate(flags: list[bool]) -> str:
    return f"{sum(flags)}/{len(flags)} = {100 * sum(flags) / len(flags):.1f}%" if flags else "-"


def summary(outcomes: list[Outcome]) -> list[str]:
    ranked = [o.rank_right for o in outcomes if o.rank_right is not None]
    causes = [o.cause_right for o in outcomes]
    clean = [bool(o.false_alarm) for o in outcomes if o.kind == "none"]
    jitter = [bool(o.false_alarm) for o in outcomes if o.kind == "jitter"]
    seconds = sorted(o.analyze_s for o in outcomes)
    lines = [f"runs: {len(outcomes)}",
             f"culprit rank accuracy: {rate(ranked)}",
             f"cause accuracy: {rate(causes)}",
             f"false alarms: clean runs with a high-severity finding {rate(clean)}; jitter "
             f"runs naming a rank {rate(jitter)}",
             f"time to diagnose (analyze wall, s): median {statistics.median(seconds):.2f}, "
             f"p90 {seconds[int(0.9 * (len(seconds) - 1))]:.2f}, max {seconds[-1]:.2f}"
             if seconds else "time to diagnose: -"]
    by_kind = {}
    for o in outcomes:
        by_kind.setdefault(o.kind, []).append(o)
    lines.append("")
    lines.append("| kind | runs | cause right | culprit right | expected |")
    lines.append("| --- | --- | --- | --- | --- |")
    for kind, mine in by_kind.items():
        ranked_here = [o.rank_right for o in mine if o.rank_right is not None]
        expected = ", ".join(f"`{c}`" for c in FAULT_KINDS[kind].expected_codes) or \
            "no high-severity finding"
        lines.append(f"| `{kind}` | {len(mine)} | {sum(o.cause_right for o in mine)} | "
                     f"{sum(ranked_here) if ranked_here else '-'} | {expected} |")
    return lines


def confusion(outcomes: list[Outcome]) -> list[str]:
    """Kind against top finding (the top finding's code; "-" for none)."""
    tops = sorted({o.top_code or "-" for o in outcomes})
    kinds = list(dict.fromkeys(o.kind for o in outcomes))
    counts = Counter((o.kind, o.top_code or "-") for o in outcomes)
    lines = ["| kind \\ top finding | " + " | ".join(f"`{t}`" for t in tops) + " |",
             "| --- |" + " --- |" * len(tops)]
    for kind in kinds:
        lines.append(f"| `{kind}` | " + " | ".join(str(counts[(kind, t)] or "") for t in tops)
                     + " |")
    return lines


def machine() -> str:
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) \
        if Path("/proc/cpuinfo").exists() else platform.processor()
    return (f"{os.cpu_count()} cores ({cpu}), torch {torch.__version__}, "
            f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def prioritise(nice: int) -> None:
    """Run at niceness ``nice``, and where Linux shares the CPU between sessions
    (autogroups: a niceness then counts only within the session), give this session's
    group that niceness too: it covers the shell that started the benchmark."""
    os.nice(nice)
    group = Path("/proc/self/autogroup")
    if group.exists():
        try:
            group.write_text(str(nice))
        except OSError as error:
            print(f"autogroup niceness not set: {error}", file=sys.stderr)


def share_priority(pid: int, nice: int) -> None:
    """Give the autogroups of ``pid``'s descendants the niceness ``nice``: ``record`` starts
    torchrun in a session of its own (so that a signal reaches all its ranks), and a session
    is an autogroup, whose niceness the benchmark's does not cover."""
    seen, todo = set(), [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo += [int(child) for child in task.read_text().split()]
            except (OSError, ValueError):
                continue
        if current != pid and current not in seen:
            seen.add(current)
            try:
                group = Path(f"/proc/{current}/autogroup")
                if not group.read_text().rstrip().endswith(f"nice {nice}"):
                    group.write_text(str(nice))
            except OSError:
                continue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-diagnose"))
    parser.add_argument("--models", type=lambda s: s.split(","), default=list(MODELS))
    parser.add_argument("--world-sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=[2, 3])
    # the hang kinds (``ddpprof hang``'s, tested in tests/test_hang_recorded.py) last until
    # their collective timeout each: named with --kinds only
    parser.add_argument("--kinds", type=lambda s: s.split(","), default=[
        name for name, kind in FAULT_KINDS.items() if "hang" not in kind.expected_codes])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clean", type=int, default=4, help="clean runs per cell")
    parser.add_argument("--delay-share", type=float, default=0.5,
                        help="the sleeps and spins, as a share of the cell's clean step")
    parser.add_argument("--op-us", type=float, default=20.0,
                        help="host_bound: what one tiny op costs, µs (profiled, the gaps "
                             "between ops included)")
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--nice", type=int, default=0,
                        help="run at this niceness, and its session's autogroup too (negative, "
                             "as root: the recordings take the CPU before other work on a "
                             "shared machine)")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--analyze-only", action="store_true",
                        help="record nothing: diagnose the runs already there")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if args.nice:
        prioritise(args.nice)
    started = time.time()
    loads = [os.getloadavg()[0]]
    planned = plan(args)
    step_ms: dict[str, float | None] = {}
    errors: dict[str, str] = {}
    if not args.analyze_only:
        for index, run in enumerate(planned, 1):
            folder = args.out / run.cell / run.name
            error = record(run, folder, step_ms.get(run.cell), args)
            loads.append(os.getloadavg()[0])
            if error:
                errors[f"{run.cell}/{run.name}"] = error
            elif run.kind == "none" and step_ms.get(run.cell) is None:
                step_ms[run.cell] = clean_step_ms(folder)
            print(f"[{index}/{len(planned)}] {run.cell}/{run.name}"
                  f"{': ' + error if error else ''}", file=sys.stderr, flush=True)
    recorded_s = time.time() - started
    outcomes = []
    for run in planned:
        folder = args.out / run.cell / run.name
        if not complete(folder):
            errors.setdefault(f"{run.cell}/{run.name}", "not recorded")
            continue
        outcomes.append(judge(run, folder, args))
        if outcomes[-1].error:    # counted as diagnosed wrong, and listed
            errors[f"{run.cell}/{run.name}"] = outcomes[-1].error
    lines = [f"machine: {machine()}", f"recording: {recorded_s / 60:.1f} min at niceness "
             f"{os.nice(0)}, 1-minute load average median {statistics.median(loads):.2f}, "
             f"max {max(loads):.2f}", "",
             *summary(outcomes), "", "Confusion (kind against top finding):", "",
             *confusion(outcomes)]
    if errors:
        lines += ["", f"{len(errors)} run(s) not diagnosed:",
                  *(f"  {name}: {error}" for name, error in errors.items())]
    print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))


if __name__ == "__main__":
    main()
