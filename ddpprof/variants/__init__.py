"""The data-parallel variants, selectable by name; each lives in a small module of its own."""

from __future__ import annotations

from torch import nn

from .base import DataParallel
from .bucket_ddp_async import BucketDDPAsync
from .pytorch_ddp import PyTorchDDP
from .simple_ddp import SimpleDDP
from .simple_ddp_async import SimpleDDPAsync
from .simple_ddp_ga import SimpleDDPGA
from .simple_ddp_hook import SimpleDDPHook
from .single import Single

VARIANTS: dict[str, type[DataParallel]] = {
    "single": Single,
    "simple_ddp": SimpleDDP,
    "simple_ddp_ga": SimpleDDPGA,
    "simple_ddp_hook": SimpleDDPHook,
    "simple_ddp_async": SimpleDDPAsync,
    "bucket_ddp_async": BucketDDPAsync,
    "pytorch_ddp": PyTorchDDP,
}
VARIANT_NAMES: tuple[str, ...] = tuple(VARIANTS)


def make_variant(name: str, module: nn.Module, *, bucket_cap_mb: float = 25.0,
                 gradient_as_bucket_view: bool = False) -> DataParallel:
    """Wrap ``module`` in the variant called ``name`` (the process group must already exist,
    except for ``single``)."""
    if name == "bucket_ddp_async":
        return BucketDDPAsync(module, bucket_cap_mb=bucket_cap_mb)
    if name == "pytorch_ddp":
        return PyTorchDDP(module, bucket_cap_mb=bucket_cap_mb,
                          gradient_as_bucket_view=gradient_as_bucket_view)
    return VARIANTS[name](module)


__all__ = ["VARIANTS", "VARIANT_NAMES", "DataParallel", "make_variant"]
