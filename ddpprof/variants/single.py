"""``single``: one process, no process group; the baseline every variant is checked against."""

from __future__ import annotations

from .base import DataParallel


class Single(DataParallel):
    distributed = False

    def _sync_gradients(self) -> None:
        pass

    def allreduces_per_sync(self) -> int:
        return 0
