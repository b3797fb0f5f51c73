"""Reading input files, bounded: regular files only, never more than a cap, and a file that
changes while it is read is noticed. Every trace and every JSON input goes through here.

* **Only regular files.** A link to one is followed. A FIFO, a device, a socket or a folder
  is refused in one line naming it, and is never opened in a way that could block: the path
  is ``stat``-ed first (nothing but a regular file is opened), then opened with
  ``O_NONBLOCK`` (a FIFO opened so never waits for a writer) and ``fstat``-ed again: it must
  still be the same regular file, so a link swapped between the check and the open is
  refused, never followed into a hang.
* **Never more than a cap.** A trace may hold at most :func:`max_trace_bytes` bytes
  (``DDPPROF_MAX_TRACE_BYTES``, 16 GiB by default), counted on what is actually read: a plain
  file's size is checked before anything is read, and gzip is inflated in chunks of at most
  16 MiB that stop as soon as the inflated bytes pass the cap (so a gzip bomb costs the cap,
  not its inflated size). The JSON inputs of ``gate``, ``simulate`` and ``calibrate`` have
  their own, smaller cap (``ddpprof.core.json_input``).
* **Read in place, checked for changes.** A plain local file is not loaded whole: the
  sliced decode reads each slice where it lies, with ``pread`` (:class:`FileBytes`), so
  its bytes are held once, a slice at a time, and forked decoders read the same descriptor.
  A read that comes back short, or a size or modification time that differs after the decode
  from before, is one line: "changed while it was read". (A memory map would read as fast,
  but a file that shrinks under a map kills the process with SIGBUS, a signal rather than an
  error, and its pages count against the process's memory.)
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import storage
from .atomic import remember_input
from .errors import TraceError, UsageError
from .processes import memory_room
from .storage import Location

#: The default of ``DDPPROF_MAX_TRACE_BYTES``: the most bytes of JSON one trace may hold
#: (inflated, for gzip).
DEFAULT_MAX_TRACE_BYTES = 16 * 1024**3
MAX_TRACE_BYTES_ENV = "DDPPROF_MAX_TRACE_BYTES"
#: gzip is inflated in chunks of at most this many bytes, from input read this much at a time.
INFLATE_CHUNK_BYTES = 16 * 1024**2
_INPUT_CHUNK_BYTES = 1024**2
_URL_CHUNK_BYTES = 8 * 1024**2
_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
#: A byte that ``bytes.strip()`` keeps.
NOT_BLANK = re.compile(rb"[^ \t\n\r\x0b\x0c]")
_NOT_ZERO = re.compile(rb"[^\x00]")
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0))
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def byte_cap(variable: str, default: int) -> int:
    """A cap in bytes from the environment variable ``variable`` (a whole number ≥ 1)."""
    text = os.environ.get(variable)
    if not text:                  # unset, or set to nothing
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"{variable}={text!r}: not a whole number of bytes (at least 1)")
    return value


def max_trace_bytes() -> int:
    """The most bytes of JSON a trace may hold: ``DDPPROF_MAX_TRACE_BYTES``, else 16 GiB."""
    return byte_cap(MAX_TRACE_BYTES_ENV, DEFAULT_MAX_TRACE_BYTES)


def size_text(count: int) -> str:
    """``count`` bytes for a message: ``16 GiB`` where that is exact, else the bytes and,
    from 1 KiB, a size rounded down beside them (``100,000 bytes, about 97.6 KiB``)."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            if count % scale == 0:
                return f"{count // scale:,} {unit}"
            return f"{count:,} bytes, about {count * 10 // scale / 10:,.1f} {unit}"
    return f"{count:,} bytes"


def too_large(path: Location, limit: int, variable: str | None, verb: str = "holds"
              ) -> TraceError:
    """``PATH: holds more than 16 GiB (set VARIABLE to allow more)``."""
    allow = f" (set {variable} to allow more)" if variable else ""
    return TraceError(path, f"{verb} more than {size_text(limit)}{allow}")


def changed(path: Location) -> TraceError:
    return TraceError(path, "changed while it was read (rewritten, or cut short, by another "
                            "process?)")


def open_regular(path: Path) -> tuple[int, os.stat_result]:
    """A descriptor open for reading on ``path`` and its status, if ``path`` is a regular file
    or a link to one; a TraceError naming it otherwise (see the module's docstring)."""
    try:
        before = os.stat(path)
    except FileNotFoundError:
        dangling = os.path.islink(path)
        raise TraceError(path, "no such file" + (" (a link to nothing)" if dangling else "")
                         ) from None
    except OSError as error:
        raise TraceError(path, f"cannot be read ({error.strerror or error})") from None
    check_regular(path, before)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as error:
        raise TraceError(path, f"cannot be read ({error.strerror or error})") from None
    try:
        after = os.fstat(fd)
        check_regular(path, after)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise TraceError(path, "replaced while it was opened")
    except BaseException:
        os.close(fd)
        raise
    remember_input(status=after)      # no output of this process may replace it
    return fd, after


def check_regular(path: Path, status: os.stat_result) -> None:
    """A TraceError naming ``path`` and what it is, unless ``status`` is a regular file's."""
    if not stat.S_ISREG(status.st_mode):
        kind = next((name for test, name in _KINDS if test(status.st_mode)), "special")
        raise TraceError(path, f"not a regular file ({kind})")


class TraceBytes:
    """The bytes of a document, read by offset; ``size`` of them."""

    path: Location
    size: int

    def read(self, offset: int, length: int) -> bytes | bytearray | memoryview:
        """Up to ``length`` bytes from ``offset`` (fewer only at the end)."""
        raise NotImplementedError

    def framed(self, start: int, end: int) -> bytes | bytearray:
        """``[`` + the bytes from ``start`` to ``end`` + ``]``: a run of events as an array."""
        raise NotImplementedError

    def whole(self) -> bytes | bytearray | memoryview:
        return self.read(0, self.size)

    def check_unchanged(self) -> None:
        """A TraceError if the bytes may have changed since they were first looked at."""


class MemoryBytes(TraceBytes):
    """Bytes held in memory (inflated gzip, a URL's content, a whole document)."""

    def __init__(self, path: Location, data: bytes | bytearray | memoryview) -> None:
        self.path, self.view = path, memoryview(data)
        self.size = len(self.view)

    def read(self, offset: int, length: int) -> memoryview:
        return self.view[offset:offset + length]

    def framed(self, start: int, end: int) -> bytes:
        return b"".join((b"[", self.view[start:end], b"]"))

    def whole(self) -> memoryview:
        return self.view


class FileBytes(TraceBytes):
    """An open regular file, read where it lies with ``pread`` from byte ``start`` on. The
    descriptor is shared with forked decoders (``pread`` moves no shared offset)."""

    path: Path    # a local file

    def __init__(self, path: Path, fd: int, status: os.stat_result, start: int = 0) -> None:
        self.path, self.fd, self.status, self.start = path, fd, status, start
        self.size = status.st_size - start

    def from_offset(self, start: int) -> FileBytes:
        return FileBytes(self.path, self.fd, self.status, self.start + start)

    def read(self, offset: int, length: int) -> bytearray:
        buffer = bytearray(max(0, min(length, self.size - offset)))
        self._fill(memoryview(buffer), offset)
        return buffer

    def framed(self, start: int, end: int) -> bytearray:
        buffer = bytearray(end - start + 2)
        buffer[0], buffer[-1] = ord("["), ord("]")
        self._fill(memoryview(buffer)[1:-1], start)
        return buffer

    def _fill(self, view: memoryview, offset: int) -> None:
        done = 0
        while done < len(view):
            count = _pread_into(self.fd, view[done:], self.start + offset + done)
            if count == 0:            # the file ends before the size it had: cut short
                raise changed(self.path)
            done += count

    def check_unchanged(self) -> None:
        now = os.fstat(self.fd)
        if (now.st_size, now.st_mtime_ns) != (self.status.st_size, self.status.st_mtime_ns):
            raise changed(self.path)

    def identity(self) -> tuple[Any, ...]:
        """What tells this file's content apart: a rewrite changes its size or times."""
        found = self.status
        return (str(self.path), found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns,
                found.st_ctime_ns)


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], offset)
    data = os.pread(fd, len(view), offset)
    view[:len(data)] = data
    return len(data)


@contextlib.contextmanager
def opened(path: Location, limit: int, variable: str | None) -> Iterator[TraceBytes]:
    """``path``'s bytes as they are stored (gzip not inflated): a local file opened (nothing
    read yet, closed on leaving), or a URL's content read whole; at most ``limit`` bytes."""
    path = storage.location_of(path) if isinstance(path, str) else path
    if not isinstance(path, Path):
        yield MemoryBytes(path, read_url(path, limit, variable))
        return
    fd, status = open_regular(path)
    try:
        if status.st_size > limit:
            raise too_large(path, limit, variable)
        yield FileBytes(path, fd, status)
    finally:
        os.close(fd)


def read_url(url: str, limit: int, variable: str | None) -> bytes | bytearray:
    """The content of ``url``, read a chunk at a time, each read given the store's deadline
    (``storage.within_deadline``), never more than ``limit`` bytes."""
    stream = storage.within_deadline(url, lambda fs, path: fs.open(path, "rb"))
    if (getattr(stream, "size", None) or 0) > limit:     # where the store said its size
        raise too_large(url, limit, variable)
    data = bytearray()

    def next_chunk(fs: Any, path: str) -> bytes:
        result: bytes = stream.read(min(_URL_CHUNK_BYTES, limit + 1 - len(data)))
        return result

    try:
        while chunk := storage.within_deadline(url, next_chunk):
            data += chunk
            if len(data) > limit:
                raise too_large(url, limit, variable)
    finally:
        with contextlib.suppress(Exception):
            storage.within_deadline(url, lambda fs, path: stream.close())
    return data


def read_regular_file(path: Path, limit: int, variable: str | None) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (``variable`` names
    the setting that allows more); a TraceError naming it otherwise."""
    with opened(path, limit, variable) as stored:
        data = stored.whole()
        stored.check_unchanged()
    return bytes(data)


def json_bytes(stored: TraceBytes, limit: int) -> TraceBytes:
    """A trace's JSON: inflated where it is gzip (never beyond ``limit`` bytes), without the
    byte-order mark an editor may have put first."""
    path = stored.path
    if not stored.size:
        raise TraceError(path, "empty file")
    data: TraceBytes = stored
    if bytes(stored.read(0, 2)) == _GZIP_MAGIC:
        inflated = gunzip(stored, limit, memory_room())
        data = MemoryBytes(path, inflated)
        stored.check_unchanged()
        if NOT_BLANK.search(data.view) is None:
            raise TraceError(path, f"inflates to {size_text(inflated.blanks)} of blanks only "
                                   "(no JSON)" if inflated.blanks else "empty file")
    if bytes(data.read(0, 3)) == _UTF8_BOM:
        # Editors and PowerShell on Windows (Out-File, Set-Content) write one when a trace is
        # re-saved; Python's json.loads of bytes (HTA's reader) skips it too, msgspec does not.
        data = data.from_offset(3) if isinstance(data, FileBytes) else MemoryBytes(
            path, data.read(3, data.size))
    return data


def inflater() -> tuple[Any, type[Exception]]:
    """isal's gzip inflater (about 2-3x zlib's speed) where installed, else zlib's; both take
    the same calls."""
    try:
        from isal import isal_zlib  # isal: optional, a faster gzip
    except ImportError:
        return zlib, zlib.error
    # isal's stub declares ``error`` an instance; it is zlib.error's counterpart, a class
    return isal_zlib, isal_zlib.error  # type: ignore[return-value]


class Inflated(bytearray):
    """Inflated bytes, less the blanks they began with (``blanks`` of them: not kept, so that a
    bomb of spaces costs no memory)."""

    blanks = 0


#: The share of the memory a process may still take (``processes.memory_room``) that one
#: inflated trace may fill: the bytes grow by reallocation (twice their size for a moment),
#: and the decode then takes about as much again.
MEMORY_SHARE = 3
#: Blanks a JSON document may begin with: no writer puts more there.
MAX_LEADING_BLANKS = 64 * 1024**2


def gunzip(packed: TraceBytes, limit: int, room: tuple[int, str] | None = None) -> Inflated:
    """Every gzip member of ``packed`` inflated (zero bytes between members are skipped), read
    and inflated a bounded chunk at a time; a TraceError as soon as the output passes
    ``limit`` bytes, or a 1/``MEMORY_SHARE`` of ``room`` (the memory the process may still
    take, and what sets it), or where the gzip is corrupt or cut short."""
    library, library_error = inflater()
    out, position, path = Inflated(), 0, packed.path
    cap = limit
    if room is not None and room[0] // MEMORY_SHARE < limit:
        cap = max(room[0] // MEMORY_SHARE, 1)
        too_much = TraceError(path, f"inflates to more than {size_text(cap)}, a third of the "
                                    f"memory this process may still take ({room[1]}: "
                                    f"{size_text(room[0])})")
    else:
        too_much = too_large(path, limit, MAX_TRACE_BYTES_ENV, "inflates to")
    try:
        while (position := _skip_zeros(packed, position)) < packed.size:
            member = library.decompressobj(16 + zlib.MAX_WBITS)
            while not member.eof:
                piece = packed.read(position, _INPUT_CHUNK_BYTES)
                room_left = min(INFLATE_CHUNK_BYTES, cap + 1 - len(out) - out.blanks)
                chunk = member.decompress(piece, room_left)
                if out:
                    out += chunk
                else:                   # blanks before the JSON: counted, not kept
                    kept = chunk.lstrip(b" \t\n\r\x0b\x0c")
                    out.blanks += len(chunk) - len(kept)
                    out += kept
                    if out.blanks > MAX_LEADING_BLANKS:
                        raise TraceError(path, f"inflates to more than "
                                               f"{size_text(MAX_LEADING_BLANKS)} of blanks "
                                               "before any JSON (a gzip bomb?)")
                if len(out) + out.blanks > cap:
                    raise too_much
                used = len(piece) - len(member.unconsumed_tail) - (
                    len(member.unused_data) if member.eof else 0)
                position += used
                if not member.eof and not chunk and not used:
                    raise TraceError(path, "truncated or corrupt gzip (ends before its last "
                                           "block)")
    except (zlib.error, library_error) as error:
        raise TraceError(path, f"truncated or corrupt gzip ({error})") from None
    return out


def _skip_zeros(data: TraceBytes, position: int) -> int:
    """The first offset from ``position`` on that does not hold a zero byte (or the end)."""
    while position < data.size:
        found = _NOT_ZERO.search(data.read(position, _INPUT_CHUNK_BYTES))
        if found is not None:
            return position + found.start()
        position += _INPUT_CHUNK_BYTES
    return data.size
