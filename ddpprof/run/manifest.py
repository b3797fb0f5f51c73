"""The run manifest ``run.json``: its schema, reading it, and what its status means now.

``ddpprof record`` writes one manifest per run folder (always atomically, as standard JSON).
Its ``status`` is

* ``running`` while the run is recorded; ``owner`` then names the recording process (pid,
  host, and the process's start time and boot, so that a later process reusing the pid is not
  taken for it);
* ``complete`` when every rank finished and wrote its trace;
* ``failed`` with ``error`` (``rank``, ``message``, ``traceback``, ``log``);
* ``interrupted`` when a signal stopped the recording, with ``error.signal``.

The API, for any reader (it imports neither torch nor anything heavy)::

    read_manifest(path: Path) -> RunManifest
        Decode a run.json. Unknown fields are ignored and fields a manifest lacks read as None
        (a field of ``config`` as ``RunConfig``'s default), so older and newer manifests both
        read; a version 1 or 2 file is read into version 3's form (:func:`_from_version_2`).
        A file that is not JSON, or a field of the wrong type, raises
        ``UsageError("<path>: config.steps: expected int, got str")``.
    read_run_manifest(folder: Path) -> RunManifest | None
        ``read_manifest(folder / "run.json")``, or None when the folder has none.
    effective_status(manifest: RunManifest) -> Status | None
        The status as it stands now (None when the file has none): a ``running`` manifest
        whose owner process is gone (the recorder was killed outright, say by SIGKILL) is
        ``interrupted``. An owner on another host cannot be checked and reads as recorded.
    status_detail(manifest: RunManifest) -> str | None
        One line saying why a run is not complete (``rank 1: RuntimeError: ...``,
        ``interrupted by SIGTERM``), None for a complete run.

New optional fields are added by giving them a default of None (``buckets``, ``memory``...).
``config`` is the run's :class:`ddpprof.run.config.RunConfig` itself (version 3), so a new
option needs nothing here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import click
import msgspec

from ..core.errors import UsageError
from ..core.json_input import read_json_bytes
from ..core.limits import Rank
from ..core.processes import stat_fields, state_of
from ..core.units import MIB
from ..variants.mesh import MeshRecord
from .config import RunConfig, decode_hook, with_current_names

MANIFEST_NAME = "run.json"
#: 4: ``config.bucket_cap_mib`` (``bucket_cap_mb`` before, read either way:
#: ``record.config.OLD_FIELD_NAMES``); 3: ``config`` is the ``RunConfig`` itself and
#: ``measured`` what the ranks reported (version 2 mixed both in ``config``, renamed); 2:
#: ``owner``, the ``interrupted`` status and ``error.signal``. Version 1 and 2 files are read
#: into version 3's form.
SCHEMA_VERSION = 4
#: A manifest is a few kilobytes per hundred steps; anything this big is not one.
MAX_MANIFEST_BYTES = 64 * MIB

Status = Literal["running", "complete", "failed", "interrupted"]
#: A run in one of these never stands for a good one (analyzed, gated, calibrated from).
INCOMPLETE: tuple[Status, ...] = ("running", "failed", "interrupted")

#: What numbers a run.json read back may hold (``read_manifest``): finite, not negative and
#: within physical bounds (a rank below ``core.limits.MAX_RANKS``, times of at most 10⁹ s,
#: counts and rates of at most 10¹⁸); a loss may be anything (NaN where training diverged).
Count = Annotated[int, msgspec.Meta(ge=0, le=2**62)]
Bytes = Annotated[int, msgspec.Meta(ge=0, le=2**62)]
Seconds = Annotated[float, msgspec.Meta(ge=0, le=1e9)]
Rate = Annotated[float, msgspec.Meta(ge=0, le=1e18)]


class Owner(msgspec.Struct, kw_only=True):
    """The process recording a run, while it runs."""

    pid: int
    hostname: str
    #: The process's start time, in clock ticks after boot (Linux), else None; with
    #: ``boot_id`` it tells the owner from a later process that reuses its pid.
    start_ticks: int | None = None
    boot_id: str | None = None

    @classmethod
    def current(cls) -> Owner:
        return cls(pid=os.getpid(), hostname=socket.gethostname(),
                   start_ticks=process_start_ticks(os.getpid()), boot_id=_boot_id())


class RunError(msgspec.Struct, kw_only=True):
    """Why a run failed or was interrupted."""

    message: str
    rank: int | None = None             # the failing rank, as torchrun reports the root cause
    traceback: str | None = None
    log: str | None = None              # torchrun's output, relative to the run folder
    signal: str | None = None           # for an interrupted run: SIGINT, SIGTERM or SIGHUP


class MemoryRow(msgspec.Struct, kw_only=True):
    """One rank's memory (``workloads/memory.py``): steady-state bytes counted from the tensors
    (each storage once), and peaks."""

    rank: Rank
    device: str | None = None
    params_bytes: Bytes | None = None
    grads_bytes: Bytes | None = None
    optimizer_bytes: Bytes | None = None
    state_bytes: Bytes | None = None
    peak_allocated_bytes: Bytes | None = None          # GPU: torch.cuda.max_memory_allocated
    peak_allocated_profiled_bytes: Bytes | None = None  # GPU: the profiler's allocator events
    step_peak_rise_bytes: Bytes | None = None          # largest rise within a profiled step
    peak_rss_bytes: Bytes | None = None                # the process's peak resident set


class BucketRecord(msgspec.Struct, kw_only=True):
    """One gradient collective of a sync (a bucket): the parameters whose gradients it carries.
    ``run.json``'s ``buckets`` lists them in the order the variant launches them."""

    params: list[str]                   # names, as the model's named_parameters() gives them
    param_index: list[Count]            # their positions in named_parameters() order
    param_bytes: list[Bytes]            # each parameter's gradient bytes (its full size)
    bytes: Bytes                        # their sum: the gradient bytes the collective carries
    param_dtypes: list[str] | None = None  # each parameter's dtype (``float32``); version 3

    def __post_init__(self) -> None:
        if not len(self.params) == len(self.param_index) == len(self.param_bytes) or (
                self.param_dtypes is not None and len(self.param_dtypes) != len(self.params)):
            raise ValueError("buckets: params, param_index, param_bytes and param_dtypes must "
                             "hold one value per parameter")


class RunMeasurements(msgspec.Struct, kw_only=True):
    """What the ranks reported of the run and of where it ran (rank 0 hands it over when the
    run ends); every field may be absent (None) in a file."""

    parameters: int | None = None
    world_size: int | None = None       # the process group's, as the ranks saw it
    devices: list[str] | None = None    # one per rank
    threads_per_rank: int | None = None
    #: The cores rank 0 could run on (its affinity, else the machine's): what the ranks of a
    #: CPU run on one host share (``simulate`` crowds them at another world size).
    host_cores: int | None = None
    #: How each step's ``wall_s`` was taken over the ranks: ``mean`` (None: a run recorded
    #: before it was, which kept the slowest rank's, see ``StepRecord``).
    wall_s_over_ranks: str | None = None
    torch_version: str | None = None
    #: Collectives one optimizer step launches, by kind (``all_reduce``, ``reduce_scatter``,
    #: ...): what the variant says (``DataParallel.collectives_per_sync``).
    collectives_per_sync: dict[str, int | None] | None = None
    seq_len: int | None = None          # a language model's sequence length; None for others

    @property
    def allreduces_per_sync(self) -> int | None:
        """The all-reduces of ``collectives_per_sync`` (0 when it launches none; None where
        the run does not say)."""
        if self.collectives_per_sync is None:
            return None
        return self.collectives_per_sync.get("all_reduce", 0)


class StepRecord(msgspec.Struct, kw_only=True):
    """One optimizer step: ``wall_s`` from its first micro-batch to the end of the optimizer
    (the mean over ranks, ``RunMeasurements.wall_s_over_ranks``; older runs kept the slowest
    rank's), ``sync_s`` the time in ``finish_gradient_sync`` (the slowest rank's)."""

    step: Count
    phase: str                          # wait, warmup, active, after, or unprofiled
    wall_s: Seconds | None = None
    sync_s: Seconds | None = None
    samples_per_s: Rate | None = None
    tokens_per_s: Rate | None = None
    loss: float | None = None           # (NaN where training diverged)


class Throughput(msgspec.Struct, kw_only=True):
    samples_per_s: Rate | None = None
    tokens_per_s: Rate | None = None
    median_step_s: Seconds | None = None
    steps_used: list[Count] | None = None
    includes_profiled_steps: bool | None = None
    profiler_overhead_ratio: Rate | None = None


class InjectedFault(msgspec.Struct, kw_only=True):
    """A fault ``ddpprof record --fault`` injected into the run (``workloads/faults.py``): the
    ground truth a diagnosis is held to. The analysis never reads it."""

    kind: str
    rank: int | None = None             # the culprit rank; None for a kind of every rank
    amount: float | None = None
    unit: str | None = None             # of the amount: "ms", "x", "MiB", ...


class RunManifest(msgspec.Struct, kw_only=True):
    schema_version: int | None = None
    status: Status | None = None        # None: the file does not say (not ddpprof's)
    run: str | None = None
    started: str | None = None
    finished: str | None = None
    elapsed_s: Seconds | None = None
    #: The run's configuration, every default resolved (its variant's gradient accumulation,
    #: the backend); None for a folder ddpprof did not record.
    config: RunConfig | None = None
    measured: RunMeasurements | None = None
    command: list[str] | None = None
    owner: Owner | None = None
    error: RunError | None = None
    steps: list[StepRecord] | None = None
    throughput: Throughput | None = None
    traces: list[str] | None = None
    memory: list[MemoryRow] | None = None
    buckets: list[BucketRecord] | None = None
    mesh: MeshRecord | None = None
    #: A failed or interrupted run's Flight Recorder dumps, relative to the run folder
    #: (``fr/rank_0``, ...: PyTorch's own format, one per rank that could write one; read by
    #: ``ddpprof hang``); None when no rank left one, or the run completed.
    fr_dumps: list[str] | None = None
    #: The faults injected into the run (``record --fault``); None: none. Never read by the
    #: analysis (``tests/test_fault_injection.py`` checks its findings do not change without it).
    injected_faults: list[InjectedFault] | None = None


def read_manifest(path: Path) -> RunManifest:
    """Decode the run.json at ``path``; every problem is a ``UsageError`` naming the file (and
    the field, for a wrong type)."""
    data = read_json_bytes(path, MAX_MANIFEST_BYTES)
    try:
        document = json.loads(data)  # json, not msgspec: older files hold NaN
    except (ValueError, RecursionError) as error:
        raise UsageError(f"{path}: not JSON ({error})") from None
    return manifest_from_json(document, path)


def manifest_from_json(document: object, where: object) -> RunManifest:
    """A decoded run.json as a :class:`RunManifest`; a field of the wrong type is a
    ``UsageError`` naming ``where`` and the field. A file of version 1 or 2 (or of none) is
    read into version 3's form."""
    version = document.get("schema_version") if isinstance(document, dict) else None
    try:
        if isinstance(version, int) and not isinstance(version, bool) and version >= 3:
            if isinstance(document, dict) and "config" in document:
                document = {**document, "config": with_current_names(document["config"])}
            manifest = msgspec.convert(document, RunManifest, dec_hook=decode_hook)
            if manifest.config is not None:  # every field in the object, defaults included
                manifest.config = dataclasses.replace(manifest.config)
        else:
            manifest = _from_version_2(msgspec.convert(document, _ManifestV2))
    except msgspec.ValidationError as error:
        raise UsageError(f"{where}: {validation_problem(error)}") from None
    if manifest.config is not None:
        _check_ranges(manifest.config, where)
    return manifest


def _check_ranges(config: RunConfig, where: object) -> None:
    """A ``UsageError`` naming the field where a number of ``config`` is out of the range its
    option accepts (a bucket cap of -25 MiB, a NaN learning rate): the same types check a
    number given on the command line and one read back."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        kind = field.metadata.get("type")
        if kind is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        try:
            kind.convert(value, None, None)
        except click.BadParameter as error:
            raise UsageError(f"{where}: config.{field.name}: {error.message}") from None


class _ProfilerV2(msgspec.Struct, kw_only=True):
    wait: int
    warmup: int
    active: int


class _ConfigV2(msgspec.Struct, kw_only=True):
    """``config`` of a version 1 or 2 run.json: the configuration, renamed, with what the
    ranks measured."""

    variant: str | None = None
    model: str | None = None
    model_path: str | None = None
    parameters: int | None = None
    world_size: int | None = None
    nproc_per_node: int | None = None
    nnodes: int | None = None
    backend: str | None = None
    devices: list[str] | None = None
    threads_per_rank: int | None = None
    torch_version: str | None = None
    global_batch: int | None = None
    grad_accum: int | None = None
    bucket_cap_mb: float | None = None
    gradient_as_bucket_view: bool | None = None
    seq_len: int | None = None
    steps: int | None = None
    seed: int | None = None
    lr: float | None = None
    timeout_s: float | None = None
    data: str | None = None
    profiler: _ProfilerV2 | None = None
    allreduces_per_sync: int | None = None
    collectives_per_sync: dict[str, int | None] | None = None


class _ManifestV2(RunManifest, kw_only=True):
    config: _ConfigV2 | None = None     # type: ignore[assignment]


def _from_version_2(old: _ManifestV2) -> RunManifest:
    """A version 1 or 2 manifest in version 3's form: ``config`` mapped onto ``RunConfig``
    (``nproc_per_node`` is ``nproc``; ``profiler`` gives ``wait``, ``warmup``, ``active`` and
    ``profile``; ``data: synthetic`` is none), each field it lacks at ``RunConfig``'s default,
    and none at all without a variant (not a run's configuration); what the ranks measured
    goes to ``measured``."""
    fields = {f: getattr(old, f) for f in RunManifest.__struct_fields__}
    legacy = old.config
    if legacy is None:
        return RunManifest(**{**fields, "config": None})
    collectives = legacy.collectives_per_sync or (
        {"all_reduce": legacy.allreduces_per_sync}
        if legacy.allreduces_per_sync is not None else None)
    measured = RunMeasurements(
        parameters=legacy.parameters, world_size=legacy.world_size, devices=legacy.devices,
        threads_per_rank=legacy.threads_per_rank, torch_version=legacy.torch_version,
        collectives_per_sync=collectives, seq_len=legacy.seq_len)
    config = None
    if legacy.variant is not None:
        nnodes = legacy.nnodes or 1
        schedule = legacy.profiler
        given: dict[str, Any] = {
            "variant": legacy.variant, "model": legacy.model,
            "model_path": Path(legacy.model_path) if legacy.model_path else None,
            "data": Path(legacy.data) if legacy.data not in (None, "synthetic") else None,
            "nproc": legacy.nproc_per_node or (legacy.world_size // nnodes
                                                 if legacy.world_size else None),
            "nnodes": legacy.nnodes, "backend": legacy.backend,
            "global_batch": legacy.global_batch, "grad_accum": legacy.grad_accum,
            "bucket_cap_mib": legacy.bucket_cap_mb,
            "gradient_as_bucket_view": legacy.gradient_as_bucket_view,
            "seq_len": legacy.seq_len, "steps": legacy.steps, "seed": legacy.seed,
            "lr": legacy.lr, "timeout_s": legacy.timeout_s,
            "profile": schedule is not None,
            **({"wait": schedule.wait, "warmup": schedule.warmup, "active": schedule.active}
               if schedule else {})}
        config = RunConfig(**{key: value for key, value in given.items() if value is not None})
    return RunManifest(**{**fields, "config": config, "measured": measured})


def read_run_manifest(folder: Path) -> RunManifest | None:
    path = folder / MANIFEST_NAME
    return read_manifest(path) if path.is_file() else None


def effective_status(manifest: RunManifest) -> Status | None:
    if manifest.status == "running" and manifest.owner is not None \
            and owner_is_gone(manifest.owner):
        return "interrupted"
    return manifest.status


def status_detail(manifest: RunManifest) -> str | None:
    status = effective_status(manifest)
    if status == "complete":
        return None
    if status != manifest.status:
        owner = manifest.owner
        assert owner is not None
        return f"interrupted: its recorder (pid {owner.pid} on {owner.hostname}) is gone"
    if manifest.error is None:
        return status
    if manifest.error.rank is not None:
        return f"rank {manifest.error.rank}: {manifest.error.message}"
    return manifest.error.message


def owner_is_gone(owner: Owner) -> bool:
    """True when ``owner`` certainly no longer runs: it was on this host and its pid is free,
    a zombie, or now another process (a different start time)."""
    if owner.hostname != socket.gethostname():
        return False
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process: it exists
    if owner.boot_id is not None and owner.boot_id != _boot_id():
        return True  # the machine rebooted since
    if state_of(owner.pid) == "Z":
        return True
    started = process_start_ticks(owner.pid)
    return None not in (owner.start_ticks, started) and started != owner.start_ticks


def process_start_ticks(pid: int) -> int | None:
    """When the kernel started process ``pid``, in clock ticks after boot (``/proc/<pid>/stat``
    field 22; exact, unlike a wall-clock time, which moves when the clock is set); None where
    that cannot be read."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None


def now_iso() -> str:

    return datetime.now(UTC).isoformat(timespec="seconds")


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def validation_problem(error: msgspec.ValidationError) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.config.world_size`" as
    "config.world_size: expected int, got str"."""
    text, _, where = str(error).partition(" - at `")
    text = text.replace("`", "")
    text = text[:1].lower() + text[1:]
    location = re.sub(r"^\$\.?", "", where.rstrip("`"))
    return f"{location}: {text}" if location else text
