"""Hostile cases on what ddpprof reads: special files in a folder or named directly, inputs
that never end or change while they are read, gzip bombs, and URLs. See
``hostile_campaign.py``; malformed content, names and folders are in ``hostile_cases_content``.
"""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from hostile_campaign import Attempt, Case
from hostile_cases_writes import GIVEN_COST, _fifo, _loop, _socket

#: Every command that reads a run folder.
RUN_READERS = {
    "analyze": ["analyze", "{run}"],
    "gate": ["gate", "{run}", "--baseline", "analysis.json"],
    "critical-path": ["critical-path", "{run}"],
    "diff": ["diff", "{run}", "run2"],
    "simulate": ["simulate", "{run}", *GIVEN_COST],
    "memory": ["memory", "{run}"],
}
#: Every JSON input that is not a trace: (command line with {file}, the file it replaces).
JSON_INPUTS = {
    "gate-baseline": (["gate", "run", "--baseline", "{file}"], "analysis.json"),
    "gate-current": (["gate", "{file}", "--baseline", "analysis.json"], "analysis.json"),
    "diff-input": (["diff", "{file}", "run2"], "analysis.json"),
    "simulate-measured": (["simulate", "run", *GIVEN_COST, "--measured", "{file}"],
                          "sweep.json"),
    "simulate-calibration": (["simulate", "run", "--calibration", "{file}"],
                             "calibration.json"),
    "run-json": (["analyze", "run"], "run/run.json"),
    "run-json-simulate": (["simulate", "run", *GIVEN_COST], "run/run.json"),
    "run-json-gate": (["gate", "run", "--baseline", "analysis.json"], "run/run.json"),
}


def fill(argv: list[str], **values: str) -> list[str]:
    return [a.format(**values) for a in argv]


def _dev_zero(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


def _dangling(path: Path) -> Path:
    path.symlink_to(path.parent / "nothing-here")
    return path


def _directory(path: Path) -> Path:
    path.mkdir()
    return path


def _unreadable(path: Path) -> Path:
    path.write_text('{"traceEvents": []}')
    os.chmod(path, 0)
    return path


SPECIALS: dict[str, Callable[[Path], Path]] = {
    "fifo": _fifo, "socket": _socket, "dev-zero": _dev_zero, "loop": _loop,
    "dangling": _dangling, "folder": _directory, "unreadable": _unreadable}


def special_cases() -> list[Case]:
    cases = []
    for kind, make in SPECIALS.items():
        user = kind == "unreadable"
        for command, argv in RUN_READERS.items():
            # in a run folder, beside the good traces: skipped with a note, or the run's error
            # (memory reads no trace, simulate only rank 0's; a folder is no trace file)
            unread = command == "memory" or (command == "simulate" and kind in (
                "loop", "dangling", "unreadable"))
            told = () if unread or kind == "folder" else ("rank2.json",)
            cases.append(Case(f"{command}-{kind}-in-run-folder", "special-file-in-folder",
                              lambda d, a=argv, m=make, u=user, t=told: Attempt(
                                  fill(a, run=str(_in(d / "run/rank2.json", m))), codes=(0, 2),
                                  one_line=False, mentions=t, no_override=u)))
            cases.append(Case(f"{command}-{kind}-named-directly", "special-file-named",
                              lambda d, a=argv, m=make, u=user: Attempt(
                                  fill(a, run=str(m(d / "x.json"))), mentions=("x.json",),
                                  no_override=u)))
        cases.append(Case(f"analyze-{kind}-in-folder-of-runs", "special-file-in-folder",
                          lambda d, m=make, u=user: _folder_of_runs(d, m, u)))
        for name, (argv, replaced) in JSON_INPUTS.items():
            cases.append(Case(f"{name}-{kind}", "special-file-json-input",
                              lambda d, a=argv, r=replaced, m=make, u=user: _replace_input(
                                  d, a, r, m, u)))
    return cases


def _in(path: Path, make: Callable[[Path], Path]) -> Path:
    make(path)
    return path.parent


def _folder_of_runs(folder: Path, make: Callable[[Path], Path], user: bool) -> Attempt:
    many = folder / "many"
    for name in ("run", "run2"):
        shutil.copytree(folder / name, many / name)
    make(many / "run" / "rank2.json")
    make(many / "loose.json")
    return Attempt(["analyze", "many"], codes=(0, 2), one_line=False,
                   mentions=() if make is _directory else ("rank2.json",),
                   no_override=user, check=_good_runs_reported)


def _good_runs_reported(folder: Path, result) -> str | None:
    out = result.stdout.decode(errors="replace")
    return None if "run2" in out else "the good run run2 is not reported"


def _replace_input(folder: Path, argv: list[str], replaced: str,
                   make: Callable[[Path], Path], user: bool) -> Attempt:
    path = folder / replaced
    path.unlink()
    make(path)
    in_folder = replaced.startswith("run/")
    # run.json that is not a regular file: read as no run.json (a note), never a hang
    return Attempt(fill(argv, file=replaced), codes=(0, 2) if in_folder else (2,),
                   one_line=None if not in_folder else False,
                   mentions=() if in_folder else (Path(replaced).name,), no_override=user)


def bounded_cases() -> list[Case]:
    cases = []
    small = {"DDPPROF_MAX_TRACE_BYTES": str(8 * 1024**2), "DDPPROF_MAX_JSON_BYTES": "100000"}
    for command, argv in RUN_READERS.items():
        if command == "memory":     # reads no trace
            continue
        cases.append(Case(f"{command}-gzip-bomb", "bounded-read",
                          lambda d, a=argv: Attempt(fill(a, run=str(_bomb(d))), env=small,
                                                    mentions=("rank0.json.gz", "8 MiB"))))
        cases.append(Case(f"{command}-trace-over-cap", "bounded-read",
                          lambda d, a=argv: Attempt(fill(a, run="run"), mentions=("rank",),
                                                    env={"DDPPROF_MAX_TRACE_BYTES": "1000"},
                                                    one_line=False)))
        for how in ("grows", "shrinks", "replaced", "rewritten"):
            cases.append(Case(f"{command}-trace-{how}-while-read", "changed-while-read",
                              lambda d, a=argv, h=how: Attempt(
                                  fill(a, run=str(_big_run(d))), codes=(0, 2), one_line=False,
                                  background=lambda f, h=h: _churn(f / "big/rank0.json", h),
                                  timeout_s=90)))
    for name, (argv, replaced) in JSON_INPUTS.items():
        if replaced.startswith("run/"):
            continue
        cases.append(Case(f"{name}-over-json-cap", "bounded-read",
                          lambda d, a=argv, r=replaced: Attempt(
                              fill(a, file=str(_padded(d / r))),
                              env={"DDPPROF_MAX_JSON_BYTES": "100000"},
                              mentions=(Path(r).name, "DDPPROF_MAX_JSON_BYTES"))))
        cases.append(Case(f"{name}-gzip-bomb", "bounded-read",
                          lambda d, a=argv, r=replaced: Attempt(
                              fill(a, file=str(_json_bomb(d / "bomb.json"))),
                              mentions=("bomb.json",))))
        cases.append(Case(f"{name}-grows-while-read", "changed-while-read",
                          lambda d, a=argv, r=replaced: Attempt(
                              fill(a, file=str(_padded(d / "grow.json", 3_000_000))),
                              codes=(0, 2), background=lambda f: _churn(f / "grow.json",
                                                                        "grows"))))
    for bad in ("abc", "0", "-5", "1e9", "nan", " "):
        cases.append(Case(f"cap-variable-{bad!r}", "options",
                          lambda d, b=bad: Attempt(["analyze", "run"],
                                                   env={"DDPPROF_MAX_TRACE_BYTES": b},
                                                   mentions=("DDPPROF_MAX_TRACE_BYTES",),
                                                   codes=(0, 2) if b in ("1e9", " ") else (2,))))
    return cases


def _bomb(folder: Path) -> Path:
    run = folder / "bomb"
    run.mkdir()
    member = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = member.compress(b'{"traceEvents": [' + b" " * (64 * 1024**2)) + member.flush()
    (run / "rank0.json.gz").write_bytes(data * 4)
    return run


def _json_bomb(path: Path) -> Path:
    path.write_bytes(gzip.compress(b"[" + b" " * (300 * 1024**2) + b"]", 9))
    return path


def _padded(path: Path, size: int = 200_000) -> Path:
    text = path.read_text() if path.exists() else '{"rows": []}'
    path.write_text(text.rstrip()[:-1] + " " * size + text.rstrip()[-1])
    return path


def _big_run(folder: Path) -> Path:
    import hostile_workspace
    run = folder / "big"
    run.mkdir()
    import json
    for rank in (0, 1):
        (run / f"rank{rank}.json").write_text(json.dumps(hostile_workspace.trace(rank,
                                                                                 steps=3000)))
    return run


def _churn(path: Path, how: str) -> Callable[[], None]:
    """Change ``path`` again and again while the command reads it; returns the stopper."""
    stop = threading.Event()
    original = path.read_bytes()

    def work() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            if how == "grows":
                with open(path, "ab") as out:
                    out.write(b" " * 65536)
            elif how == "shrinks":
                os.truncate(path, max(0, len(original) - 1000 * (n % 50)))
                time.sleep(0.001)
                path.write_bytes(original)
            elif how == "replaced":
                side = path.with_name(".swap")
                side.write_bytes(original[: len(original) // 2] if n % 2 else original)
                os.replace(side, path)
            else:
                with open(path, "r+b") as out:
                    out.seek(len(original) // 2)
                    out.write(b"x" * 100)
                path.write_bytes(original)
            time.sleep(0.002)
    thread = threading.Thread(target=work, daemon=True)
    thread.start()

    def stopper() -> None:
        stop.set()
        thread.join()
    return stopper


def _silent_server() -> str:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)                      # accepts connections, never answers
    _SERVERS.append(server)
    return f"127.0.0.1:{server.getsockname()[1]}"


_SERVERS: list[socket.socket] = []


def url_cases() -> list[Case]:
    urls = {"s3-no-credentials": "s3://no-such-bucket-ddpprof/rank0.json",
            "gs-no-network": "gs://no-such-bucket-ddpprof/rank0.json",
            "az-no-account": "az://container/rank0.json",
            "ftp-scheme": "ftp://example.com/rank0.json", "malformed": "http://[::1",
            "unknown-scheme": "gopher://x/y.json", "no-host": "http:///x.json",
            "refused": "http://127.0.0.1:1/rank0.json",
            "password-in-url": "http://user:hunter2@127.0.0.1:1/rank0.json",
            "file-url-dev-zero": "file:///dev/zero", "file-url-missing": "file:///nope.json",
            "s3-folder": "s3://no-such-bucket-ddpprof/"}
    cases = []
    for name, url in urls.items():
        for command, argv in (("analyze", ["analyze", url]),
                              ("critical-path", ["critical-path", url]),
                              ("diff", ["diff", url, "run"])):
            cases.append(Case(f"{command}-url-{name}", "url", lambda d, a=argv: Attempt(
                a, timeout_s=40, check=_no_secret)))
    cases.append(Case("analyze-url-silent-server", "url", lambda d: Attempt(
        ["analyze", f"http://{_silent_server()}/rank0.json"], timeout_s=40,
        env={"DDPPROF_URL_TIMEOUT_S": "3"})))
    for option in ("--baseline",):
        cases.append(Case(f"gate{option}-url", "url", lambda d, o=option: Attempt(
            ["gate", "run", o, "s3://no-such-bucket-ddpprof/a.json"], timeout_s=40)))
    cases.append(Case("analyze-url-timeout-variable-bad", "url", lambda d: Attempt(
        ["analyze", "s3://b/x.json"], env={"DDPPROF_URL_TIMEOUT_S": "nan"},
        mentions=("DDPPROF_URL_TIMEOUT_S",))))
    return cases


def _no_secret(folder: Path, result) -> str | None:
    text = (result.stdout + result.stderr).decode(errors="replace")
    return "the URL's password is printed" if "hunter2" in text else None


def cases() -> list[Case]:
    import hostile_cases_content
    return [*special_cases(), *bounded_cases(), *url_cases(), *hostile_cases_content.cases()]
