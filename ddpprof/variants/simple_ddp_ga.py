"""``simple_ddp_ga``: ``simple_ddp`` that accumulates gradients over micro-steps by default.

The accumulation itself is the shared ``no_sync`` of :class:`DataParallel`; what makes this a
variant of its own is that it accumulates two micro-steps per optimizer step unless
``--grad-accum`` says otherwise, as the reference study's GA variant did, so a side-by-side
comparison shows what accumulation buys.
"""

from __future__ import annotations

from .simple_ddp import SimpleDDP


class SimpleDDPGA(SimpleDDP):
    default_grad_accum = 2
