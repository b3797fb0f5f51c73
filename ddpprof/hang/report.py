"""``ddpprof hang`` on one screen: the first hang (the collective, its group, the culprits and
what each was doing, where in the code), the other groups' problems in a line each, what to
do next, and what the dumps held (partial dumps said so)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..render.output import Section
from ..render.table import Column, Table
from .model import Frame
from .result import Collective, Culprit, Hang, HangDocument, ranks_text, who

#: Frames printed of a stack (the document keeps up to ``diagnose.SITE_FRAMES``).
SHOWN_FRAMES = 3


def headline(document: HangDocument) -> str:
    """One line: the verdict."""
    if document.hang is None:
        return "no hang: " + _no_hang_reason(document)
    return f"HANG: {document.hang.summary}"


@dataclass(frozen=True)
class ProblemRow:
    """One group's first problem, as the table shows it (the first row is the hang)."""

    group: str            # its label and members: tp [2-3]
    seq: int
    kind: str
    collective: str       # as the ranks taken as right issued it
    culprits: str         # ranks and what each did instead: 3 mismatched
    pg: str               # c10d's name of the group
    reached: str


PROBLEM_COLUMNS = [Column("group", max_width=16), Column("seq"), Column("kind"),
                   Column("collective", max_width=32), Column("culprits", max_width=24),
                   Column("pg", wide=True), Column("reached", wide=True)]


def table(document: HangDocument) -> Table:
    """Each group's first problem, the hang first: the table ``--csv`` and ``--markdown``
    write."""
    hangs = [document.hang, *document.others] if document.hang else []
    rows = [ProblemRow(
        group=hang.collective.group_text, seq=hang.collective.seq, kind=hang.kind,
        collective=hang.collective.call.text(),
        culprits=", ".join(f"{c.rank} {c.status}" for c in hang.culprits)
        + (f" (+{len(hang.missing) + len(hang.unknown) - len(hang.culprits)})"
           if hang.kind in ("not_reached", "not_known")
           and len(hang.missing) + len(hang.unknown) > len(hang.culprits) else ""),
        pg=hang.collective.group, reached=ranks_text(hang.reached)) for hang in hangs]
    return Table(PROBLEM_COLUMNS, rows)


def sections(document: HangDocument) -> list[Section]:
    found: list[Section] = []
    hang = document.hang
    if hang is not None:
        found.append(Section(None, _collective_lines(hang)))
        for culprit in hang.culprits:
            found.append(Section(f"rank {culprit.rank} ({culprit.status}): {culprit.summary}",
                                 _culprit_lines(culprit)))
        if document.next_steps:
            found.append(Section("What to do next:", [f"{n}. {step}" for n, step in
                                                      enumerate(document.next_steps, 1)]))
    found.append(Section("Dumps:", _dump_lines(document)))
    return found


def _collective_lines(hang: Hang) -> list[str]:
    collective = hang.collective
    lines = [f"  collective  {collective.call.text()}, #{collective.seq} of "
             f"{collective.group_text} (c10d group {collective.group}, "
             f"{len(collective.group_ranks)} ranks)"]
    if hang.reached:
        when = _clock(collective.issued_ns)
        lines.append(f"  reached by  {who(hang.reached)}"
                     + (f", first at {when}" if when else ""))
    if hang.missing:
        lines.append(f"  never by    {who(hang.missing)}")
    if hang.unknown:
        lines.append(f"  unknown     {who(hang.unknown)} (no dump, or their "
                     "buffer no longer holds it)")
    lines += _stack_lines("called at", collective)
    if hang.pattern is not None:
        lines.append(f"  a step ago  {hang.pattern.text()}")
        lines += _stack_lines("called at", hang.pattern)
    return lines


def _culprit_lines(culprit: Culprit) -> list[str]:
    lines = []
    if culprit.issued is not None:
        lines += _stack_lines("its call", culprit.issued)
    elif culprit.last is not None:
        lines.append(f"  last        {culprit.last.text()}"
                     + (f" at {_clock(culprit.last.issued_ns)}"
                        if culprit.last.issued_ns else ""))
        lines += _stack_lines("called at", culprit.last)
    if culprit.where and culprit.status not in ("mismatched",):
        label = "raised at" if (culprit.dump_reason or "").startswith("error:") else "was at"
        lines += _frame_lines(label, culprit.where)
    if culprit.error and culprit.status not in ("dead",):
        lines.append(f"  its error   {culprit.error}")
    return lines


def _stack_lines(label: str, collective: Collective) -> list[str]:
    site = collective.site
    if site is None:
        return [f"  {label:<11} (the dump holds no stack)"]
    return _frame_lines(label, site.frames, f" (in torch: {site.api})" if site.api else "")


def _frame_lines(label: str, frames: list[Frame], suffix: str = "") -> list[str]:
    if not frames:
        return []
    lines = [f"  {label:<11} {frames[0].text()}{suffix}"]
    lines += [f"  {'':<11} {frame.text()}" for frame in frames[1:SHOWN_FRAMES]]
    return lines


def _dump_lines(document: HangDocument) -> list[str]:
    dumped = [row.rank for row in document.dumps]
    entries = sum(row.entries for row in document.dumps)
    versions = sorted({row.version for row in document.dumps})
    lines = [f"{len(dumped)} of {document.world_size} ranks ({ranks_text(dumped)}), "
             f"{entries:,} entries, Flight Recorder {', '.join(versions)}; "
             f"{len(document.groups)} process group(s)"]
    reasons = sorted({row.reason.split(":")[0] for row in document.dumps if row.reason})
    if reasons:
        lines.append(f"dumped on: {', '.join(reasons)}")
    if document.run_status is not None:
        lines.append(f"the run: {document.run_status}"
                     + (f" ({document.run_error})" if document.run_error else ""))
    lines += [f"note: {note}" for note in document.notes]
    return lines


def _no_hang_reason(document: HangDocument) -> str:
    if not document.dumps:
        return "; ".join(document.notes)
    matched = sum(group.matched for group in document.groups)
    text = (f"every collective in the dumps ({matched:,} over {len(document.groups)} "
            "process group(s)) was issued alike by every member of its group")
    if document.missing_dumps:
        text += f" (no dump of {who(document.missing_dumps)})"
    return text


def _clock(ns: int | None) -> str | None:
    """A wall-clock time in ns as ``HH:MM:SS.mmm`` UTC."""
    if not ns or ns < 10**15:
        return None
    seconds = ns / 1e9
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) + f".{int(ns % 10**9 / 1e6):03d} UTC"
