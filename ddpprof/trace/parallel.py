"""Decoding a trace's slices on several processes: this one and ``workers - 1`` forked ones.

Every process takes the next *task* (a run of consecutive slices) from a shared counter when it
is free, so a late start or a slow slice evens out, and decodes it into :class:`Columns`. A
forked decoder reads the document where the parent holds it (the same file descriptor, or the
parent's memory, shared by ``fork``), and writes its columns, task by task as it finishes
them, to an anonymous file shared with the parent (:class:`Spill`: ``memfd``, else an unlinked
temporary file), which the parent maps when the child is done: only a small index goes through
the pipe. A child leaves with ``os._exit`` (no interpreter shutdown to wait for), dies with
its parent (``PR_SET_PDEATHSIG``: a parent killed outright, even by SIGKILL, takes it along),
and sends the parent any exception that stopped it, which is raised there. A child that ends
without its result (killed, most often for memory) is :class:`DecoderDied`.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import pickle
import tempfile
from collections.abc import Callable
from typing import Any

from ..core.processes import die_with_parent
from .columns import Columns

Slice = tuple[int, int | None]             # (start, end) offsets; None: to the array's end
DecodeSlices = Callable[[list[Slice]], Columns]
#: Called in the process that is about to decode a task, with the index of its first slice.
BeforeTask = Callable[[int], None]


class DecoderDied(RuntimeError):
    """A forked decoder ended without sending its columns (killed, most often for memory)."""


def decode_in_parallel(decode: DecodeSlices, slices: list[Slice], workers: int,
                       slices_per_task: int, before_task: BeforeTask | None = None) -> Columns:
    """``decode`` of every slice, in order, on this process and up to ``workers - 1`` forked
    ones (never more than there are tasks); on this process alone, as one task, where one
    worker is asked for or ``fork`` is missing."""
    workers = min(workers, -(-len(slices) // slices_per_task))
    if workers <= 1 or not hasattr(os, "fork"):
        if before_task is not None:
            before_task(0)
        return decode(slices)
    taken = multiprocessing.get_context("fork").Value("q", 0)
    children: list[_Child] = []
    done: dict[int, Columns] = {}
    tasks = _Tasks(decode, slices, taken, slices_per_task, before_task)
    try:
        for _ in range(workers - 1):
            children.append(_fork_decoder(tasks))
        tasks.run(done.__setitem__)
        while children:
            done.update(children.pop(0).result())
    finally:
        taken.value = len(slices)                  # an error here: the children stop soon
        for child in children:
            child.abandon()
    merged = Columns()
    for index in range(0, len(slices), slices_per_task):
        merged.extend(done.pop(index))
    return merged


class _Tasks:
    """The slices and the counter shared by every decoding process."""

    def __init__(self, decode: DecodeSlices, slices: list[Slice], taken: Any,
                 slices_per_task: int, before_task: BeforeTask | None) -> None:
        self.decode, self.slices, self.taken = decode, slices, taken
        self.per_task, self.before_task = slices_per_task, before_task

    def run(self, keep: Callable[[int, Columns], object]) -> None:
        """Decode tasks until none is left, each handed to ``keep`` with the index of its
        first slice; an error stops the other processes after their current task."""
        while True:
            with self.taken.get_lock():
                index = self.taken.value
                self.taken.value = index + self.per_task
            if index >= len(self.slices):
                return
            try:
                if self.before_task is not None:
                    self.before_task(index)
                keep(index, self.decode(self.slices[index:index + self.per_task]))
            except BaseException:
                self.taken.value = len(self.slices)
                raise


SpillIndex = list[tuple[int, int, int, list[tuple[int, int]]]]


class Spill:
    """What a forked decoder decoded, written task by task, while it works, to a file shared
    with the parent (anonymous: it goes with the last descriptor). The arrays go raw (pickle's
    out-of-band buffers), so the parent maps them instead of reading them through a pipe and
    copying them: nothing but a small index is left to send at the end."""

    def __init__(self, descriptor: int) -> None:
        self.file = open(descriptor, "wb", closefd=False)  # noqa: SIM115 - closed by the owner
        self.index: SpillIndex = []

    def write(self, key: int, columns: Columns) -> None:
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(columns, protocol=5, buffer_callback=buffers.append)
        spans = []
        for buffer in buffers:
            raw = buffer.raw()
            spans.append((self.file.tell(), raw.nbytes))
            self.file.write(raw)
        self.index.append((key, self.file.tell(), len(head), spans))
        self.file.write(head)

    @staticmethod
    def read(descriptor: int, index: SpillIndex) -> dict[int, Columns]:
        if not index:
            return {}
        # a private map: the arrays read from it are writable, and the file is never changed
        view = memoryview(mmap.mmap(descriptor, 0, access=mmap.ACCESS_COPY))
        return {key: pickle.loads(view[at:at + size],
                                  buffers=[view[a:a + n] for a, n in spans])
                for key, at, size, spans in index}


def spill_descriptor() -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create("ddpprof-columns", os.MFD_CLOEXEC)
    with tempfile.TemporaryFile() as file:     # already unlinked: a duplicate keeps it alive
        return os.dup(file.fileno())


class _Child:
    """A forked decoder: its pid, the read end of its pipe, and its spill file."""

    def __init__(self, pid: int, reading: int, spill: int) -> None:
        self.pid, self.reading, self.spill = pid, reading, spill

    def result(self) -> dict[int, Columns]:
        """What it decoded, once it has ended (its error raised here)."""
        try:
            with open(self.reading, "rb") as pipe:
                outcome = pickle.load(pipe)
        except (EOFError, pickle.UnpicklingError):
            outcome = None
        finally:
            _, status = os.waitpid(self.pid, 0)
        try:
            if isinstance(outcome, BaseException):
                raise outcome
            if outcome is None or status != 0:
                raise DecoderDied(f"a decoding process ended without its result "
                                  f"({_ended(status)}; out of memory? try --jobs 1)")
            return Spill.read(self.spill, outcome)
        finally:
            os.close(self.spill)

    def abandon(self) -> None:
        os.close(self.reading)
        os.close(self.spill)
        os.waitpid(self.pid, 0)


def _fork_decoder(tasks: _Tasks) -> _Child:
    """A forked child that takes tasks as this process does, spills what it decoded (see
    :class:`Spill`), sends the spill's index (or the exception that stopped it) through a
    pipe, and leaves with ``os._exit``. A plain ``fork`` rather than a process pool: nothing
    to start but the child."""
    spill = spill_descriptor()
    reading, writing = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        os.close(writing)
        return _Child(pid, reading, spill)
    status = 1
    try:
        die_with_parent(parent)    # a parent killed outright (SIGKILL) takes the child along
        os.close(reading)
        spilled = Spill(spill)
        try:
            tasks.run(spilled.write)
            spilled.file.flush()
            outcome: Any = spilled.index
        except BaseException as error:  # sent to the parent, and raised there
            outcome = error
        with open(writing, "wb") as pipe:
            pickle.dump(outcome, pipe, protocol=pickle.HIGHEST_PROTOCOL)
        status = 0
    finally:
        os._exit(status)


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
