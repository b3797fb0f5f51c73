"""Hostile cases on what ddpprof writes: outputs aimed at its own inputs, links planted where an
output goes, special files and full disks under an output, the files a recording writes in its
run folder, and options out of range. See ``hostile_campaign.py``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

from hostile_campaign import VICTIM_TEXT, Attempt, Case

#: Every analysis command on the workspace's run, and the outputs it takes.
GIVEN_COST = ["--latency-us", "10", "--bandwidth-gbps", "1"]
READERS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "analyze": (["analyze", "run"], ("--json", "--csv", "--markdown", "--html-out")),
    "gate": (["gate", "run", "--baseline", "analysis.json"], ("--json", "--csv", "--markdown")),
    "critical-path": (["critical-path", "run"],
                      ("--json", "--csv", "--markdown", "--html-out", "--graph-json")),
    "diff": (["diff", "run", "run2"], ("--json", "--csv", "--markdown", "--html-out")),
    "simulate": (["simulate", "run", *GIVEN_COST], ("--json", "--csv", "--markdown",
                                                     "--html-out")),
    "memory": (["memory", "run"], ("--json", "--csv", "--markdown")),
}
#: Inputs of each command besides the run's traces and run.json: (argv, the input's path).
OTHER_INPUTS = [
    (["gate", "run", "--baseline", "analysis.json"], "analysis.json"),
    (["gate", "analysis.json", "--baseline", "analysis.json"], "analysis.json"),
    (["diff", "analysis.json", "run2"], "analysis.json"),
    (["simulate", "run", *GIVEN_COST, "--measured", "sweep.json"], "sweep.json"),
    (["simulate", "run", "--calibration", "calibration.json"], "calibration.json"),
]
WRITERS = {  # commands that record, refused before they launch
    "record": ["record", "--variant", "single", "--model", "mlp-small", "--nproc", "1",
               "--steps", "3", "--wait", "0", "--warmup", "1", "--active", "1"],
    "sweep": ["sweep", "--variant", "pytorch_ddp", "--bucket-cap-mib", "1", "--nproc", "1",
              "--steps", "6"],
    "bench": ["bench", "--model", "mlp-small", "--variant", "single", "--nproc", "1",
              "--steps", "6"],
    "calibrate": ["calibrate", "--nproc", "2", "--min-bytes", "4K", "--max-bytes", "16K"],
}


def victim_kept(folder: Path, _result: object) -> str | None:
    victim = folder / "victim.txt"
    if victim.is_symlink() or victim.read_bytes() != VICTIM_TEXT:
        return "victim.txt changed"
    return None


def inputs_kept(*names: str):
    """A check that the files ``names`` (relative to the case's folder) are what the workspace
    held: still regular files, with their content."""
    def check(folder: Path, _result: object) -> str | None:
        base = folder.parent / "base"
        for name in names:
            path = folder / name
            if path.is_symlink() or not path.is_file():
                return f"{name} is no longer a regular file"
            if path.read_bytes() != (base / name).read_bytes():
                return f"{name} was overwritten"
        return None
    return check


def no_temporary_left(folder: Path, _result: object) -> str | None:
    left = [str(p.relative_to(folder)) for p in folder.rglob(".tmp-*")]
    return f"temporary files left: {left}" if left else None


def _planted(folder: Path, name: str, target: Path, uid: int = 4242) -> Path:
    """A link ``shared/name`` to ``target``, owned by another user, in a folder anyone may
    write (sticky, like /tmp)."""
    shared = folder / "shared"
    shared.mkdir(exist_ok=True)
    os.chmod(shared, 0o1777)
    link = shared / name
    link.symlink_to(target)
    os.lchown(link, uid, uid)
    return link


def output_cases() -> list[Case]:
    cases = []
    for command, (argv, options) in READERS.items():
        for option in options:
            flag = option.lstrip("-")
            for target in ("run/rank0.json", "run/run.json"):
                cases.append(Case(
                    f"{command}-{flag}-onto-{target.replace('/', '-')}", "output-onto-input",
                    lambda d, a=argv, o=option, t=target: Attempt(
                        [*a, o, t], mentions=(o,), check=inputs_kept(t))))
            cases.append(Case(
                f"{command}-{flag}-through-link-to-trace", "output-onto-input",
                lambda d, a=argv, o=option: Attempt(
                    [*a, o, str(_link(d / "out.link", d / "run/rank1.json"))], mentions=(o,),
                    check=inputs_kept("run/rank1.json"))))
            cases.append(Case(
                f"{command}-{flag}-planted-link", "output-planted-link",
                lambda d, a=argv, o=option: Attempt(
                    [*a, o, str(_planted(d, "out", d / "victim.txt"))], mentions=(o,),
                    check=victim_kept)))
            cases.append(Case(
                f"{command}-{flag}-fifo-without-reader", "output-special-file",
                lambda d, a=argv, o=option: Attempt(
                    [*a, o, str(_fifo(d / "out.fifo"))], mentions=(o, "out.fifo"),
                    timeout_s=40)))
            cases.append(Case(
                f"{command}-{flag}-full-disk", "output-full-disk",
                lambda d, a=argv, o=option: Attempt(
                    [*a, o, "out.file"], file_size_limit=64, mentions=("out.file",),
                    check=no_temporary_left)))
        option = options[0]
        for kind, make in (("socket", _socket), ("loop", _loop), ("folder", _folder),
                           ("under-a-file", lambda p: p.parent / "victim.txt" / "x.json")):
            cases.append(Case(f"{command}-{option.lstrip('-')}-{kind}", "output-special-file",
                              lambda d, a=argv, o=option, m=make: Attempt(
                                  [*a, o, str(m(d / "out.x"))], mentions=(o,))))
    for index, (argv, name) in enumerate(OTHER_INPUTS):
        for option in ("--json", "--markdown", "--csv"):
            cases.append(Case(f"{argv[0]}-{option[2:]}-onto-{name}-{index}",
                              "output-onto-input", lambda d, a=argv, o=option, n=name: Attempt(
                                  [*a, o, n], mentions=(o,), check=inputs_kept(n))))
    cases.append(Case("critical-path-graph-json-and-json-to-stdout", "output-special-file",
                      lambda d: Attempt(["critical-path", "run", "--graph-json", "-",
                                         "--json", "-"], mentions=("-",))))
    cases.append(Case("analyze-two-outputs-one-file", "output-onto-input",
                      lambda d: Attempt(["analyze", "run", "--json", "o.json", "--markdown",
                                         "o.json"], codes=(2,), mentions=("o.json",))))
    return cases


def _link(link: Path, target: Path) -> Path:
    link.symlink_to(target)
    return link


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _socket(path: Path) -> Path:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    _KEEP.append(server)
    return path


_KEEP: list[socket.socket] = []


def _loop(path: Path) -> Path:
    path.symlink_to(path)
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def record_cases() -> list[Case]:
    """What the recording commands write, refused before anything launches."""
    cases = []
    for command, argv in WRITERS.items():
        inside = {"record": "rec/single/run.json", "sweep": "rec/x/run.json",
                  "bench": "rec/y/run.json", "calibrate": "rec/calibration.json"}[command]
        for option in ("--json", "--csv", "--markdown"):
            cases.append(Case(f"{command}{option}-inside-its-run-folder", "record-outputs",
                              lambda d, a=argv, o=option, i=inside: Attempt(
                                  [*a, "--out", "rec", o, i], mentions=(o,), timeout_s=90)))
        cases.append(Case(f"{command}-out-is-a-link", "record-run-folder",
                          lambda d, a=argv: Attempt(
                              [*a, "--out", str(_link(d / "rec", d / "victim.txt"))],
                              check=victim_kept, timeout_s=90)))
        cases.append(Case(f"{command}-out-planted-link-in-shared", "record-run-folder",
                          lambda d, a=argv: Attempt(
                              [*a, "--out", str(_planted(d, "rec", d / "victim.txt"))],
                              check=victim_kept, timeout_s=90)))
        if command in ("sweep", "bench"):   # their run folders are record's
            continue
        cases.append(Case(f"{command}-lock-planted-link", "record-run-folder",
                          lambda d, a=argv, c=command: Attempt(
                              [*a, "--out", str(_lock_link(d, c))], check=victim_kept,
                              mentions=(".ddpprof.lock",), timeout_s=90)))
    for name in ("a\nb", "a\rb", "a\x1b[31mb", "a\tb", "\u202eevil", "a\u2028b", "a" * 300):
        cases.append(Case(f"record-name-{name[:8].encode('unicode_escape').decode()}",
                          "record-names", lambda d, n=name: Attempt(
                              [*WRITERS["record"], "--out", "rec", "--name", n],
                              mentions=("rec/" if len(n) > 255 else "--name",),
                              timeout_s=90)))
    for command, option, value in [
            ("bench", "--models", ""), ("bench", "--model", ""), ("bench", "--model", ","),
            ("record", "--variant", ""), ("record", "--nproc", "0"),
            ("record", "--nproc", "99999999999999999999"), ("record", "--steps", "nan"),
            ("record", "--steps", "1e9"), ("record", "--global-batch", "-1"),
            ("record", "--lr", "inf"), ("record", "--lr", "-1"), ("record", "--seed", "-1"),
            ("record", "--seed", "1e30"), ("record", "--timeout-s", "nan"),
            ("record", "--bucket-cap-mib", "1e-320"), ("record", "--bucket-cap-mib", "1e400"),
            ("record", "--rdzv-endpoint", "host:0"), ("record", "--rdzv-endpoint", "[::1"),
            ("bench", "--repeats", "0"), ("bench", "--repeats", "1e12"),
            ("bench", "--warmup-steps", "-1"), ("sweep", "--bucket-cap-mib", "0"),
            ("sweep", "--bucket-cap-mib", "-5"), ("sweep", "--bucket-cap-mib", "nan,1"),
            ("calibrate", "--min-bytes", "0"), ("calibrate", "--max-bytes", "1e400"),
            ("calibrate", "--min-bytes", "-4K"), ("calibrate", "--step-factor", "1"),
            ("calibrate", "--step-factor", "nan"), ("calibrate", "--iters", "0"),
            ("calibrate", "--iters", "1e15"), ("calibrate", "--max-bytes", "1P"),
            ("record", "--model-path", "/dev/zero"), ("record", "--model-path", "victim.txt")]:
        # bench names it --model; a path is named as the path; a value that is in range but
        # pointless for the variant (one process ignores --nproc) may run
        told = {"--models": "--model", "--model-path": value}.get(option, option)
        runs = option in ("--nproc", "--bucket-cap-mib") and not value.startswith(("0", "-"))
        cases.append(Case(f"{command}-{option[2:]}={value!r}", "options",
                          lambda d, c=command, o=option, v=value, t=told, r=runs: Attempt(
                              [*WRITERS[c], "--out", "rec", o, v], mentions=() if r else (t,),
                              codes=(0, 2) if r else (2,), timeout_s=120)))
    return cases


def _lock_link(folder: Path, command: str) -> Path:
    run = folder / "rec" / ("" if command == "calibrate" else {
        "record": "single", "sweep": "", "bench": ""}[command])
    run.mkdir(parents=True, exist_ok=True)
    (run / ".ddpprof.lock").symlink_to(folder / "victim.txt")
    return folder / "rec"


def option_cases() -> list[Case]:
    """Numbers out of range in the analysis commands' options."""
    rows = [
        ("analyze", ["--jobs", "0"]), ("analyze", ["--jobs", "1e30"]),
        ("analyze", ["--jobs", "99999999999999999999999"]), ("analyze", ["--jobs", "-3"]),
        ("gate", ["--tolerance", "nan"]), ("gate", ["--tolerance", "-1"]),
        ("gate", ["--tolerance", "1e400"]), ("gate", ["--rule", "overlap_pct<nan"]),
        ("gate", ["--rule", "nonsense"]), ("gate", ["--rule", "overlap_pct>="]),
        ("gate", ["--rule", "step_ms<=+inf"]), ("gate", ["--significance", "2"]),
        ("gate", ["--significance", "nan"]),
        ("simulate", ["--world-size", "0"]), ("simulate", ["--world-size", "1e9"]),
        ("simulate", ["--world-size", "1000000000"]), ("simulate", ["--world-size", "-2"]),
        ("simulate", ["--bucket-cap-mib", "1e-300"]), ("simulate", ["--bucket-cap-mib", "1e300"]),
        ("simulate", ["--bucket-cap-mib", "inf"]), ("simulate", ["--latency-us", "1e308"]),
        ("simulate", ["--bandwidth-gbps", "1e-308"]), ("simulate", ["--bandwidth-gbps", "0"]),
        ("critical-path", ["--faster", "aten::mm=nan"]), ("critical-path", ["--faster", "x=-1"]),
        ("critical-path", ["--faster", "=2"]), ("critical-path", ["--faster-network", "inf"]),
        ("critical-path", ["--faster-network", "0"]),
        ("critical-path", ["--rank-delay", "0=1e300"]),
        ("critical-path", ["--rank-delay", "99999999999=5"]),
        ("critical-path", ["--rank-delay", "-1=5"]), ("critical-path", ["--rank-delay", "0=nan"]),
        ("diff", ["--significance", "nan"]), ("diff", ["--run-noise", "-1"]),
        ("diff", ["--run-noise", "inf"]),
        ("memory", ["--model", "mlp-small", "--world-size", "0"]),
        ("memory", ["--model", "mlp-small", "--world-size", "1e30"]),
        ("memory", ["--model", "mlp-small", "--world-size", "99999999999999999999999"]),
        ("memory", ["--model", ""]), ("memory", ["--model-path", "/dev/zero"]),
    ]
    cases = []
    for command, extra in rows:
        argv = READERS[command][0] if command != "memory" else ["memory"]
        if command == "simulate" and "--bandwidth-gbps" in extra:
            argv = ["simulate", "run", "--latency-us", "10"]
        elif command == "simulate" and "--latency-us" in extra:
            argv = ["simulate", "run", "--bandwidth-gbps", "1"]
        # an option that is accepted must still give a bounded answer: 0 (used) or 2 (refused)
        cases.append(Case(f"{command}-{'='.join(extra)}", "options",
                          lambda d, a=argv, e=extra: Attempt([*a, *e], codes=(0, 2),
                                                             one_line=None, timeout_s=60,
                                                             check=_json_standard)))
    return cases


def _json_standard(folder: Path, result: subprocess.CompletedProcess) -> str | None:
    if result.returncode == 2:
        lines = [x for x in result.stderr.decode(errors="replace").splitlines() if x.strip()]
        if len(lines) != 1:
            return f"exit 2 with {len(lines)} lines on stderr"
    return None


def cases() -> list[Case]:
    return [*output_cases(), *record_cases(), *option_cases()]


__all__ = ["cases", "inputs_kept", "json", "victim_kept"]
