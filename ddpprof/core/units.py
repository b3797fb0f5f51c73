"""Units, defined once: sizes in binary multiples (a "MiB" everywhere in ddpprof is 2²⁰ bytes,
as PyTorch's ``bucket_cap_mb`` is, despite its name)."""

from __future__ import annotations

KIB = 2**10
MIB = 2**20
GIB = 2**30
