"""How long ``ddpprof diff`` of two large traces takes against two ``ddpprof analyze`` runs (a
benchmark, not a test; target: the diff takes no longer than the two analyses).

Builds two traces as ``benchmarks/analyze_vs_hta.py`` does (a real fixture tiled in time to at
least ``--min-mb`` MiB each; the second with a different gap between copies, so the two
differ), then times, alternating, each in a fresh process: ``ddpprof analyze A --json``,
``ddpprof analyze B --json`` and ``ddpprof diff A B --json``; with ``--baseline-python``, also
``analyze A`` by another checkout's interpreter (``PYTHONPATH`` its root), to see what the
step attribution costs ``analyze``. Prints the minimum of ``--repeats`` runs of each and the
ratio diff / (analyze A + analyze B), in wall time and in CPU time (children included): on a
machine shared with other work the CPU time is the steadier of the two.

    python benchmarks/diff_speed.py [--out-dir /tmp/diffspeed] [--repeats 3]
        [--baseline-checkout /work/main]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import analyze_vs_hta as tiled  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-mb", type=float, default=200.0)
    parser.add_argument("--baseline-checkout", type=Path,
                        help="Also time analyze A with this checkout's code (the same "
                             "interpreter, PYTHONPATH its root).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="diff_speed-") as tmp:
        root = args.out_dir or Path(tmp)
        scratch = Path(tmp)
        folders = {}
        for name, gap in (("a", 1000.0), ("b", 5000.0)):
            folder = root / name
            folder.mkdir(parents=True, exist_ok=True)
            build_args = argparse.Namespace(
                fixture=tiled.DEFAULT_FIXTURE, copies=None, min_mb=args.min_mb,
                min_events=0, gap_us=gap, compact=False, verify=False)
            tiled.build(build_args, folder)
            folders[name] = folder
        python = sys.executable
        commands = {
            "analyze A": [python, "-m", "ddpprof.cli", "analyze", str(folders["a"]), "--json",
                          str(scratch / "a.json")],
            "analyze B": [python, "-m", "ddpprof.cli", "analyze", str(folders["b"]), "--json",
                          str(scratch / "b.json")],
            "diff A B": [python, "-m", "ddpprof.cli", "diff", str(folders["a"]),
                         str(folders["b"]), "--json", str(scratch / "diff.json")]}
        env = None
        if args.baseline_checkout:
            commands["analyze A (baseline checkout)"] = [
                python, "-c", "import sys; sys.argv[0] = 'ddpprof'; from ddpprof.cli import "
                "main; main()", "analyze", str(folders["a"]), "--json",
                str(scratch / "base.json")]
            env = str(args.baseline_checkout.resolve())
        times: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
        for repeat in range(args.repeats):
            order = list(commands) if repeat % 2 == 0 else list(commands)[::-1]
            for name in order:
                cwd = Path(env) if name.endswith("(baseline checkout)") else REPO
                result = tiled.measure(commands[name], cwd, sample_memory=False)
                if result.returncode != 0:
                    print(f"{name} failed: {result.stderr.strip()[-500:]}")
                    return 1
                times[name].append(result.wall_s)
                cpu[name].append(result.cpu_s)
                print(f"{name}: {result.wall_s:.2f} s wall, {result.cpu_s:.2f} s CPU",
                      flush=True)
        for label, found in (("wall", times), ("CPU", cpu)):
            best = {name: min(values) for name, values in found.items()}
            for name, value in best.items():
                print(f"min {label} {name}: {value:.2f} s")
            ratio = best["diff A B"] / (best["analyze A"] + best["analyze B"])
            print(f"{label}: diff / (analyze A + analyze B) = {ratio:.2f} (target <= 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
