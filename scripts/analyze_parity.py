"""``analyze --json`` of every fixture folder, by two checkouts of ddpprof, compared byte for
byte: a change that should keep the output (a refactoring) is shown to keep it, and a change
that should not names each file that moved.

    .venv/bin/python scripts/analyze_parity.py --old /tmp/main            # beside a checkout
    .venv/bin/python scripts/analyze_parity.py --old /tmp/main --keep /tmp/parity
    # again with --keep /tmp/parity: the old checkout's documents kept there are reused

Each fixture folder holding traces (``tests/fixtures/**``), and each folder of such runs, is
analyzed three ways (as is, ``--per-step``, ``--critical-path``) by this checkout and by
``--old`` (its code put first on ``PYTHONPATH``, run from this checkout's root so that the
paths written are the same); the documents are compared as bytes, and where they differ the
first lines that differ are printed. The old checkout needs the native scanner built (it is
copied from this one when absent). Exit 0 when every document is the same, 1 otherwise.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
MODES = {"plain": [], "per-step": ["--per-step"], "critical-path": ["--critical-path"]}
TRACE_SUFFIXES = (".json", ".json.gz")


def folders() -> list[Path]:
    """Every folder under the fixtures that holds trace files, and every folder holding two
    or more of those (a folder of runs), relative to the repository."""
    leaves = sorted({p.parent for p in FIXTURES.rglob("*") if p.is_file()
                     and p.name.endswith(TRACE_SUFFIXES) and p.name != "run.json"
                     and "expected" not in p.name})
    parents = sorted({p.parent for p in leaves
                      if sum(q.parent == p.parent for q in leaves) >= 2})
    return [p.relative_to(REPO) for p in [*leaves, *parents]]


def analyze(code: Path, folder: Path, flags: list[str], out: Path) -> str:
    """``ddpprof analyze FOLDER --json OUT`` by the code in ``code``; its stderr's last line
    when it fails."""
    env = {**os.environ, "PYTHONPATH": str(code), "CI": "true"}
    done = subprocess.run([sys.executable, "-m", "ddpprof.cli", "analyze", str(folder),
                           *flags, "--json", str(out), "--quiet"], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode not in (0, 2):
        return f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    return "" if out.exists() else f"no document: {done.stderr.strip()[-300:]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="another checkout of ddpprof")
    parser.add_argument("--keep", type=Path, help="keep the documents in this folder")
    parser.add_argument("--mode", choices=sorted(MODES), action="append",
                        help="only these ways (default: all)")
    args = parser.parse_args()
    old = args.old.resolve()
    scanner = next((REPO / "ddpprof" / "trace").glob("_scan*.so"), None)
    if scanner is not None and not any((old / "ddpprof" / "trace").glob("_scan*.so")):
        shutil.copy2(scanner, old / "ddpprof" / "trace" / scanner.name)
    out = args.keep or Path(tempfile.mkdtemp(prefix="parity-"))
    differ = 0
    for mode in args.mode or list(MODES):
        for folder in folders():
            name = f"{str(folder).replace('/', '_')}.{mode}.json"
            documents = []
            for side, code in (("old", old), ("new", REPO)):
                (out / side).mkdir(parents=True, exist_ok=True)
                if side == "old" and (out / side / name).exists():   # kept from before
                    documents.append((out / side / name).read_text())
                    continue
                (out / side / name).unlink(missing_ok=True)
                problem = analyze(code, folder, MODES[mode], out / side / name)
                documents.append(problem if problem else (out / side / name).read_text())
            if documents[0] == documents[1]:
                print(f"same     {mode:13} {folder}")
                continue
            differ += 1
            print(f"DIFFERS  {mode:13} {folder}")
            lines = difflib.unified_diff(documents[0].splitlines(), documents[1].splitlines(),
                                         "old", "new", n=1, lineterm="")
            for line in list(lines)[:40]:
                print(f"    {line}")
    print(f"{differ} document(s) differ; documents in {out}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
