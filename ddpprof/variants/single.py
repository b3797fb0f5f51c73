"""``single``: one process, no process group; the baseline every variant is checked against."""

from __future__ import annotations

from torch import nn

from .base import DataParallel


class Single(DataParallel):
    distributed = False

    def _sync_gradients(self) -> None:
        pass

    def collectives_per_sync(self) -> dict[str, int | None]:
        return {}

    def gradient_buckets(self) -> list[list[nn.Parameter]] | None:
        return None
