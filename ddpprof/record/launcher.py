"""Validate a recording, run each variant through torchrun, own its processes, finish run.json.

Every way a run can end leaves its ``run.json`` final: ``complete``, ``failed`` (with the rank
torchrun names as the root cause) or ``interrupted`` (with the signal), and no process of the
run alive (see ``process``). If this process itself is killed outright, the manifest stays
``running`` with this process as its owner, which readers take for ``interrupted``.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ..core import processes
from ..core.atomic import json_text
from ..core.errors import Interrupted, RunFailed, UsageError, describe_os_error, signal_name
from ..core.progress import Progress
from ..grammar.options import check_run_name, unknown_model
from ..run.config import CONFIG_FILE, Launch, RunConfig, encode_hook
from ..run.folder import FOLDER_ID_ENV, RunFolder
from ..run.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    SCHEMA_VERSION,
    Owner,
    RunError,
    RunManifest,
    now_iso,
    status_detail,
)
from ..variants import VARIANTS
from . import faults, flight_recorder, folders, grid, measurements, process
from .failure import run_error

if TYPE_CHECKING:
    from workloads.faults import Fault, FaultSpec

WORKER_MODULE = "workloads.train"
#: More CPU ranks than this per usable core measure only the contention (and a typo such as
#: --nproc 1000 would start a thousand processes that each import torch).
MAX_RANKS_PER_CORE = 8


@dataclass(frozen=True)
class Recording:
    """One ``ddpprof record``: each of ``variants`` under ``config`` (or under each of
    ``configs``, the product of ``record``'s list options: ``grid``), under ``out``."""

    variants: list[str]
    config: RunConfig = field(default_factory=RunConfig)
    out: Path = Path("traces")
    name: str | None = None
    quiet: bool = False
    configs: tuple[RunConfig, ...] = ()
    #: ``--fault``: injected into every run (``workloads/faults.py``)
    faults: tuple[FaultSpec, ...] = ()

    def runs(self) -> list[grid.PlannedRun]:
        return grid.plan(self.variants, self.configs or (self.config,))

    def run_dir(self, label: str) -> Path:
        """The folder of the run ``label`` (a variant, for one configuration): see ``grid``."""
        if len(self.runs()) == 1:
            return self.out / (self.name or label)
        return self.out / self.name / label if self.name else self.out / label

    def targets(self) -> list[Path]:
        """The folders this recording replaces whole (``folders``)."""
        return [self.out / self.name] if self.name else [self.out / r.label for r in self.runs()]

    def run_config(self, variant: str, backend: str, config: RunConfig | None = None
                   ) -> RunConfig:
        """The configuration of ``variant``'s run, every default resolved."""
        config = config or self.config
        info = VARIANTS[variant]
        config = config.replace(
            variant=variant, backend=backend,
            grad_accum=config.grad_accum or info.default_grad_accum,
            nproc=config.nproc if info.distributed else 1,
            tp=(config.tp or info.default_tp) if info.tensor_parallel else None)
        if not self.faults:
            return config
        # the workloads: torchrun's side, off the analysis's start
        from workloads.faults import configure

        return configure(config, self.run_faults(config))

    def run_faults(self, config: RunConfig) -> list[Fault]:
        """``--fault`` in the run of ``config``: each culprit rank and amount resolved."""
        return [spec.resolve(config.world_size) for spec in self.faults]

    @property
    def log_name(self) -> str:
        # Launchers of several nodes may share one run folder.
        node = self.config.node_rank
        return "launcher.log" if node == 0 else f"launcher.node{node}.log"


@dataclass
class RunOutcome:
    variant: str
    run_dir: Path
    manifest: RunManifest

    @property
    def status(self) -> str:
        status = self.manifest.status
        assert status is not None, "record_one gives its manifest a status from the start"
        return status

    @property
    def error(self) -> str | None:
        return status_detail(self.manifest)


def cuda_device_count() -> int:
    import torch  # torch: only where a rank trains or a run is checked for it

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_backend(requested: str) -> str:
    if requested == "auto":
        return "nccl" if cuda_device_count() > 0 else "gloo"
    return requested


def validate(recording: Recording) -> None:
    """Everything that can be checked before a launch (ranges are the option types' job)."""
    # the workloads: torchrun's side, off the analysis's start
    from workloads.configs import MODEL_NAMES, SMOLLM2_CONFIGS

    config = recording.config
    if recording.name is not None and (problem := check_run_name(recording.name)):
        raise UsageError(f"--name: {problem}")
    for model in dict.fromkeys(c.model for c in recording.configs or (config,)):
        if config.model_path is None and model not in MODEL_NAMES:
            raise UsageError(unknown_model(model))
        positions = SMOLLM2_CONFIGS.get(model, {}).get("max_position_embeddings")
        if config.model_path is None and positions and config.seq_len > positions:
            raise UsageError(f"--seq-len {config.seq_len} is longer than {model}'s "
                             f"{positions} positions")
    if config.model_path is not None and not (config.model_path / "config.json").is_file():
        raise UsageError(f"{config.model_path}: not a Hugging Face checkpoint folder "
                         "(no config.json)")
    if config.data is not None and not config.data.is_file():
        raise UsageError(f"{config.data}: no such data file")
    if config.tokenizer is not None and not config.tokenizer.is_dir():
        raise UsageError(f"{config.tokenizer}: no such tokenizer folder")
    if config.profile and config.wait + config.warmup + config.active > config.steps:
        raise UsageError(f"the profiler window (--wait {config.wait} --warmup {config.warmup} "
                         f"--active {config.active}) does not fit in --steps {config.steps}")
    if config.node_rank >= config.nnodes:
        raise UsageError(f"--node-rank {config.node_rank} is not below --nnodes "
                         f"{config.nnodes}")
    if config.nnodes > 1 and not config.rdzv_endpoint:
        raise UsageError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT")
    one_process = [v for v in recording.variants if not VARIANTS[v].distributed]
    if config.nnodes > 1 and one_process:
        raise UsageError(f"variant {one_process[0]!r} runs one process; it cannot span "
                         "--nnodes > 1")
    for planned in recording.runs():
        run = faults.checked_config(recording, planned.variant, planned.config)
        if run.tp is not None:
            check_tensor_parallel(run)
        accum = run.grad_accum or 1     # run_config gave it the variant's default
        if config.global_batch % (run.data_parallel_size * accum):
            size = f"data-parallel size {run.data_parallel_size}" if run.tp else \
                f"world size {run.world_size}"
            raise UsageError(f"--global-batch {config.global_batch} is not divisible by "
                             f"{size} x grad-accum {accum} (variant {planned.variant})")
    nproc = max(c.nproc for c in recording.configs or (config,))
    if resolve_backend(config.backend) == "nccl":
        gpus = cuda_device_count()
        if nproc > gpus:
            raise UsageError(f"--backend nccl needs one GPU per rank: --nproc {nproc}, "
                             f"but {gpus} CUDA GPU(s) are visible")
    elif nproc > MAX_RANKS_PER_CORE * processes.usable_cores() and any(
            VARIANTS[v].distributed for v in recording.variants):
        raise UsageError(f"--nproc {nproc}: more than {MAX_RANKS_PER_CORE} CPU ranks per core "
                         f"({processes.usable_cores()} cores usable here); such a run "
                         "measures only the contention")


def check_tensor_parallel(run: RunConfig) -> None:
    """A tensor-parallel run's ``--tp`` must divide its world size and the widths and heads it
    splits (checked on the model built on the meta device: shapes, no weights)."""
    # the workloads: torchrun's side, off the analysis's start
    from workloads.models import build_model_skeleton

    # torch: only where a rank trains or a run is checked for it
    from ..variants.fsdp_tp import tensor_parallel_problem

    assert run.tp is not None
    problem = tensor_parallel_problem(build_model_skeleton(run.model, run.model_path),
                                      run.world_size, run.tp)
    if problem:
        raise UsageError(f"--tp {run.tp}: {problem} ({run.model}, variant {run.variant})")


def torchrun_command(config: Launch, run_dir: Path, rdzv_id: str,
                     worker: str = WORKER_MODULE, config_file: str = CONFIG_FILE) -> list[str]:
    """torchrun running ``python -m worker RUN_DIR/config_file`` on every rank."""
    command = [sys.executable, "-m", "torch.distributed.run",
               "--nproc-per-node", str(config.nproc), "--max-restarts", "0"]
    if config.nnodes == 1 and not config.rdzv_endpoint:
        command.append("--standalone")
    else:
        timeout = str(math.ceil(config.timeout_s))
        command += ["--nnodes", str(config.nnodes), "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", str(config.rdzv_endpoint), "--rdzv-id", rdzv_id,
                    "--rdzv-conf", f"join_timeout={timeout},read_timeout={timeout}"]
    return [*command, "-m", worker, str(run_dir / config_file)]


def threads_per_rank(nproc: int) -> int:
    return max(1, processes.usable_cores() // nproc)


def record(recording: Recording) -> list[RunOutcome]:
    """Validate everything first (bad input must not leave half a set of runs), claim and clear
    the folders, then record each variant in turn. A signal marks the current run
    ``interrupted``, records nothing more and raises ``Interrupted``."""
    validate(recording)
    backend = resolve_backend(recording.config.backend)
    leader = recording.config.node_rank == 0  # other nodes' launchers only add their logs
    planned = recording.runs()
    run_dirs = [recording.run_dir(r.label) for r in planned]
    with process.SignalGuard() as guard, contextlib.ExitStack() as stack, \
            folders.claim([*recording.targets(), *run_dirs] if leader else []) as locks:
        if leader:
            for target in recording.targets():
                folders.clear_previous(target, locks)
        processes.become_subreaper()  # only now: bad input must leave this process as it was
        progress = Progress(quiet=recording.quiet, total=len(planned))
        outcomes: list[RunOutcome] = []
        for run in planned:
            if guard.signum is not None:
                break
            config = recording.run_config(run.variant, backend, run.config)
            run_dir = recording.run_dir(run.label)
            progress.start(run.label, run_dir, config.world_size)
            try:
                folder = locks.folder(run_dir) if leader else stack.enter_context(
                    RunFolder(run_dir))
                outcome = record_one(recording, config, folder, progress, guard)
            except OSError as error:
                message = describe_os_error(error.filename or run_dir, error)
                raise (RunFailed if outcomes else UsageError)(message) from None
            progress.finish(outcome.status, _samples_per_s(outcome.manifest), outcome.error)
            outcomes.append(outcome)
        if guard.signum is not None:
            marked = [str(o.run_dir) for o in outcomes if o.status == "interrupted"]
            raise Interrupted(guard.signum, f"interrupted by {signal_name(guard.signum)}"
                              + (f"; {', '.join(marked)} marked interrupted" if marked else ""))
    return outcomes


def record_one(recording: Recording, config: RunConfig, folder: RunFolder, progress: Progress,
               guard: process.SignalGuard) -> RunOutcome:
    """Run ``config`` through torchrun into ``folder`` and return its finished manifest.

    An ``OSError`` before the launch (the run folder cannot be written) propagates with
    nothing started; after the launch the run is always finished and marked first."""
    run_dir = folder.path
    writes_manifest = config.node_rank == 0
    command = torchrun_command(config, run_dir, recording.name or run_dir.name)
    injected = recording.run_faults(config)
    manifest = RunManifest(schema_version=SCHEMA_VERSION, status="running", run=run_dir.name,
                           started=now_iso(), config=config, command=command,
                           owner=Owner.current(), injected_faults=faults.ground_truth(injected))
    folder.write_text(CONFIG_FILE, config.to_json().decode())
    if writes_manifest:
        write_manifest(folder, manifest)

    launched = run_torchrun(command, folder, recording.log_name, config.backend,
                            config.nproc, config.start_timeout_s, guard, progress, config.steps,
                            faults.environment(injected), config.fr_buffer_size)
    finish_manifest(manifest, recording, config, folder, launched.returncode, guard.signum,
                    launched.rendezvous_expired, launched.elapsed_s)
    if writes_manifest:
        try:
            write_manifest(folder, manifest)
        except OSError as error:
            where = error.filename or run_dir / MANIFEST_NAME
            raise RunFailed(f"{config.variant} ran, but its manifest could not be written: "
                            f"{describe_os_error(where, error)}") from None
    return RunOutcome(config.variant, run_dir, manifest)


@dataclass(frozen=True)
class Launched:
    """How a torchrun launch ended (its processes all gone)."""

    returncode: int
    rendezvous_expired: bool     # killed because no rank started within the timeout
    elapsed_s: float


def run_torchrun(command: list[str], folder: RunFolder, log_name: str, backend: str,
                 nproc: int, timeout_s: float, guard: process.SignalGuard, progress: Progress,
                 steps: int, extra_env: dict[str, str] | None = None, fr_buffer_size: int = 0
                 ) -> Launched:
    """Run ``command`` (``torchrun_command``) to its end, its output in ``folder``'s log
    ``log_name`` (the ranks check that they write into ``folder``, not a folder that took its
    place): torchrun
    dies with this process, gets the signals ``guard`` forwards, is killed when no rank has
    started ``timeout_s`` after the launch, and whatever it leaves is killed and reaped before
    this returns. ``progress`` follows rank 0's ``ddpprof-step k/steps`` lines; ``extra_env``
    is added to the ranks' environment. With ``fr_buffer_size`` the ranks keep that many
    Flight Recorder entries, and are asked for their dumps before torchrun is killed
    (``flight_recorder``)."""
    # PYTHONSAFEPATH: a folder named workloads (or torch) in the working directory must not
    # stand in for the installed one.
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONSAFEPATH="1",
               **{process.LAUNCHER_PID_ENV: str(os.getpid()),
                  FOLDER_ID_ENV: folder.identity_text}, **(extra_env or {}),
               **flight_recorder.environment(fr_buffer_size, backend, folder.path))
    if backend == "gloo":
        env["OMP_NUM_THREADS"] = str(threads_per_rank(nproc))
    started = time.monotonic()
    log_path = folder.path / log_name
    with folder.new_file(log_name) as log:
        torchrun = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                    preexec_fn=processes.preexec_die_with_parent())
    watchdog = Watchdog(torchrun, timeout_s, guard,
                        folder.path if fr_buffer_size else None)
    guard.attach(torchrun.pid)
    try:
        progress.follow(torchrun, log_path, steps, on_tick=watchdog.check)
    finally:
        guard.detach()
        if torchrun.poll() is None:  # only when following it failed
            torchrun.kill()
        torchrun.wait()
        process.kill_and_reap_children()
    return Launched(torchrun.returncode, watchdog.expired, time.monotonic() - started)


def finish_manifest(manifest: RunManifest, recording: Recording, config: RunConfig,
                    folder: RunFolder, returncode: int, signum: int | None,
                    rendezvous_expired: bool, elapsed_s: float) -> None:
    """Give the manifest of a run whose processes are all gone its final status."""
    run_dir = folder.path
    for leftover in [*run_dir.glob(".tmp-*"), *(run_dir / flight_recorder.FR_DIR).glob(".tmp-*")]:
        leftover.unlink(missing_ok=True)  # a rank stopped mid-write
    manifest.elapsed_s = round(elapsed_s, 3)
    manifest.finished = now_iso()
    manifest.traces = sorted(p.name for p in run_dir.glob("rank*.pt.trace.json.gz"))
    log = recording.log_name
    # On one node every rank's trace is here; other nodes write theirs on their own disks.
    traced = {int(name[len("rank"):].split(".")[0]) for name in manifest.traces}
    missing = [] if config.nnodes > 1 or not config.profile else sorted(
        set(range(config.world_size)) - traced)
    if signum is not None:
        manifest.status = "interrupted"
        manifest.error = RunError(message=f"interrupted by {signal_name(signum)}",
                                  signal=signal_name(signum), log=log)
    elif rendezvous_expired:
        manifest.status = "failed"
        where = f" at {config.rdzv_endpoint}" if config.rdzv_endpoint else ""
        manifest.error = RunError(message=f"the rendezvous{where} did not start the ranks "
                                          f"within {config.start_timeout_s:g} s (--timeout-s)",
                                  log=log)
    elif returncode != 0:
        manifest.status = "failed"
        manifest.error = run_error(folder, log, returncode)
    elif missing:
        manifest.status = "failed"
        manifest.error = RunError(message=f"torchrun succeeded, but rank(s) {missing} wrote "
                                          "no trace", log=log)
    else:
        manifest.status = "complete"
        try:
            result = read_worker_result(folder)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as error:
            manifest.status = "failed"
            manifest.error = RunError(message=f"rank 0's result ({measurements.WORKER_RESULT}) "
                                              f"cannot be read: {error}", log=log)
        else:
            if result is not None:
                add_measurements(manifest, result, config)
    if manifest.status != "complete":   # the ranks' Flight Recorder dumps, if any
        manifest.fr_dumps = flight_recorder.dumps_in(run_dir) or None
    if config.node_rank == 0:
        # Only the launcher that writes run.json takes rank 0's result: on one machine the
        # other nodes' launchers share the folder, and rank 0 may be one of their ranks.
        folder.unlink(measurements.WORKER_RESULT)


class Watchdog:
    """Called by the progress loop while torchrun runs: kills torchrun when a forwarded signal
    has gone unheeded for ``process.GRACE_S`` (first asking the ranks for their Flight Recorder
    dumps into ``dumps_into``, when given), and when no rank has started ``timeout_s`` after
    the launch (a rendezvous that never completes: torchrun's own timeouts do not cover an
    endpoint that accepts the connection and never answers)."""

    def __init__(self, torchrun: subprocess.Popen[bytes], timeout_s: float,
                 guard: process.SignalGuard, dumps_into: Path | None = None) -> None:
        self.torchrun, self.timeout_s, self.guard = torchrun, timeout_s, guard
        self.dumps_into = dumps_into
        self.launched = time.monotonic()
        self.started = not processes.can_list_children()  # cannot tell: assume started
        self.expired = False

    def check(self) -> None:
        if self.guard.overdue():
            ranks = processes.child_pids(self.torchrun.pid)
            if self.dumps_into is not None and ranks:
                flight_recorder.request_dumps(ranks, self.dumps_into)
            self.guard.kill_child()
        if not self.started:
            self.started = bool(processes.child_pids(self.torchrun.pid))
            if not self.started and time.monotonic() - self.launched > self.timeout_s:
                self.expired = True
                self.started = True  # checked once
                os.kill(self.torchrun.pid, signal.SIGKILL)


def read_worker_result(folder: RunFolder) -> measurements.WorkerResult | None:
    """What rank 0 handed over, or None when it wrote nothing."""
    try:
        data = folder.read_bytes(measurements.WORKER_RESULT, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return None
    return msgspec.json.decode(data, type=measurements.WorkerResult)


def add_measurements(manifest: RunManifest, result: measurements.WorkerResult,
                     config: RunConfig) -> None:
    manifest.measured = result.measured
    manifest.memory = result.memory
    manifest.buckets = result.buckets
    manifest.mesh = result.mesh
    seq_len = result.measured.seq_len
    phases = measurements.step_phases(config.steps, config.wait, config.warmup, config.active,
                                      config.profile)
    manifest.steps = measurements.step_records(result.step_wall_s, result.step_loss, phases,
                                               config.global_batch, seq_len,
                                               result.step_sync_s)
    manifest.throughput = measurements.throughput(manifest.steps, config.global_batch, seq_len)


def write_manifest(folder: RunFolder, manifest: RunManifest) -> None:
    folder.write_text(MANIFEST_NAME, json_text(msgspec.to_builtins(manifest,
                                                                   enc_hook=encode_hook)))


def _samples_per_s(manifest: RunManifest) -> float | None:
    return manifest.throughput.samples_per_s if manifest.throughput else None

