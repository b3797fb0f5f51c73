"""The data-parallel variants, selectable by name; each lives in a small module of its own.

The registry below is the one place that knows a variant's properties (whether it has buckets,
whether its sync blocks, what it shards, whether it splits layers over a tensor-parallel group,
how it syncs its gradients); ``record``, ``bench``, ``sweep``, ``simulate``, the findings and
the help text all ask it. It names every variant without importing it: the analysis side
(``analyze``, ``gate``, ``simulate``, ``memory``) and option validation need the names, and must
not pay for importing torch. :func:`variant_class` imports a variant's module when a rank
actually builds it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from torch import nn

    from .base import DataParallel


#: The bucket cap, in MiB, of a bucketed variant when none is given (PyTorch DDP's default).
DEFAULT_BUCKET_CAP_MIB = 25.0

#: How a variant syncs its gradients: ``blocking`` one blocking collective per gradient after
#: backward, ``hook`` one blocking collective per gradient as it becomes ready, ``async`` one
#: async collective per gradient as it becomes ready, waited on after backward, ``buckets``
#: one async collective per bucket as it fills, ``sharded_buckets`` that and one all-gather
#: per bucket after the optimizer step, ``fsdp`` FSDP's own per unit, ``none`` nothing.
#: ``ddpprof simulate`` re-buckets the collectives of ``buckets`` and ``sharded_buckets`` at
#: another cap (``ddpprof.graph.edit``); ``bench`` times the sync of ``blocking`` ones.
GradientSync = Literal["blocking", "hook", "async", "buckets", "sharded_buckets", "fsdp",
                       "none"]


@dataclass(frozen=True)
class VariantInfo:
    name: str
    module: str                  # module in this package
    class_name: str
    #: Micro-steps per optimizer step when the user does not choose (``--grad-accum``).
    default_grad_accum: int = 1
    #: Whether it runs one process per rank under a process group (``single`` does not).
    distributed: bool = True
    #: Whether ``--bucket-cap-mib`` changes what it does (``sweep`` sizes these).
    bucketed: bool = False
    #: Whether it takes ``--gradient-as-bucket-view`` (PyTorch DDP's option).
    ddp_options: bool = False
    #: What each rank holds a 1/N shard of: 0 nothing (DDP), 1 optimizer state, 2 and
    #: gradients, 3 and parameters (ZeRO's stages).
    zero_stage: int = 0
    #: How it syncs its gradients (see :data:`GradientSync`).
    gradient_sync: GradientSync = "none"
    #: The collective its gradient sync launches (what a bucket is reduced by), if distributed.
    gradient_collective: str = "all_reduce"
    #: One line for ``record --help`` and ``ddpprof variants``.
    description: str = ""
    #: Tensor-parallel degree when the user does not choose (``--tp``); None for a variant
    #: with no tensor-parallel dimension (one process group).
    default_tp: int | None = None

    @property
    def sharded(self) -> bool:
        return self.zero_stage > 0

    @property
    def blocking(self) -> bool:
        """Whether all its gradient communication happens, blocking, in
        ``finish_gradient_sync`` after backward (so the sync's time is its communication
        time, which ``bench`` reports)."""
        return self.gradient_sync == "blocking"

    @property
    def tensor_parallel(self) -> bool:
        """Whether it runs on a data-parallel × tensor-parallel mesh, two process groups: the
        tools that model one group (``simulate``, ``bench``) refuse it."""
        return self.default_tp is not None


VARIANTS: dict[str, VariantInfo] = {info.name: info for info in (
    VariantInfo("single", "single", "Single", distributed=False,
                description="one process, no process group: the baseline"),
    VariantInfo("simple_ddp", "simple_ddp", "SimpleDDP", gradient_sync="blocking",
                description="after backward, a blocking all-reduce per parameter: no overlap"),
    VariantInfo("simple_ddp_ga", "simple_ddp_ga", "SimpleDDPGA", default_grad_accum=2,
                gradient_sync="blocking",
                description="simple_ddp accumulating gradients over 2 micro-steps by default"),
    VariantInfo("simple_ddp_hook", "simple_ddp_hook", "SimpleDDPHook", gradient_sync="hook",
                description="a blocking all-reduce per parameter from its hook, in backward"),
    VariantInfo("simple_ddp_async", "simple_ddp_async", "SimpleDDPAsync",
                gradient_sync="async",
                description="an async all-reduce per parameter from its hook"),
    VariantInfo("bucket_ddp_async", "bucket_ddp_async", "BucketDDPAsync", bucketed=True,
                gradient_sync="buckets",
                description="gradients in buckets, one async all-reduce per bucket"),
    VariantInfo("pytorch_ddp", "pytorch_ddp", "PyTorchDDP", bucketed=True, ddp_options=True,
                gradient_sync="buckets", description="torch.nn.parallel.DistributedDataParallel"),
    VariantInfo("zero1", "zero1", "Zero1", bucketed=True, zero_stage=1,
                gradient_sync="sharded_buckets", gradient_collective="reduce_scatter",
                description="ZeRO-1: bucketed reduce-scatter, optimizer state sharded"),
    VariantInfo("zero2", "zero2", "Zero2", bucketed=True, zero_stage=2,
                gradient_sync="sharded_buckets", gradient_collective="reduce_scatter",
                description="ZeRO-2: zero1, and each rank keeps only its gradient shard"),
    VariantInfo("pytorch_zero1", "pytorch_zero1", "PyTorchZero1", bucketed=True,
                ddp_options=True, zero_stage=1, gradient_sync="buckets",
                description="PyTorch's ZeroRedundancyOptimizer over pytorch_ddp"),
    VariantInfo("fsdp", "fsdp", "FSDP", zero_stage=3, gradient_collective="reduce_scatter",
                gradient_sync="fsdp",
                description="ZeRO-3 through FSDP2 (fully_shard): everything sharded"),
    VariantInfo("fsdp_tp", "fsdp_tp", "FSDPTP", zero_stage=3, default_tp=2,
                gradient_collective="reduce_scatter", gradient_sync="fsdp",
                description="a dp x tp mesh: FSDP2 over dp, layers split over --tp ranks"),
)}
VARIANT_NAMES: tuple[str, ...] = tuple(VARIANTS)
#: The variants with buckets (``--bucket-cap-mib``).
BUCKETED_VARIANT_NAMES: tuple[str, ...] = tuple(n for n, i in VARIANTS.items() if i.bucketed)
#: What ``--variant all`` records: the variants on one process group, which run at any world
#: size. A tensor-parallel variant needs a world size its ``--tp`` divides and communicates
#: over two groups: it is recorded by name.
VARIANTS_IN_ALL: tuple[str, ...] = tuple(n for n, i in VARIANTS.items() if not i.tensor_parallel)


def variant_info(name: str | None) -> VariantInfo | None:
    """The registry's entry for ``name``; None for a run of no known variant."""
    return VARIANTS.get(name or "")


def variant_class(name: str) -> type[DataParallel]:
    info = VARIANTS[name]
    module = importlib.import_module(f"{__name__}.{info.module}")
    result: type[DataParallel] = getattr(module, info.class_name)
    return result


def make_variant(name: str, module: nn.Module, *,
                 bucket_cap_mib: float = DEFAULT_BUCKET_CAP_MIB,
                 gradient_as_bucket_view: bool = False, tp: int | None = None) -> DataParallel:
    """Wrap ``module`` in the variant called ``name`` (the process group must already exist,
    except for ``single``)."""
    info = VARIANTS[name]
    options: dict[str, object] = {}
    if info.bucketed:
        options["bucket_cap_mib"] = bucket_cap_mib
    if info.ddp_options:
        options["gradient_as_bucket_view"] = gradient_as_bucket_view
    if info.tensor_parallel:
        options["tp"] = tp or info.default_tp
    return variant_class(name)(module, **options)


__all__ = ["BUCKETED_VARIANT_NAMES", "DEFAULT_BUCKET_CAP_MIB", "VARIANTS", "VARIANTS_IN_ALL",
           "VARIANT_NAMES", "GradientSync", "VariantInfo", "make_variant", "variant_class",
           "variant_info"]
