"""Which runs one ``ddpprof record`` makes, and the names of their folders.

``record`` runs every variant under every combination of its list options (``--model``,
``--nproc``, ``--bucket-cap-mib``). A variant is recorded once for each combination that
changes what it runs: ``single`` runs one process whatever ``--nproc`` says, and a variant
without buckets ignores ``--bucket-cap-mib``.

Folder names are deterministic: one run is ``<out>/<--name or the variant>``; several are
``<variant>[-<model>][-n<nproc>][-cap<MiB>]``, a part present when its option has several
values that matter to the variant, in ``<out>/<--name>/`` with ``--name``, else in ``<out>/``.
Variant names hold no ``-``, so no two runs share a folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

from ..run.config import RunConfig
from ..variants import VARIANTS


@dataclass(frozen=True)
class PlannedRun:
    label: str                 # its folder's name among several
    variant: str
    config: RunConfig          # before the variant's own defaults (``Recording.run_config``)


def configs(base: RunConfig, models: Sequence[str], nprocs: Sequence[int],
            caps_mib: Sequence[float]) -> list[RunConfig]:
    """``base`` under every combination of the values given (an empty list keeps base's)."""
    return [base.replace(model=model, nproc=nproc, bucket_cap_mib=cap)
            for model, nproc, cap in product(models or [base.model], nprocs or [base.nproc],
                                             caps_mib or [base.bucket_cap_mib])]


def plan(variants: Sequence[str], configs: Sequence[RunConfig]) -> list[PlannedRun]:
    """Every variant under every configuration that changes what it runs, labelled."""
    several_models = len({c.model for c in configs}) > 1
    several_nprocs = len({c.nproc for c in configs}) > 1
    several_caps = len({c.bucket_cap_mib for c in configs}) > 1
    runs: dict[str, PlannedRun] = {}
    for config, variant in product(configs, variants):
        info = VARIANTS[variant]
        label = variant
        if several_models:
            label += f"-{config.model}"
        if several_nprocs and info.distributed:
            label += f"-n{config.nproc}"
        if several_caps and info.bucketed:
            label += f"-cap{config.bucket_cap_mib:g}"
        runs.setdefault(label, PlannedRun(label, variant, config))
    return list(runs.values())
