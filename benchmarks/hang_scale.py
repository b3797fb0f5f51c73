"""Benchmark ``ddpprof hang`` on many ranks' Flight Recorder dumps: time and peak memory must
grow with the dumps' bytes, not faster, and the planted culprit must be named at every size.

It writes synthetic dumps in PyTorch's own format (the pickle of ``_dump_fr_trace``) for a
data-parallel x tensor-parallel job (tensor-parallel groups of 8, data-parallel groups across
them, and the world), each rank's ring buffer full (``--entries``, 2,000 by default: PyTorch's
suggested size, so the buffers have wrapped) with Python stacks of ``--frames`` frames, and
one rank that stopped issuing collectives in the last step: its tensor-parallel peers wait in
an all-reduce it never issued. Then, for each count in ``--ranks``, side by side in one run,
each in a fresh process: ``python -m ddpprof.cli hang <folder> --json <file>``, its wall time,
CPU time and peak memory (PSS of its process tree), and whether it named the planted rank,
group and sequence id.

How to run, from the repository root::

    python benchmarks/hang_scale.py                    # 128 and 1,024 ranks
    python benchmarks/hang_scale.py --ranks 64,256 --entries 500

1,024 ranks of 2,000 entries take about 0.5 GB of disk (in a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze_vs_hta import REPO_ROOT, Measurement, measure  # a sibling script, not a package

TP = 8
#: Per step, each rank: an all-gather and a reduce-scatter per layer on its data-parallel
#: group, two all-reduces per layer on its tensor-parallel group, one on the world.
LAYERS = 4
TORCH = "/usr/lib/python3/site-packages/torch"


def frames(layer: int, kind: str, depth: int) -> list[dict[str, object]]:
    """A stack as Flight Recorder keeps it, innermost first: torch's frames, then the
    training code's."""
    inner = [{"name": kind, "filename": f"{TORCH}/distributed/distributed_c10d.py",
              "line": 3245},
             {"name": "wrapper", "filename": f"{TORCH}/distributed/c10d_logger.py", "line": 83},
             {"name": "forward", "filename": f"{TORCH}/nn/modules/module.py", "line": 1775}]
    outer = [{"name": f"layer{layer}", "filename": "/home/user/model.py", "line": 40 + layer},
             {"name": "train_step", "filename": "/home/user/train.py", "line": 120},
             {"name": "main", "filename": "/home/user/train.py", "line": 300}]
    return (inner + outer * depth)[:max(depth, 4)]


def step_ops(rank: int, world: int) -> list[tuple[str, str, str, list[list[int]]]]:
    """One step's collectives of ``rank``: (group name, description, op, input sizes)."""
    tp_group, dp_group = rank // TP, rank % TP
    ops = []
    for _layer in range(LAYERS):
        ops.append((f"dp{dp_group}", "mesh_dp", "all_gather", [[4096]]))
        ops.append((f"tp{tp_group}", "mesh_tp", "all_reduce", [[16, 512]]))
        ops.append((f"tp{tp_group}", "mesh_tp", "all_reduce", [[16, 512]]))
        ops.append((f"dp{dp_group}", "mesh_dp", "reduce_scatter", [[4096 * world // TP]]))
    ops.append(("0", "default_pg", "all_reduce", [[1]]))
    return ops


def dump(rank: int, world: int, steps: int, entries: int, depth: int, culprit: int
         ) -> dict[str, object]:
    seqs: dict[str, int] = {}
    records = []
    record_id = 0
    for step in range(steps):
        for index, (group, desc, op, sizes) in enumerate(step_ops(rank, world)):
            if step == steps - 1 and rank == culprit and index >= 1:
                break                  # the culprit stops after the last step's all-gather
            seqs[group] = seqs.get(group, 0) + 1
            records.append({
                "record_id": record_id, "pg_id": 0, "process_group": (group, desc),
                "collective_seq_id": seqs[group], "p2p_seq_id": 0, "op_id": record_id + 1,
                "profiling_name": f"nccl:{op}", "time_created_ns": 10**18 + record_id * 1000,
                "input_sizes": sizes, "input_dtypes": ["Float"], "output_sizes": sizes,
                "output_dtypes": ["Float"], "state": "completed", "retired": True,
                "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
                "timeout_ms": 600000, "is_p2p": False, "thread_name": "pt_main_thread",
                "thread_id": "1", "frames": frames(index // 4, op, depth)})
            record_id += 1
    kept = records[-entries:]
    if kept and kept[-1]["process_group"][0] != "0":
        kept[-1]["state"] = "started"         # waiting in it
    tp_group, dp_group = rank // TP, rank % TP
    config = {
        "0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))},
        f"tp{tp_group}": {"name": f"tp{tp_group}", "desc": "mesh_tp",
                          "ranks": str(list(range(tp_group * TP, tp_group * TP + TP)))},
        f"dp{dp_group}": {"name": f"dp{dp_group}", "desc": "mesh_dp",
                          "ranks": str(list(range(dp_group, world, TP)))}}
    return {"version": "2.10", "pg_config": config, "pg_status": {}, "entries": kept}


def write_dumps(folder: Path, world: int, entries: int, depth: int, culprit: int) -> int:
    steps = entries // len(step_ops(0, world)) + 3     # enough for the ring to wrap
    total = 0
    for rank in range(world):
        data = pickle.dumps(dump(rank, world, steps, entries, depth, culprit), protocol=4)
        (folder / f"nccl_trace_rank_{rank}").write_bytes(data)
        total += len(data)
    return total


def named_culprit(output: Path, culprit: int) -> str:
    document = json.loads(output.read_text())
    hang = document.get("hang") or {}
    ranks = [c["rank"] for c in hang.get("culprits", [])]
    group = hang.get("collective", {}).get("group")
    return "yes" if ranks == [culprit] and group == f"tp{culprit // TP}" else \
        f"NO ({ranks}, {group})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="128,1024")
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--frames", type=int, default=10)
    args = parser.parse_args()
    rows: list[tuple[int, float, Measurement, str]] = []
    for world in [int(n) for n in args.ranks.split(",")]:
        culprit = world * 3 // 4 + 1
        with tempfile.TemporaryDirectory(prefix="ddpprof-hang-") as scratch:
            folder = Path(scratch) / "dumps"
            folder.mkdir()
            size = write_dumps(folder, world, args.entries, args.frames, culprit)
            output = Path(scratch) / "hang.json"
            measured = measure([sys.executable, "-m", "ddpprof.cli", "hang", str(folder),
                                "--json", str(output), "--quiet"], REPO_ROOT, True)
            verdict = named_culprit(output, culprit) if measured.returncode == 0 else \
                f"exit {measured.returncode}: {measured.stderr.strip()[-200:]}"
            rows.append((world, size / 2**20, measured, verdict))
            print(f"{world} ranks written ({size / 2**20:,.0f} MiB); hang: "
                  f"{measured.wall_s:.1f} s", file=sys.stderr)
    base = rows[0]
    print(f"{'ranks':>6} {'dumps MiB':>10} {'wall s':>8} {'cpu s':>8} {'peak MiB':>9} "
          f"{'x ranks':>8} {'x wall':>7} {'x peak':>7}  culprit named")
    for world, mib, m, verdict in rows:
        print(f"{world:>6} {mib:>10,.0f} {m.wall_s:>8.1f} {m.cpu_s:>8.1f} "
              f"{m.peak_mib or 0:>9,.0f} {world / base[0]:>8.1f} {m.wall_s / base[2].wall_s:>7.1f} "
              f"{(m.peak_mib or 0) / (base[2].peak_mib or 1):>7.1f}  {verdict}")


if __name__ == "__main__":
    main()
