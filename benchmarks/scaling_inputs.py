"""Benchmark ddpprof on many runs, many steps and many process groups: the time per run, per
step and per group must stay flat (within 2x) as the input grows, i.e. the work is linear in
it. (Each time includes the process's start-up and the report's fixed part, so the time per
item falls a little as the input grows; work that grew faster than the input would make it
rise.)

Side by side in one run, each command in a fresh process (start-up included):

* many runs: a folder of N rankless traces (each a one-rank run of three small training
  steps on gloo, so that every run gets the bucket-cap advice), for each N of ``--runs``:
  ``ddpprof analyze FOLDER --json A.json --markdown M.md --html-out R.html`` (discovery,
  analysis, findings with the simulator's advice, every report), then ``ddpprof gate A.json
  --baseline A.json`` (N runs matched against N);
* many steps: one trace of S ProfilerSteps, for each S of ``--steps``: ``ddpprof analyze
  TRACE --per-step --json A.json`` and ``ddpprof simulate RUN`` (the analysis of every step
  and the replays of at most 16 of them: ``--world-size 2 --bucket-cap-mib 25`` and a given
  cost model);
* many steps on two ranks, for each S of ``--path-steps``: ``ddpprof critical-path RUN``
  (every step's graph across the ranks, and its critical path);
* many process groups: a two-rank NCCL-style run whose 1.2 × G collectives go through G
  groups (each named in the collectives' arguments), for each G of ``--groups``: ``ddpprof
  analyze RUN --json A.json`` and ``ddpprof diff RUN RUN2`` (the same run, slower).

How to run, from the repository root::

    python benchmarks/scaling_inputs.py                          # 1,000 to 10,000 runs;
                                                                 # 10,000 to 100,000 steps;
                                                                 # 5,000 and 50,000 steps on
                                                                 # two ranks; 1,000 to 10,000
                                                                 # groups
    python benchmarks/scaling_inputs.py --runs 100,400 --steps 1000,4000 \
        --path-steps 500,2000 --groups 500,2000                  # a quick look
    python benchmarks/scaling_inputs.py --only groups,path-steps # some tables only

It writes about 20 MB per 1,000 runs and 75 MB per 100,000 steps under a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MANIFEST = {"schema_version": 3, "status": "complete", "config": {
    "variant": "bucket_ddp_async", "nproc": 1, "backend": "gloo", "grad_accum": 1,
    "bucket_cap_mb": 25.0}}


def span(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op",
         **args: object) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def step_events(number: int, base: float, backward_us: float = 300, mm_us: float = 190
                ) -> list[dict[str, object]]:
    """A 1000 µs step of a bucketed gloo run: forward, a backward producing two gradients
    (1 KiB and 4 KiB, each all-reduced as it is ready: two sizes, so that a cost model can be
    fitted), the optimizer."""
    events = [span(f"ProfilerStep#{number}", base, 1000, cat="user_annotation"),
              span("aten::mm", base + 10, mm_us),
              span("autograd::engine::evaluate_function: MmBackward0", base + 200, backward_us)]
    for ready, numel, took in ((300, 256, 40), (500, 1024, 90)):
        dims = {"Input Dims": [[numel]], "Input type": ["float"]}
        events += [span("torch::autograd::AccumulateGrad", base + ready - 20, 20, **dims),
                   span("c10d::allreduce_", base + ready + 1, 2),
                   span("gloo:all_reduce", base + ready + 5, took, tid=9, **dims)]
    events.append(span("Optimizer.step#AdamW.step", base + 700, 100, cat="user_annotation"))
    return events


def training_step(number: int, base: float) -> list[str]:
    """:func:`step_events`, each event as compact JSON."""
    return [json.dumps(e, separators=(",", ":")) for e in step_events(number, base)]


def write_trace(path: Path, steps: int, distributed: bool) -> None:
    info = ',"distributedInfo":{"rank":0,"world_size":2,"backend":"gloo"}' if distributed \
        else ""
    with path.open("w") as out:
        out.write('{"traceEvents":[')
        for s in range(steps):
            out.write(("," if s else "") + ",".join(training_step(s, 1000.0 * s)))
        out.write("]" + info + "}")


def many_runs(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True)
    write_trace(folder / "model.json", 3, distributed=False)
    body = (folder / "model.json").read_bytes()
    for k in range(1, count):
        (folder / f"model-{k:05d}.json").write_bytes(body)
    return folder


def many_steps(folder: Path, steps: int) -> Path:
    folder.mkdir(parents=True)
    write_trace(folder / "rank0.json", steps, distributed=True)
    (folder / "run.json").write_text(json.dumps(MANIFEST))
    return folder


def two_rank_steps(folder: Path, steps: int) -> Path:
    """A two-rank run of ``steps`` :func:`step_events` steps (rank 1's backward slower)."""
    folder.mkdir(parents=True)
    for rank in (0, 1):
        with (folder / f"rank{rank}.json").open("w") as out:
            out.write('{"traceEvents":[')
            for s in range(steps):
                events = step_events(s, 1000.0 * s, backward_us=300 + 40 * rank)
                out.write(("," if s else "") + ",".join(
                    json.dumps(e, separators=(",", ":")) for e in events))
            out.write(f'],"distributedInfo":{{"rank":{rank},"world_size":2,'
                      '"backend":"gloo"}}')
    (folder / "run.json").write_text(json.dumps({**MANIFEST, "config": {
        **MANIFEST["config"], "nproc": 2, "world_size": 2}}))
    return folder


#: Steps of a many-groups run (the last one is dropped by the analysis).
GROUP_STEPS = 5


def many_groups(folder: Path, groups: int, slower_us: float = 0.0) -> Path:
    """Two NCCL-style ranks of :data:`GROUP_STEPS` steps whose collectives go through
    ``groups`` process groups named in their arguments, 1.2 × ``groups`` collectives over the
    analyzed steps; each step a GEMM kernel beside its collectives (``slower_us`` longer)."""
    folder.mkdir(parents=True)
    per_step = -(-groups * 6 // 5 // (GROUP_STEPS - 1))
    step_us = 3.0 * per_step + 200
    for rank in (0, 1):
        events: list[dict[str, object]] = []
        for s in range(GROUP_STEPS):
            base = s * step_us
            events.append(span(f"ProfilerStep#{s}", base, step_us, cat="user_annotation"))
            events.append({"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0,
                           "tid": 7, "ts": base + 5, "dur": 100 + slower_us,
                           "args": {"stream": 7, "correlation": 1 + 2 * s}})
            for j in range(per_step):
                k = s * per_step + j
                group = k % groups
                events.append({
                    "ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32",
                    "pid": 0, "tid": 20, "ts": base + 150 + 3 * j, "dur": 2,
                    "args": {"stream": 20, "correlation": 100_000 + k,
                             "Collective name": "allreduce", "In msg nelems": 1024,
                             "Out msg nelems": 1024, "dtype": "Float", "Seq": k,
                             "Process Group Name": str(10 + group),
                             "Process Group Description": f"group_{group}",
                             "Process Group Ranks": "[0, 1]", "Group size": 2}})
        (folder / f"rank{rank}.json").write_text(json.dumps({
            "traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 2,
                                                       "backend": "nccl"}},
            separators=(",", ":")))
    return folder


def timed(*args: str) -> float:
    """Wall seconds of ``ddpprof ARGS`` in a fresh process (which must succeed)."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "ddpprof.cli", *args], cwd=REPO_ROOT,
                            env={**os.environ, "CI": "true"}, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1):
        sys.exit(f"ddpprof {' '.join(args)} failed:\n{result.stderr[-2000:]}")
    return elapsed


def table(title: str, unit: str, rows: list[tuple[int, dict[str, float]]]) -> None:
    """Seconds and time per item for each size, and the spread of the time per item."""
    commands = list(rows[0][1])
    print(f"\n{title}")
    print(f"| {unit} | " + " | ".join(f"{c} s | {c} ms per {unit[:-1]}" for c in commands)
          + " |")
    print("| ---: |" + " ---: | ---: |" * len(commands))
    for size, seconds in rows:
        print(f"| {size:,} | " + " | ".join(f"{seconds[c]:.1f} | {1e3 * seconds[c] / size:.3f}"
                                           for c in commands) + " |")
    for command in commands:
        per = [seconds[command] / size for size, seconds in rows]
        print(f"{command}: time per {unit[:-1]} at the largest size / at the smallest = "
              f"{per[-1] / per[0]:.2f}; largest / smallest over all sizes = "
              f"{max(per) / min(per):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="1000,2000,5000,10000")
    parser.add_argument("--steps", default="10000,20000,50000,100000")
    parser.add_argument("--path-steps", default="5000,50000")
    parser.add_argument("--groups", default="1000,2000,5000,10000")
    parser.add_argument("--only", default="runs,steps,path-steps,groups",
                        help="the tables to measure")
    parser.add_argument("--jobs", default="2", help="analyze --jobs")
    args = parser.parse_args()
    only = set(args.only.split(","))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{platform.node()}: {cores} cores, {platform.machine()}, Python "
          f"{platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="ddpprof-scaling-") as tmp:
        root = Path(tmp)
        if "runs" in only:
            table("Many runs (rankless traces in one folder, one run each)", "runs",
                  [(count, runs_timed(root, count, args.jobs))
                   for count in sizes(args.runs)])
        if "steps" in only:
            table("Many steps (one trace)", "steps",
                  [(steps, steps_timed(root, steps, args.jobs)) for steps in sizes(args.steps)])
        if "path-steps" in only:
            table("Many steps on two ranks (critical-path)", "steps",
                  [(steps, {"critical-path": timed(
                      "critical-path", str(two_rank_steps(root / f"path-{steps}", steps)),
                      "--json", str(root / "c.json"))}) for steps in sizes(args.path_steps)])
        if "groups" in only:
            table("Many process groups (two ranks, 1.2 collectives per group)", "groups",
                  [(groups, groups_timed(root, groups, args.jobs))
                   for groups in sizes(args.groups)])


def sizes(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n]


def runs_timed(root: Path, count: int, jobs: str) -> dict[str, float]:
    folder = many_runs(root / f"runs-{count}", count)
    analysis = root / f"runs-{count}.json"
    return {"analyze": timed("analyze", str(folder), "--jobs", jobs, "--json", str(analysis),
                             "--markdown", str(root / "m.md"), "--html-out",
                             str(root / "r.html")),
            "gate": timed("gate", str(analysis), "--baseline", str(analysis), "--json",
                          str(root / "g.json"))}


def steps_timed(root: Path, steps: int, jobs: str) -> dict[str, float]:
    run = many_steps(root / f"steps-{steps}", steps)
    return {"analyze": timed("analyze", str(run), "--per-step", "--jobs", jobs, "--json",
                             str(root / "s.json")),
            "simulate": timed("simulate", str(run), "--world-size", "2", "--bucket-cap-mib",
                              "25", "--latency-us", "10", "--bandwidth-gbps", "1", "--json",
                              str(root / "p.json"))}


def groups_timed(root: Path, groups: int, jobs: str) -> dict[str, float]:
    run = many_groups(root / f"groups-{groups}" / "run", groups)
    slower = many_groups(root / f"groups-{groups}" / "run2", groups, slower_us=30)
    return {"analyze": timed("analyze", str(run), "--jobs", jobs, "--json",
                             str(root / "a.json")),
            "diff": timed("diff", str(run), str(slower), "--json", str(root / "d.json"))}

if __name__ == "__main__":
    main()
