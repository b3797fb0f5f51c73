"""The exceptions the CLI turns into one line on stderr and an exit code, never a traceback.

* ``UsageError`` (and ``TraceError``): the input is wrong (an option, a file, a folder); nothing
  was run. Exit 2.
* ``RunFailed``: something was run and it failed (a run, or writing what a run produced).
  Exit 1.
* ``Interrupted``: a signal stopped the work. Exit 128 + the signal's number, as a shell does.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

#: ``://user:PASSWORD@``: a URL's credentials, found from each ``://`` (its scheme is read
#: backwards from there: :func:`without_secrets`).
_CREDENTIALS = re.compile(r"://[^/@\s:]*:([^/@\s]+)@")
_SCHEME_TAIL = re.compile(r"[A-Za-z0-9+.-]*")
_LETTER = re.compile(r"[A-Za-z]")


class UsageError(Exception):
    """Bad input: a message that names the file or option and the problem."""


class TraceError(UsageError):
    """A trace file that cannot be analyzed; the message starts with the file's path."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        # a URL stays text: a Path would fold its "//"
        self.path = path if isinstance(path, Path) or "://" in path else Path(path)
        self.problem = problem

    def __reduce__(self) -> tuple[type[TraceError], tuple[Path | str, str]]:
        # so that it crosses from a worker process intact
        return type(self), (self.path, self.problem)


class NotATrace(TraceError):
    """A JSON document that is not a Chrome trace at all (no ``traceEvents``): a PyTorch
    execution trace, a config, another tool's output saved beside the traces. A run skips it
    when the run has traces."""


class RunFailed(Exception):
    """A launched run, or an output written after it, failed: one line naming what and where."""


class Interrupted(Exception):
    """A signal (SIGINT, SIGTERM, SIGHUP) stopped the work after its runs were marked so."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_os_error(path: str | os.PathLike[str], error: OSError) -> str:
    """``path: reason``, the reason as the OS words it (``No space left on device``)."""
    return f"{os.fspath(path)}: {error.strerror or error}"


def without_secrets(text: str) -> str:
    """``text`` with the password of every URL in it written ``***`` (``http://me:***@host``):
    a message ends up in CI logs and PR comments.

    A URL is ``SCHEME://USER:PASSWORD@`` with SCHEME a letter then letters, digits, ``+``,
    ``-`` or ``.``. Time is linear in ``text`` whatever it holds (a regular expression tried
    from every position would rescan a long run of letters once per letter): each ``://`` is
    found once, the scheme read backwards from it, and the credentials forwards from it up to
    the next ``/``, so no character is read more than a few times."""
    if "://" not in text:
        return text
    reversed_text = text[::-1]
    pieces, copied = [], 0
    for found in _CREDENTIALS.finditer(text):
        at = found.start()
        run = _SCHEME_TAIL.match(reversed_text, len(text) - at)
        start = at - (run.end() - run.start() if run else 0)
        if _LETTER.search(text, start, at):       # a scheme starts with a letter
            pieces += [text[copied:found.start(1)], "***"]
            copied = found.end(1)
    return "".join([*pieces, text[copied:]])
