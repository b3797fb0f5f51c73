"""One grammar across the commands: the same option is the same everywhere, every result has
--json, tables have --csv/--markdown FILE and --wide, choices are in --help, and the commands
are listed in the order a user works."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import click.testing
import pytest
from trace_builders import span, step, write_trace

from ddpprof.cli import cli
from ddpprof.grammar.options import ListOf
from ddpprof.variants import VARIANT_NAMES

COMMANDS: dict[str, click.Command] = cli.commands
WORKFLOW = ["record", "analyze", "critical-path", "diff", "gate", "hang", "simulate",
            "calibrate", "sweep", "bench", "memory", "variants"]


def _options(command: click.Command) -> dict[str, click.Option]:
    return {opt: p for p in command.params if isinstance(p, click.Option) for opt in p.opts}


def _shape(option: click.Option) -> tuple:
    """What must agree wherever the option appears: its type, whether it repeats or is a
    flag, and for lists the type of an item."""
    kind = option.type
    item = kind.item if isinstance(kind, ListOf) else None
    return (type(kind).__name__, repr(item) if isinstance(item, click.Choice) is False
            else type(item).__name__, option.multiple, option.is_flag)


def test_commands_are_listed_in_workflow_order():
    assert list(COMMANDS) == WORKFLOW
    help_text = click.testing.CliRunner().invoke(cli, ["--help"], terminal_width=200).output
    listed = re.findall(r"^\W+([\w-]+) {2,}\S", help_text.split("Commands")[1], re.MULTILINE)
    assert listed == WORKFLOW


def test_the_same_option_has_the_same_shape_everywhere():
    seen: dict[str, tuple[str, tuple]] = {}
    for name, command in COMMANDS.items():
        for opt, option in _options(command).items():
            if opt in seen:
                first, shape = seen[opt]
                assert _shape(option) == shape, f"{opt}: {name} differs from {first}"
            else:
                seen[opt] = (name, _shape(option))
    # the lists: repeatable everywhere, one value or a comma list each time
    for opt in ("--variant", "--model", "--nproc", "--bucket-cap-mib", "--world-size"):
        assert seen[opt][1][2] is True and seen[opt][1][0] == "ListOf", opt


def test_every_result_has_json_and_every_table_csv_markdown_and_wide():
    for name, command in COMMANDS.items():
        options = _options(command)
        assert "--json" in options, name
        for opt in ("--csv", "--markdown"):
            # a FILE (or -), never a flag: the table goes where it is asked to
            assert not options[opt].is_flag and isinstance(options[opt].type, click.Path), name
        assert options["--wide"].is_flag, name
    assert {n for n, c in COMMANDS.items() if "--html" in _options(c)} == {
        "analyze", "critical-path", "diff", "simulate", "calibrate", "sweep", "bench"}
    for name, command in COMMANDS.items():
        options = _options(command)
        if "--html" in options:  # a flag, so it never takes the path that follows it
            assert options["--html"].is_flag and not options["--html-out"].is_flag, name


def test_each_help_states_its_exit_codes_and_lists_choices():
    runner = click.testing.CliRunner()
    for name in COMMANDS:
        text = runner.invoke(cli, [name, "--help"], terminal_width=200).output
        assert "Exit status: 0" in text and "2 bad input" in text, name
    record = runner.invoke(cli, ["record", "--help"], terminal_width=200).output
    for variant in VARIANT_NAMES:  # each with its one-line description
        assert re.search(rf"{variant}: \w", record), variant
    assert "mlp-small" in record and "auto|gloo|nccl" in record
    assert "--bucket-cap-mb" not in record   # the old spelling works, unadvertised


@pytest.mark.parametrize("args", [["--variant", ""], ["--model", ""], ["--nproc", ","],
                                  ["--bucket-cap-mib", " "], ["--variants", ""]])
def test_empty_lists_are_one_line(args, ddpprof_cli, tmp_path):
    for command in ("record", "bench", "sweep"):
        if args[0] not in _options(COMMANDS[command]) and args[0] != "--variants":
            continue
        result = ddpprof_cli(command, *args, "--out", str(tmp_path / "out"))
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "expected a value, or several separated by commas" in result.stderr
        assert not (tmp_path / "out").exists()


def test_lists_repeat_or_take_commas_alike():
    runner = click.testing.CliRunner()
    seen = []

    @click.command()
    @__import__("ddpprof.grammar.options", fromlist=["nproc_option"]).nproc_option("2")
    def probe(nprocs):
        seen.append(nprocs)

    runner.invoke(probe, ["--nproc", "4,1", "--nproc", "2", "--nproc", "4"])
    runner.invoke(probe, [])
    assert seen == [[1, 2, 4], [2]]


def _two_runs(root: Path) -> Path:
    for name in ("first-run", "second-run"):
        write_trace(root / name / "rank0.json",
                    [step(0, 0, 100), step(1, 100, 200), step(2, 200, 300),
                     span("aten::mm", 10, 60), span("aten::mm", 110, 160),
                     span("gloo:all_reduce", 40, 90, cat="user_annotation", tid=2),
                     span("gloo:all_reduce", 140, 190, cat="user_annotation", tid=2)],
                    world_size=1)
    return root


@pytest.mark.parametrize("order", ["flag first", "flag last"])
def test_html_never_swallows_a_path(order, tmp_path, ddpprof_cli):
    _two_runs(tmp_path / "traces")
    args = ["--html", "traces"] if order == "flag first" else ["traces", "--html"]
    result = ddpprof_cli("analyze", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "reports" / "traces.html").is_file()
    assert f"report: {Path('reports') / 'traces.html'}" in result.stderr


def test_default_table_fits_100_columns_and_shared_notes_print_once(tmp_path, ddpprof_cli):
    _two_runs(tmp_path / "traces")
    # a terminal 100 columns wide, whatever the environment pytest runs in says
    result = ddpprof_cli("analyze", str(tmp_path / "traces"), env={"COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("\n\n")[0].splitlines()
    assert max(map(len, table)) <= 100
    assert table[0].split() == ["run", "ranks", "step_ms", "compute_pct", "exposed_comm_pct",
                                "overlap_pct", "top_finding"]
    # each run: steps [0,100) and [100,200) analyzed (the last dropped); compute [10,60) and
    # [110,160): 50 %; all-reduce [40,90): 50 µs of which [40,60) beside compute: 40 %
    # overlap, 30 µs exposed of 100: 30 %; step 100 µs = 0.10 ms
    first = table[2].split()
    assert first[:6] == ["first-run", "1", "0.10", "50.00", "30.00", "40.00"]
    assert result.stderr.count("last ProfilerStep dropped") == 1
    assert "every run: last ProfilerStep dropped" in result.stderr
    # --wide: every column, as a table of one row per column (it cannot fit otherwise)
    wide = ddpprof_cli("analyze", str(tmp_path / "traces"), "--wide").stdout.split("\n\n")[0]
    lines = wide.splitlines()
    assert lines[0].split() == ["metric", "first-run", "second-run"]
    assert len(lines) > 60 and max(map(len, lines)) <= 100
    # idle: the window [0,100) less the busy [10,90) (compute [10,60), all-reduce [40,90))
    assert [line.split() for line in lines if line.startswith("idle_pct ")] == [
        ["idle_pct", "20.00", "20.00"]]


def test_json_to_standard_output_is_the_document_alone(tmp_path, ddpprof_cli):
    _two_runs(tmp_path / "traces")
    for command in (["analyze", str(tmp_path / "traces")], ["variants"],
                    ["memory", "--model", "mlp-tiny", "--world-size", "2"]):
        result = ddpprof_cli(*command, "--json", "-")
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout)
        assert document["schema"].startswith("ddpprof.") and document["version"] >= 1
        assert "─" in result.stderr     # the table went to stderr


def test_two_outputs_on_standard_output_are_refused(tmp_path, ddpprof_cli):
    result = ddpprof_cli("variants", "--json", "-", "--csv", "-")
    assert result.returncode == 2 and "only one output can be standard output" in result.stderr
