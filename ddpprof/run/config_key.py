"""What makes two runs comparable: the key ``gate`` and ``diff`` group recordings by."""

from __future__ import annotations

from dataclasses import dataclass

from ..render.table import counted


@dataclass(frozen=True)
class ConfigKey:
    """What makes two runs comparable (and repeats of one another)."""

    variant: str
    model: str | None
    world_size: int | None
    global_batch: int | None
    grad_accum: int | None
    bucket_cap_mib: float | None

    def describe(self) -> str:
        parts = [self.model, counted(self.world_size, "rank") if self.world_size else None,
                 f"batch {self.global_batch}" if self.global_batch else None,
                 f"accum {self.grad_accum}" if self.grad_accum else None,
                 f"{self.bucket_cap_mib:g} MiB buckets" if self.bucket_cap_mib else None]
        return ", ".join(p for p in parts if p)

    def differences(self, other: ConfigKey) -> list[str]:
        """Fields known on both sides that differ."""
        names = ("variant", "model", "world_size", "global_batch", "grad_accum",
                 "bucket_cap_mib")
        return [f"{name} {getattr(self, name)} vs {getattr(other, name)}" for name in names
                if None not in (getattr(self, name), getattr(other, name))
                and getattr(self, name) != getattr(other, name)]
