"""``ddpprof hang`` on Flight Recorder dumps written by hand (``fr_dumps``): each kind of hang
named with its rank, group, sequence id and call site; partial dumps said so; hostile files
refused in bounded time; and the invariants of the matching, fuzzed."""

from __future__ import annotations

import json
import os
import pickle
import time
from dataclasses import replace
from pathlib import Path

import pytest
from fr_dumps import BCAST, GRADS, LOSS, Op, Rank, steps, write
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpprof.cli import main
from ddpprof.core.errors import UsageError
from ddpprof.hang import diagnose, read_dumps
from ddpprof.hang.result import HangDocument


def run_hang(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    """``ddpprof hang PATH --json -`` in this process: exit status, document, stderr."""
    try:
        main(["hang", str(path), "--json", "-", "--quiet"])
        code = 0
    except SystemExit as exit:
        code = int(exit.code or 0)
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else {}, err


def diagnosis(folder: Path) -> HangDocument:
    return diagnose(read_dumps(folder))


def test_a_rank_that_never_issued_the_next_collective_is_named(tmp_path, capsys):
    ranks = [Rank(r, steps(3, GRADS, LOSS)) for r in range(4)]
    ranks[2].ops.pop()                        # rank 2 never issues the last loss all-reduce
    code, document, err = run_hang(write(tmp_path, ranks), capsys)
    assert code == 0, err
    hang = document["hang"]
    assert (hang["kind"], hang["collective"]["seq"], hang["collective"]["group_label"]) == \
        ("not_reached", 6, "world")
    assert [c["rank"] for c in hang["culprits"]] == [2]
    assert hang["reached"] == [0, 1, 3] and hang["missing"] == [2]
    assert hang["collective"]["site"]["frames"][0] == {"name": "step", "file": "/job/train.py",
                                                       "line": 30}
    culprit = hang["culprits"][0]
    assert culprit["status"] == "busy"
    assert culprit["last"]["seq"] == 5 and culprit["last"]["site"]["frames"][0]["line"] == 20
    assert "HANG: all_reduce(1 float) #6 of world never completed: rank 2" in err


def test_a_different_op_is_a_desync_against_the_majority(tmp_path):
    ranks = [Rank(r, steps(2, GRADS, LOSS)) for r in range(3)]
    ranks[1].ops[-1] = Op("all_gather", 1, line=31)
    hang = diagnosis(write(tmp_path, ranks)).hang
    assert hang is not None and (hang.kind, hang.collective.seq) == ("mismatch", 4)
    assert [c.rank for c in hang.culprits] == [1] and hang.expected == [0, 2]
    assert hang.culprits[0].issued is not None
    assert hang.culprits[0].issued.site.frames[0].line == 31    # type: ignore[union-attr]
    assert "a different collective" in hang.culprits[0].summary


def test_between_two_ranks_the_one_that_breaks_its_own_step_is_the_culprit(tmp_path):
    """A size mismatch between two ranks: one against one, so the side that issued what it
    issued one step earlier is taken as right, whichever rank it is."""
    for culprit in (0, 1):
        ranks = [Rank(r, steps(3, GRADS, LOSS)) for r in range(2)]
        ranks[culprit].ops[-2] = replace(GRADS, size=4000)
        hang = diagnosis(write(tmp_path / str(culprit), ranks)).hang
        assert hang is not None and hang.kind == "mismatch" and not hang.tie
        assert [c.rank for c in hang.culprits] == [culprit] and hang.collective.seq == 5
        assert "different sizes" in hang.culprits[0].summary


def test_a_skipped_collective_is_an_order_problem(tmp_path):
    """Rank 1 skips the loss all-reduce of the third step: its gradients' all-reduce of the
    next step meets the others' loss all-reduce, and both hang there."""
    ranks = [Rank(r, [*steps(2, GRADS, LOSS, BCAST), GRADS, LOSS]) for r in range(2)]
    ranks[1].ops[-1] = BCAST
    document = diagnosis(write(tmp_path, ranks))
    hang = document.hang
    assert hang is not None and (hang.kind, hang.shift, hang.collective.seq) == ("order", 1, 8)
    assert [c.rank for c in hang.culprits] == [1]
    assert "skipped all_reduce(1 float)" in hang.culprits[0].summary
    assert document.next_steps[0].startswith("rank 1 skipped the call at /job/train.py:30")


def test_a_dump_that_breaks_its_pattern_names_the_culprit_when_its_peer_left_none(tmp_path):
    """gloo aborts the rank that receives a message of the wrong size: it leaves no dump, and
    the sender goes on. The sender's one-off break of its own step is the evidence."""
    ranks = [Rank(1, [*steps(3, GRADS, LOSS, BCAST), GRADS, replace(LOSS, size=2), BCAST])]
    document = diagnose(read_dumps(write(tmp_path, ranks)))
    assert document.world_size == 2 and document.missing_dumps == [0]
    hang = document.hang
    assert hang is not None and (hang.kind, hang.collective.seq) == ("deviation", 11)
    assert [c.rank for c in hang.culprits] == [1] and hang.pattern is not None
    assert hang.pattern.call.input_sizes == ((1,),) and hang.unknown == [0]


def test_a_last_collective_of_other_sizes_from_the_same_line_is_a_deviation(tmp_path):
    """The receiver aborted before the sender issued anything else: the sender's last
    collective, from the line that issued the others, with one element more."""
    ranks = [Rank(1, [*steps(3, GRADS, LOSS), GRADS, replace(LOSS, size=2)])]
    hang = diagnose(read_dumps(write(tmp_path, ranks))).hang
    assert hang is not None and (hang.kind, hang.collective.seq) == ("deviation", 8)
    # from another line, the same sizes-breaking call is only the end of the pattern
    ranks = [Rank(1, [*steps(3, GRADS, LOSS), GRADS, replace(LOSS, size=2, line=99)])]
    hang = diagnose(read_dumps(write(tmp_path / "other", ranks))).hang
    assert hang is not None and hang.kind == "not_known"


def test_a_rank_without_a_dump_that_the_run_says_died(tmp_path):
    run = tmp_path / "run"
    write(run / "fr", [Rank(0, steps(3, GRADS, LOSS))])
    (run / "run.json").write_text(json.dumps({
        "schema_version": 3, "status": "failed",
        "error": {"message": "exited with code 1 without writing an error", "rank": 1},
        "config": {"nproc": 2, "variant": "pytorch_ddp"}}))
    document = diagnosis(run)
    hang = document.hang
    assert hang is not None and (hang.kind, hang.collective.seq) == ("not_known", 6)
    assert hang.culprits[0].rank == 1 and hang.culprits[0].status == "dead"
    assert document.run_status == "failed"
    assert any("rank 1 died" in step for step in document.next_steps)


def test_wrapped_buffers_compare_what_every_rank_still_holds(tmp_path):
    ranks = [Rank(r, steps(4, GRADS, LOSS), first_record=r * 3) for r in range(3)]
    for rank in ranks:         # the ring kept each rank's last 8 - r entries
        rank.skip_seqs = rank.first_record
        rank.ops = rank.ops[rank.first_record:]
    ranks[0].ops.pop()
    document = diagnosis(write(tmp_path, ranks))
    assert document.hang is not None and [c.rank for c in document.hang.culprits] == [0]
    assert document.hang.collective.seq == 8
    assert any("wrapped" in note for note in document.notes)
    assert document.groups[0].first_seq == 7


def _mesh_rank(r: int) -> tuple[Op, Op, dict[str, tuple[str, list[int]]]]:
    """Rank ``r`` of a 2 x 2 mesh (tensor-parallel pairs 0-1 and 2-3, data-parallel pairs 0-2
    and 1-3): its tensor-parallel all-reduce, its data-parallel all-gather, its groups."""
    tp = {0: ("tp0", [0, 1]), 1: ("tp0", [0, 1]), 2: ("tp1", [2, 3]), 3: ("tp1", [2, 3])}[r]
    dp = {0: ("dp0", [0, 2]), 2: ("dp0", [0, 2]), 1: ("dp1", [1, 3]), 3: ("dp1", [1, 3])}[r]
    return (Op("all_reduce", 64, line=50, group=tp[0], desc="mesh_tp"),
            Op("all_gather", 256, line=60, group=dp[0], desc="mesh_dp"),
            {tp[0]: ("mesh_tp", tp[1]), dp[0]: ("mesh_dp", dp[1])})


def test_a_hang_in_one_group_of_a_mesh_names_that_group(tmp_path):
    """A 2 x 2 mesh: rank 3 never issues its tensor-parallel all-reduce; its tensor-parallel
    peer waits there, its data-parallel peer waits for it in the next data-parallel one."""
    ranks = []
    for r in range(4):
        t, d, groups = _mesh_rank(r)
        ops = steps(3, d, t)
        if r == 3:
            ops.pop()
        ranks.append(Rank(r, ops + ([] if r in (2, 3) else [d]), groups=groups))
    document = diagnosis(write(tmp_path, ranks))
    hang = document.hang
    assert hang is not None and hang.collective.group == "tp1"
    assert (hang.collective.group_label, hang.collective.group_ranks) == ("tp", [2, 3])
    assert [c.rank for c in hang.culprits] == [3] and hang.collective.seq == 3
    # the data-parallel peers of both tp1 ranks wait for them: rank 3 is busy outside any
    # collective, rank 2 stuck in tp1 (so dp0's wait follows from tp1's and comes last)
    assert [(other.collective.group, [(c.rank, c.status) for c in other.culprits])
            for other in document.others] == [("dp1", [(3, "busy")]), ("dp0", [(2, "stuck")])]
    assert {g.group: g.problem for g in document.groups} == {
        "dp0": "not_reached", "dp1": "not_reached", "tp0": None, "tp1": "not_reached"}


def test_the_mismatch_that_holds_a_rank_comes_before_the_collective_it_never_reached(tmp_path):
    """A 2 x 2 mesh: rank 3 broadcasts in its tensor-parallel group where rank 2 all-reduces.
    Ranks 0 and 1 issue their data-parallel all-gather first in a step, at the same moment as
    the mismatch, so the dumps' times do not order the two problems (nor did the recorded run's
    reliably); rank 3 never issued the all-gather rank 1 waits in because it is held in the
    broadcast: the mismatch is the hang, the waits follow from it."""
    ranks = []
    for r in range(4):
        t, d, groups = _mesh_rank(r)
        if r in (0, 1):
            ops = [*steps(2, d, t), d]
        else:
            ops = [*steps(2, t, d), t if r == 2 else replace(t, op="broadcast", line=70)]
        ranks.append(Rank(r, ops, groups=groups))
    document = diagnosis(write(tmp_path, ranks))
    hang = document.hang
    assert hang is not None and (hang.kind, hang.collective.group) == ("mismatch", "tp1")
    assert [c.rank for c in hang.culprits] == [3] and hang.expected == [2]
    assert sorted((o.collective.group, [c.rank for c in o.culprits]) for o in document.others
                  ) == [("dp0", [2]), ("dp1", [3])]


def test_ranks_that_wait_for_each_other_in_two_groups_are_a_deadlock(tmp_path):
    groups = {"1": ("a", [0, 1]), "2": ("b", [0, 1])}
    a, b = Op(group="1", desc="a", line=70), Op(group="2", desc="b", line=80)
    ranks = [Rank(0, [a, b, a], groups=groups), Rank(1, [a, b, b], groups=groups)]
    document = diagnosis(write(tmp_path, ranks))
    assert document.deadlock in ([0, 1, 0], [1, 0, 1])
    assert "in the same order on every rank" in document.next_steps[0]


def test_collectives_every_rank_issued_alike_are_no_hang(tmp_path, capsys):
    code, document, err = run_hang(write(tmp_path, [Rank(r, steps(5, GRADS, LOSS))
                                                    for r in range(4)]), capsys)
    assert code == 1 and document["verdict"] == "no_hang" and document["hang"] is None
    assert "no hang: every collective in the dumps (10 over 1 process group(s))" in err


def test_nccl_states_show_a_collective_every_rank_issued_but_not_all_completed(tmp_path):
    ranks = [Rank(r, [replace(GRADS, state="completed"), replace(LOSS, state="completed")])
             for r in range(2)]
    ranks[1].ops[-1] = replace(LOSS, state="started")
    hang = diagnosis(write(tmp_path, ranks)).hang
    assert hang is not None and (hang.kind, hang.collective.seq) == ("not_completed", 2)
    assert [c.rank for c in hang.culprits] == [1]


def test_json_dumps_under_a_prefix_are_read_without_stacks(tmp_path):
    ranks = [Rank(r, steps(2, GRADS, LOSS)) for r in range(2)]
    ranks[0].ops.pop()
    write(tmp_path, ranks, prefix="nccl_trace_rank_", as_json=True)
    (tmp_path / "notes.txt").write_text("unrelated")
    document = diagnosis(tmp_path / "nccl_trace_rank_")
    assert document.hang is not None and [c.rank for c in document.hang.culprits] == [0]
    assert document.hang.collective.site is None
    assert any("no Python stacks" in note for note in document.notes)


@pytest.mark.parametrize("layout, problem", [
    ({"rank_0": 0, "other_1": 1}, "dumps under several prefixes"),
    ({"a_0": 0, "a_00": 0}, "two dumps of rank 0"),
    ({}, "no Flight Recorder dump"),
])
def test_folders_that_are_not_one_set_of_dumps_are_one_line(tmp_path, capsys, layout, problem):
    for name, rank in layout.items():
        (tmp_path / name).write_bytes(pickle.dumps(Rank(rank, [GRADS]).document()))
    code, _, err = run_hang(tmp_path, capsys)
    assert code == 2 and problem in err and len(err.strip().splitlines()) == 1


def test_a_failed_run_that_left_no_dumps_is_one_line(tmp_path, capsys):
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": 3, "status": "failed"}))
    code, _, err = run_hang(tmp_path, capsys)
    assert code == 2 and "the run left no Flight Recorder dumps" in err


def test_a_complete_run_is_no_hang(tmp_path, capsys):
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": 3, "status": "complete"}))
    code, document, err = run_hang(tmp_path, capsys)
    assert code == 1 and document["verdict"] == "no_hang"
    assert "no hang: the run completed" in err


class _Planted:
    def __reduce__(self) -> tuple:
        return (os.system, ("touch planted",))


def test_a_pickle_that_names_a_function_is_refused_without_running_it(tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "dumps", [Rank(0, [GRADS, LOSS])])
    document = Rank(1, [GRADS]).document()
    document["entries"].append(_Planted())
    (tmp_path / "dumps" / "rank_1").write_bytes(pickle.dumps(document))
    code, result, _err = run_hang(tmp_path / "dumps", capsys)
    assert not (tmp_path / "planted").exists()
    assert code == 0 and result["missing_dumps"] == [1]
    assert "refers to posix.system" in json.dumps(result["unreadable"])


def test_a_pickle_bomb_of_shared_lists_is_refused_quickly(tmp_path):
    """One list of 200,000 sizes, shared by 5,000 entries: a 1 MB file whose entries would
    take a billion steps to read one by one."""
    shared = list(range(200_000))
    document = Rank(0, [GRADS]).document()
    document["entries"] = [dict(document["entries"][0], input_sizes=[shared], record_id=i)
                           for i in range(5000)]
    write(tmp_path, [Rank(1, [GRADS])])
    (tmp_path / "rank_0").write_bytes(pickle.dumps(document))
    assert (tmp_path / "rank_0").stat().st_size < 2_000_000
    started = time.monotonic()
    dump_set = read_dumps(tmp_path)
    assert time.monotonic() - started < 5
    assert "shares its objects" in dump_set.unreadable[str(tmp_path / "rank_0")]


@pytest.mark.parametrize("content, problem", [
    (b"\x80\x04\x95", "not a readable Flight Recorder dump"),
    (b'{"entries": 3}', "no list of entries"),
    (b"{\"a\": " + b"[" * 100_000, "not JSON"),
    (b"hello", "neither a pickle nor JSON"),
])
def test_damaged_dumps_are_left_out_and_named(tmp_path, content, problem):
    write(tmp_path, [Rank(0, [GRADS])])
    (tmp_path / "rank_1").write_bytes(content)
    dump_set = read_dumps(tmp_path)
    assert problem in dump_set.unreadable[str(tmp_path / "rank_1")]


def test_a_dump_over_the_cap_and_a_fifo_are_not_read(tmp_path, monkeypatch):
    write(tmp_path, [Rank(0, steps(50, GRADS)), Rank(1, [GRADS])])
    os.mkfifo(tmp_path / "rank_2")
    monkeypatch.setenv("DDPPROF_MAX_DUMP_BYTES", "2000")
    dump_set = read_dumps(tmp_path)
    assert "DDPPROF_MAX_DUMP_BYTES" in dump_set.unreadable[str(tmp_path / "rank_0")]
    assert "rank_2: not a regular file" in dump_set.notes
    monkeypatch.setenv("DDPPROF_MAX_DUMP_BYTES", "10")
    with pytest.raises(UsageError, match="no Flight Recorder dump could be read"):
        read_dumps(tmp_path)


_OPS = st.sampled_from([GRADS, LOSS, BCAST, replace(GRADS, size=8)])


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(_OPS, min_size=1, max_size=12), world=st.integers(2, 5),
       cut=st.data())
def test_a_rank_that_stopped_early_is_the_one_named(tmp_path_factory, ops, world, cut):
    """Ranks that issued the same collectives are no hang; one that stopped k collectives
    short of the others is the culprit, at the first sequence id it never issued."""
    folder = tmp_path_factory.mktemp("fuzz")
    same = diagnosis(write(folder / "same", [Rank(r, list(ops)) for r in range(world)]))
    assert same.hang is None
    short = cut.draw(st.integers(1, len(ops)))
    culprit = cut.draw(st.integers(0, world - 1))
    ranks = [Rank(r, list(ops) if r != culprit else list(ops[:-short])) for r in range(world)]
    hang = diagnosis(write(folder / "short", ranks)).hang
    assert hang is not None and [c.rank for c in hang.culprits] == [culprit]
    assert hang.kind == "not_reached" and hang.collective.seq == len(ops) - short + 1


@settings(max_examples=30, deadline=None)
@given(entries=st.lists(st.dictionaries(
    st.sampled_from(["process_group", "collective_seq_id", "record_id", "profiling_name",
                     "input_sizes", "frames", "state", "retired", "is_p2p"]),
    st.one_of(st.none(), st.integers(-2**70, 2**70), st.text(max_size=5),
              st.lists(st.integers(), max_size=3), st.tuples(st.text(max_size=2),
                                                             st.text(max_size=2)),
              st.lists(st.dictionaries(st.text(max_size=8), st.integers()), max_size=2))),
    max_size=8))
def test_odd_entries_never_crash_the_diagnosis(tmp_path_factory, entries):
    folder = tmp_path_factory.mktemp("odd")
    write(folder, [Rank(0, [GRADS, LOSS])])
    (folder / "rank_1").write_bytes(pickle.dumps({"version": "2.10", "entries": entries}))
    document = diagnosis(folder)
    assert document.verdict in ("hang", "no_hang")


def test_record_turns_flight_recorder_on_and_names_its_dumps(tmp_path):
    from ddpprof.record import flight_recorder as fr
    from ddpprof.record.folders import is_run_file

    assert fr.environment(0, "gloo", tmp_path) == {"TORCH_FR_BUFFER_SIZE": "0"}
    assert fr.environment(2000, "gloo", tmp_path) == {"TORCH_FR_BUFFER_SIZE": "2000"}
    nccl = fr.environment(2000, "nccl", tmp_path)
    assert nccl["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path.resolve() / "fr" / "rank_")
    assert nccl["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    (tmp_path / "fr").mkdir()
    for name in ("rank_10", "rank_2", "rank_x", ".tmp-1-rank_3"):
        (tmp_path / "fr" / name).write_bytes(b"")
    assert fr.dumps_in(tmp_path) == ["fr/rank_2", "fr/rank_10"]
    assert is_run_file(tmp_path / "fr")       # replaced whole when the run is recorded again
