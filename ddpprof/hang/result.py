"""What ``ddpprof hang`` finds, typed: the document ``--json`` writes (``HangDocument``, schema
``ddpprof.hang``), from which the screen is printed and ``analyze`` takes its finding."""

from __future__ import annotations

from typing import Literal

import msgspec

from .model import Call, Frame


def ranks_text(ranks: list[int]) -> str:
    """``0-3, 5``: ranks as ranges."""
    parts: list[tuple[int, int]] = []
    for rank in sorted(set(ranks)):
        if parts and parts[-1][1] == rank - 1:
            parts[-1] = (parts[-1][0], rank)
        else:
            parts.append((rank, rank))
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def who(ranks: list[int] | dict[int, int]) -> str:
    """``rank 3``, ``ranks 0-2``."""
    listed = sorted(ranks)
    return f"rank {listed[0]}" if len(listed) == 1 else f"ranks {ranks_text(listed)}"

Kind = Literal["mismatch", "order", "deviation", "not_reached", "not_known", "not_completed"]
#: What a culprit rank was doing instead of the collective.
Status = Literal["mismatched", "stuck", "busy", "failed", "dead", "absent", "idle"]


class Site(msgspec.Struct, kw_only=True):
    """Where a collective was called: ``frames``, the code that called it (the innermost
    frames outside torch, innermost first), and ``api``, the torch function it went through."""

    frames: list[Frame]
    api: str | None = None

    def text(self) -> str:
        return self.frames[0].text() if self.frames else (self.api or "unknown")


class Collective(msgspec.Struct, kw_only=True):
    """One collective of one process group, as a rank issued it."""

    group: str                       # c10d's name of the group
    group_label: str                 # its mesh dimension (tp, dp), world, or its description
    group_ranks: list[int]           # its members, global ranks
    seq: int                         # the group's collective sequence id
    call: Call
    site: Site | None = None         # None where the dump holds no stacks (JSON dumps)
    state: str | None = None         # Flight Recorder's: scheduled, started, completed
    issued_ns: int | None = None     # when the rank issued it (wall clock)

    @property
    def group_text(self) -> str:
        """``tp [2-3]``: the group's label, with its members unless it is the world."""
        if self.group_label == "world":
            return "world"
        return f"{self.group_label} [{ranks_text(self.group_ranks)}]"

    def text(self) -> str:
        return f"{self.call.text()} #{self.seq} of {self.group_text}"


class Culprit(msgspec.Struct, kw_only=True):
    """A rank that did not issue the collective as the others did, and what it did instead."""

    rank: int
    status: Status
    summary: str                     # one line
    issued: Collective | None = None  # a mismatch or order problem: what it issued instead
    last: Collective | None = None   # its last collective (any group)
    where: list[Frame] = msgspec.field(default_factory=list)  # its main thread at its dump,
    #                                  or where its error was raised
    dump_reason: str | None = None   # why it dumped (SIGTERM, error: ...); None for no dump
    error: str | None = None         # its own error, where the run recorded one


class Hang(msgspec.Struct, kw_only=True):
    """The first collective of one group that its members did not all reach alike."""

    kind: Kind
    summary: str                     # one line
    collective: Collective           # as the ranks taken as right issued it
    reached: list[int]
    expected: list[int]              # the ranks taken as right (the others issued it alike)
    missing: list[int]               # members whose dumps show they never issued it
    unknown: list[int]               # members with no dump, or whose buffer lost it
    culprits: list[Culprit]
    #: A deviation: what the culprit issued one step earlier (its pattern), where no other
    #: member's dump shows what it should have issued.
    pattern: Collective | None = None
    shift: int = 0                   # order: +d the culprits skipped d collectives, -d more
    tie: bool = False                # two sides alike in size that nothing told apart


class DumpRow(msgspec.Struct, kw_only=True):
    rank: int
    file: str
    version: str
    entries: int
    wrapped: bool                    # the ring buffer overwrote older entries
    first_record: int
    reason: str | None = None        # why it dumped (ddpprof record's dumps)


class GroupRow(msgspec.Struct, kw_only=True):
    group: str
    label: str
    ranks: list[int]
    members_from: str                # dump, run.json, world or inferred
    matched: int                     # collectives every member issued alike
    first_seq: int | None            # the first sequence id all members' buffers hold
    problem: Kind | None = None
    problem_seq: int | None = None


class HangDocument(msgspec.Struct, kw_only=True):
    """``ddpprof hang --json``: the verdict, the first hang and the other groups' problems, the
    culprits, what to do, and what the dumps held."""

    source: str
    verdict: Literal["hang", "no_hang"]
    world_size: int
    hang: Hang | None
    others: list[Hang]
    deadlock: list[int] | None       # ranks each waiting for the next, across groups
    next_steps: list[str]
    dumps: list[DumpRow]
    missing_dumps: list[int]
    unreadable: dict[str, str]
    groups: list[GroupRow]
    notes: list[str]
    run_status: str | None = None
    run_error: str | None = None
    schema: str = "ddpprof.hang"
    version: int = 1
