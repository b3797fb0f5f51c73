"""What the dumps hold, as ``dumps`` reads them: each rank's collectives per process group,
compact (numpy columns, with the calls and stacks interned once for all ranks), and the
groups with their members.

A rank's entries in one group are one :class:`Track`: a row per sequence id (a coalesced
collective's entries, which share one, are one row whose call lists them all), in the order
the rank issued them. Everything the report needs of an entry beyond its row (its op, sizes,
dtypes, Python stack) is looked up by the row's ``call`` and ``stack`` in :class:`Interned`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import numpy as np

#: Entry states as Flight Recorder writes them (``scheduled`` on gloo, which records no
#: progress; ``started`` and ``completed`` where the backend discovers them), and unknown.
STATES = ("scheduled", "started", "completed", "unknown")


class Frame(msgspec.Struct, frozen=True):
    """One Python frame: the function, its file and line."""

    name: str
    file: str
    line: int

    def text(self) -> str:
        return f"{self.file}:{self.line} in {self.name}"


class Call(msgspec.Struct, frozen=True):
    """One collective as a rank issued it: what ranks must agree on to complete it. A coalesced
    collective lists its parts in ``parts``."""

    op: str
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    parts: tuple[Call, ...] | None = None

    def match_key(self) -> tuple[object, ...]:
        """What every rank must issue alike for the collective to complete, as PyTorch's own
        analyzer compares them: a scatter's input is the root's alone (its output is
        compared), a gather's output the root's alone (its input is), an all-to-all's and a
        ``_v`` collective's sizes may differ from rank to rank (the op and dtypes are), and a
        coalesced collective is its parts'."""
        if self.parts:
            return (self.op, tuple(part.match_key() for part in self.parts))
        if self.op == "scatter":
            return (self.op, self.output_sizes, self.output_dtypes)
        if self.op == "gather":
            return (self.op, self.input_sizes, self.input_dtypes)
        if self.op.startswith("all_to_all") or self.op.endswith("_v"):
            return (self.op, self.input_dtypes, self.output_dtypes)
        return (self.op, self.input_sizes, self.output_sizes, self.input_dtypes,
                self.output_dtypes)

    def text(self) -> str:
        if self.parts:
            return " + ".join(part.text() for part in self.parts)
        sizes = ", ".join("x".join(map(str, s)) or "scalar" for s in self.input_sizes)
        dtypes = ",".join(dict.fromkeys(d.lower() for d in (*self.input_dtypes,
                                                           *self.output_dtypes)))
        return f"{self.op}({sizes}{' ' + dtypes if dtypes else ''})"


@dataclass
class Interned:
    """The calls and stacks of every rank's entries, each distinct one stored once, and each
    group's description as its entries give it."""

    calls: list[Call] = field(default_factory=list)
    stacks: list[tuple[Frame, ...]] = field(default_factory=lambda: [()])   # 0: no stack
    _calls: dict[Call, int] = field(default_factory=dict)
    _stacks: dict[tuple[Frame, ...], int] = field(default_factory=lambda: {(): 0})
    descs: dict[str, str] = field(default_factory=dict)
    #: Each call's match key (``Call.match_key``), interned: calls that match share one.
    matches: list[int] = field(default_factory=list)
    _keys: dict[tuple[object, ...], int] = field(default_factory=dict)

    def call(self, call: Call) -> int:
        found = self._calls.get(call)
        if found is None:
            found = self._calls[call] = len(self.calls)
            self.calls.append(call)
            key = call.match_key()
            self.matches.append(self._keys.setdefault(key, len(self._keys)))
        return found

    def stack(self, frames: tuple[Frame, ...]) -> int:
        found = self._stacks.get(frames)
        if found is None:
            found = self._stacks[frames] = len(self.stacks)
            self.stacks.append(frames)
        return found


@dataclass
class Track:
    """One rank's collectives in one process group, a row per sequence id, in issue order."""

    seq: np.ndarray            # int64: the group's collective sequence id
    call: np.ndarray           # int32: Interned.calls
    match: np.ndarray          # int32: the call's match key (Interned.matches)
    stack: np.ndarray          # int32: Interned.stacks (0: none recorded)
    record: np.ndarray         # int64: the entry's record id (its place in the rank's buffer)
    created_ns: np.ndarray     # int64: when the rank issued it (wall clock, ns; 0 unknown)
    state: np.ndarray          # int8: STATES
    retired: np.ndarray        # int8: 1 the work finished (or failed), 0 not yet, -1 unknown

    def index(self, seq: int) -> int | None:
        """The row of sequence id ``seq``, or None."""
        position = int(np.searchsorted(self.seq, seq))
        return position if position < len(self.seq) and self.seq[position] == seq else None


@dataclass
class RankDump:
    """One rank's dump: where it came from, and its tracks by group name."""

    rank: int
    path: str
    version: str
    tracks: dict[str, Track]
    first_record: int          # the oldest entry's record id: > 0 when the ring wrapped
    last_record: int
    entries: int
    p2p_entries: int = 0
    backend: str | None = None
    #: ``ddpprof record``'s additions: why it dumped (``SIGTERM``, ``error: ...``), when
    #: (wall clock, ns), and where its main thread was (the error's frames for an error).
    reason: str | None = None
    dumped_ns: int | None = None
    where: tuple[Frame, ...] = ()
    notes: list[str] = field(default_factory=list)

    @property
    def wrapped(self) -> bool:
        return self.first_record > 0

    def last_entry(self) -> tuple[str, int] | None:
        """The group and row of the last collective this rank issued (by record id)."""
        best: tuple[int, str, int] | None = None
        for name, track in self.tracks.items():
            if len(track.seq) and (best is None or track.record[-1] > best[0]):
                best = (int(track.record[-1]), name, len(track.seq) - 1)
        return None if best is None else (best[1], best[2])


class GroupInfo(msgspec.Struct, frozen=True):
    """A process group: c10d's name, its description, its members (global ranks, in group
    order) and where they were learnt: ``dump`` (its ``pg_config``), ``run.json`` (the run's
    mesh), ``world`` (the default group: every rank), or ``inferred`` (the ranks whose dumps
    name it: a member that never issued one of its collectives is then not known)."""

    name: str
    desc: str
    ranks: list[int]
    members_from: str

    @property
    def label(self) -> str:
        """The mesh dimension (``mesh_tp`` is ``tp``), ``world`` for the default group, else
        its description, else its name."""
        if self.desc == "default_pg" or (self.desc in ("", "undefined") and self.name == "0"):
            return "world"
        if self.desc.startswith("mesh_"):
            return self.desc[len("mesh_"):]
        return self.desc if self.desc not in ("", "undefined") else f"group {self.name}"


@dataclass
class DumpSet:
    """Every rank's dump that could be read, the groups, and what is missing."""

    source: str
    dumps: dict[int, RankDump]
    groups: dict[str, GroupInfo]
    world_size: int
    interned: Interned
    unreadable: dict[str, str] = field(default_factory=dict)    # path: why
    notes: list[str] = field(default_factory=list)
    #: From the run's run.json, when there is one: its status, its error, the failing rank,
    #: and each rank's own error (``.errors/rank<r>.json``: message, traceback).
    run_status: str | None = None
    run_error: str | None = None
    failed_rank: int | None = None
    rank_errors: dict[int, tuple[str, str | None]] = field(default_factory=dict)

    @property
    def missing_ranks(self) -> list[int]:
        return [r for r in range(self.world_size) if r not in self.dumps]
