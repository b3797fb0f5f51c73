"""Validate a recording request, launch each variant through torchrun, and write its manifest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_json_atomic
from ..errors import UsageError
from ..variants import VARIANT_NAMES, VARIANTS
from . import manifest
from .progress import Progress

WORKER_MODULE = "workloads.train"
WORKER_RESULT = "worker_result.json"
ERRORS_DIR = ".errors"


@dataclass
class RecordOptions:
    variants: list[str]
    model: str = "mlp-large"
    nproc: int = 2
    steps: int = 8
    global_batch: int = 1024
    grad_accum: int | None = None  # None: each variant's default
    bucket_cap_mb: float = 25.0
    gradient_as_bucket_view: bool = False
    backend: str = "auto"
    out: Path = Path("traces")
    name: str | None = None
    wait: int = 1
    warmup: int = 2
    active: int = 3
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    model_path: Path | None = None
    data: Path | None = None
    tokenizer: Path | None = None
    seq_len: int = 256
    lr: float = 1e-3
    seed: int = 0
    timeout_s: float = 300.0
    quiet: bool = False
    profile: bool = True

    def grad_accum_for(self, variant: str) -> int:
        return self.grad_accum or VARIANTS[variant].default_grad_accum

    def nproc_for(self, variant: str) -> int:
        return 1 if variant == "single" else self.nproc

    def world_size_for(self, variant: str) -> int:
        return 1 if variant == "single" else self.nproc * self.nnodes

    @property
    def log_name(self) -> str:
        # Launchers of several nodes may share one run folder.
        return "launcher.log" if self.node_rank == 0 else f"launcher.node{self.node_rank}.log"

    def run_dir(self, variant: str) -> Path:
        if len(self.variants) == 1:
            return self.out / (self.name or variant)
        return self.out / self.name / variant if self.name else self.out / variant


@dataclass
class RunOutcome:
    variant: str
    run_dir: Path
    status: str
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> str | None:
        error = self.manifest.get("error")
        return None if error is None else f"rank {error.get('rank')}: {error['message']}"


def parse_variants(spec: str) -> list[str]:
    """``all``, one name, or a comma-separated list."""
    if spec.strip() == "all":
        return list(VARIANT_NAMES)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise UsageError(f"unknown variant {', '.join(map(repr, unknown)) or repr(spec)} "
                         f"(choose from all, {', '.join(VARIANT_NAMES)})")
    return list(dict.fromkeys(names))


def cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_backend(requested: str) -> str:
    if requested == "auto":
        return "nccl" if cuda_device_count() > 0 else "gloo"
    return requested


def validate(opts: RecordOptions) -> None:
    from workloads.models import MODEL_NAMES, SMOLLM2_CONFIGS

    if opts.model_path is None and opts.model not in MODEL_NAMES:
        raise UsageError(f"unknown model {opts.model!r} (choose from {', '.join(MODEL_NAMES)}, "
                         "or give --model-path)")
    positions = SMOLLM2_CONFIGS.get(opts.model, {}).get("max_position_embeddings")
    if opts.model_path is None and positions and opts.seq_len > positions:
        raise UsageError(f"--seq-len {opts.seq_len} is longer than {opts.model}'s "
                         f"{positions} positions")
    if opts.model_path is not None and not (opts.model_path / "config.json").is_file():
        raise UsageError(f"{opts.model_path}: not a Hugging Face checkpoint folder "
                         "(no config.json)")
    if opts.data is not None and not opts.data.is_file():
        raise UsageError(f"{opts.data}: no such data file")
    if opts.tokenizer is not None and not opts.tokenizer.is_dir():
        raise UsageError(f"{opts.tokenizer}: no such tokenizer folder")
    for flag, value in (("--nproc", opts.nproc), ("--steps", opts.steps),
                        ("--global-batch", opts.global_batch), ("--active", opts.active),
                        ("--nnodes", opts.nnodes), ("--seq-len", opts.seq_len)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if opts.grad_accum is not None and opts.grad_accum < 1:
        raise UsageError(f"--grad-accum must be at least 1, got {opts.grad_accum}")
    if opts.bucket_cap_mb <= 0:
        raise UsageError(f"--bucket-cap-mb must be positive, got {opts.bucket_cap_mb}")
    if opts.profile and (min(opts.wait, opts.warmup) < 0
                         or opts.wait + opts.warmup + opts.active > opts.steps):
        raise UsageError(f"the profiler window (--wait {opts.wait} --warmup {opts.warmup} "
                         f"--active {opts.active}) does not fit in --steps {opts.steps}")
    if opts.nnodes > 1 and not opts.rdzv_endpoint:
        raise UsageError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT")
    if opts.nnodes > 1 and "single" in opts.variants:
        raise UsageError("variant 'single' runs one process; it cannot span --nnodes > 1")
    for variant in opts.variants:
        world, accum = opts.world_size_for(variant), opts.grad_accum_for(variant)
        if opts.global_batch % (world * accum):
            raise UsageError(f"--global-batch {opts.global_batch} is not divisible by world size "
                             f"{world} x grad-accum {accum} (variant {variant})")
    if resolve_backend(opts.backend) == "nccl":
        gpus = cuda_device_count()
        if opts.nproc > gpus:
            raise UsageError(f"--backend nccl needs one GPU per rank: --nproc {opts.nproc}, "
                             f"but {gpus} CUDA GPU(s) are visible")
    _check_writable(opts.out)


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".ddpprof-write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise UsageError(f"{folder}: output folder cannot be written ({error.strerror})") from None


def worker_arguments(opts: RecordOptions, variant: str, run_dir: Path, backend: str) -> list[str]:
    args = ["--variant", variant, "--model", opts.model, "--steps", str(opts.steps),
            "--global-batch", str(opts.global_batch),
            "--grad-accum", str(opts.grad_accum_for(variant)),
            "--bucket-cap-mb", str(opts.bucket_cap_mb), "--seq-len", str(opts.seq_len),
            "--lr", str(opts.lr), "--seed", str(opts.seed), "--backend", backend,
            "--timeout-s", str(opts.timeout_s), "--wait", str(opts.wait),
            "--warmup", str(opts.warmup), "--active", str(opts.active), "--out", str(run_dir)]
    for flag, value in (("--model-path", opts.model_path), ("--data", opts.data),
                        ("--tokenizer", opts.tokenizer)):
        if value is not None:
            args += [flag, str(value)]
    if opts.gradient_as_bucket_view:
        args.append("--gradient-as-bucket-view")
    if not opts.profile:
        args.append("--no-profile")
    return args


def torchrun_command(opts: RecordOptions, variant: str, run_dir: Path, backend: str) -> list[str]:
    command = [sys.executable, "-m", "torch.distributed.run",
               "--nproc-per-node", str(opts.nproc_for(variant)), "--max-restarts", "0"]
    if opts.nnodes == 1 and not opts.rdzv_endpoint:
        command.append("--standalone")
    else:
        command += ["--nnodes", str(opts.nnodes), "--node-rank", str(opts.node_rank),
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", str(opts.rdzv_endpoint),
                    "--rdzv-id", opts.name or run_dir.name]
    return [*command, "-m", WORKER_MODULE, *worker_arguments(opts, variant, run_dir, backend)]


def threads_per_rank(nproc: int) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // nproc)


def _clear_previous(run_dir: Path) -> None:
    # A rerun into the same folder must not leave an older run's ranks beside the new ones.
    for stale in [*run_dir.glob("rank*.pt.trace.json*"), run_dir / WORKER_RESULT,
                  run_dir / manifest.MANIFEST_NAME]:
        stale.unlink(missing_ok=True)
    shutil.rmtree(run_dir / ERRORS_DIR, ignore_errors=True)


def _first_error(run_dir: Path) -> dict[str, Any] | None:
    """The earliest error a rank wrote: later ones are usually peers losing their connection."""
    errors = []
    for path in (run_dir / ERRORS_DIR).glob("rank*.json"):
        try:
            errors.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return min(errors, key=lambda e: e["time"]) if errors else None


def record_one(opts: RecordOptions, variant: str, progress: Progress) -> RunOutcome:
    backend = resolve_backend(opts.backend)
    run_dir = opts.run_dir(variant)
    run_dir.mkdir(parents=True, exist_ok=True)
    writes_manifest = opts.node_rank == 0
    if writes_manifest:
        _clear_previous(run_dir)
    grad_accum = opts.grad_accum_for(variant)
    nproc = opts.nproc_for(variant)
    body: dict[str, Any] = {
        "schema_version": manifest.SCHEMA_VERSION,
        "run": run_dir.name,
        "status": "running",
        "started": manifest.now_iso(),
        "config": {
            "variant": variant, "model": opts.model,
            "model_path": str(opts.model_path) if opts.model_path else None,
            "world_size": opts.world_size_for(variant), "nproc_per_node": nproc,
            "nnodes": opts.nnodes, "backend": backend, "global_batch": opts.global_batch,
            "grad_accum": grad_accum,
            "micro_batch_per_rank": opts.global_batch // grad_accum
            // opts.world_size_for(variant),
            "bucket_cap_mb": opts.bucket_cap_mb,
            "gradient_as_bucket_view": opts.gradient_as_bucket_view,
            "steps": opts.steps, "seed": opts.seed, "lr": opts.lr,
            "data": str(opts.data) if opts.data else "synthetic",
            "profiler": {"wait": opts.wait, "warmup": opts.warmup, "active": opts.active,
                         "record_shapes": True} if opts.profile else None,
            "torch_version": _torch_version(),
        },
        "command": torchrun_command(opts, variant, run_dir, backend),
    }
    manifest_path = run_dir / manifest.MANIFEST_NAME
    if writes_manifest:
        write_json_atomic(manifest_path, body)

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if backend == "gloo":
        env["OMP_NUM_THREADS"] = str(threads_per_rank(nproc))
    started = time.monotonic()
    log_path = run_dir / opts.log_name
    with open(log_path, "w") as log:
        process = subprocess.Popen(body["command"], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env)
        progress.follow(process, log_path, opts.steps)
    body["elapsed_s"] = round(time.monotonic() - started, 3)
    body["finished"] = manifest.now_iso()
    body["traces"] = sorted(p.name for p in run_dir.glob("rank*.pt.trace.json.gz"))

    result_path = run_dir / WORKER_RESULT
    # On one node every rank's trace is here; other nodes write theirs on their own disks.
    traces_complete = (opts.nnodes > 1 or not opts.profile
                       or len(body["traces"]) == opts.world_size_for(variant))
    if process.returncode == 0 and traces_complete:
        body["status"] = "complete"
        if result_path.is_file():
            _add_measurements(body, json.loads(result_path.read_text()), opts)
            result_path.unlink()
    else:
        body["status"] = "failed"
        error = _first_error(run_dir)
        body["error"] = {
            "rank": error["rank"] if error else None,
            "message": error["error"] if error else
            f"torchrun exited with code {process.returncode} without a rank error "
            f"(see {opts.log_name})",
            "traceback": error["traceback"] if error else None,
            "log": opts.log_name,
        }
    if writes_manifest:
        write_json_atomic(manifest_path, body)
    return RunOutcome(variant, run_dir, body["status"], body)


def _add_measurements(body: dict[str, Any], result: dict[str, Any], opts: RecordOptions) -> None:
    config = body["config"]
    for key in ("parameters", "devices", "threads_per_rank", "allreduces_per_sync", "seq_len"):
        config[key] = result[key]
    phases = manifest.step_phases(opts.steps, opts.wait, opts.warmup, opts.active, opts.profile)
    body["steps"] = manifest.step_records(result["step_wall_s"], result["step_loss"], phases,
                                          opts.global_batch, result["seq_len"],
                                          result.get("step_sync_s"))
    body["throughput"] = manifest.throughput(body["steps"], opts.global_batch, result["seq_len"])


def _torch_version() -> str:
    import torch

    return torch.__version__


def record(opts: RecordOptions) -> list[RunOutcome]:
    """Validate everything first (bad input must not leave half a set of runs), then record each
    variant in turn."""
    validate(opts)
    progress = Progress(quiet=opts.quiet, total=len(opts.variants))
    outcomes = []
    for variant in opts.variants:
        progress.start(variant, opts.run_dir(variant), opts.world_size_for(variant))
        outcome = record_one(opts, variant, progress)
        progress.finish(outcome.status, outcome.manifest.get("throughput"), outcome.error)
        outcomes.append(outcome)
    return outcomes


def summary_rows(outcomes: list[RunOutcome]) -> list[dict[str, Any]]:
    rows = []
    for outcome in outcomes:
        config = outcome.manifest.get("config", {})
        speed = outcome.manifest.get("throughput") or {}
        rows.append({
            "run": outcome.run_dir.name, "variant": outcome.variant, "status": outcome.status,
            "ranks": config.get("world_size"), "grad_accum": config.get("grad_accum"),
            "step_ms": speed["median_step_s"] * 1e3 if speed else None,
            "samples_per_s": speed.get("samples_per_s"),
            "allreduces_per_step": config.get("allreduces_per_sync"),
            "folder": str(outcome.run_dir),
        })
    return rows


__all__ = ["RecordOptions", "RunOutcome", "parse_variants", "record", "summary_rows"]
