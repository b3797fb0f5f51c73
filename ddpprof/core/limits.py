"""The physical bounds of what ddpprof reads or is told: beyond them an input is bad, not a
question (the command line's ranges, ``run.json``'s and the analyze document's types)."""

from __future__ import annotations

from typing import Annotated

import msgspec

#: A world size beyond any real cluster is bad input, not a question.
MAX_RANKS = 1 << 20
#: A rank of a run: below :data:`MAX_RANKS`.
Rank = Annotated[int, msgspec.Meta(ge=0, lt=MAX_RANKS)]
#: The bus bandwidths (GB/s) and per-call latencies (µs) a cost model may have: from a modem's
#: to far beyond any interconnect's, and up to a quarter of an hour. Outside them the
#: predicted times overflow float64 (1e-308 GB/s) and no fit can be made from them.
MIN_BANDWIDTH_GBPS, MAX_BANDWIDTH_GBPS, MAX_LATENCY_US = 1e-6, 1e6, 1e9
#: ``--rank-delay``: a rank's start moved by at most a quarter of an hour either way.
MAX_DELAY_US = 1e9
