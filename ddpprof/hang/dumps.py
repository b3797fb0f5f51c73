"""Reading the dumps (``files``) into a :class:`~ddpprof.hang.model.DumpSet`: each rank's
entries as tracks per process group, the groups' members, and, for a run ``ddpprof record``
wrote, what its ``run.json`` and the ranks' own errors say.

Entries are read leniently, as Flight Recorder's versions differ: a field that is missing or of
the wrong type reads as unknown, and an entry without a process group or sequence id is left
out (and counted in a note). Point-to-point entries are counted, not matched.
"""

from __future__ import annotations

import contextlib
import operator
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import TraceError, UsageError
from ..record.failure import rank_errors
from ..run.folder import RunFolder
from ..run.manifest import RunManifest, read_run_manifest
from . import files
from .model import STATES, Call, DumpSet, Frame, GroupInfo, Interned, RankDump, Track
from .safe_pickle import Budget, UnsafePickle

_STATE_CODE = {name: code for code, name in enumerate(STATES)}
_RANKS_TEXT = re.compile(r"^\s*[\[(]?\s*(\d+\s*(,\s*\d+\s*)*,?)?\s*[\])]?\s*$")
#: The parts of one coalesced collective kept (more are counted in it, not listed).
MAX_PARTS = 64
#: Ranks a group may list: more is not a real job's (and would cost memory to hold).
MAX_GROUP_RANKS = 1 << 20


def read(path: Path, found: files.Found | None = None,
         on_dump: Callable[[int, int], None] = lambda done, total: None) -> DumpSet:
    """Every dump at ``path`` (``files.find``, unless ``found`` already), read, each counted by
    ``on_dump(done, total)``; a ``UsageError`` when none can be read."""
    found = found or files.find(path)
    limit = files.max_dump_bytes()
    interned = Interned()
    decoder = _Decoder(interned)
    dumps: dict[int, RankDump] = {}
    declared: dict[str, tuple[str, list[int]]] = {}
    unreadable: dict[str, str] = {}
    notes = list(found.skipped)
    world_sizes = [max(found.files) + 1]     # a dump that cannot be read still names its rank
    for done, (rank, file) in enumerate(sorted(found.files.items())):
        on_dump(done, len(found.files))
        try:
            document, size = files.decode(file, limit)
            dump, groups = _rank_dump(document, rank, str(file), size, decoder)
        except TraceError as error:
            unreadable[str(file)] = error.problem
            continue
        except UnsafePickle as error:
            unreadable[str(file)] = f"not a readable Flight Recorder dump: {error}"
            continue
        dumps[rank] = dump
        notes += [f"rank {rank}: {note}" for note in dump.notes]
        for name, group in groups.items():
            declared.setdefault(name, group)
        extra = document.get("ddpprof")
        if isinstance(extra, dict) and _is_int(extra.get("world_size")):
            world_sizes.append(extra["world_size"])
    if not dumps:
        problems = "; ".join(f"{Path(p).name}: {why}" for p, why in unreadable.items())
        raise UsageError(f"{path}: no Flight Recorder dump could be read ({problems})")
    dump_set = DumpSet(str(path), dumps, {}, 0, interned, unreadable, notes)
    manifest = _run_info(found.run_dir, dump_set) if found.run_dir else None
    if manifest is not None and manifest.config is not None:
        world_sizes.append(manifest.config.world_size)
    _resolve_groups(dump_set, declared, manifest, world_sizes)
    versions = sorted({d.version for d in dumps.values()})
    if len(versions) > 1:
        notes.append(f"the dumps are of different Flight Recorder versions ({', '.join(versions)})")
    return dump_set


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _run_info(run_dir: Path, dump_set: DumpSet) -> RunManifest | None:
    """What the run's ``run.json`` and its ranks' error files say (for a run ``ddpprof
    record`` wrote)."""
    try:
        manifest = read_run_manifest(run_dir)
    except UsageError as error:
        dump_set.notes.append(f"run.json left out: {error}")
        return None
    if manifest is None:
        return None
    dump_set.run_status = manifest.status
    if manifest.error is not None:
        dump_set.run_error = manifest.error.message
        dump_set.failed_rank = manifest.error.rank
    try:
        with RunFolder(run_dir, create=False) as folder:
            written = rank_errors(folder)
    except OSError:
        written = {}
    for rank, wrote in written.items():
        if _is_int(rank) and isinstance(wrote.get("error"), str):
            traceback = wrote.get("traceback")
            dump_set.rank_errors[rank] = (wrote["error"],
                                          traceback if isinstance(traceback, str) else None)
    return manifest


def _resolve_groups(dump_set: DumpSet, declared: dict[str, tuple[str, list[int]]],
                    manifest: RunManifest | None, world_sizes: list[int]) -> None:
    """Every group the entries name, with its members (see ``GroupInfo.members_from``), and
    the world size."""
    mesh = {g.pg_name: (g.pg_desc or dim.name, g.ranks)
            for dim in (manifest.mesh.dims if manifest and manifest.mesh else [])
            for g in dim.groups if g.pg_name}
    named: dict[str, str] = {}           # group: the description its entries give
    users: dict[str, list[int]] = {}     # group: the ranks with entries in it
    for rank, dump in dump_set.dumps.items():
        for name, track in dump.tracks.items():
            named.setdefault(name, dump_set.interned.descs.get(name, "undefined"))
            if len(track.seq):
                users.setdefault(name, []).append(rank)
    highest = max([*dump_set.dumps, *(max(r, default=0) for _, r in declared.values())])
    world = max([*world_sizes, highest + 1])
    dump_set.world_size = world
    for name in sorted(set(named) | set(declared), key=_natural):
        desc = named.get(name, "undefined")
        if name in declared and declared[name][1]:
            desc = declared[name][0] or desc
            info = GroupInfo(name, desc, declared[name][1], "dump")
        elif name in mesh:
            info = GroupInfo(name, mesh[name][0] or desc, list(mesh[name][1]), "run.json")
        elif desc == "default_pg" or (name == "0" and desc in ("", "undefined")):
            info = GroupInfo(name, desc, list(range(world)), "world")
        else:
            info = GroupInfo(name, desc, sorted(users.get(name, [])), "inferred")
            dump_set.notes.append(f"the members of {info.label} (group {name}) are not in the "
                                  f"dumps: taken as the ranks whose dumps name it "
                                  f"({_ranks_text(info.ranks)})")
        dump_set.groups[name] = info


def _natural(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 62, name)


def _ranks_text(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:16])) + (f", ... ({len(ranks)})" if len(ranks) > 16 else "")


def _rank_dump(document: dict[str, Any], rank: int, path: str, size: int,
               decoder: _Decoder) -> tuple[RankDump, dict[str, tuple[str, list[int]]]]:
    """One rank's dump as tracks; the groups its ``pg_config`` declares (name: description,
    members)."""
    budget = Budget(size)
    interned = decoder.interned
    rows: dict[str, list[list[Any]]] = {}
    parts: dict[tuple[str, int], list[Call]] = {}
    dropped = p2p = 0
    records: list[int] = []
    backend = None
    for raw in document["entries"]:
        budget.spend()
        entry = decoder.entry(raw, budget) if isinstance(raw, dict) else None
        if entry is None:
            dropped += 1
            continue
        name, desc, seq, is_p2p, call, stack, record, created, state, retired, entry_backend \
            = entry
        records.append(record)
        backend = backend or entry_backend
        if is_p2p:
            p2p += 1
            continue
        interned.descs.setdefault(name, desc)
        track = rows.setdefault(name, [])
        row = [seq, call, stack, record, created, state, retired]
        if track and track[-1][0] == seq:    # a coalesced collective: one row, every part
            key = (name, seq)
            merged = parts.setdefault(key, [interned.calls[track[-1][1]]])
            if len(merged) < MAX_PARTS:
                merged.append(interned.calls[call])
                budget.spend(sum(decoder.weight(part) for part in merged))
                track[-1][1] = interned.call(Call("coalesced", (), (), (), (), tuple(merged)))
            track[-1][2:] = row[2:]
        else:
            track.append(row)
    tracks = {name: _track(rows_of, interned) for name, rows_of in rows.items()}
    extra = document.get("ddpprof")
    extra = extra if isinstance(extra, dict) else {}
    where = interned.stacks[decoder.stack(extra.get("main_thread"), budget)]
    dump = RankDump(
        rank=rank, path=path, version=str(document.get("version", "unknown"))[:32],
        tracks=tracks, first_record=min(records, default=0),
        last_record=max(records, default=-1), entries=len(records), p2p_entries=p2p,
        backend=backend,
        reason=extra["reason"][:500] if isinstance(extra.get("reason"), str) else None,
        dumped_ns=_int(extra.get("time_ns")), where=where)
    if dropped:
        dump.notes = [f"{dropped} entr{'y' if dropped == 1 else 'ies'} without a process "
                      "group or sequence id left out"]
    return dump, _declared_groups(document.get("pg_config"), budget)


def _track(rows: list[list[Any]], interned: Interned) -> Track:
    rows.sort(key=lambda row: row[3])     # the order the rank issued them
    columns = list(zip(*rows, strict=True))
    calls = np.array(columns[1], dtype=np.int32)
    return Track(seq=np.array(columns[0], dtype=np.int64), call=calls,
                 match=np.array(interned.matches, dtype=np.int32)[calls],
                 stack=np.array(columns[2], dtype=np.int32),
                 record=np.array(columns[3], dtype=np.int64),
                 created_ns=np.array(columns[4], dtype=np.int64),
                 state=np.array(columns[5], dtype=np.int8),
                 retired=np.array(columns[6], dtype=np.int8))


_INT64 = 1 << 63
_FRAME_FIELDS = operator.itemgetter("name", "filename", "line")
_UNKNOWN_STATE = _STATE_CODE["unknown"]


def _int(value: object, default: int | None = None) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64:
        return value
    return default


class _Decoder:
    """Entries into rows. What repeats from entry to entry and rank to rank (a stack, a
    shape, a call) is checked and interned once, and found again by its raw value."""

    def __init__(self, interned: Interned) -> None:
        self.interned = interned
        self._stacks: dict[Any, int] = {}
        self._calls: dict[Any, int] = {}
        self._weights: dict[Call, int] = {}

    def weight(self, call: Call) -> int:
        """What hashing ``call`` costs, in the numbers it holds."""
        return self._weights.get(call, 1)

    def entry(self, raw: dict[str, Any], budget: Budget) -> tuple[Any, ...] | None:
        """One entry's fields (its call and stack interned), or None when it names no group
        or sequence id."""
        group = raw.get("process_group")
        if not (isinstance(group, list | tuple) and len(group) == 2
                and isinstance(group[0], str) and isinstance(group[1], str)):
            return None
        profiling = raw.get("profiling_name")
        profiling = profiling if isinstance(profiling, str) else "unknown"
        backend, _, name = profiling.partition(":") if ":" in profiling else \
            (None, "", profiling)
        op = (name.split(" ")[0] or "unknown")[:100]
        is_p2p = raw.get("is_p2p")
        is_p2p = is_p2p if isinstance(is_p2p, bool) else op in ("send", "recv")
        seq = _int(raw.get("p2p_seq_id" if is_p2p else "collective_seq_id"))
        record = _int(raw.get("record_id"))
        if seq is None or record is None:
            return None
        state, retired = raw.get("state"), raw.get("retired")
        return (group[0][:200], group[1][:200], seq, is_p2p, self.call(op, raw, budget),
                self.stack(raw.get("frames"), budget), record,
                max(_int(raw.get("time_created_ns"), 0) or 0, 0),
                _STATE_CODE.get(state, _UNKNOWN_STATE) if isinstance(state, str)
                else _UNKNOWN_STATE,
                int(retired) if isinstance(retired, bool) else -1,
                backend[:20] if backend else None)

    def call(self, op: str, raw: dict[str, Any], budget: Budget) -> int:
        fields: list[Any] = [raw.get("input_sizes"), raw.get("output_sizes"),
                             raw.get("input_dtypes"), raw.get("output_dtypes")]
        for index, field in enumerate(fields):
            if not isinstance(field, list | tuple):
                fields[index] = ()
                continue
            budget.spend(len(field))
            if index < 2:       # what converting the shapes costs, before it is spent
                budget.spend(sum(len(s) for s in field if isinstance(s, list | tuple)))
        try:
            key: Any = (op, tuple(map(tuple, fields[0])), tuple(map(tuple, fields[1])),
                        tuple(fields[2]), tuple(fields[3]))
            return self._calls[key]
        except (TypeError, KeyError):
            pass
        call = Call(op, _sizes(fields[0], budget), _sizes(fields[1], budget),
                    _names(fields[2], budget), _names(fields[3], budget))
        found = self.interned.call(call)
        self._weights[call] = 1 + sum(map(len, call.input_sizes + call.output_sizes))
        with contextlib.suppress(TypeError, UnboundLocalError):
            self._calls[key] = found
        return found

    def stack(self, value: object, budget: Budget) -> int:
        if not isinstance(value, list | tuple):
            return 0
        budget.spend(len(value))
        try:
            key: Any = tuple(map(_FRAME_FIELDS, value))
            return self._stacks[key]
        except (TypeError, KeyError):
            pass
        found = self.interned.stack(_frames(value))
        with contextlib.suppress(TypeError, UnboundLocalError):
            self._stacks[key] = found
        return found


def _sizes(value: object, budget: Budget) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list | tuple):
        return ()
    shapes = []
    for shape in value:
        if not isinstance(shape, list | tuple):
            return ()
        budget.spend(len(shape))
        if not all(_int(d) is not None for d in shape):
            return ()
        shapes.append(tuple(shape))
    return tuple(shapes)


def _names(value: object, budget: Budget) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(v[:40] for v in value if isinstance(v, str))


def _frames(value: list[Any] | tuple[Any, ...]) -> tuple[Frame, ...]:
    frames = []
    for frame in value:
        if isinstance(frame, dict):
            name, file, line = frame.get("name"), frame.get("filename"), frame.get("line")
            if isinstance(name, str) and isinstance(file, str):
                frames.append(Frame(name[:200], file[:500], _int(line, 0) or 0))
    return tuple(frames)


def _declared_groups(config: object, budget: Budget) -> dict[str, tuple[str, list[int]]]:
    """A ``pg_config``'s groups with their members (``ranks`` is text: ``"[0, 1]"``)."""
    found: dict[str, tuple[str, list[int]]] = {}
    if not isinstance(config, dict):
        return found
    budget.spend(len(config))
    for key, value in config.items():
        if not (isinstance(key, str) and key and isinstance(value, dict)):
            continue
        ranks = value.get("ranks")
        if isinstance(ranks, str) and len(ranks) < 16 * MAX_GROUP_RANKS \
                and _RANKS_TEXT.match(ranks):
            members = [int(r) for r in re.findall(r"\d+", ranks)]
        elif isinstance(ranks, list | tuple) and len(ranks) <= MAX_GROUP_RANKS:
            members = [r for r in ranks if _int(r) is not None and r >= 0]
        else:
            continue
        budget.spend(len(members))
        if members and max(members) < MAX_GROUP_RANKS:
            desc = value.get("desc")
            found[key[:200]] = (desc[:200] if isinstance(desc, str) else "undefined", members)
    return found
