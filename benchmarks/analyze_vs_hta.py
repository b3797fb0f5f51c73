"""Benchmark ``ddpprof analyze`` against HolisticTraceAnalysis (HTA) on one large trace.

What it measures
----------------
1. It builds a large synthetic Kineto trace by tiling a real one in time: the events of
   ``--fixture`` (default: the HTA NCCL fixture, rank 0, ~40k events) are repeated ``N`` times,
   copy ``k`` shifted by ``k * (span of the fixture + --gap-us)`` so copies never overlap.
   Per copy, ``ProfilerStep#N`` is renumbered so step numbers keep increasing, and the IDs that
   tie events together (``args.correlation``, ``args.External id``, ``args.Record function id``,
   ``args.Sequence number``, ``args.Ev Idx`` and flow events' ``id``) get the same per-copy
   offset, so every GPU kernel still meets its own CPU launch and nothing else. Metadata
   (``distributedInfo``, ``deviceProperties``, ``ph: M`` events, the profiler's own span and
   markers) is kept once. ``N`` is the smallest count that gives at least ``--min-mb`` MiB of
   uncompressed JSON and ``--min-events`` events (``--copies`` overrides it). The trace is
   written uncompressed as ``rank-0.json``, alone in its folder, because HTA reads every JSON
   file in ``trace_dir``.
2. It times, in the same run and each in its own fresh child process tree, so the peak memory
   is that tool's alone:

   * ddpprof: ``python -m ddpprof.cli analyze <folder> --json <tmpfile>``
   * HTA: ``TraceAnalysis(trace_dir=<folder>)`` followed by
     ``get_temporal_breakdown(visualize=False)`` and ``get_comm_comp_overlap(visualize=False)``
   * the floor: a plain ``msgspec.json.decode`` of the file into Python objects (what any
     decoder that builds one object per event must pay at least)

   Wall time is the child's whole life (interpreter start, imports, parsing, analysis; the
   checkouts' bytecode compiled first, as an installed package's is); peak
   memory is the largest sampled proportional set size (PSS) summed over the child and every
   process it starts, so ddpprof's forked decoding workers are charged to it. Times and peaks
   come from separate runs: reading a process tree's PSS every 10 ms walks its page tables and
   takes CPU from it (about a tenth of ddpprof's one-second run on 2 cores), so the timed runs
   are not watched. With ``--repeats R`` each tool is timed R times, the order alternating,
   then its memory is sampled in one more run; the minimum time per tool is reported.
3. It prints both times and peaks, the speed ratio HTA / ddpprof (target >= 20x), the memory
   ratio ddpprof / HTA (target <= 0.4), and rank 0's idle / compute / non-compute / overlap
   shares from both tools, side by side, so a reader can check that they agree.
4. With ``--compare-with DIR`` (another checkout of ddpprof, such as the main branch), that
   ddpprof is timed too, in the same rounds, and its ``--json`` output is compared byte for
   byte with this one's: a change to the loader is measured side by side, on the same machine
   in the same minutes, and shown to keep the output.

How to run
----------
From the repository root, in an environment with ddpprof and HTA installed::

    python benchmarks/analyze_vs_hta.py                      # build in a temp folder, run once
    python benchmarks/analyze_vs_hta.py --repeats 3          # min of 3 runs per tool
    python benchmarks/analyze_vs_hta.py --out-dir /tmp/big   # keep the trace (reused if there)
    python benchmarks/analyze_vs_hta.py --copies 5           # a smaller trace, for a quick look
    python benchmarks/analyze_vs_hta.py --compact            # compact JSON, no line breaks
    python benchmarks/analyze_vs_hta.py --fixture b200       # tile another fixture
    python benchmarks/analyze_vs_hta.py --compare-with /tmp/main   # beside another checkout
    python benchmarks/analyze_vs_hta.py --skip-memory        # times only, no memory round
    python benchmarks/analyze_vs_hta.py --repeats 3 \
        --folder tests/fixtures/real-traces/param-dlrm-8rank-alltoall   # a real 8-rank set

``--fixture`` takes a path or one of the names of :data:`FIXTURES`: ``nccl`` (the default: the
HTA NCCL fixture, GPU-heavy), ``b200`` (TraceLens' B200 eager trace: Python functions), and
``cpu-ops`` (HTA's two-rank fixture, rank 0: half its events CPU ops, with names of 88
characters on average and 6 arguments each).

It needs a few GB of memory (HTA holds the whole trace in pandas) and a few minutes.
The exit status is 0 when both tools succeeded, 1 otherwise; missing a target is only reported.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

REPO_ROOT = Path(__file__).resolve().parent.parent
_FIXTURES_DIR = REPO_ROOT / "tests" / "fixtures"
FIXTURES = {
    "nccl": _FIXTURES_DIR / "hta-gpu" / "nccl-data" / "rank-0.json.gz",
    "b200": _FIXTURES_DIR / "real-traces" / "tracelens-b200-eager-ws8" / "eager_trace.json.gz",
    "cpu-ops": _FIXTURES_DIR / "hta-gpu" / "two-rank" / "rank-0.json.gz",
}
DEFAULT_FIXTURE = FIXTURES["nccl"]
TRACE_NAME = "rank-0.json"
MIB = 1 << 20

# Integer args that link events to each other; every copy offsets all of them by one amount.
ID_ARGS = ("correlation", "External id", "Record function id", "Sequence number", "Ev Idx")
FLOW_PHASES = frozenset({"s", "t", "f"})
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

SPEED_TARGET = 20.0  # HTA time / ddpprof time, at least
MEMORY_TARGET = 0.4  # ddpprof peak / HTA peak, at most
SHARES = ("idle_pct", "compute_pct", "non_compute_pct", "overlap_pct")

MSGSPEC_CHILD = """
import sys, msgspec
with open(sys.argv[1], "rb") as f:
    msgspec.json.decode(f.read())
"""
HTA_RESULT_TAG = "HTA_RESULT "
HTA_CHILD = f"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
temporal = a.get_temporal_breakdown(visualize=False)
overlap = a.get_comm_comp_overlap(visualize=False)
t3 = time.perf_counter()
t = temporal[temporal["rank"] == 0].iloc[0]
o = overlap[overlap["rank"] == 0].iloc[0]
print({HTA_RESULT_TAG!r} + json.dumps({{
    "idle_pct": float(t["idle_time_pctg"]),
    "compute_pct": float(t["compute_time_pctg"]),
    "non_compute_pct": float(t["non_compute_time_pctg"]),
    "overlap_pct": float(o["comp_comm_overlap_pctg"]),
    "import_s": t1 - t0, "load_s": t2 - t1, "analyze_s": t3 - t2,
}}), flush=True)
"""


# --------------------------------------------------------------------------- trace building


@dataclass
class Fixture:
    """A loaded Kineto trace, its events split into tiled ones and ones kept once."""

    header: dict[str, Any]  # every top-level key but traceEvents, in file order
    key_order: list[str]
    tiled: list[dict[str, Any]]
    once: list[dict[str, Any]]
    start_us: float
    end_us: float
    id_stride: int  # > every ID in the fixture
    step_stride: int  # ProfilerStep numbers per copy


def _is_global(event: dict[str, Any]) -> bool:
    """Metadata and the profiler's own bookkeeping (string pids): emitted once, not tiled."""
    return event.get("ph") == "M" or isinstance(event.get("pid"), str)


def load_fixture(path: Path) -> Fixture:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    events: list[dict[str, Any]] = doc["traceEvents"]
    tiled = [e for e in events if not _is_global(e)]
    once = [e for e in events if _is_global(e)]
    timed = [e for e in events if "ts" in e]
    start = min(float(e["ts"]) for e in timed)
    end = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed)
    max_id = 0
    steps: list[int] = []
    for e in tiled:
        if e.get("ph") in FLOW_PHASES and isinstance(e.get("id"), int):
            max_id = max(max_id, e["id"])
        for key in ID_ARGS:
            value = (e.get("args") or {}).get(key)
            if isinstance(value, int):
                max_id = max(max_id, value)
        m = STEP_RE.match(str(e.get("name", "")))
        if m:
            steps.append(int(m.group(1)))
    if not steps:  # a trace recorded without a schedule: nothing to renumber
        steps = [0]
    header = {k: v for k, v in doc.items() if k != "traceEvents"}
    return Fixture(header=header, key_order=list(doc), tiled=tiled, once=once, start_us=start,
                   end_us=end, id_stride=10 ** len(str(max_id)),
                   step_stride=max(steps) - min(steps) + 1)


def shift_event(e: dict[str, Any], k: int, period_us: float, fx: Fixture) -> dict[str, Any]:
    """Copy ``k`` of event ``e``: shifted in time, steps renumbered, IDs offset."""
    if k == 0:
        return e
    out = dict(e)
    if "ts" in out:
        out["ts"] = round(out["ts"] + k * period_us, 3)
    id_offset = k * fx.id_stride
    if out.get("ph") in FLOW_PHASES and "id" in out:
        if not isinstance(out["id"], int):
            raise SystemExit(f"flow event with a non-integer id: {out!r}")
        out["id"] += id_offset
    args = out.get("args")
    if args and any(isinstance(args.get(key), int) for key in ID_ARGS):
        args = dict(args)
        for key in ID_ARGS:
            if isinstance(args.get(key), int):
                args[key] += id_offset
        out["args"] = args
    m = STEP_RE.match(str(out.get("name", "")))
    if m:
        out["name"] = f"ProfilerStep#{int(m.group(1)) + k * fx.step_stride}"
    return out


def once_events(fx: Fixture, copies: int, period_us: float) -> Iterator[dict[str, Any]]:
    """Events kept once; the profiler's span and its end marker stretched to cover all copies."""
    new_end = fx.end_us + (copies - 1) * period_us
    for e in fx.once:
        if e.get("ph") == "X" and "dur" in e:
            e = {**e, "dur": round(new_end - float(e["ts"]), 3)}
        elif e.get("ph") == "i" and math.isclose(float(e.get("ts", 0)), fx.end_us):
            e = {**e, "ts": round(new_end, 3)}
        yield e


def _event_line(e: dict[str, Any]) -> str:
    return "  " + json.dumps(e)


def _compact(e: dict[str, Any]) -> str:
    return json.dumps(e, separators=(",", ":"))


def pick_copies(fx: Fixture, min_bytes: int, min_events: int, compact: bool = False) -> int:
    line = _compact if compact else _event_line
    per_copy_bytes = sum(len(line(e)) + 2 for e in fx.tiled)
    fixed_bytes = sum(len(line(e)) + 2 for e in fx.once) + len(json.dumps(fx.header))
    by_size = math.ceil(max(0, min_bytes - fixed_bytes) / per_copy_bytes)
    by_count = math.ceil(max(0, min_events - len(fx.once)) / len(fx.tiled))
    return max(1, by_size, by_count)


def write_trace(fx: Fixture, copies: int, gap_us: float, out: TextIO,
                compact: bool = False) -> int:
    """Write the tiled trace, Kineto style (one event per line), or as compact JSON (no line
    breaks or blanks between events); return the event count."""
    period = float(math.ceil(fx.end_us - fx.start_us + gap_us))  # whole us: keeps ts fractions
    line, comma = (_compact, ",") if compact else (_event_line, ",\n")
    out.write("{\n")
    n = 0
    for i, key in enumerate(fx.key_order):
        sep = ",\n" if i < len(fx.key_order) - 1 else "\n"
        if key != "traceEvents":
            out.write(f"  {json.dumps(key)}: {json.dumps(fx.header[key])}{sep}")
            continue
        out.write('  "traceEvents": [\n')
        first = True
        for e in once_events(fx, copies, period):
            out.write(("" if first else comma) + line(e))
            first, n = False, n + 1
        for k in range(copies):
            out.write("" if first else comma)
            out.write(comma.join(line(shift_event(e, k, period, fx)) for e in fx.tiled))
            first, n = False, n + len(fx.tiled)
        out.write(f"\n  ]{sep}")
    out.write("}\n")
    return n


def verify_trace(path: Path) -> None:
    """Reload the trace and check step names and kernel correlations are unique (slow)."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    steps = [e["name"] for e in events if STEP_RE.match(str(e.get("name", "")))]
    corr = [e["args"]["correlation"] for e in events if e.get("cat") == "kernel"]
    ok = len(set(steps)) == len(steps) and len(set(corr)) == len(corr)
    print(f"verify: {len(steps)} ProfilerSteps, {len(corr)} kernels, unique: {ok}")
    if not ok:
        raise SystemExit("verify: duplicate ProfilerStep names or kernel correlations")


# --------------------------------------------------------------------------- measuring


@dataclass
class Measurement:
    wall_s: float
    cpu_s: float  # user + system time of the child
    peak_mib: float | None  # None where memory was not sampled
    returncode: int
    stdout: str
    stderr: str


@dataclass
class ToolRuns:
    name: str
    runs: list[Measurement] = field(default_factory=list)          # timed
    memory_runs: list[Measurement] = field(default_factory=list)   # memory sampled
    shares: dict[str, float] | None = None
    extra: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    output: bytes | None = None                # ddpprof's --json document, the last one

    @property
    def ok(self) -> list[Measurement]:
        return [m for m in self.runs if m.returncode == 0]

    def add(self, measurement: Measurement, sampled: bool) -> Measurement:
        (self.memory_runs if sampled else self.runs).append(measurement)
        return measurement

    @property
    def peak_mib(self) -> float | None:
        peaks = [m.peak_mib for m in self.memory_runs if m.returncode == 0 and m.peak_mib]
        return min(peaks) if peaks else None


def _tree_pss_kib(root: int) -> int:
    """Proportional set size of ``root`` and all its descendants, in KiB. PSS divides pages that
    processes share (a parent's buffer read by forked workers) among them, so the sum is the
    tree's real footprint; a sum of RSS would count shared pages once per process."""
    total, pending = 0, [root]
    while pending:
        pid = pending.pop()
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                total += next(int(line.split()[1]) for line in rollup
                              if line.startswith("Pss:"))
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    pending += [int(c) for c in children.read().split()]
        except (OSError, StopIteration, ValueError):
            continue  # the process ended while we looked
    return total


def measure(cmd: list[str], cwd: Path, sample_memory: bool) -> Measurement:
    """Run ``cmd`` in a fresh process: wall time, CPU time (its own and its waited-for
    children's) and, with ``sample_memory``, the peak memory of its whole process tree (PSS,
    sampled every 10 ms), so a tool that works in several processes is charged for all of
    them."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        peak_kib = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG if sample_memory else 0)
            if pid:
                break
            peak_kib = max(peak_kib, _tree_pss_kib(proc.pid))
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        cpu = usage.ru_utime + usage.ru_stime
        return Measurement(wall, cpu, peak_kib / 1024 if sample_memory else None,
                           proc.returncode, out.read(), err.read())


def run_ddpprof(python: str, folder: Path, scratch: Path, tool: ToolRuns,
                sample_memory: bool, checkout: Path = REPO_ROOT) -> Measurement:
    """``ddpprof analyze`` of the checkout ``checkout`` (run from there, so that its code is
    the one imported)."""
    json_out = scratch / f"{tool.name}.json"
    json_out.unlink(missing_ok=True)
    m = tool.add(measure([python, "-m", "ddpprof.cli", "analyze", str(folder), "--json",
                          str(json_out)], checkout, sample_memory), sample_memory)
    if m.returncode != 0:
        tool.error = f"exit {m.returncode}\n{m.stderr.strip() or m.stdout.strip()}"
        return m
    tool.output = json_out.read_bytes()
    doc = json.loads(tool.output)
    rank0 = next(r for run in doc["runs"] for r in run["per_rank"] if r["rank"] == 0)
    # a share without meaning (overlap where nothing communicates) is null in the JSON
    tool.shares = {key: math.nan if rank0[key] is None else float(rank0[key]) for key in SHARES}
    return m


def run_msgspec(python: str, trace: Path, tool: ToolRuns, sample_memory: bool
                ) -> Measurement:
    """The floor: one plain ``msgspec.json.decode`` of the file into Python objects."""
    m = tool.add(measure([python, "-c", MSGSPEC_CHILD, str(trace)], REPO_ROOT, sample_memory),
                 sample_memory)
    if m.returncode != 0:
        tool.error = f"exit {m.returncode}\n{m.stderr.strip()[-4000:]}"
    return m


def run_hta(python: str, folder: Path, tool: ToolRuns, sample_memory: bool) -> Measurement:
    m = tool.add(measure([python, "-c", HTA_CHILD, str(folder)], REPO_ROOT, sample_memory),
                 sample_memory)
    lines = [ln for ln in m.stdout.splitlines() if ln.startswith(HTA_RESULT_TAG)]
    if m.returncode != 0 or not lines:
        tool.error = f"exit {m.returncode}\n{m.stderr.strip()[-4000:]}"
        return m
    result = json.loads(lines[-1][len(HTA_RESULT_TAG):])
    tool.shares = {key: result[key] for key in SHARES}
    phases = {key: result[key] for key in ("import_s", "load_s", "analyze_s")}
    tool.extra = {k: min(v, tool.extra.get(k, v)) for k, v in phases.items()}
    return m


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--fixture", type=lambda text: FIXTURES.get(text, Path(text)),
                   default=DEFAULT_FIXTURE,
                   help="Kineto trace (.json or .json.gz) to tile, or one of "
                        f"{', '.join(FIXTURES)}.")
    p.add_argument("--compare-with", type=Path, metavar="DIR",
                   help="Another checkout of ddpprof (the main branch, say) to time in the same "
                        "rounds; its --json output must be the same, byte for byte.")
    p.add_argument("--out-dir", type=Path,
                   help="Keep the big trace here (reused if already there with the same size "
                        "parameters; default: a temporary folder, removed at the end).")
    p.add_argument("--copies", type=int, help="Tile this many copies (default: just enough "
                                              "for --min-mb and --min-events).")
    p.add_argument("--min-mb", type=float, default=200.0, help="Smallest trace, MiB.")
    p.add_argument("--min-events", type=int, default=800_000, help="Fewest events.")
    p.add_argument("--gap-us", type=float, default=1000.0,
                   help="Gap between copies, in microseconds.")
    p.add_argument("--repeats", type=int, default=1, help="Runs per tool (order alternates).")
    p.add_argument("--python", default=sys.executable, help="Interpreter for the children.")
    p.add_argument("--compact", action="store_true",
                   help="Write the trace as compact JSON (no line breaks between events).")
    p.add_argument("--skip-hta", action="store_true", help="Time ddpprof only.")
    p.add_argument("--skip-memory", action="store_true",
                   help="Leave out the last round, which samples each tool's peak memory (HTA's "
                        "run is minutes on a busy machine).")
    p.add_argument("--folder", type=Path, metavar="DIR",
                   help="Time both tools on this folder of traces as it is (a real multi-rank "
                        "set: every rank's trace; nothing is tiled, no msgspec floor).")
    p.add_argument("--verify", action="store_true",
                   help="Reload the built trace and check steps and correlations are unique.")
    args = p.parse_args(argv)
    if args.repeats < 1 or (args.copies is not None and args.copies < 1):
        p.error("--repeats and --copies must be at least 1")
    return args


def _fmt_time(tool: ToolRuns) -> str:
    ok = tool.ok
    if not ok:
        return "failed"
    times = ", ".join(f"{m.wall_s:.2f}" for m in tool.runs)
    cpu = min(m.cpu_s for m in ok)
    return f"{min(m.wall_s for m in ok):8.2f} s   (runs: {times}; min CPU time {cpu:.2f} s)"


def report(ddp: ToolRuns, hta: ToolRuns, floor: ToolRuns, other: ToolRuns | None = None
           ) -> None:
    print("\n== results ==")
    for tool in (ddp, other, hta, floor):
        if tool is None or not tool.runs:
            continue
        print(f"{tool.name:8s} time   {_fmt_time(tool)}")
        if tool.peak_mib is not None:
            print(f"{tool.name:8s} peak   {tool.peak_mib:8.0f} MiB (a separate run, sampled)")
    if hta.extra:
        print("HTA phases (min): " + ", ".join(f"{k} {v:.2f} s" for k, v in hta.extra.items()))
    if other is not None and other.ok and hta.ok:
        speed = min(m.wall_s for m in hta.ok) / min(m.wall_s for m in other.ok)
        memory = f", memory {other.peak_mib / hta.peak_mib:.2f}" if (
            other.peak_mib and hta.peak_mib) else ""
        print(f"{other.name}: speed HTA / it = {speed:6.1f}x{memory}")
    if other is not None and other.output is not None and ddp.output is not None:
        same = "identical" if other.output == ddp.output else "DIFFERENT"
        print(f"--json output of ddpprof and {other.name}: {same}")
    if ddp.ok and hta.ok:
        speed = min(m.wall_s for m in hta.ok) / min(m.wall_s for m in ddp.ok)
        cpu_speed = min(m.cpu_s for m in hta.ok) / min(m.cpu_s for m in ddp.ok)
        print(f"speed  HTA / ddpprof   = {speed:6.1f}x   target >= {SPEED_TARGET:g}x   "
              f"{'met' if speed >= SPEED_TARGET else 'MISSED'}   (CPU time ratio "
              f"{cpu_speed:.1f}x)")
    if ddp.peak_mib and hta.peak_mib:
        memory = ddp.peak_mib / hta.peak_mib
        print(f"memory ddpprof / HTA   = {memory:6.2f}    target <= {MEMORY_TARGET:g}    "
              f"{'met' if memory <= MEMORY_TARGET else 'MISSED'}")
    if ddp.ok and floor.ok:
        wall = min(m.wall_s for m in floor.ok) / min(m.wall_s for m in ddp.ok)
        cpu = min(m.cpu_s for m in floor.ok) / min(m.cpu_s for m in ddp.ok)
        print(f"floor  msgspec.json.decode / ddpprof analyze = {wall:.2f}x wall, "
              f"{cpu:.2f}x CPU time (above 1: ddpprof's whole analysis beats a plain decode)")
    if ddp.shares or hta.shares:
        print("\nrank 0 shares (%)     " + "".join(f"{s:>16s}" for s in SHARES))
        for tool in (ddp, hta):
            if tool.shares:
                print(f"  {tool.name:20s}" + "".join(f"{tool.shares[s]:16.2f}" for s in SHARES))
        if ddp.shares and hta.shares:
            print(f"  {'difference':20s}"
                  + "".join(f"{ddp.shares[s] - hta.shares[s]:16.2f}" for s in SHARES))
    for tool in (ddp, other, hta, floor):
        if tool is not None and tool.error:
            print(f"\n{tool.name} FAILED: {tool.error}")


def compile_bytecode(python: str, checkout: Path) -> None:
    """Compile a checkout's ``ddpprof`` to bytecode first, as ``pip install`` does for an
    installed package (HTA's is compiled in site-packages): where ``PYTHONDONTWRITEBYTECODE``
    is set, an editable checkout would otherwise compile its modules on every run (0.1 to
    0.2 s of each run here)."""
    subprocess.run([python, "-m", "compileall", "-q", str(checkout / "ddpprof")], check=True,
                   stdout=subprocess.DEVNULL)


def build(args: argparse.Namespace, folder: Path) -> Path:
    t0 = time.perf_counter()
    fx = load_fixture(args.fixture)
    copies = args.copies or pick_copies(fx, int(args.min_mb * MIB), args.min_events,
                                          args.compact)
    trace = folder / TRACE_NAME
    stamp = folder / ".analyze_vs_hta.stamp"  # not .json: HTA reads those
    key = {"fixture": str(args.fixture.resolve()), "copies": copies, "gap_us": args.gap_us,
           "compact": args.compact}
    if trace.exists() and stamp.exists() and json.loads(stamp.read_text()).get("key") == key:
        n_events = json.loads(stamp.read_text())["events"]
        print(f"reusing {trace}")
    else:
        stamp.unlink(missing_ok=True)
        with open(trace, "w") as f:
            n_events = write_trace(fx, copies, args.gap_us, f, args.compact)
        stamp.write_text(json.dumps({"key": key, "events": n_events}))
    size = trace.stat().st_size
    span_s = (fx.end_us - fx.start_us) / 1e6
    print(f"fixture  {args.fixture}: {len(fx.tiled) + len(fx.once):,} events, "
          f"span {span_s:.3f} s, ProfilerSteps per copy {fx.step_stride}")
    print(f"trace    {trace}: {copies} copies, {n_events:,} events, "
          f"{size:,} bytes ({size / MIB:.1f} MiB, {size / 1e6:.1f} MB), "
          f"built in {time.perf_counter() - t0:.1f} s")
    if size < args.min_mb * MIB or n_events < args.min_events:
        print("note: below --min-mb / --min-events (--copies given?)")
    if args.verify:
        verify_trace(trace)
    return trace


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="analyze_vs_hta-") as tmp:
        scratch = Path(tmp)
        if args.folder is not None:
            folder, trace = args.folder.resolve(), args.folder.resolve()
            size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
            print(f"folder   {folder}: {len(list(folder.glob('*.json*')))} traces, "
                  f"{size / 1e6:.1f} MB as stored")
        else:
            folder = args.out_dir or scratch / "trace"
            folder.mkdir(parents=True, exist_ok=True)
            others = [p.name for p in folder.iterdir() if p.is_file() and p.name != TRACE_NAME
                      and p.suffix in (".json", ".gz")]
            if others:
                raise SystemExit(f"{folder} holds other traces ({', '.join(others)}); HTA "
                                 "would read them too: use an empty --out-dir")
            trace = build(args, folder)
        for checkout in (REPO_ROOT, *([args.compare_with.resolve()] if args.compare_with
                                      else [])):
            compile_bytecode(args.python, checkout)
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"machine  {os.cpu_count()} CPUs, load average {load} (other load skews wall "
              "times; CPU times are printed too)")
        ddp, hta, floor = ToolRuns("ddpprof"), ToolRuns("HTA"), ToolRuns("msgspec")
        other = ToolRuns("compared") if args.compare_with else None
        runners = {
            "ddpprof": lambda sample: run_ddpprof(args.python, folder, scratch, ddp, sample),
            "HTA": lambda sample: run_hta(args.python, folder, hta, sample),
            "msgspec": lambda sample: run_msgspec(args.python, trace, floor, sample)}
        if other is not None:
            print(f"compared {args.compare_with.resolve()}: timed in the same rounds")
            runners["compared"] = lambda sample: run_ddpprof(
                args.python, folder, scratch, other, sample, args.compare_with.resolve())
        names = [n for n in ("ddpprof", "compared", "HTA", "msgspec")
                 if n in runners and not (n == "HTA" and args.skip_hta)
                 and not (n == "msgspec" and args.folder is not None)]
        for i in range(args.repeats + (0 if args.skip_memory else 1)):
            sample = i == args.repeats          # the last round samples memory
            for name in names if i % 2 == 0 else names[::-1]:
                label = "memory" if sample else f"time {i + 1}/{args.repeats}"
                print(f"run {label}: {name} ...", flush=True)
                m = runners[name](sample)
                peak = f", peak {m.peak_mib:.0f} MiB" if m.peak_mib is not None else ""
                print(f"  {m.wall_s:.2f} s wall, {m.cpu_s:.2f} s CPU{peak}, exit "
                      f"{m.returncode}", flush=True)
        report(ddp, hta, floor, other)
        failed = not ddp.ok or (not floor.ok and args.folder is None) or (
            not args.skip_hta and not hta.ok) or (
            other is not None and (not other.ok or other.output != ddp.output))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
