"""What a terminal shows: tables and text fitted to its width (100 columns when it is unknown),
never a word cut; --wide as a table; one name per metric; the CLI's manners (short flags,
--quiet, suggestions)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import click.testing
import pytest

from ddpprof.cli import cli
from ddpprof.metrics.registry import METRICS, RENAMED
from ddpprof.render.output import Output, Section, terminal
from ddpprof.render.table import Column, Table, to_csv, to_markdown, to_text, wrap

DLRM = Path(__file__).resolve().parent / "fixtures" / "real-traces" / \
    "param-dlrm-8rank-alltoall"
LONG = ("rank 7 arrives last at collectives (76% of the waiting is for it): the other ranks "
        "spend 6.47 ms per step waiting; accumulate over micro-batches with "
        "set_requires_gradient_sync(False) in FSDP2")


def words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("width", [80, 100, 120])
def test_text_wraps_to_the_width_and_never_cuts_a_word(width):
    output = Output(None, sections=[Section("What to change:", [f"1. [high] {LONG}"] * 2)])
    text = terminal(output, wide=False, tty=False, width=width)
    lines = text.splitlines()
    assert max(map(len, lines)) <= width
    assert words(text) == words(f"What to change: 1. [high] {LONG} 1. [high] {LONG}")
    # a numbered line's continuations are indented past its number
    assert all(line.startswith(("1. ", "What", "   ")) for line in lines if line)


def test_a_word_longer_than_the_line_is_kept_whole():
    assert wrap("a " + "x" * 30 + " b", 10) == ["a", "x" * 30, "b"]


def table(rows: int = 3) -> Table:
    return Table([Column("run", max_width=12), Column("exposed_comm_pct"),
                  Column("overlap_pct"), Column("top_finding")],
                 [{"run": f"pytorch_ddp-mlp-small-n{k}", "exposed_comm_pct": 12.5 * k,
                   "overlap_pct": 1000.0 + k, "top_finding": "bucket_cap_too_large"}
                  for k in range(rows)])


@pytest.mark.parametrize("width", [60, 80, 100])
def test_a_table_fits_the_width_numbers_whole(width):
    text = to_text(table(), width=width)
    assert max(map(len, text.splitlines())) <= width
    for k in range(3):      # every number is printed whole, on one line
        assert f"{1000 + k:,.2f}" in text and f"{12.5 * k:.2f}" in text
    # names wrap at their separators only: every piece is a piece of the name
    pieces = re.findall(r"pytorch_ddp-mlp-small-n\d|pytorch_|ddp-|mlp-|small-|n\d", text)
    assert "".join(pieces).count("pytorch_ddp-mlp-small-n") + "".join(pieces).count(
        "pytorch_") >= 3


def test_columns_that_cannot_fit_are_left_out_and_said_so():
    text = to_text(table(), width=30)
    assert "more columns do not fit in 30 columns: --wide" in text
    assert max(map(len, text.splitlines()[:-1])) <= 30


def test_wide_is_a_table_of_one_row_per_column():
    wide = Table([Column(f"metric_number_{k}_pct") for k in range(30)],
                 [{f"metric_number_{k}_pct": float(k) for k in range(30)}] * 2)
    text = to_text(wide, wide=True, width=80)
    assert max(map(len, text.splitlines())) <= 80
    assert text.splitlines()[2].split() == ["metric_number_1_pct", "1.00", "1.00"]


def test_the_analyze_table_at_80_columns(ddpprof_cli, tmp_path):
    result = ddpprof_cli("analyze", str(DLRM), env={"COLUMNS": "80"}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines and max(map(len, lines)) <= 80
    assert "exposed_" in lines[0] or "exposed_comm_pct" in lines[0]
    wide = ddpprof_cli("analyze", str(DLRM), "--wide", env={"COLUMNS": "80"}, cwd=tmp_path)
    assert max(map(len, wide.stdout.splitlines())) <= 80
    assert re.search(r"^exposed_comm_pct +37\.58$", wide.stdout, re.MULTILINE)


def test_one_name_per_metric_in_table_csv_and_markdown():
    renamed = Table([Column("exposed_comm_ms_per_step", attr="exposed_comm_ms"),
                     Column("before_mib", attr="before_size_bytes", scale=2**20)],
                    [{"exposed_comm_ms": 1.5, "before_size_bytes": 2**21}])
    assert to_text(renamed, width=100).split()[:2] == ["exposed_comm_ms_per_step", "before_mib"]
    assert to_csv(renamed).splitlines() == ["exposed_comm_ms_per_step,before_mib", "1.5,2.0"]
    assert to_markdown(renamed).splitlines()[0] == "| exposed_comm_ms_per_step | before_mib |"


def _all_tables() -> list[Column]:
    from ddpprof.bench import scaling as bench
    from ddpprof.commands import record, simulate, variants
    from ddpprof.gate import rules as gate
    from ddpprof.memory import estimate as memory
    from ddpprof.report import console, critical_path, diff
    from ddpprof.sweep import bucket_caps as sweep

    return [*console.RUN_COLUMNS, *console.PER_STEP_COLUMNS, *console.GROUP_COLUMNS,
            *critical_path.PATH_COLUMNS, *critical_path.WHAT_IF_COLUMNS, *diff.PART_COLUMNS,
            *diff.ITEM_COLUMNS, *bench.COLUMNS, *sweep.COLUMNS, *simulate.COLUMNS,
            *record.COLUMNS, *variants.COLUMNS, *gate.COLUMNS,
            *memory.comparisons_table([]).columns]


def test_every_printed_metric_is_registered_under_one_name():
    """Each column whose name carries a unit is a metric of the registry; no column is named
    as a metric was before, nor with a '%'."""
    unit = re.compile(r"_(pct|ms|us|mib|gib|gbps|per_step|per_s)$")
    for column in _all_tables():
        assert "%" not in column.key and column.key not in RENAMED, column
        if unit.search(column.key) and not column.key.startswith(("before_", "after_",
                                                                   "estimated_", "measured_")):
            assert column.key in METRICS, column.key


def test_metric_names_carry_their_unit():
    for name, metric in METRICS.items():
        if metric.unit == "%":
            assert name.endswith(("_pct", "_min", "_max")), name
        if metric.unit == "ms":
            assert "_ms" in name, name


def invoke(*args: str) -> click.testing.Result:
    return click.testing.CliRunner().invoke(cli, list(args), terminal_width=100)


def test_short_flags():
    assert invoke("-h").exit_code == 0 and "Usage" in invoke("-h").output
    analyze = invoke("analyze", "-h").output
    assert re.search(r"-j\b.*--jobs", analyze) and re.search(r"-q\b.*--quiet", analyze)
    assert re.search(r"-o\b.*--out", invoke("record", "-h").output)


def test_quiet_on_every_command_that_can_take_time():
    for name, command in cli.commands.items():
        options = {opt for p in command.params for opt in getattr(p, "opts", [])}
        if name != "variants":
            assert {"--quiet", "-q"} <= options, name


@pytest.mark.parametrize(("args", "expected"), [
    (["record", "--variant", "pytorch_dp"], "did you mean 'pytorch_ddp'?"),
    (["memory", "--model", "mlp-smal", "--world-size", "2"], "did you mean 'mlp-small'?"),
])
def test_a_mistyped_name_gets_a_suggestion(args, expected, ddpprof_cli):
    result = ddpprof_cli(*args)
    assert result.returncode == 2 and expected in result.stderr
    assert result.stderr.count("\n") == 1 and len(result.stderr) < 300


def test_a_mistyped_metric_gets_a_suggestion_and_an_old_name_a_note(tmp_path, ddpprof_cli):
    runs = DLRM.parent / "tbplugin-micro-gloo-cpu"
    base = ddpprof_cli("analyze", str(runs), "--json", str(tmp_path / "b.json"))
    assert base.returncode == 0, base.stderr
    typo = ddpprof_cli("gate", str(tmp_path / "b.json"), "--baseline", str(tmp_path / "b.json"),
                       "--rule", "exposed_com_pct <= baseline + 1")
    assert typo.returncode == 2 and "did you mean 'exposed_comm_pct'?" in typo.stderr
    old = ddpprof_cli("gate", str(tmp_path / "b.json"), "--baseline", str(tmp_path / "b.json"),
                      "--rule", "comm_overhead_pct <= baseline + 1")
    assert old.returncode == 0, old.stderr
    assert "comm_overhead_pct is now called exposed_comm_pct" in old.stderr


def test_record_says_its_phase_and_a_bare_record_is_quick():
    from ddpprof.core.progress import phase

    assert [phase(k, 4) for k in (0, 1, 3, 4)] == [
        "starting ranks", "step 2 of 4", "step 4 of 4", "writing traces"]
    model = next(p for p in cli.commands["record"].params if p.name == "models")
    assert model.default == ("mlp-small",)    # records in seconds, not mlp-large's minute


def test_a_number_is_never_broken():
    assert wrap("-5,459.42", 3) == ["-5,459.42"]
    wide = Table([Column(f"metric_number_{k}_pct") for k in range(20)],
                 [{f"metric_number_{k}_pct": 123456.75 for k in range(20)}] * 3)
    text = to_text(wide, wide=True, width=40)
    assert "123,456.75" in text and "123," not in text.replace("123,456.75", "")
