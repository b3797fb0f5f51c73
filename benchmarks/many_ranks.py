"""Benchmark ``ddpprof analyze`` on many rank traces: its peak memory must stay bounded by
``--jobs`` x one trace's working set, however many ranks there are.

It tiles ``--fixture`` (as ``analyze_vs_hta.py`` does) into one trace of about ``--rank-mb``
MiB, writes it once per rank as ``rank-<r>.json`` with that rank's ``distributedInfo``, and
for each count in ``--ranks`` times, side by side in one run, each in its own fresh process
tree (wall time, CPU time, peak PSS summed over the tree):

* ddpprof: ``python -m ddpprof.cli analyze <folder> --jobs J --json <tmpfile>``
* HTA: ``TraceAnalysis(trace_dir=<folder>)``, temporal breakdown and comm/comp overlap
  (``--skip-hta`` leaves it out: it takes minutes at 64 ranks).

How to run, from the repository root::

    python benchmarks/many_ranks.py                       # 16, 32, 64 ranks of ~30 MB, --jobs 2
    python benchmarks/many_ranks.py --ranks 64 --skip-hta

It needs about 2 GB of disk for 64 ranks and, for HTA, several GB of memory.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze_vs_hta import (  # a sibling script, not a package
    DEFAULT_FIXTURE,
    HTA_CHILD,
    MIB,
    REPO_ROOT,
    Measurement,
    load_fixture,
    measure,
    pick_copies,
    write_trace,
)


def build(fixture: Path, rank_mb: float, ranks: int, folder: Path) -> int:
    """Write ``ranks`` copies of one tiled trace, each naming its own rank; their size."""
    fx = load_fixture(fixture)
    copies = pick_copies(fx, int(rank_mb * MIB), 0)
    marker = {"rank": -12345, "world_size": -54321}
    fx.header["distributedInfo"] = {**fx.header.get("distributedInfo", {}), **marker}
    if "distributedInfo" not in fx.key_order:
        fx.key_order.insert(0, "distributedInfo")
    text = io.StringIO()
    write_trace(fx, copies, 1000.0, text)
    body = text.getvalue()
    for rank in range(ranks):
        own = body.replace('"rank": -12345', f'"rank": {rank}', 1).replace(
            '"world_size": -54321', f'"world_size": {ranks}', 1)
        (folder / f"rank-{rank}.json").write_text(own)
    return len(body)


def line(name: str, m: Measurement) -> str:
    state = "" if m.returncode == 0 else f"  FAILED (exit {m.returncode})"
    return (f"  {name:8s} {m.wall_s:8.2f} s wall {m.cpu_s:8.2f} s CPU "
            f"{m.peak_mib:8.0f} MiB peak{state}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    p.add_argument("--ranks", default="16,32,64", help="Comma-separated rank counts.")
    p.add_argument("--rank-mb", type=float, default=30.0, help="Size of one rank's trace, MiB.")
    p.add_argument("--jobs", type=int, default=2, help="ddpprof analyze --jobs.")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--skip-hta", action="store_true")
    args = p.parse_args(argv)
    counts = sorted(int(c) for c in args.ranks.split(","))
    failed = False
    rows = []
    with tempfile.TemporaryDirectory(prefix="many_ranks-") as tmp:
        scratch = Path(tmp)
        folder = scratch / "run"
        folder.mkdir()
        size = build(args.fixture, args.rank_mb, max(counts), folder)
        print(f"{max(counts)} rank traces of {size / MIB:.1f} MiB from {args.fixture}")
        for count in counts:
            # a folder with exactly ``count`` ranks, as hard links to the files written once
            run = scratch / f"ranks-{count}"
            run.mkdir()
            for rank in range(count):
                (run / f"rank-{rank}.json").hardlink_to(folder / f"rank-{rank}.json")
            print(f"{count} ranks:", flush=True)
            ddp = measure([args.python, "-m", "ddpprof.cli", "analyze", str(run), "--jobs",
                           str(args.jobs), "--quiet", "--json", str(scratch / "out.json")],
                          REPO_ROOT, sample_memory=True)
            print(line("ddpprof", ddp), flush=True)
            failed |= ddp.returncode != 0
            hta = None
            if not args.skip_hta:
                hta = measure([args.python, "-c", HTA_CHILD, str(run)], REPO_ROOT,
                              sample_memory=True)
                print(line("HTA", hta), flush=True)
                failed |= hta.returncode != 0
            rows.append((count, ddp, hta))
    print(f"\n| ranks | ddpprof wall s | CPU s | peak MiB | HTA wall s | CPU s | peak MiB | "
          f"speed | memory |  (--jobs {args.jobs})")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for count, ddp, hta in rows:
        if hta is None:
            print(f"| {count} | {ddp.wall_s:.1f} | {ddp.cpu_s:.1f} | {ddp.peak_mib:.0f} "
                  "| | | | | |")
            continue
        print(f"| {count} | {ddp.wall_s:.1f} | {ddp.cpu_s:.1f} | {ddp.peak_mib:.0f} | "
              f"{hta.wall_s:.1f} | {hta.cpu_s:.1f} | {hta.peak_mib:.0f} | "
              f"{hta.wall_s / ddp.wall_s:.1f}x | {ddp.peak_mib / hta.peak_mib:.2f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
