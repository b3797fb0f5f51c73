"""Regenerates the output pasted in the documentation's console blocks (``$ ddpprof ...``):
makes the recordings the examples name, runs every block's command in a scratch folder, and
writes what it printed (standard output, then the notes on standard error, at 100 columns;
long outputs cut, marked ``[...]``) back under the command. README.md's sentence that starts
``Measured on`` gets the date, the machine and each quickstart command's time.

    .venv/bin/python scripts/docs_output.py [PAGE.md ...]     # default: every page

Recordings take minutes (the diff and gate examples record three runs a side); the README's
and critical-path's blocks need only the quickstart's recording (about half a minute).
tests/test_docs.py runs every documented command on the same stand-ins (``stand_ins``).
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DDPPROF = [sys.executable, "-m", "ddpprof.cli"]
#: Lines of output kept under a command; the rest is cut, marked [...].
MAX_LINES = 30
QUICKSTART = ("record --variant simple_ddp,pytorch_ddp --model mlp-small "
              "--global-batch 256")
#: Folders and analyses the examples name, made from the quickstart's recording (traces/).
FOLDERS = ("main", "slow", "runs-main", "runs-pr", "a", "b", "traces/main", "traces/pr")
ANALYSES = ("main.json", "slow.json", "pr.json", "current.json", "base.json")
#: The recordings of the diff and gate worked examples: three of each side, rank 1 of the
#: slow side sleeping 40 ms each step (what their pages describe).
WORKED_EXAMPLE = [
    *(f"record --variant bucket_ddp_async --model mlp-small --global-batch 256 --out main "
      f"--name try{k} --quiet" for k in (1, 2, 3)),
    *(f"record --variant bucket_ddp_async --model mlp-small --global-batch 256 --out slow "
      f"--name try{k} --inject-delay 1:40 --quiet" for k in (1, 2, 3)),
    "analyze main --json main.json --quiet", "analyze slow --json slow.json --quiet"]
SETUP = {"diff.md": WORKED_EXAMPLE, "gate.md": WORKED_EXAMPLE}


def run(command: str, cwd: Path) -> tuple[str, float]:
    """What ``ddpprof COMMAND`` prints (stdout, then stderr) and how long it took."""
    started = time.monotonic()
    done = subprocess.run([*DDPPROF, *shlex.split(command)], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "CI": "true", "COLUMNS": "100"})
    took = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"ddpprof {command}: exit {done.returncode}\n{done.stderr}")
    return done.stdout + done.stderr, took


def stand_ins(folder: Path) -> None:
    """The quickstart's recording (``traces/``), then copies of it and its analysis under
    every name the examples use."""
    if not (folder / "traces").is_dir():
        run(QUICKSTART, folder)
    subprocess.run([*DDPPROF, "analyze", "traces", "--json", "stand-in.json", "-q"],
                   cwd=folder, check=True, capture_output=True)
    for name in FOLDERS:
        if not (folder / name).exists():
            shutil.copytree(folder / "traces", folder / name,
                            ignore=shutil.ignore_patterns("main", "pr"))
    for name in ANALYSES:
        if not (folder / name).exists():
            shutil.copy(folder / "stand-in.json", folder / name)


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {platform.system()} {platform.machine()}"


def cut(text: str) -> str:
    lines = text.rstrip("\n").splitlines()
    return "\n".join(lines if len(lines) <= MAX_LINES else [*lines[:MAX_LINES], "[...]"])


def regenerate(page: Path, scratch: Path, times: dict[str, float]) -> None:
    text = page.read_text()
    for command in SETUP.get(page.name, []):
        run(command, scratch)

    def block(match: re.Match[str]) -> str:
        body = match.group(1)
        commands = re.findall(r"^\$ ddpprof (.+(?:\\\n.*)*)", body, re.MULTILINE)
        parts = []
        for command in commands:
            output, took = run(command.replace("\\\n", " "), scratch)
            times[" ".join(shlex.split(command.replace("\\\n", " ")))] = took
            parts.append(f"$ ddpprof {command}\n{cut(output)}")
        return "```console\n" + "\n".join(parts) + "\n```" if commands else match.group(0)

    text = re.sub(r"```console\n(.*?)```", block, text, flags=re.DOTALL)
    if page.name == "README.md":
        took = [times.get(" ".join(shlex.split(c)), 0.0) for c in (
            QUICKSTART, "analyze traces/ --json baseline.json",
            "gate traces/ --baseline baseline.json")]
        text = re.sub(r"^Measured on .*?\.$",
                      f"Measured on {date.today()} on {machine()} (torch "
                      f"{torch_version()}, gloo; load average {os.getloadavg()[0]:.0f}: other "
                      f"jobs shared the cores): record {took[0]:.0f} s, analyze {took[1]:.1f} s, "
                      f"gate {took[2]:.1f} s, each the command's whole run.",
                      text, count=1, flags=re.MULTILINE | re.DOTALL)
    page.write_text(text)


def torch_version() -> str:
    done = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True)
    return done.stdout.strip() or "not installed"


def main(names: list[str]) -> None:
    pages = [REPO / n if "/" in n else (REPO / n if n == "README.md" else REPO / "docs" / n)
             for n in names] or [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    with tempfile.TemporaryDirectory() as scratch:
        stand_ins(Path(scratch))
        times: dict[str, float] = {}
        for page in pages:
            if "```console" in page.read_text():
                regenerate(page, Path(scratch), times)
                print(f"{page.relative_to(REPO)}: regenerated", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
