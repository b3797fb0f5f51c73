"""Every option value is parsed by the types of ``ddpprof/grammar/options.py``: numbers in ASCII
digits only (``'²'`` passes ``str.isdigit`` and fails ``int``; ``'٣'`` passes ``int``), ranges
checked, and a rank checked against the run read (an unknown rank names the ranks there are),
the gate's ``[rank=N]`` selector too; calibrate's list of sizes is counted before it is made.
Each case failed on the code before (a traceback, a what-if of a rank that does not exist, or
gigabytes of sizes listed)."""

from __future__ import annotations

import pytest
from bounded import cli, one_line
from test_hostile_inputs import GIVEN_COST
from test_hostile_outputs import two_rank_run

from ddpprof.grammar.options import ascii_decimal, ascii_whole


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    return two_rank_run(tmp_path_factory.mktemp("options") / "run")


@pytest.mark.parametrize("text", ["²", "٣", "1_000", "１", " 1 2", "0x10", "", "+", "1" * 500])
def test_only_ascii_digits_make_a_whole_number(text):
    assert ascii_whole(text) is None


@pytest.mark.parametrize("text", ["²", "٣.5", "1_0.5", "1e", ".", "1.2.3", "0x1p3", "½"])
def test_only_ascii_numbers_make_a_number(text):
    assert ascii_decimal(text) is None


def test_ascii_numbers_read_as_python_reads_them():
    assert (ascii_whole(" -12 "), ascii_decimal("1e-3"), ascii_decimal("-.5")) == (-12, 1e-3,
                                                                                  -0.5)


@pytest.mark.parametrize(("command", "option", "value"), [
    ("critical-path", "--rank-delay", "²=5"), ("critical-path", "--rank-delay", "٣=5"),
    ("critical-path", "--rank-delay", "1=٣"), ("critical-path", "--rank-delay", "1=1e308"),
    ("critical-path", "--faster", "gemm=²"), ("critical-path", "--faster-network", "٣"),
    ("simulate", "--rank-delay", "²=5"), ("simulate", "--shared-cores", "٣"),
    ("analyze", "--jobs", "²"), ("analyze", "--jobs", "٣"),
    ("diff", "--run-noise", "1e308"), ("diff", "--run-noise", "٣")])
def test_a_number_not_in_ascii_digits_or_out_of_range_is_one_line(command, option, value, run,
                                                                   capsys):
    extra = [run] if command == "diff" else []
    cost = GIVEN_COST if command == "simulate" else []
    one_line(cli(capsys, command, run, *extra, *cost, option, value), option)


@pytest.mark.parametrize(("option", "value"), [
    ("--nproc", "٣"), ("--steps", "²"), ("--seed", "1_0"), ("--rdzv-endpoint", "host:²"),
    ("--inject-delay", "²:5"), ("--bucket-cap-mib", "٣")])
def test_record_refuses_such_numbers_before_launching(option, value, tmp_path, capsys):
    one_line(cli(capsys, "record", "--variant", "simple_ddp", "--out", tmp_path, option,
                 value), option)


@pytest.mark.parametrize(("option", "value"), [
    ("--step-factor", "1.0000001"), ("--step-factor", "1e9"), ("--iters", "1000000000"),
    ("--min-bytes", "٣K")])
def test_calibrate_sizes_and_repeats_are_bounded_before_anything_is_made(option, value,
                                                                         tmp_path, capsys):
    one_line(cli(capsys, "calibrate", "--out", tmp_path, "--min-bytes", "4K", "--max-bytes",
                 "256M", option, value), option)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("command", [["critical-path"], ["simulate", *GIVEN_COST]])
def test_a_rank_the_run_does_not_have_is_one_line_naming_its_ranks(command, run, capsys):
    one_line(cli(capsys, *command[:1], run, *command[1:], "--rank-delay", "99999=5"),
             "--rank-delay 99999=5", "no rank 99999", "its ranks: 0, 1")


def test_the_gate_rank_selector_takes_ascii_digits_and_names_the_ranks_there(run, tmp_path,
                                                                             capsys):
    document = tmp_path / "a.json"
    assert cli(capsys, "analyze", run, "--json", document).code == 0
    one_line(cli(capsys, "gate", document, "--baseline", document, "--rule",
                 "overlap_pct[rank=²] >= 0"), "selector")
    one_line(cli(capsys, "gate", document, "--baseline", document, "--rule",
                 "overlap_pct[rank=7] >= 0"), "no rank 7", "its ranks: 0, 1")
