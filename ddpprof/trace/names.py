"""Names a trace controls (ops, kernels, threads, process groups), bounded: a name longer than
:data:`MAX_NAME_CHARS` characters is shortened as it is read, before it is classified, printed,
hashed or scrubbed, so that no table, page or regular expression works on a megabyte of one
name. The shortened name keeps the first characters, then says how long the name was and
carries a hash of it, so that two long names that differ only after the cut stay apart."""

from __future__ import annotations

import hashlib

#: The longest name kept whole. Real kernel names (C++ templates) run to a few thousand
#: characters; nothing in ddpprof reads past this many.
MAX_NAME_CHARS = 4096
_HASH_BYTES = 6


def shorten(name: str) -> str:
    """``name``, or where it is longer than :data:`MAX_NAME_CHARS`, its beginning then
    ``...[N chars, HASH]`` (at most :data:`MAX_NAME_CHARS` characters in all)."""
    if len(name) <= MAX_NAME_CHARS:
        return name
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"),
                             digest_size=_HASH_BYTES).hexdigest()
    tail = f"...[{len(name):,} chars, {digest}]"
    return name[:MAX_NAME_CHARS - len(tail)] + tail

