"""A hostile-input campaign against every ddpprof command: planted links, special files, files
that never end or change while they are read, malformed and extreme JSON, names that try to
break out of Markdown, HTML or CSV, URLs that fail, a full disk, and options out of range.

Every case runs the CLI as a user would (a fresh process, ``CI=true``) in a scratch copy of a
small workspace, under a wall-clock timeout and an address-space limit, and is judged by what
the guarantees promise (docs/guarantees.md):

* never a traceback, never a signal, never past the timeout or the memory limit;
* bad input is exit 2 and one line on stderr naming the file or the option;
* nothing is written through a link and nothing but a regular file is replaced: every case
  plants ``victim.txt`` and checks afterwards that it is unchanged;
* what each case checks besides (the escaping of a name in a Markdown cell, say).

The cases are in ``hostile_cases*.py`` beside this file, grouped by class. How to run, from the
repository root (as root, like CI, for the cases that need another user's link)::

    python benchmarks/hostile_campaign.py                 # every case, 2 at a time (~20 min)
    python benchmarks/hostile_campaign.py -c escape -v    # one class, every case's stderr
    python benchmarks/hostile_campaign.py -k=gate-        # the cases whose name holds "gate-"

It prints one line per failed case and a count per class, and exits 1 when a case failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: The address space a case may use (the analysis of the small inputs needs well under 1 GiB).
MEMORY_LIMIT_BYTES = 6 * 1024**3
DEFAULT_TIMEOUT_S = 60
DAC = "-dac_override,-dac_read_search"
VICTIM_TEXT = b"precious: must never be written\n"


@dataclass
class Attempt:
    """One command line and what it must do."""

    argv: list[str]
    codes: tuple[int, ...] = (2,)           # allowed exit codes
    one_line: bool | None = None            # stderr is one error line (default: when exit 2)
    mentions: tuple[str, ...] = ()          # text the stderr must hold (a file, an option)
    check: Callable[[Path, subprocess.CompletedProcess], str | None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    background: Callable[[Path], Callable[[], None]] | None = None  # starts; returns a stopper
    no_override: bool = False               # without root's permission to read anything
    file_size_limit: int | None = None      # RLIMIT_FSIZE: a disk that fills up


@dataclass(frozen=True)
class Case:
    name: str
    klass: str
    build: Callable[[Path], Attempt]        # given a fresh copy of the workspace


@dataclass
class Verdict:
    case: Case
    problems: list[str]
    seconds: float
    code: int | None
    stderr: str


def _limits(attempt: Attempt) -> Callable[[], None]:
    def apply() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
        if attempt.file_size_limit is not None:
            limit = attempt.file_size_limit
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def run_case(case: Case, base: Path, scratch: Path) -> Verdict:
    folder = Path(tempfile.mkdtemp(prefix=case.name[:40].replace("/", "_") + "-", dir=scratch))
    shutil.copytree(base, folder, symlinks=True, dirs_exist_ok=True)
    victim = folder / "victim.txt"
    victim.write_bytes(VICTIM_TEXT)
    problems: list[str] = []
    try:
        attempt = case.build(folder)
    except Exception as error:  # a case that cannot be set up here (no such device, say)
        return Verdict(case, [f"setup: {type(error).__name__}: {error}"], 0.0, None, "")
    stop = attempt.background(folder) if attempt.background else None
    env = {**os.environ, "CI": "true", "PYTHONPATH": str(REPO_ROOT), "DDPPROF_URL_TIMEOUT_S": "5",
           "OPENBLAS_NUM_THREADS": "1", **attempt.env}
    start = time.monotonic()
    code: int | None = None
    stderr = ""
    try:
        # root reads a file of mode 000: drop the capabilities that let it
        wrapper = ["setpriv", f"--inh-caps={DAC}", f"--bounding-set={DAC}"] \
            if attempt.no_override and os.geteuid() == 0 else []
        process = subprocess.Popen([*wrapper, sys.executable, "-m", "ddpprof.cli", *attempt.argv],
                                   cwd=folder, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, preexec_fn=_limits(attempt))
        try:
            stdout, stderr_bytes = process.communicate(timeout=attempt.timeout_s)
        finally:  # the case's whole session: workers a hung command started go too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        result = subprocess.CompletedProcess(process.args, process.returncode, stdout,
                                             stderr_bytes)
        code = result.returncode
        stderr = result.stderr.decode("utf-8", "replace")
        problems += judge(attempt, result, stderr, folder)
    except subprocess.TimeoutExpired:
        problems.append(f"no answer within {attempt.timeout_s:g} s")
    except OSError as error:
        problems.append(f"could not run: {error}")
    finally:
        if stop is not None:
            stop()
    seconds = time.monotonic() - start
    if victim.is_symlink() or not victim.is_file():
        problems.append("victim.txt was replaced by something not a regular file")
    elif victim.read_bytes() != VICTIM_TEXT:
        problems.append("victim.txt was written (through a link)")
    if not problems:
        shutil.rmtree(folder, ignore_errors=True)
    return Verdict(case, problems, seconds, code, stderr)


def judge(attempt: Attempt, result: subprocess.CompletedProcess, stderr: str, folder: Path
          ) -> list[str]:
    problems = []
    code = result.returncode
    if code < 0 or code >= 128:
        problems.append(f"killed by a signal (exit {code})")
    elif code not in attempt.codes:
        problems.append(f"exit {code}, expected {' or '.join(map(str, attempt.codes))}")
    if "Traceback" in stderr or "MemoryError" in stderr:
        problems.append("a traceback")
    lines = [line for line in stderr.splitlines() if line.strip()]
    one_line = attempt.one_line if attempt.one_line is not None else (
        code == 2 and attempt.codes == (2,))
    if one_line and code == 2 and (len(lines) != 1 or not lines[0].startswith("ddpprof: error:")):
        problems.append(f"{len(lines)} lines on stderr, expected one error line")
    for text in attempt.mentions:
        if text not in stderr:
            problems.append(f"stderr does not mention {text!r}")
    if attempt.check is not None:
        try:
            problem = attempt.check(folder, result)
        except Exception as error:
            problem = f"check failed: {type(error).__name__}: {error}"
        if problem:
            problems.append(problem)
    return problems


def all_cases() -> list[Case]:
    import hostile_cases_bounds
    import hostile_cases_reads
    import hostile_cases_writes
    return [*hostile_cases_writes.cases(), *hostile_cases_reads.cases(),
            *hostile_cases_bounds.cases()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="pattern", default="", help="only cases whose name holds it")
    parser.add_argument("-c", dest="klass", default="", help="only cases whose class holds it")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("-v", "--verbose", action="store_true", help="every case's stderr")
    parser.add_argument("--json", type=Path, help="write every verdict here")
    args = parser.parse_args()
    import hostile_workspace

    cases = [c for c in all_cases() if args.pattern in c.name and args.klass in c.klass
]
    names = Counter(c.name for c in cases)
    assert all(n == 1 for n in names.values()), [k for k, n in names.items() if n > 1]
    scratch = Path(tempfile.mkdtemp(prefix="ddpprof-hostile-"))
    os.chmod(scratch, 0o755)
    base = hostile_workspace.build(scratch / "base")
    verdicts = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for verdict in pool.map(lambda c: run_case(c, base, scratch), cases):
            verdicts.append(verdict)
            if sys.stderr.isatty():
                    print(f"\r{len(verdicts)}/{len(cases)} cases, "
                      f"{sum(bool(v.problems) for v in verdicts)} failed", end="",
                      file=sys.stderr, flush=True)
    print(file=sys.stderr)
    failed = [v for v in verdicts if v.problems]
    for verdict in verdicts:
        if verdict.problems or args.verbose:
            status = "FAIL" if verdict.problems else "ok  "
            print(f"{status} [{verdict.case.klass}] {verdict.case.name} ({verdict.seconds:.1f} s,"
                  f" exit {verdict.code}): {'; '.join(verdict.problems)}")
            if verdict.problems or args.verbose:
                tail = verdict.stderr.strip().splitlines()[-3:]
                print("".join(f"      | {line[:300]}\n" for line in tail), end="")
    by_class = Counter(v.case.klass for v in verdicts)
    failed_by_class = Counter(v.case.klass for v in failed)
    print(f"\n{'class':<28} cases  failed")
    for klass in sorted(by_class):
        print(f"{klass:<28} {by_class[klass]:>5}  {failed_by_class[klass]:>6}")
    print(f"{'total':<28} {len(verdicts):>5}  {len(failed):>6}")
    if args.json:
        args.json.write_text(json.dumps([{
            "case": v.case.name, "class": v.case.klass, "problems": v.problems,
            "seconds": round(v.seconds, 2), "exit": v.code} for v in verdicts], indent=1))
    if not failed:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"failed cases' folders are kept under {scratch}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
