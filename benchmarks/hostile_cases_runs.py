"""Hostile runs: names that try to break out of a Markdown cell, an HTML page, a CSV cell or a
terminal; runs with the same name; runs that failed before writing a trace; a gate with
nothing to compare; folders of ten thousand files, loops and deep nesting. See
``hostile_campaign.py``."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

from hostile_campaign import Attempt, Case
from hostile_workspace import manifest, write_run

#: Names an attacker gives a run folder, a run, a variant or an op. "EVIL" marks them.
NAMES = {
    "newline": "a\nEVIL | b", "comment": "x<!--EVIL", "script": "</script><script>EVIL()</script>",
    "image": "<img src=x onerror=EVIL()>", "formula": "=HYPERLINK(\"http://x\",\"EVIL\")",
    "plus": "+EVIL", "minus": "-EVIL", "at": "@EVIL", "tab": "\tEVIL", "cr": "\rEVIL",
    "escape": "\x1b]0;EVIL\x07\x1b[31m", "bidi": "\u202eEVIL", "separator": "EVIL\u2028x",
    "pipe": "EVIL|x|y", "backtick": "`EVIL`</details>", "not-utf8": "EVIL\udcff",
}
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _outputs(prefix: str = "o") -> list[str]:
    return ["--json", f"{prefix}.json", "--csv", f"{prefix}.csv", "--markdown", f"{prefix}.md"]


def escaped(folder: Path, result: subprocess.CompletedProcess) -> str | None:
    """Every output that was written shows the hostile names inert."""
    stdout = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
    if "\x1b" in stdout or "\x07" in stdout:
        return "an escape sequence reached the terminal"
    if "\u202e" in stdout:
        return "a bidirectional override reached the terminal"
    for markdown in folder.glob("o*.md"):
        text = markdown.read_text(errors="replace")
        if "<!--" in text or "<script" in text or "<img" in text or "</details>" in text:
            return f"{markdown.name}: HTML got through"
        lines = text.split("\n")
        if any(line.startswith(("EVIL | b", "EVIL()</script>")) for line in lines):
            return f"{markdown.name}: a name broke its line"
        if "\r" in text or "\u2028" in text or "\u202e" in text:
            return f"{markdown.name}: a control or bidi character got through"
        header = ""
        for before, line in zip(["", *lines], lines, strict=False):
            if line.startswith("|") and not before.startswith("|"):
                header = line          # a table starts
            elif line.startswith("|") and "EVIL" in line and _cells(line) != _cells(header):
                return f"{markdown.name}: a name changed a row's columns: {line!r}"
    for table in folder.glob("o*.csv"):
        for row in csv.reader(io.StringIO(table.read_text(errors="replace"))):
            for cell in row:
                if cell.startswith(FORMULA_START) and not _number(cell):
                    return f"{table.name}: a cell a spreadsheet would run: {cell!r}"
    for page in folder.glob("o*.html"):
        text = page.read_text(errors="replace")
        if "<script>EVIL" in text or "<img src=x" in text or "x<!--EVIL" in text:
            return f"{page.name}: a name got into the page as HTML"
    return None


def _cells(line: str) -> int:
    return line.replace("\\|", "").count("|")


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _named_runs(folder: Path, name: str) -> Path:
    """``named/``: the run under the folder name ``name`` (and as its run.json's run, variant
    and model, and as an op), beside a plain run."""
    named = folder / "named"
    # an op's name is text in the trace's JSON, where bytes that are not UTF-8 cannot be
    op = name.encode("utf-8", "replace").decode("utf-8")
    run = write_run(named / name, names=(op, f"aten::{op}"))
    document = json.loads((run / "run.json").read_text())
    document["config"].update(model=name)
    (run / "run.json").write_text(json.dumps(document))
    write_run(named / "plain")
    return named


def name_cases() -> list[Case]:
    cases = []
    for key, name in NAMES.items():
        def analyze(d: Path, n: str = name) -> Attempt:
            named = _named_runs(d, n)
            return Attempt(["analyze", str(named), *_outputs(), "--html-out", "o.html",
                            "--per-step"], codes=(0,), check=escaped, timeout_s=90)

        def gate(d: Path, n: str = name) -> Attempt:
            named = _named_runs(d, n)
            return Attempt(["gate", str(named), "--baseline", str(named), *_outputs()],
                           codes=(0, 1, 2), one_line=None, check=escaped)

        def each_run(command: str, extra: list[str], n: str = name):
            def build(d: Path) -> Attempt:
                run = _named_runs(d, n) / n
                argv = [command, str(run), *extra, *_outputs()]
                if command != "memory":
                    argv += ["--html-out", "o.html"]
                return Attempt(argv, codes=(0,), check=escaped, timeout_s=90)
            return build

        cases += [Case(f"analyze-name-{key}", "escape", analyze),
                  Case(f"gate-name-{key}", "escape", gate),
                  Case(f"critical-path-name-{key}", "escape", each_run("critical-path", [])),
                  Case(f"simulate-name-{key}", "escape", each_run(
                      "simulate", ["--latency-us", "10", "--bandwidth-gbps", "1"])),
                  Case(f"diff-name-{key}", "escape", each_run("diff", ["run"])),
                  Case(f"memory-name-{key}", "escape", each_run("memory", []))]
    return cases


def gate_cases() -> list[Case]:
    def same_name_twice(d: Path) -> Attempt:
        for side in ("a", "b"):
            write_run(d / "dup" / side / "ok")
        return Attempt(["analyze", "dup/a/ok", "dup/b/ok", "--json", "out.json"], codes=(0,),
                       check=_distinct_names("out.json"))

    def baseline_dupes(d: Path) -> Attempt:
        data = json.loads((d / "analysis.json").read_text())
        data["runs"].append(dict(data["runs"][0]))
        (d / "dupes.json").write_text(json.dumps(data))
        return Attempt(["gate", "run", "--baseline", "dupes.json"], mentions=("dupes.json",))

    def current_dupes(d: Path) -> Attempt:
        baseline_dupes(d)
        return Attempt(["gate", "dupes.json", "--baseline", "analysis.json"],
                       mentions=("dupes.json",))

    def failed_before_traces(d: Path, status: str = "failed") -> Attempt:
        runs = d / "runs"
        shutil.copytree(d / "run", runs / "good")
        (runs / "broken").mkdir()
        document = {**manifest("broken", status), "error": {"message": "rank 0 died"}}
        if status == "running":
            document["owner"] = {"pid": 999_999_999, "hostname": os.uname().nodename}
        (runs / "broken" / "run.json").write_text(json.dumps(document))
        return Attempt(["analyze", "runs", "--json", "out.json"], codes=(0, 2), one_line=False,
                       mentions=("broken",), check=_unfinished("out.json", "broken"))

    def no_run_compared(d: Path, edit) -> Attempt:
        data = json.loads((d / "analysis.json").read_text())
        edit(data)
        (d / "other.json").write_text(json.dumps(data))
        return Attempt(["gate", "run", "--baseline", "other.json"], mentions=("baseline",))

    def other_variant(data: dict) -> None:
        for run in data["runs"]:
            run["run"] = "elsewhere-" + run["run"]
            run["variant"] = "zero1"

    return [Case("analyze-same-run-name-twice", "gate-logic", same_name_twice),
            Case("gate-baseline-duplicate-names", "gate-logic", baseline_dupes),
            Case("gate-current-duplicate-names", "gate-logic", current_dupes),
            Case("analyze-run-failed-before-traces", "gate-logic", failed_before_traces),
            Case("analyze-run-interrupted-before-traces", "gate-logic",
                 lambda d: failed_before_traces(d, "interrupted")),
            Case("analyze-run-running-owner-gone", "gate-logic",
                 lambda d: failed_before_traces(d, "running")),
            Case("gate-no-run-compared-other-variant", "gate-logic",
                 lambda d: no_run_compared(d, other_variant)),
            Case("gate-no-run-compared-empty", "gate-logic",
                 lambda d: no_run_compared(d, lambda a: a.update(runs=[]))),
            Case("gate-empty-current-folder", "gate-logic", lambda d: Attempt(
                ["gate", str(_mkdir(d / "empty")), "--baseline", "analysis.json"],
                mentions=("empty",))),
            Case("gate-current-only-failed-runs", "gate-logic", lambda d: _only_failed(d)),
            Case("gate-itself-passes", "gate-logic", lambda d: Attempt(
                ["gate", "analysis.json", "--baseline", "analysis.json"], codes=(0,)))]


def _only_failed(folder: Path) -> Attempt:
    (folder / "failed").mkdir()
    (folder / "failed" / "run.json").write_text(json.dumps(manifest("failed", "failed")))
    return Attempt(["gate", "failed", "--baseline", "analysis.json"], mentions=("failed",))


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _distinct_names(name: str):
    def check(folder: Path, result) -> str | None:
        runs = [r["run"] for r in json.loads((folder / name).read_text())["runs"]]
        return None if len(runs) == len(set(runs)) else f"two runs of one name: {runs}"
    return check


def _unfinished(name: str, run: str):
    def check(folder: Path, result) -> str | None:
        document = json.loads((folder / name).read_text())
        listed = json.dumps(document.get("unfinished", []))
        return None if run in listed else f"{run} is not in unfinished: {listed[:200]}"
    return check


def structure_cases() -> list[Case]:
    def tree(d: Path, make) -> Attempt:
        root = d / "tree"
        shutil.copytree(d / "run", root / "run")
        make(root)
        return Attempt(["analyze", "tree"], codes=(0, 2), one_line=False, timeout_s=120)

    def many(d: Path, count: int, make) -> Attempt:
        root = d / "many"
        root.mkdir()
        shutil.copytree(d / "run", root / "run")
        for i in range(count):
            make(root / f"x{i:05}.json")
        return Attempt(["analyze", "many", "--json", "out.json"], codes=(0, 2), one_line=False,
                       timeout_s=180)

    def deep(root: Path) -> None:
        path = root
        for _ in range(400):
            path = path / "d"
        path.mkdir(parents=True)
        shutil.copytree(root / "run", path / "run")

    def rankless(path: Path) -> None:
        path.write_text((path.parent / "run" / "rank0.json").read_text().replace(
            '"distributedInfo"', '"otherInfo"'))

    return [Case("analyze-folder-loop", "folders", lambda d: tree(
                d, lambda r: (r / "loop").symlink_to(r))),
            Case("analyze-folder-loop-deep", "folders", lambda d: tree(
                d, lambda r: (r / "run" / "up").symlink_to(r))),
            Case("analyze-folder-400-deep", "folders", lambda d: tree(d, deep)),
            Case("analyze-10000-dangling-links", "folders", lambda d: many(
                d, 10_000, lambda p: p.symlink_to(p.parent / "none"))),
            Case("analyze-10000-fifos", "folders", lambda d: many(d, 10_000, os.mkfifo)),
            Case("analyze-10000-empty-folders", "folders", lambda d: many(
                d, 10_000, lambda p: p.mkdir())),
            Case("analyze-3000-rankless-traces", "folders", lambda d: many(d, 3000, rankless)),
            Case("analyze-10000-empty-files", "folders", lambda d: many(
                d, 10_000, lambda p: p.write_text("")))]


def cases() -> list[Case]:
    return [*name_cases(), *gate_cases(), *structure_cases()]
