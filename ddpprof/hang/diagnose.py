"""From the groups' matching (``match``) to the diagnosis: which collective hung first, which
ranks are the culprits and what each was doing instead, where in the code, and what to do.

The first hang is the group problem whose collective was issued first (a problem every dump
proves comes before one that rests on a rank that left none). Each culprit is, in turn:
``mismatched`` (it issued something else at that point: another op, sizes or dtypes, or its
sequence is shifted), ``stuck`` (waiting in another group's collective that did not complete),
``failed`` (it raised an error), ``busy`` (its last collective completed and it issued no
other: it was doing something else, shown by where its main thread was when it dumped),
``dead`` (no dump, and the run says it died), ``absent`` (no dump, nothing known) or ``idle``
(it issued no collective at all).
"""

from __future__ import annotations

import re

from msgspec.structs import replace

from .match import GroupCheck, Problem, check_all
from .model import Call, DumpSet, Frame
from .result import (
    Collective,
    Culprit,
    DumpRow,
    GroupRow,
    Hang,
    HangDocument,
    Site,
    who,
)

#: Frames of torch itself: the code that called a collective is the first frame outside it.
_LIBRARY = re.compile(r"^<|(^|[/\\])torch[/\\]|[/\\]typing_extensions\.py$"
                      r"|[/\\]lib[/\\]python\d[\d.]*[/\\](?!(site|dist)-packages[/\\])")
_API_FILES = ("distributed_c10d.py", "_functional_collectives.py")
#: Frames kept of the code that called a collective.
SITE_FRAMES = 5
#: Culprits described one by one (the others are counted).
SHOWN_CULPRITS = 8
_DEFINITE = ("mismatch", "order", "deviation", "not_reached", "not_completed")


def diagnose(dump_set: DumpSet) -> HangDocument:
    checks = check_all(dump_set)
    found = [c.problem for c in checks if c.problem is not None]
    problems = sorted(found, key=lambda p: (p.kind not in _DEFINITE,
                                            _consequence(dump_set, p, found),
                                            p.created_ns or 1 << 63, p.group))
    hangs = [_hang(dump_set, p, problems) for p in problems]
    deadlock = _deadlock(problems)
    notes = list(dump_set.notes) + _partial_notes(dump_set)
    return HangDocument(
        source=dump_set.source, verdict="hang" if hangs else "no_hang",
        world_size=dump_set.world_size, hang=hangs[0] if hangs else None, others=hangs[1:],
        deadlock=deadlock, next_steps=_next_steps(hangs, deadlock) if hangs else [],
        dumps=[DumpRow(rank=d.rank, file=d.path, version=d.version, entries=d.entries,
                       wrapped=d.wrapped, first_record=d.first_record, reason=d.reason)
               for d in dump_set.dumps.values()],
        missing_dumps=dump_set.missing_ranks, unreadable=dict(dump_set.unreadable),
        groups=[_group_row(c) for c in checks], notes=notes,
        run_status=dump_set.run_status, run_error=dump_set.run_error)


def _consequence(dump_set: DumpSet, problem: Problem, problems: list[Problem]) -> bool:
    """Whether ``problem`` follows from another: its culprits never issued its collective
    because each is held in another problem's, the last entry of its dump (a rank stuck in a
    mismatched broadcast of one group never reaches the next collective of its other group).
    Such a problem comes after the one that holds its culprits, whatever the dumps' times
    say (the collective a peer issued first is not the cause)."""
    if problem.kind != "not_reached" or not problem.culprits:
        return False
    held = {(rank, (other.group, row)) for other in problems if other is not problem
            for rank, row in other.reached.items()}
    return all(rank in dump_set.dumps and (rank, dump_set.dumps[rank].last_entry()) in held
               for rank in problem.culprits)


def site_of(frames: tuple[Frame, ...]) -> Site | None:
    """The code that called a collective, from its stack (innermost first)."""
    if not frames:
        return None
    api = next((f.name for f in frames if f.file.endswith(_API_FILES)), frames[0].name)
    return Site(frames=user_frames(frames), api=api)


def user_frames(frames: tuple[Frame, ...] | list[Frame]) -> list[Frame]:
    """The frames outside torch and Python's own library: the code that called."""
    return [f for f in frames if not _LIBRARY.search(f.file)][:SITE_FRAMES]


def _collective(dump_set: DumpSet, group: str, rank: int, row: int) -> Collective:
    track = dump_set.dumps[rank].tracks[group]
    info = dump_set.groups[group]
    state = int(track.state[row])
    return Collective(
        group=group, group_label=info.label, group_ranks=info.ranks,
        seq=int(track.seq[row]), call=dump_set.interned.calls[int(track.call[row])],
        site=site_of(dump_set.interned.stacks[int(track.stack[row])]),
        state=("scheduled", "started", "completed", None)[state],
        issued_ns=int(track.created_ns[row]) or None)


def _hang(dump_set: DumpSet, problem: Problem, problems: list[Problem]) -> Hang:
    pattern = None
    if problem.pattern_row is not None:     # a deviation: the culprit's own previous step
        pattern = _collective(dump_set, problem.group, problem.culprits[0],
                              problem.pattern_row)
    reference = problem.expected[0] if problem.expected else next(iter(problem.reached))
    collective = _collective(dump_set, problem.group, reference, problem.reached[reference])
    culprits = [_culprit(dump_set, problem, rank, pattern or collective, problems)
                for rank in problem.culprits[:SHOWN_CULPRITS]]
    return Hang(kind=problem.kind,  # type: ignore[arg-type]
                summary=_summary(problem, pattern or collective, culprits), pattern=pattern,
                collective=collective, reached=sorted(problem.reached),
                expected=problem.expected, missing=problem.missing,
                unknown=problem.unknown, culprits=culprits, shift=problem.shift, tie=problem.tie)


def _culprit(dump_set: DumpSet, problem: Problem, rank: int, expected: Collective,
             problems: list[Problem]) -> Culprit:
    dump = dump_set.dumps.get(rank)
    error = dump_set.rank_errors.get(rank, (None, None))[0]
    if error is None and rank == dump_set.failed_rank:
        error = dump_set.run_error
    if dump is None:
        unreadable = [why for path, why in dump_set.unreadable.items()
                      if re.search(rf"(?<!\d){rank}(\.\w+)?$", path)]
        if error is not None:
            return Culprit(rank=rank, status="dead", error=error,
                           summary=f"left no dump; it failed: {error}")
        why = f" ({unreadable[0]})" if unreadable else ""
        return Culprit(rank=rank, status="absent",
                       summary=f"left no dump that could be read{why}: nothing is known of it")
    last_place = dump.last_entry()
    last = _collective(dump_set, last_place[0], rank, last_place[1]) if last_place else None
    where = user_frames(dump.where) or list(dump.where[:SITE_FRAMES])
    base = Culprit(rank=rank, status="busy", summary="", last=last, where=where,
                   dump_reason=dump.reason, error=error)
    if problem.kind in ("mismatch", "order", "deviation") and rank in problem.reached:
        issued = _collective(dump_set, problem.group, rank, problem.reached[rank])
        return replace(base, status="mismatched", issued=issued,
                       summary=_mismatch_text(problem, issued, expected))
    if last is None:
        return replace(base, status="idle", summary="issued no collective at all")
    for other in problems:
        if other is not problem and rank in other.reached and other.culprits:
            waiting = _collective(dump_set, other.group, rank, other.reached[rank])
            whom = f"waiting for {who(other.culprits)}" if rank not in other.culprits \
                else "which its peers issued otherwise"
            return replace(base, status="stuck", summary=(
                f"stuck in {waiting.text()} at {_where(waiting)}, {whom}"))
    if dump.reason and dump.reason.startswith("error:"):
        return replace(base, status="failed", summary=(
            f"failed after its last collective ({last.text()} at {_where(last)}): "
            f"{dump.reason[len('error: '):]}"))
    stopped = f"; when it dumped ({dump.reason}) it was at {where[0].text()}" \
        if where and dump.reason else ""
    return replace(base, summary=(
        f"completed {last.text()} at {_where(last)} and issued no collective after it{stopped}"))


def _where(collective: Collective) -> str:
    return collective.site.text() if collective.site else "(no stack in the dump)"


def _mismatch_text(problem: Problem, issued: Collective, expected: Collective) -> str:
    if problem.kind == "order":
        if problem.shift > 0:
            return (f"skipped {expected.call.text()} at {_where(expected)}: its #{problem.seq} "
                    f"is the others' #{problem.seq + problem.shift}")
        return (f"issued {issued.call.text()} at {_where(issued)} that the others did not: "
                f"its #{problem.seq - problem.shift} is the others' #{problem.seq}")
    difference = _difference(issued.call, expected.call)
    if problem.kind == "deviation":
        return (f"issued {issued.call.text()} at {_where(issued)} where one step earlier it "
                f"issued {expected.call.text()} at {_where(expected)} ({difference})")
    return f"issued {issued.call.text()} at {_where(issued)} ({difference})"


def _difference(mine: Call, theirs: Call) -> str:
    if mine.op != theirs.op:
        return f"a different collective: the others issued {theirs.op}"
    if (mine.input_sizes, mine.output_sizes) != (theirs.input_sizes, theirs.output_sizes):
        return "different sizes"
    if (mine.input_dtypes, mine.output_dtypes) != (theirs.input_dtypes, theirs.output_dtypes):
        return "different dtypes"
    return "a different call site"


def _summary(problem: Problem, collective: Collective, culprits: list[Culprit]) -> str:
    what = collective.text()
    if problem.kind == "mismatch":
        issued = culprits[0].issued if culprits else None
        detail = _difference(issued.call, collective.call) if issued else "a different call"
        tie = " (two sides alike: which is wrong is not in the dumps)" if problem.tie else ""
        return (f"desync at {what}: {who(problem.culprits)} issued "
                f"{issued.call.text() if issued else '?'} ({detail}){tie}")
    if problem.kind == "deviation":
        issued = culprits[0].issued if culprits else None
        return (f"{who(problem.culprits)} issued {issued.text() if issued else '?'}, breaking "
                f"its step's pattern ({collective.call.text()} one step earlier), and "
                f"{who(problem.unknown)} left no dump: a collective mismatch that "
                f"{who(problem.unknown)} could not match")
    if problem.kind == "order":
        if problem.shift > 0:
            return (f"{who(problem.culprits)} skipped {what}: its later collectives pair with "
                    "the others' next ones")
        return (f"{who(problem.culprits)} issued {-problem.shift} collective(s) more before "
                f"{what}")
    if problem.kind == "not_known":
        return (f"{who(problem.reached)} stopped in {what}; {who(problem.culprits)} left no "
                "dump: not known to have reached it")
    if problem.kind == "not_completed":
        return f"{what}: every member issued it; {who(problem.culprits)} never completed it"
    return (f"{what} never completed: {who(problem.culprits)} never issued it "
            f"({who(problem.reached)} did)")


def _deadlock(problems: list[Problem]) -> list[int] | None:
    """A cycle of ranks each waiting for the next (in collectives of different groups): the
    ranks issue the groups' collectives in different orders."""
    waits: dict[int, set[int]] = {}
    for problem in problems:
        if problem.kind == "not_reached":
            for rank in problem.reached:
                waits.setdefault(rank, set()).update(problem.missing)
    for start in sorted(waits):
        path, seen = [start], {start}
        while True:
            following = sorted(waits.get(path[-1], ()))
            if not following:
                break
            if start in following:
                return [*path, start]
            fresh = [r for r in following if r not in seen]
            if not fresh:
                break
            path.append(fresh[0])
            seen.add(fresh[0])
    return None


def _next_steps(hangs: list[Hang], deadlock: list[int] | None) -> list[str]:
    hang = hangs[0]
    expected = hang.collective
    steps: list[str] = []
    if deadlock:
        steps.append(f"ranks {' -> '.join(map(str, deadlock))} each wait for the next in a "
                     "different group's collective: issue the groups' collectives in the same "
                     "order on every rank")
    for culprit in hang.culprits:
        rank = culprit.rank
        if culprit.status == "mismatched" and culprit.issued is not None:
            if hang.kind == "order" and hang.shift > 0:
                steps.append(f"rank {rank} skipped the call at {_where(expected)}: make it "
                             "run on every rank, or on none")
            elif hang.kind == "deviation" and hang.pattern is not None:
                dead = ", ".join(str(r) for r in hang.unknown)
                steps.append(f"rank {rank} issued {culprit.issued.call.text()} at "
                             f"{_where(culprit.issued)} where every step before issued "
                             f"{hang.pattern.call.text()}: make its sizes and dtypes the same "
                             f"on every rank (rank {dead} could not match it: its own log says "
                             "what it received)")
            elif hang.kind == "order":
                steps.append(f"rank {rank} issued {culprit.issued.call.text()} at "
                             f"{_where(culprit.issued)}, which the others did not: make it "
                             "run on every rank, or on none")
            else:
                verb = "calls" if len(hang.expected) == 1 else "call"
                steps.append(f"compare the two call sites: {who(hang.expected)} "
                             f"{verb} {expected.call.text()} at {_where(expected)}; rank {rank} "
                             f"calls {culprit.issued.call.text()} at {_where(culprit.issued)}: "
                             "every rank must issue the same collective (op, sizes, dtypes) "
                             f"at #{expected.seq} of {expected.group_label}")
        elif culprit.status == "failed":
            raised = f" (raised at {culprit.where[0].text()})" if culprit.where else ""
            steps.append(f"rank {rank} failed{raised}: {culprit.error or culprit.dump_reason}; "
                         f"fix that first: its peers then waited for it at {_where(expected)}")
        elif culprit.status == "busy" and culprit.last is not None:
            where = f" (when it dumped it was at {culprit.where[0].text()})" \
                if culprit.where else ""
            if _where(culprit.last) == _where(expected):
                steps.append(f"rank {rank} issued {culprit.last.call.text()} at "
                             f"{_where(expected)} and then not the {expected.call.text()} the "
                             f"others issued next from there: look at what it ran in between"
                             f"{where}")
            else:
                steps.append(f"rank {rank} went on from {_where(culprit.last)} and never "
                             f"reached {_where(expected)}: look at what it runs between the "
                             f"two{where}")
        elif culprit.status == "stuck":
            steps.append(f"rank {rank} is itself waiting: {culprit.summary}; follow that one")
        elif culprit.status == "dead":
            steps.append(f"rank {rank} died ({culprit.error}): fix that first; its peers "
                         f"then waited for it at {_where(expected)}")
        elif culprit.status in ("absent", "idle"):
            steps.append(f"rank {rank} {culprit.summary}: read its output (launcher.log, "
                         "or its own log)")
    if len(hang.culprits) < len(hang.missing) + len(hang.unknown) and hang.kind != "mismatch":
        steps.append("more ranks than shown never reached it: --json lists them all")
    return steps


def _group_row(check: GroupCheck) -> GroupRow:
    problem = check.problem
    return GroupRow(group=check.info.name, label=check.info.label, ranks=check.info.ranks,
                    members_from=check.info.members_from, matched=max(check.matched, 0),
                    first_seq=check.window[0] if check.window else None,
                    problem=problem.kind if problem else None,  # type: ignore[arg-type]
                    problem_seq=problem.seq if problem else None)


def _partial_notes(dump_set: DumpSet) -> list[str]:
    notes = []
    if dump_set.missing_ranks:
        notes.append(f"no dump of {who(dump_set.missing_ranks)} (of "
                     f"{dump_set.world_size})")
    for path, why in dump_set.unreadable.items():
        notes.append(f"{path}: left out: {why}")
    wrapped = [d for d in dump_set.dumps.values() if d.wrapped]
    if wrapped:
        notes.append(f"the ring buffer of {who([d.rank for d in wrapped])} "
                     "wrapped: their oldest entries were overwritten, so only the collectives "
                     "every member still holds are compared")
    if any(d.p2p_entries for d in dump_set.dumps.values()):
        count = sum(d.p2p_entries for d in dump_set.dumps.values())
        notes.append(f"{count} point-to-point entries (send, recv) are not matched")
    if all(not d.tracks or all(not t.stack.any() for t in d.tracks.values())
           for d in dump_set.dumps.values()):
        notes.append("the dumps hold no Python stacks (JSON dumps, or stacks turned off): no "
                     "call sites")
    return notes
