"""Flight Recorder dumps written by hand for the tests, in PyTorch's own format (the pickle of
``torch._C._distributed_c10d._dump_fr_trace()``, version 2.10, as torch 2.13 writes it; or its
JSON, which holds no stacks)."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TORCH = "/venv/lib/python3.11/site-packages/torch/distributed"


def stack(line: int, api: str = "all_reduce", file: str = "/job/train.py") -> list[dict]:
    """A collective's stack, innermost first: torch's frames, then the training code's."""
    return [{"name": api, "filename": f"{TORCH}/distributed_c10d.py", "line": 3245},
            {"name": "wrapper", "filename": f"{TORCH}/c10d_logger.py", "line": 83},
            {"name": "step", "filename": file, "line": line},
            {"name": "main", "filename": file, "line": 200}]


@dataclass
class Op:
    op: str = "all_reduce"
    size: int = 1024
    dtype: str = "Float"
    line: int = 10
    group: str = "0"
    desc: str = "default_pg"
    state: str = "scheduled"
    out_size: int | None = None


@dataclass
class Rank:
    """One rank's dump: its collectives in issue order (sequence ids counted per group)."""

    rank: int
    ops: list[Op] = field(default_factory=list)
    first_record: int = 0                      # > 0: the ring wrapped
    groups: dict[str, tuple[str, list[int]]] = field(default_factory=dict)
    extra: dict[str, Any] | None = None
    skip_seqs: int = 0                          # entries lost before first_record, per group

    def document(self) -> dict[str, Any]:
        seqs: dict[str, int] = {}
        entries = []
        for index, op in enumerate(self.ops):
            seqs[op.group] = seqs.get(op.group, self.skip_seqs) + 1
            out = [op.out_size if op.out_size is not None else op.size]
            entries.append({
                "frames": stack(op.line, op.op), "record_id": self.first_record + index,
                "pg_id": 0, "process_group": (op.group, op.desc), "thread_name": "python",
                "thread_id": "1", "collective_seq_id": seqs[op.group], "p2p_seq_id": 0,
                "op_id": seqs[op.group], "profiling_name": f"gloo:{op.op}",
                "time_created_ns": 1_800_000_000_000_000_000 + 1_000_000 * (index + 1),
                "input_sizes": [[op.size]], "input_dtypes": [op.dtype],
                "output_sizes": [out], "output_dtypes": [op.dtype], "state": op.state,
                "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
                "retired": True, "timeout_ms": 5000, "is_p2p": False})
        config = {name: {"name": name, "desc": desc, "ranks": str(ranks)}
                  for name, (desc, ranks) in self.groups.items()}
        document: dict[str, Any] = {"version": "2.10", "pg_config": config or {
            "": {"name": "", "desc": "", "ranks": "[]"}}, "pg_status": {}, "entries": entries}
        if self.extra is not None:
            document["ddpprof"] = self.extra
        return document


def write(folder: Path, ranks: list[Rank], prefix: str = "rank_", as_json: bool = False
          ) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in ranks:
        document = rank.document()
        if as_json:
            for entry in document["entries"]:
                entry.pop("frames")
            (folder / f"{prefix}{rank.rank}").write_text(json.dumps(document))
        else:
            (folder / f"{prefix}{rank.rank}").write_bytes(pickle.dumps(document, protocol=4))
    return folder


def steps(count: int, *ops: Op) -> list[Op]:
    """``count`` training steps, each issuing ``ops`` in order."""
    return [op for _ in range(count) for op in ops]


#: A step of a small data-parallel job: the gradients' all-reduce, then the loss's.
GRADS = Op("all_reduce", 4096, line=20)
LOSS = Op("all_reduce", 1, line=30)
BCAST = Op("broadcast", 4096, line=40)
