"""The middle of a run of steps, defined once: the step the bucket table, the HTML timeline,
the bucket-cap advice's replay and the critical path's summaries each look at. Pure."""

from __future__ import annotations


def middle_index(count: int) -> int:
    """The position of the middle of ``count`` ordered items (steps in the order they ran, or
    sorted by length): ``count // 2``. Of an even count, the later of the two middle ones (of
    four steps, the third); of one, that one. ``count`` must be positive."""
    if count <= 0:
        raise ValueError(f"the middle of {count} items: there is none")
    return count // 2
