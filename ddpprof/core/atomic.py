"""Writing outputs safely: a reader sees the old file or the whole new one, never half of it, and
nothing but a regular file is ever replaced.

* ``-`` is standard output.
* A symlink is followed (its target is written, the link stays), unless it stands in a folder
  that anyone may write (sticky, like ``/tmp``) and belongs neither to this user nor to the
  folder's owner: the rule by which Linux's ``protected_symlinks`` refuses to follow a link
  someone else planted there. Such a link is refused.
* A device, a FIFO or another non-regular file is written straight through (``/dev/null``
  stays a device); a folder is an error.
* A regular file, or a path where nothing is yet, is written to a temporary name beside it and
  renamed over it.
* An output is never one of the command's inputs: :func:`refuse_inputs` refuses, before any
  work, a path that is (or links to) a trace being read, or that lies in a run folder being
  recorded; and every file this process reads (``ddpprof.core.io``) or finds to read (a run
  folder's traces and ``run.json``) is remembered (:func:`remember_input`), so that
  :func:`write_text` refuses to replace one, whichever command and option named it.
* A FIFO is opened without blocking: one that no process reads within
  :data:`FIFO_WAIT_S` seconds, or whose reader stops reading for that long, is an error,
  never a hang.

Files inside a run folder that ``record`` or ``calibrate`` writes go through
``ddpprof.run.folder`` instead, which never follows a link at all.
"""

from __future__ import annotations

import errno
import json
import math
import os
import select
import stat
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import RunFailed, UsageError, describe_os_error

#: The name that means standard output for ``--json``/``--csv``/``--markdown FILE`` options.
STDOUT = "-"


#: How long a FIFO named as an output may go without a reader, or without reading.
FIFO_WAIT_S = 10.0
#: ``(st_dev, st_ino, st_ctime_ns)`` of every file this process has read or is about to read
#: (the change time tells the file apart from a later one that reuses its inode).
_INPUTS: set[tuple[int, int, int]] = set()


def remember_input(path: str | os.PathLike[str] | None = None,
                   status: os.stat_result | None = None) -> None:
    """Note a file this process reads (by its status, or by ``path``, followed through links):
    no output may then replace it. A path that cannot be looked at is ignored."""
    if status is None:
        try:
            status = os.stat(path)  # type: ignore[arg-type]
        except (OSError, TypeError, ValueError):
            return
    if stat.S_ISREG(status.st_mode):
        _INPUTS.add((status.st_dev, status.st_ino, status.st_ctime_ns))


def _is_input(path: Path) -> bool:
    try:
        found = os.stat(path)
    except OSError:
        return False
    return (found.st_dev, found.st_ino, found.st_ctime_ns) in _INPUTS


def is_stdout(path: str | os.PathLike[str] | None) -> bool:
    return path is not None and os.fspath(path) == STDOUT


def resolve_target(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` lands in: a symlink's final target, else ``path`` itself.
    A link someone else planted in a folder anyone may write is an ``OSError``."""
    given = Path(path)
    if not given.is_symlink():
        return given
    link = os.lstat(given)
    folder = os.stat(given.parent)
    shared = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
    if shared and link.st_uid not in (os.geteuid(), folder.st_uid):
        raise OSError(errno.EPERM, f"a link owned by uid {link.st_uid} in a folder anyone may "
                                   "write: refusing to follow it", str(path))
    return Path(os.path.realpath(given))


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` (which may not exist yet) lies in ``folder`` or below it."""
    for candidate in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
        for parent in candidate.parents:
            if _same_file(parent, folder):
                return True
    return False


def refuse_inputs(outputs: dict[str, str | os.PathLike[str] | None],
                  files: Iterable[str | os.PathLike[str]] = (),
                  folders: Iterable[str | os.PathLike[str]] = (), what: str = "",
                  runs_under: Iterable[str | os.PathLike[str]] = ()) -> None:
    """A ``UsageError`` when an output (``{"--json": path}``) would land on one of ``files``
    (the traces or documents being read), inside one of ``folders`` (run folders being
    recorded), or inside a subfolder of one of ``runs_under`` (a folder whose subfolders are
    run folders being recorded): writing it would destroy what the command reads or
    writes."""
    given = [(option, Path(path)) for option, path in outputs.items()
             if path is not None and not is_stdout(path)]
    if not given:
        return
    inputs = [Path(f) for f in files]
    runs = [Path(f) for f in folders]
    for option, path in given:
        try:
            target = resolve_target(path)
        except OSError as error:
            raise UsageError(f"{option} {describe_os_error(path, error)}") from None
        for source in inputs:
            if _same_file(target, source):
                raise UsageError(f"{option} {os.fspath(path)}: is {what or 'an input'} "
                                 f"({source}); writing it would destroy it")
        for folder in runs:
            if _inside(target, folder):
                raise UsageError(f"{option} {os.fspath(path)}: lies in the run folder "
                                 f"{folder}, which is being recorded; write it elsewhere")
        for parent in map(Path, runs_under):
            if _inside(target, parent) and not _same_file(target.parent, parent):
                raise UsageError(f"{option} {os.fspath(path)}: lies in a run folder under "
                                 f"{parent}, which are being recorded; write it elsewhere")


def _mode(path: Path) -> int | None:
    try:
        return path.stat().st_mode
    except FileNotFoundError:
        return None


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only if the block succeeds.

    ``path`` must be a regular file or absent (a symlink is followed to one): anything else is
    an ``OSError``, so a device or a folder is never replaced. The temporary name keeps the final
    suffixes (``.json.gz``), because some writers, such as ``torch.profiler``'s
    ``export_chrome_trace``, choose compression by the name's ending.
    """
    final = resolve_target(path)
    mode = _mode(final)
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if mode is not None and not stat.S_ISREG(mode):
        raise OSError(errno.EEXIST, "exists and is not a regular file", str(path))
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".tmp-{os.getpid()}-", suffix=f"-{final.name}",
                                    dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp's 0600 would hide results from others
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` by the rules in the module docstring.

    Undecodable bytes of file names (kept by Python as surrogate escapes) are written back as the
    bytes they were, never an encoding error.
    """
    data = text.encode("utf-8", "surrogateescape")
    if is_stdout(path):
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    final = resolve_target(path)
    if _is_input(final):
        raise OSError(errno.EEXIST, "is a file this command reads (a trace, a run.json or "
                                    "another input); writing it would destroy it", str(path))
    mode = _mode(final)
    if mode is not None and stat.S_ISFIFO(mode):
        _write_fifo(final, data)
        return
    if mode is not None and not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
        with open(final, "wb") as stream:  # a device: straight through, never renamed
            stream.write(data)
        return
    with atomic_path(final) as tmp:
        tmp.write_bytes(data)


def write_output(option: str, path: str | os.PathLike[str], text: str, ran: bool = False
                 ) -> None:
    """:func:`write_text` for the output option ``option``: an ``OSError`` (a full disk, a
    refused link) is one line naming the option and the path, a ``UsageError`` (exit 2), or a
    ``RunFailed`` (exit 1) once something ``ran``."""
    try:
        write_text(path, text)
    except OSError as error:
        raise (RunFailed if ran else UsageError)(
            f"{option} {describe_os_error(path, error)}") from None


def _write_fifo(path: Path, data: bytes) -> None:
    """``data`` into the FIFO ``path``: waits at most :data:`FIFO_WAIT_S` for a reader to open
    it, and as long again each time the reader stops taking what is written."""
    deadline = time.monotonic() + FIFO_WAIT_S
    while True:
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            break
        except OSError as error:
            if error.errno != errno.ENXIO:       # ENXIO: no process has it open for reading
                raise
            if time.monotonic() > deadline:
                raise OSError(errno.ENXIO, f"a FIFO that no process read within "
                                           f"{FIFO_WAIT_S:g} s", str(path)) from None
            time.sleep(0.05)
    try:
        if not stat.S_ISFIFO(os.fstat(descriptor).st_mode):
            raise OSError(errno.EEXIST, "replaced while it was opened", str(path))
        view, poller = memoryview(data), select.poll()
        poller.register(descriptor, select.POLLOUT)
        while view:
            if not poller.poll(FIFO_WAIT_S * 1000):
                raise OSError(errno.ETIMEDOUT, f"its reader took nothing for {FIFO_WAIT_S:g} s",
                              str(path))
            try:
                view = view[os.write(descriptor, view):]
            except BlockingIOError:
                continue
    finally:
        os.close(descriptor)


def check_output(path: str | os.PathLike[str], option: str) -> None:
    """Fail with a ``UsageError`` now, before any work, when ``write_text(path)`` could not
    succeed: ``path`` is a folder, or its folder cannot be created or written."""
    if is_stdout(path):
        return
    try:
        final = resolve_target(path)
        mode = _mode(final)
        if mode is not None and stat.S_ISDIR(mode):
            raise UsageError(f"{option} {os.fspath(path)}: is a folder, not a file")
        if mode is not None and not stat.S_ISREG(mode):
            # A device or FIFO is written through; opening a FIFO here would wait for a reader.
            if not os.access(final, os.W_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".tmp-probe-", dir=final.parent)
        os.close(fd)
        os.unlink(probe)
        if len(os.fsencode(final.name)) > os.pathconf(final.parent, "PC_NAME_MAX"):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), str(path))
    except OSError as error:
        raise UsageError(f"{option} {describe_os_error(path, error)}") from None


def check_outputs(**options: str | os.PathLike[str] | None) -> None:
    """``check_output`` for every given option (``json=path`` checks ``--json path``); at
    most one of them may be standard output, and no two may name one file."""
    given = {name: path for name, path in options.items() if path is not None}
    to_stdout = [name for name, path in given.items() if is_stdout(path)]
    if len(to_stdout) > 1:
        raise UsageError(f"only one output can be standard output (-): "
                         f"{', '.join('--' + name.replace('_', '-') for name in to_stdout)}")
    seen: dict[str, str] = {}
    for name, path in given.items():
        option = "--" + name.replace("_", "-")
        check_output(path, option)
        if is_stdout(path):
            continue
        target = os.path.realpath(path)
        if target in seen:  # the second would silently replace the first
            raise UsageError(f"{seen[target]} and {option} name one file ({os.fspath(path)})")
        seen[target] = option


def json_text(data: Any) -> str:
    """Standard JSON (RFC 8259): NaN and ±Infinity, which it cannot express, are written as
    null."""
    return json.dumps(_finite(data), indent=2, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
