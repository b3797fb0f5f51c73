"""How gradients are grouped into buckets, defined once and without torch: the bucketed
variants build their buckets with it (``buckets.py``: ``bucket_ddp_async``, ``zero1``,
``zero2``), and ``ddpprof simulate`` replays bucketed syncs with it (``ddpprof.simulate``).

The rule is PyTorch's Reducer's (``compute_bucket_assignment_by_size``): parameters are taken in
reverse registration order (the order backward roughly produces their gradients); each group of
parameters that may share a buffer (one dtype on one device) fills its own open bucket, which
closes as soon as its bytes reach the cap, so a parameter larger than the cap gets a bucket of
its own; the buckets still open at the end close then. Buckets are numbered, and launched, in
the order of their first parameter. (PyTorch DDP caps its first bucket at 1 MiB only when
``bucket_cap_mb`` is left unset; ``pytorch_ddp`` here always sets it, so every variant buckets
alike.) Every rank computes the same assignment, so the buffers line up.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def assign_buckets(sizes_bytes: Sequence[int], cap_bytes: float,
                   groups: Sequence[Hashable] | None = None,
                   order: Sequence[int] | None = None) -> list[list[int]]:
    """The buckets of parameters whose gradients take ``sizes_bytes``, given in registration
    order: each bucket a list of registration positions, in the order they were taken, and the
    buckets in launch order.

    ``groups``: what may share a bucket, per parameter (its ``(dtype, device)``); by default
    every parameter may. ``order``: the positions in the order to take them; by default reverse
    registration order (``simulate --ready-order`` takes them as they became ready).
    """
    if not cap_bytes > 0:
        raise ValueError(f"the bucket cap must be positive, got {cap_bytes} bytes")
    taken = range(len(sizes_bytes) - 1, -1, -1) if order is None else order
    filling: dict[Hashable, tuple[list[int], int]] = {}
    closed: list[list[int]] = []
    for position in taken:
        group = groups[position] if groups is not None else None
        members, size = filling.pop(group, ([], 0))
        members.append(position)
        size += sizes_bytes[position]
        if size >= cap_bytes:
            closed.append(members)
        else:
            filling[group] = (members, size)
    closed.extend(members for members, _ in filling.values())
    when_taken = {position: k for k, position in enumerate(taken)}
    return sorted(closed, key=lambda members: when_taken[members[0]])
