"""``ddpprof hang``: why a distributed job hung, from its ranks' Flight Recorder dumps.

``files`` finds the dumps (a run folder's ``fr/``, a folder, a prefix) and decodes each,
bounded and without running anything a pickle names (``safe_pickle``); ``dumps`` reads them
into each rank's collectives per process group (``model``); ``match`` matches them across each
group's members by sequence id and finds each group's first problem; ``diagnose`` names the
first hang, its culprits and what each did instead (``result``, the ``--json`` document);
``report`` prints it. No torch is imported.

    read_dumps(path) -> DumpSet;  diagnose(dump_set) -> HangDocument
"""

from __future__ import annotations

from .diagnose import diagnose
from .dumps import read as read_dumps

__all__ = ["diagnose", "read_dumps"]
