"""The run configuration: every option of a recorded run, declared once, here.

* ``ddpprof record``, ``bench`` and ``sweep`` generate their command-line options from these
  fields' metadata (``ddpprof.grammar.options.config_options``): name, type with its range,
  default and help all come from here.
* The launcher resolves it for each run (the variant, its gradient accumulation, the backend)
  and writes it to ``<run folder>/.config.json``; the worker (``workloads/train.py``) reads that
  file and hands the object to its plain training loop, as torchtitan hands its one config.
* ``run.json`` records it itself under ``config`` (``ddpprof.run.manifest``), beside what the ranks
  measured. It imports no torch: the analysis side reads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import msgspec

from ..grammar import options
from ..variants import BUCKETED_VARIANT_NAMES, DEFAULT_BUCKET_CAP_MIB, VARIANTS

#: The flight recorder's buffer (``--fr-buffer-size``): PyTorch's default and the size its
#: tutorial suggests: a few hundred steps of DDP, a few steps of FSDP (one all-gather and one
#: reduce-scatter per unit).
DEFAULT_BUFFER_SIZE = 2000

CONFIG_FILE = ".config.json"
#: The least time the ranks of a one-node run get to start (``Launch.start_timeout_s``).
STANDALONE_START_S = 120.0
BACKENDS = ("auto", "gloo", "nccl")
PATH = click.Path(path_type=Path)


def cli(help: str, type: click.ParamType[Any] | None = None, flag: bool = False) -> dict[str, Any]:
    """Field metadata that makes the field a command-line option (``--field-name``)."""
    return {"help": help, "type": type, "flag": flag}


@dataclass(frozen=True)
class Launch:
    """Where a launch's ranks run: what ``torchrun`` is told. A recorded run's
    (:class:`RunConfig`) and ``ddpprof calibrate``'s sweep's."""

    backend: str = field(default="auto", metadata=cli(
        "auto: nccl when CUDA GPUs are visible, else gloo.", click.Choice(BACKENDS)))
    nproc: int = field(default=2, metadata=cli("Ranks per node.", options.POSITIVE_INT))
    nnodes: int = field(default=1, metadata=cli("Nodes taking part.", options.POSITIVE_INT))
    node_rank: int = field(default=0, metadata=cli(
        "This node's rank, 0 to --nnodes - 1.", options.NON_NEGATIVE_INT))
    rdzv_endpoint: str | None = field(default=None, metadata=cli(
        "HOST:PORT of the c10d rendezvous (several nodes).", options.ENDPOINT))
    timeout_s: float = field(default=300.0, metadata=cli(
        "Seconds before a rank stuck in a collective fails, and before a rendezvous that has "
        "not started the ranks fails.", options.TIMEOUT_S))

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def start_timeout_s(self) -> float:
        """How long the ranks may take to start: ``timeout_s`` at a rendezvous endpoint, at
        least ``STANDALONE_START_S`` on one node, where no endpoint can hang and torchrun's own
        start (importing torch) takes seconds on a busy machine: a short collective timeout
        must not fail a run before its ranks exist."""
        if self.rdzv_endpoint or self.nnodes > 1:
            return self.timeout_s
        return max(self.timeout_s, STANDALONE_START_S)


@dataclass(frozen=True)
class RunConfig(Launch):
    """A recorded run: where it runs (:class:`Launch`), and what it trains and profiles."""

    # record takes several variants (--variant a,b|all) and runs each with this set to one
    variant: str = "bucket_ddp_async"
    model: str = field(default="mlp-large", metadata=cli(
        "A model of workloads/models.py (any name, with --model-path)."))
    model_path: Path | None = field(default=None, metadata=cli(
        "A local Hugging Face checkpoint folder to train instead of random weights.", PATH))
    data: Path | None = field(default=None, metadata=cli(
        "A local .jsonl ('text' field) or text file; default: synthetic data.", PATH))
    tokenizer: Path | None = field(default=None, metadata=cli(
        "A local tokenizer folder for --data; default: --model-path's, else bytes.", PATH))
    seq_len: int = field(default=256, metadata=cli(
        "Tokens per sequence (language models).", options.POSITIVE_INT))
    steps: int = field(default=8, metadata=cli("Optimizer steps.", options.POSITIVE_INT))
    global_batch: int = field(default=1024, metadata=cli(
        "Samples per optimizer step, across all ranks and micro-steps.", options.POSITIVE_INT))
    grad_accum: int | None = field(default=None, metadata=cli(
        "Micro-steps per optimizer step [default: 1; 2 for simple_ddp_ga].",
        options.POSITIVE_INT))
    bucket_cap_mib: float = field(default=DEFAULT_BUCKET_CAP_MIB, metadata=cli(
        f"Gradient bucket size in MiB ({', '.join(BUCKETED_VARIANT_NAMES)}).",
        options.POSITIVE_FLOAT))
    gradient_as_bucket_view: bool = field(default=False, metadata=cli(
        "pytorch_ddp's option of that name.", flag=True))
    tp: int | None = field(default=None, metadata=cli(
        "Tensor-parallel degree: ranks that split each layer ("
        + ", ".join(f"{name}: default {info.default_tp}" for name, info in VARIANTS.items()
                    if info.tensor_parallel) + ").",
        options.POSITIVE_INT))
    wait: int = field(default=1, metadata=cli(
        "Profiler schedule: steps skipped.", options.NON_NEGATIVE_INT))
    warmup: int = field(default=2, metadata=cli(
        "Profiler schedule: warm-up steps.", options.NON_NEGATIVE_INT))
    active: int = field(default=3, metadata=cli(
        "Profiler schedule: traced steps.", options.POSITIVE_INT))
    lr: float = field(default=1e-3, metadata=cli(
        "AdamW's learning rate.", options.NON_NEGATIVE_FLOAT))
    seed: int = field(default=0, metadata=cli(
        "Seed of the data and of the initial weights.", options.SEED))
    inject_delay: str | None = field(default=None, metadata=cli(
        "RANK:MS: that rank sleeps MS ms at the start of every step, in a traced span "
        "(ddpprof::injected_delay): a known straggler, to test attribution.",
        options.INJECT_DELAY))
    fr_buffer_size: int = field(default=DEFAULT_BUFFER_SIZE, metadata=cli(
        "Flight Recorder: the collectives each rank keeps (its last ones), dumped into fr/ when "
        "the run fails, hangs or is stopped, for `ddpprof hang`; 0 turns it off.",
        options.NON_NEGATIVE_INT))
    # bench times unprofiled runs; not an option of record
    profile: bool = True

    @property
    def data_parallel_size(self) -> int:
        """Ranks that train on different samples: all of them, or one per tensor-parallel
        group."""
        return self.world_size // (self.tp or 1)

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> bytes:
        return msgspec.json.encode(self, enc_hook=encode_hook)

    @classmethod
    def from_json(cls, data: bytes) -> RunConfig:
        # msgspec leaves the fields a document lacks on the class: replace() puts every field
        # on the object, so that encoding it again writes them all
        return dataclasses.replace(msgspec.convert(
            with_current_names(msgspec.json.decode(data)), cls, dec_hook=decode_hook))


def option_fields() -> list[dataclasses.Field[Any]]:
    """The fields that are command-line options, in declaration order."""
    return [f for f in dataclasses.fields(RunConfig) if "help" in f.metadata]


#: Fields that ``record`` takes as list options of their own (it records their product).
LIST_FIELDS = ("model", "nproc", "bucket_cap_mib")


def record_option_fields() -> list[dataclasses.Field[Any]]:
    """The fields that are ``record``'s single-valued options: what it runs, then where."""
    where = {f.name for f in dataclasses.fields(Launch)}
    return sorted((f for f in option_fields() if f.name not in LIST_FIELDS),
                  key=lambda f: f.name in where)


#: The fields of a configuration written under an older name: ``bucket_cap_mb`` (run.json
#: before version 4, ``analyze --json``'s ``profile.config`` before version 6), MiB as PyTorch's
#: parameter of that name is.
OLD_FIELD_NAMES = {"bucket_cap_mb": "bucket_cap_mib"}


def with_current_names(config: Any) -> Any:
    """A decoded configuration (JSON object) with its fields' older names read as today's;
    anything but an object is returned as it is, for the decoder to refuse."""
    if not isinstance(config, dict) or not config.keys() & OLD_FIELD_NAMES.keys():
        return config
    renamed = {OLD_FIELD_NAMES.get(key, key): value for key, value in config.items()}
    # a document that gives both names: today's wins
    return {**renamed, **{key: config[key] for key in OLD_FIELD_NAMES.values() if key in config}}


def encode_hook(value: Any) -> Any:
    """msgspec's hook for the types it does not encode itself (``Path``)."""
    if isinstance(value, Path):
        return str(value)
    raise NotImplementedError(type(value))


def decode_hook(kind: type, value: Any) -> Any:
    """msgspec's hook for the types it does not decode itself (``Path``)."""
    if kind is Path:
        return Path(value)
    raise NotImplementedError(kind)
