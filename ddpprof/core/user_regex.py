"""Regular expressions a user gives (``--comm-kernel``), matched in time linear in the text:
compiled by RE2 (google-re2), which never backtracks, so ``(a+)+$`` on a name of 10,000
characters takes microseconds where Python's ``re`` would run for longer than the universe.
RE2 lacks what needs backtracking: backreferences (``\\1``), lookaround (``(?=``, ``(?<!``)
and possessive quantifiers (``a++``); a pattern using one is one line naming the option and
RE2's reason. Where google-re2 is not installed, a user's regular expression is refused in
one line saying so (Python's ``re`` cannot bound its time)."""

from __future__ import annotations

from typing import Any, Protocol

from .errors import UsageError


class Matcher(Protocol):
    def search(self, text: str) -> Any: ...


def compile_user(pattern: str, option: str) -> Matcher:
    """``pattern`` compiled for linear-time search; a ``UsageError`` naming ``option`` and the
    pattern when RE2 refuses it or is not installed."""
    try:
        import re2  # google-re2: optional
    except ImportError:
        raise UsageError(f"{option} {pattern!r}: matching a regular expression needs "
                         "google-re2 (pip install google-re2), whose time is bounded") from None
    options = re2.Options()
    options.log_errors = False      # its reason goes in our one line, not to stderr
    try:
        result: Matcher = re2.compile(pattern, options)
        return result
    except re2.error as error:
        reason = error.args[0] if error.args else error
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise UsageError(f"{option} {pattern!r}: not a regular expression ddpprof can match "
                         f"in bounded time ({reason}; backreferences, lookaround and "
                         "possessive quantifiers are not supported)") from None
