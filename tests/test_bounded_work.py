"""Work that a file controls stays bounded and linear in it: a user's regular expression
cannot backtrack (RE2), names longer than ``trace.names.MAX_NAME_CHARS`` are shortened before
anything reads them, the scrubbing of secrets is linear, a run's groups are split once, and
the lenient decoder keeps every argument the strict one keeps. Each test failed on the code
before (minutes of CPU, or one process group reported as two). No test is timed: the ones
about time run a command under a generous timeout that the code before ran far past."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from bounded import cli, one_line
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_builders import kernel, step, write_trace

from ddpprof.core.errors import without_secrets
from ddpprof.trace.decode_events import Event, lenient_event
from ddpprof.trace.names import MAX_NAME_CHARS

REPO = Path(__file__).resolve().parent.parent
#: Far beyond what each command needs here (seconds), far below what the code before
#: took (minutes, or hours).
TIMEOUT_S = 180


def _within_timeout(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddpprof.cli", *args], capture_output=True,
                          text=True, timeout=TIMEOUT_S, cwd=REPO,
                          env={"CI": "true", "PATH": "/usr/bin:/bin"})


def _gpu_run(folder: Path, kernel_name: str, group: str = "1") -> Path:
    for rank in (0, 1):
        events = [step(s, 300 * s, 300 * s + 300) for s in range(3)]
        for s in range(3):
            events += [kernel(kernel_name, 300 * s + 10, 300 * s + 100, 1 + s),
                       kernel("ncclDevKernel_AllReduce_Sum_f32", 300 * s + 120,
                              300 * s + 200, 10 + s, stream=20, **{
                                  "Collective name": "allreduce", "In msg nelems": 256,
                                  "dtype": "Float", "Seq": s, "Process Group Name": group,
                                  "Process Group Description": group, "Group size": 2})]
        write_trace(folder / f"rank{rank}.json", events, rank=rank, backend="nccl")
    return folder


# ---- user regexes -----------------------------------------------------------------------------

def test_a_backtracking_regex_on_a_long_name_finishes(tmp_path):
    run = _gpu_run(tmp_path / "run", "a" * 10_000)
    result = _within_timeout("analyze", str(run), "--comm-kernel", "(a+)+$", "--json", "-")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["runs"][0]["ranks"] == 2


@pytest.mark.parametrize("pattern", [r"(a)\1", "(?=nccl)", "(?<!x)y", "a++", "(unclosed"])
def test_a_regex_re2_cannot_match_is_one_line(pattern, tmp_path, capsys):
    run = _gpu_run(tmp_path / "run", "gemm")
    one_line(cli(capsys, "analyze", run, "--comm-kernel", pattern), "--comm-kernel",
             repr(pattern))


# ---- names a file controls ----------------------------------------------------------------

def test_huge_names_are_shortened_before_any_table_or_scrubbing(tmp_path):
    """A 1,000,000-character process group and a 200,000-character kernel name: read in
    seconds (the code before printed nothing in 300 s), shortened with a note, and two names
    that differ only after the cut stay apart."""
    run = _gpu_run(tmp_path / "run", "k" * 200_000, group="g" * 1_000_000)
    result = _within_timeout("analyze", str(run), "--json", str(tmp_path / "a.json"),
                             "--markdown", str(tmp_path / "a.md"), "--html-out",
                             str(tmp_path / "a.html"))
    assert result.returncode == 0, result.stderr
    assert f"longer than {MAX_NAME_CHARS:,} characters shortened" in result.stderr
    document = (tmp_path / "a.json").read_text()
    assert "200,000 chars" in document and "g" * (MAX_NAME_CHARS + 1) not in document
    from ddpprof.trace.names import shorten

    a, b = shorten("x" * 9000 + "a"), shorten("x" * 9000 + "b")
    assert a != b and len(a) == len(b) == MAX_NAME_CHARS


_OLD_SCRUB = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:)[^/@\s]+@")


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="ab1:/@ .+-xZ\n", max_size=40))
def test_scrubbing_finds_the_passwords_the_regex_found(text):
    assert without_secrets(text) == _OLD_SCRUB.sub(r"\1***@", text)


def test_scrubbing_is_linear_in_a_long_run_of_letters():
    script = ("from ddpprof.core.errors import without_secrets as w\n"
              "for t in ('a' * 1_000_000 + '://u:p@h', 'a://' * 250_000):\n"
              "    w(t)\n"
              "assert w('x' * 10**6 + 'http://me:pw@host') == 'x' * 10**6 + 'http://me:***@host'")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=TIMEOUT_S, cwd=REPO)
    assert result.returncode == 0, result.stderr


# ---- many groups --------------------------------------------------------------------------

class _Counted(list):
    """A list that counts the items read from it by index."""

    reads = 0

    def __getitem__(self, index):
        _Counted.reads += 1
        return super().__getitem__(index)


def test_a_run_of_many_groups_reads_each_call_a_bounded_number_of_times(tmp_path,
                                                                         monkeypatch):
    """500 groups, 600 calls per rank: each call's group is read a few times, not once per
    group (the code before read it 500 times over in ``analysis.groups`` and in
    ``metrics.waits``: 10,000 groups took 177 s to analyze and 560 s to diff;
    ``benchmarks/scaling_inputs.py --only groups`` measures the time)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from scaling_inputs import many_groups
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from ddpprof.analysis import AnalysisOptions, analyze_paths, device_rank, host_rank, rank_common
    from ddpprof.analysis.profile import run_profile
    from ddpprof.trace import calls

    made = calls.collective_calls
    calls_made = []

    def counted(*args, **kwargs):
        calls = made(*args, **kwargs)
        calls_made.append(calls.n)
        return dataclasses.replace(calls, group=_Counted(calls.group),
                                   groups=_Counted(calls.groups))

    for module in (device_rank, host_rank, rank_common):   # where the analysis makes them
        monkeypatch.setattr(module, "collective_calls", counted)
    _Counted.reads = 0
    [run] = analyze_paths([many_groups(tmp_path / "run", 500)], AnalysisOptions(jobs=1)).runs
    profile = run_profile(run)
    assert profile is not None and len(profile.collectives) == len(run.process_groups) > 400
    assert _Counted.reads <= 20 * sum(calls_made), (_Counted.reads, sum(calls_made))


# ---- the lenient decoder ------------------------------------------------------------------

_ARG = st.one_of(st.none(), st.integers(-5, 10**6), st.text(max_size=8),
                 st.lists(st.integers(0, 64), max_size=4), st.booleans())
_GROUP_ARGS = st.fixed_dictionaries({}, optional={
    name: _ARG for name in (
        "Process Group Name", "Process Group Description", "Process Group Ranks",
        "Group size", "Collective name", "In msg nelems", "Out msg nelems", "dtype", "Seq",
        "In split size", "Out split size", "name")})


@settings(max_examples=100, deadline=None)
@given(_GROUP_ARGS)
def test_the_lenient_decoder_keeps_every_argument_the_strict_one_keeps(args):
    """An event read leniently (one of its fields of an odd type) keeps its arguments as the
    strict decoder reads them: the code before lost the group's description (and the
    all-to-all splits), so one rank's calls were filed under another group."""
    event = {"ph": "X", "name": "nccl:all_reduce", "ts": 1, "dur": 2, "args": args}
    strict = msgspec.json.decode(json.dumps(event), type=Event)
    lenient = lenient_event(json.loads(json.dumps(event)))
    for field in msgspec.structs.fields(strict.args):
        value, other = getattr(strict.args, field.name), getattr(lenient.args, field.name)
        if isinstance(value, msgspec.Raw):
            value, other = bytes(value), bytes(other)
            value, other = json.loads(value or b"null"), json.loads(other or b"null")
        assert value == other, field.name


def test_one_rank_read_leniently_stays_in_the_same_group(tmp_path, capsys):
    run = _gpu_run(tmp_path / "run", "gemm", group="7")
    path = run / "rank1.json"
    trace = json.loads(path.read_text())
    trace["traceEvents"].append({"ph": "X", "name": "odd", "ts": "soon", "dur": 1})
    for event in trace["traceEvents"]:
        if "Process Group Description" in event.get("args", {}):
            event["args"]["Process Group Description"] = "mesh_dp"
    path.write_text(json.dumps(trace).replace('"Process Group Description": "7"',
                                              '"Process Group Description": "mesh_dp"'))
    rank0 = json.loads((run / "rank0.json").read_text())
    for event in rank0["traceEvents"]:
        if "Process Group Description" in event.get("args", {}):
            event["args"]["Process Group Description"] = "mesh_dp"
    (run / "rank0.json").write_text(json.dumps(rank0))
    ran = cli(capsys, "analyze", run, "--json", "-")
    assert ran.code == 0, ran.err
    groups = json.loads(ran.out)["runs"][0]["process_groups"]
    assert [g["name"] for g in groups] == ["dp"]
