"""Bounded inputs: the documents ``diff`` and ``gate`` read back (their schema: lengths that
agree, parts in range, finite numbers within physical bounds), option values (ASCII digits,
ranges, ranks the run has), a user's regular expression that would backtrack, names of a
megabyte, gzip bombs under the address-space limit, and a terminal that encodes ASCII only.
See ``hostile_campaign.py``."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from hostile_campaign import Attempt, Case
from hostile_workspace import span, trace

#: Edits of ``analysis.json``'s first run's profile, each breaking its schema.
PROFILES = {
    "part-ms-short": lambda p: p.update(part_ms=p["part_ms"][:-1]),
    "item-part-999": lambda p: p["items"][0].update(part=999),
    "item-part-negative": lambda p: p["items"][0].update(part=-1),
    "rank-part-ms-shape": lambda p: p.update(rank_part_ms=[[1.0]]),
    "series-length": lambda p: p["part_series_ms"][0].append(1.0),
    "step-nan": lambda p: p.update(step_ms=float("nan")),
    "step-infinity": lambda p: p.update(step_ms=float("inf")),
    "step-minus-1e308": lambda p: p.update(step_ms=-1e308),
    "ranks-twice": lambda p: p.update(ranks=[0, 0]),
}
#: Option values that are not what they claim, per command line.
OPTIONS = {
    "rank-delay-superscript": ["critical-path", "cp", "--rank-delay", "²=5"],
    "rank-delay-arabic-digit": ["simulate", "run", "--latency-us", "10", "--bandwidth-gbps",
                                "1", "--rank-delay", "٣=5"],
    "rank-delay-unknown-rank": ["critical-path", "cp", "--rank-delay", "99999=5"],
    "simulate-unknown-rank": ["simulate", "run", "--latency-us", "10", "--bandwidth-gbps", "1",
                              "--rank-delay", "99999=5"],
    "gate-selector-superscript": ["gate", "run", "--baseline", "analysis.json", "--rule",
                                  "overlap_pct[rank=²] >= 0"],
    "gate-selector-unknown-rank": ["gate", "run", "--baseline", "analysis.json", "--rule",
                                   "overlap_pct[rank=9] >= 0"],
    "run-noise-1e308": ["diff", "analysis.json", "run2", "--run-noise", "1e308"],
    "calibrate-step-factor-tiny": ["calibrate", "--out", "cal", "--step-factor", "1.0000001",
                                   "--min-bytes", "4K", "--max-bytes", "256M"],
    "calibrate-iters-billion": ["calibrate", "--out", "cal", "--iters", "1000000000"],
    "jobs-superscript": ["analyze", "run", "--jobs", "²"],
}


def _edited_profile(folder: Path, edit) -> Path:
    document = json.loads((folder / "analysis.json").read_text())
    edit(document["runs"][0]["profile"])
    (folder / "bad.json").write_text(json.dumps(document))
    return folder / "bad.json"


def _named_run(folder: Path, name: str, group: str = "0") -> Path:
    """``run``'s rank 1 with one more event named ``name`` (and every collective's group
    description ``group``)."""
    body = trace(1)
    body["traceEvents"].append(span(name, 20, 3))
    for event in body["traceEvents"]:
        if event["name"] == "gloo:all_reduce":
            event["args"].update({"Process Group Name": group,
                                  "Process Group Description": group})
    (folder / "run" / "rank1.json").write_text(json.dumps(body))
    return folder / "run"


def _bomb(folder: Path, head: bytes) -> Path:
    """``head`` then 8 GiB of spaces, a few MB of gzip (see tests/test_memory_limits.py)."""
    run = folder / "bomb"
    run.mkdir()
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = [packer.compress(head), packer.flush(zlib.Z_FULL_FLUSH)]
    block = packer.compress(b" " * (64 << 20)) + packer.flush(zlib.Z_FULL_FLUSH)
    (run / "rank0.json.gz").write_bytes(b"".join([*data, *[block] * 128, packer.flush()]))
    return run


def cases() -> list[Case]:
    found = []
    for name, edit in PROFILES.items():
        for command in ("diff", "gate"):
            found.append(Case(f"{command}-profile-{name}", "document-schema",
                              lambda d, c=command, e=edit: Attempt(
                                  [c, str(_edited_profile(d, e)), *(
                                      ["run2"] if c == "diff" else
                                      ["--baseline", "analysis.json", "--significance",
                                       "0.95"])], mentions=("bad.json", "profile"))))
    for name, argv in OPTIONS.items():
        found.append(Case(f"option-{name}", "option-values",
                          lambda d, a=argv: Attempt(a, timeout_s=30)))
    found.append(Case("comm-kernel-backtracking", "bounded-work", lambda d: Attempt(
        ["analyze", str(_named_run(d, "a" * 10_000)), "--comm-kernel", "(a+)+$", "--json",
         "out.json"], codes=(0,), timeout_s=30)))
    found.append(Case("comm-kernel-backreference", "bounded-work", lambda d: Attempt(
        ["analyze", "run", "--comm-kernel", r"(a)\1"], mentions=("--comm-kernel",))))
    found.append(Case("group-name-megabyte", "bounded-work", lambda d: Attempt(
        ["analyze", str(_named_run(d, "x", group="g" * 1_000_000)), "--json", "out.json",
         "--markdown", "out.md"], codes=(0,), one_line=False, timeout_s=60)))
    found.append(Case("op-name-200k-json", "bounded-work", lambda d: Attempt(
        ["analyze", str(_named_run(d, "k" * 200_000)), "--json", "out.json"], codes=(0,),
        one_line=False, timeout_s=60)))
    found.append(Case("gzip-bomb-under-memory-limit", "memory", lambda d: Attempt(
        ["critical-path", str(_bomb(d, b'{"traceEvents": ['))], mentions=("rank0.json.gz",),
        timeout_s=120)))
    found.append(Case("gzip-bomb-of-blanks", "memory", lambda d: Attempt(
        ["analyze", str(_bomb(d, b" "))], mentions=("blanks",), timeout_s=60)))
    for command in (["analyze", "run"], ["gate", "run", "--baseline", "analysis.json"],
                    ["diff", "run", "run2"], ["critical-path", "cp"],
                    ["simulate", "run", "--latency-us", "10", "--bandwidth-gbps", "1"]):
        found.append(Case(f"ascii-terminal-{command[0]}", "ascii-terminal",
                          lambda d, a=command: Attempt(a, codes=(0, 1), one_line=False,
                                                       env={"PYTHONIOENCODING": "ascii"})))
    return found
