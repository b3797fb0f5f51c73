"""A folder that ddpprof records into (a run folder, a calibration folder): opened once, and
every file in it written without following a link.

A run folder may sit in a place others can write (a shared scratch folder, a team's trace
store), so nothing written there goes through a name someone else put there:

* the folder itself is opened with ``O_NOFOLLOW``: a folder that is a symbolic link is refused,
  and so is one that is writable by others but owned by someone else (they could plant links in
  it while the run records);
* every file is reached through the folder's descriptor, never through its path again, so a
  folder renamed or swapped for a link mid-run does not redirect the writes; a process that
  opens the folder later (a rank) checks that it is still the one the launcher opened
  (:attr:`RunFolder.identity`);
* a file is written to a new temporary name (``O_CREAT | O_EXCL``) and renamed over its final
  name: a rename replaces a link that stands there, it never writes through it;
* a log is created anew (whatever stood under its name is removed first, a link included);
* the lock is opened with ``O_NOFOLLOW`` and must be a regular file;
* a file read back (a rank's result) is opened with ``O_NOFOLLOW``, must be a regular file, and
  is read up to a limit.

Only the standard library: the ranks import it before torch, and the analysis side may too.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

#: Set by the launcher for the ranks: ``<st_dev>:<st_ino>`` of the run folder it opened.
FOLDER_ID_ENV = "DDPPROF_RUN_FOLDER_ID"
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _refused(path: Path | str, problem: str) -> OSError:
    return OSError(errno.EPERM, problem, str(path))


def check_owner(path: Path | str, found: os.stat_result) -> None:
    """Refuse a folder that others may write while it belongs to someone else: they could put
    links in it while a run records. A world-writable folder with the sticky bit (``/tmp``)
    is fine as a parent, never as a run folder."""
    mine = found.st_uid == os.geteuid()
    if not mine and found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refused(path, f"writable by others and owned by uid {found.st_uid}, not by "
                             "this user: refusing to record into it")


class RunFolder:
    """An open run folder. ``create`` makes it (and its parents) when missing;
    ``expected_identity`` is the ``(st_dev, st_ino)`` a launcher saw, which a rank checks."""

    def __init__(self, path: Path, create: bool = True,
                 expected_identity: tuple[int, int] | None = None) -> None:
        self.path = Path(path)
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with suppress(FileExistsError):
                os.mkdir(self.path)
        try:
            self.fd = os.open(self.path, _DIRECTORY_FLAGS)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR) and self.path.is_symlink():
                raise _refused(self.path, "is a symbolic link: refusing to record through "
                                          "it (give the folder it points to)") from None
            raise
        try:
            found = os.fstat(self.fd)
            check_owner(self.path, found)
            self.identity = (found.st_dev, found.st_ino)
            if expected_identity is not None and self.identity != tuple(expected_identity):
                raise _refused(self.path, "is no longer the folder the recording opened "
                                          "(moved or replaced while it ran)")
        except BaseException:
            os.close(self.fd)
            raise

    # --- the folder ---------------------------------------------------------------------

    @classmethod
    def for_rank(cls, path: Path) -> RunFolder:
        """The run folder as a rank opens it: it must exist, and be the launcher's (when the
        launcher said which)."""
        text = os.environ.get(FOLDER_ID_ENV)
        expected = tuple(int(part) for part in text.split(":")) if text else None
        return cls(path, create=False, expected_identity=expected)  # type: ignore[arg-type]

    @property
    def identity_text(self) -> str:
        return f"{self.identity[0]}:{self.identity[1]}"

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def subfolder(self, name: str) -> RunFolder:
        """A folder inside this one (made when missing), opened the same way."""
        with suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=self.fd)
        sub = RunFolder.__new__(RunFolder)
        sub.path = self.path / name
        try:
            sub.fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=self.fd)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _refused(sub.path, "is not a folder (a link or a file is in the way)"
                               ) from None
            raise
        found = os.fstat(sub.fd)
        sub.identity = (found.st_dev, found.st_ino)
        return sub

    # --- files ------------------------------------------------------------------------------

    def kind(self, name: str) -> int | None:
        """``st_mode`` of what stands under ``name`` (a link's own), or None."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return None

    @contextmanager
    def replacing(self, name: str) -> Iterator[BinaryIO]:
        """A new file to write; renamed over ``name`` only if the block succeeds. A link (or a
        regular file) under that name is replaced, never written through; a folder or a
        special file there is an error."""
        mode = self.kind(name)
        if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise OSError(errno.EEXIST, "exists and is not a regular file", str(self.path / name))
        temporary = f".tmp-{os.getpid()}-{os.urandom(4).hex()}-{name}"
        descriptor = os.open(temporary, _NEW_FILE_FLAGS, 0o666, dir_fd=self.fd)
        try:
            with os.fdopen(descriptor, "wb") as stream:
                yield stream
            os.replace(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=self.fd)

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.replacing(name) as stream:
            stream.write(data)

    def write_text(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode("utf-8", "surrogateescape"))

    def new_file(self, name: str) -> BinaryIO:
        """A file created afresh under ``name`` (a log that grows while the run records):
        whatever stood there, a link included, is removed first, never opened."""
        mode = self.kind(name)
        if mode is not None and stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR),
                                    str(self.path / name))
        if mode is not None:
            os.unlink(name, dir_fd=self.fd)
        return os.fdopen(os.open(name, _NEW_FILE_FLAGS, 0o666, dir_fd=self.fd), "wb")

    def open_lock(self, name: str) -> int:
        """A descriptor on the lock file ``name`` (created when missing): never a link, never
        anything but a regular file."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            descriptor = os.open(name, flags, 0o666, dir_fd=self.fd)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise _refused(self.path / name, "is a symbolic link: refusing to write "
                                                 "through it (remove it)") from None
            raise
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise _refused(self.path / name, "is not a regular file (remove it)")
        return descriptor

    def read_bytes(self, name: str, limit: int) -> bytes:
        """A regular file's bytes, read without following a link, at most ``limit`` of them
        (more is an ``OSError``)."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        descriptor = os.open(name, flags, dir_fd=self.fd)
        with os.fdopen(descriptor, "rb") as stream:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise _refused(self.path / name, "is not a regular file")
            data = stream.read(limit + 1)
        if len(data) > limit:
            raise OSError(errno.EFBIG, f"larger than {limit:,} bytes", str(self.path / name))
        return data

    def unlink(self, name: str) -> None:
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)
