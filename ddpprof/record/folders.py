"""Run folders: who may write in them, and what an earlier recording left there.

A recording writes into its *target* folders: ``<out>/<name>`` with ``--name``, else
``<out>/<variant>`` for each variant. With one variant a target is the run folder; with several
under one name, each variant's run folder is a subfolder of the target.

Before anything runs, ``claim`` locks every target and run folder (``flock`` on
``.ddpprof.lock``, held until the recording ends), so a second recorder into the same folder is
refused ("in use"), and ``clear_previous`` removes what an earlier recording left in a target,
whole: its run files and every run subfolder's, so ``analyze`` never sees old runs beside new
ones. Anything there that ``analyze`` would read but ``ddpprof record`` did not write (another
tool's trace, a JSON summary) makes ``record`` refuse instead; anything else is left alone.
Lock files are never deleted: deleting one would let two recorders lock different files.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

from ..core.errors import UsageError
from ..run.discover import is_trace_file
from ..run.folder import RunFolder
from ..run.manifest import MANIFEST_NAME, owner_is_gone, read_run_manifest
from .failure import ERRORS_DIR
from .flight_recorder import FR_DIR

LOCK_NAME = ".ddpprof.lock"
#: Everything ``ddpprof record`` and its workers write in a run folder (besides the lock).
_RUN_FILE = re.compile(r"^(?:run\.json|launcher(?:\.node\d+)?\.log|rank\d+\.pt\.trace\.json\.gz"
                       r"|\.?worker_result\.json|\.config\.json|\.errors|fr|\.tmp-.*)$")


class FolderLocks:
    """Exclusive locks on run folders, held by this process until ``release``, and the folders
    themselves, open (``ddpprof.run.folder``): every file of a run is written through them."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, int], tuple[RunFolder, int]] = {}
        self._paths: dict[str, tuple[int, int]] = {}

    def lock(self, folder: Path) -> RunFolder:
        try:
            opened = RunFolder(folder)
        except OSError as error:
            raise UsageError(f"{folder}: output folder cannot be written "
                             f"({error.strerror or error})") from None
        if opened.identity in self._held:   # the same folder by another name
            opened.close()
            self._paths[os.path.abspath(folder)] = opened.identity
            return self._held[opened.identity][0]
        try:
            with opened.replacing(".tmp-probe"):   # can files be made here?
                pass
            opened.unlink(".tmp-probe")
            descriptor = opened.open_lock(LOCK_NAME)
        except OSError as error:
            opened.close()
            raise UsageError(f"{error.filename or folder}: output folder cannot be written "
                             f"({error.strerror or error})") from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 512, 0).decode("utf-8", "replace").strip()
            os.close(descriptor)
            opened.close()
            raise UsageError(f"{folder}: in use by another ddpprof record"
                             + (f" ({holder})" if holder else "")) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._held[opened.identity] = (opened, descriptor)
        self._paths[os.path.abspath(folder)] = opened.identity
        return opened

    def folder(self, path: Path) -> RunFolder:
        """The open folder of ``path`` (locked before)."""
        return self._held[self._paths[os.path.abspath(path)]][0]

    def release(self) -> None:
        for opened, descriptor in self._held.values():
            os.close(descriptor)  # closing the only descriptor releases the flock
            opened.close()
        self._held.clear()
        self._paths.clear()


@contextlib.contextmanager
def claim(folders: list[Path]) -> Iterator[FolderLocks]:
    """Lock ``folders`` (in a fixed order, so two recorders cannot deadlock) for the block."""
    locks = FolderLocks()
    try:
        for folder in sorted(set(folders), key=os.path.abspath):
            locks.lock(folder)
        yield locks
    finally:
        locks.release()


def is_run_file(path: Path) -> bool:
    """A file (or the ``.errors`` folder) that ``ddpprof record`` writes in a run folder.
    Something else under such a name is in the way: a ``UsageError``."""
    if not _RUN_FILE.match(path.name):
        return False
    if (path.name in (ERRORS_DIR, FR_DIR)) != (path.is_dir() and not path.is_symlink()):
        raise UsageError(f"{path}: in the way of the run's own {path.name} (move it, or "
                         "choose another --out or --name)")
    return True


def clear_previous(target: Path, locks: FolderLocks) -> None:
    """Remove an earlier recording from ``target`` (its run files, and its run subfolders'),
    after checking that nothing there is in use or foreign; see the module docstring."""
    if not target.is_dir():
        return
    doomed = _run_files(target)
    for entry in sorted(target.iterdir()):
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        if entry.is_symlink():  # never deleted through; refused if analyze would read it
            _refuse_traces(entry, target)
            continue
        inside = _run_files(entry)
        if inside:
            locks.lock(entry)  # a recorder writing in there holds it
            doomed += inside
    for path in doomed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _run_files(folder: Path) -> list[Path]:
    """The run files directly in ``folder``; a ``UsageError`` if it holds a trace file that
    ddpprof did not write, or a run still being recorded."""
    found = []
    for entry in sorted(folder.iterdir()):
        if is_run_file(entry):
            found.append(entry)
        elif is_trace_file(entry):
            _refuse(entry, folder)
    _check_not_running(folder)
    return found


def _refuse_traces(folder: Path, target: Path) -> None:
    for entry in folder.iterdir():
        if is_trace_file(entry):
            _refuse(entry, target)


def _refuse(entry: Path, folder: Path) -> None:
    raise UsageError(f"{entry}: not written by ddpprof record; recording into {folder} would "
                     "mix it with the new runs (move it, or choose another --out or --name)")


def _check_not_running(folder: Path) -> None:
    """A run.json saying ``running`` whose owner is alive on this host is in use (a recorder
    from before folder locks, or one on a file system without them)."""
    try:
        manifest = read_run_manifest(folder)
    except UsageError:
        return  # unreadable: stale, and replaced
    owner = manifest.owner if manifest else None
    if manifest and manifest.status == "running" and owner is not None \
            and owner.hostname == socket.gethostname() and owner.pid != os.getpid() \
            and not owner_is_gone(owner):
        raise UsageError(f"{folder / MANIFEST_NAME}: in use: still being recorded by pid "
                         f"{owner.pid}")
