"""The models ddpprof trains: seed 000's MLPs and SmolLM2-architecture language models.

Every model comes with random weights unless ``model_path`` names a local Hugging Face
checkpoint directory; nothing is ever downloaded.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .configs import (  # noqa: F401  (re-exported: the definitions live there, torch-free)
    MLP_WIDTHS,
    MNIST_CLASSES,
    MNIST_FEATURES,
    MODEL_NAMES,
    SMOLLM2_CONFIGS,
    mlp_parameter_count,
)


@dataclass(frozen=True)
class ModelInfo:
    """What the data and the training loop need to know about a model."""

    name: str
    is_language_model: bool
    vocab_size: int | None = None
    max_seq_len: int | None = None


def build_mlp(widths: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def build_model(name: str, model_path: str | Path | None = None) -> tuple[nn.Module, ModelInfo]:
    """Build ``name`` with random weights (seed with ``torch.manual_seed`` first), or load the
    local checkpoint directory ``model_path`` (a language model; ``name`` is then a label)."""
    if model_path is not None:
        return _load_checkpoint(Path(model_path), name)
    if name in MLP_WIDTHS:
        return build_mlp(MLP_WIDTHS[name]), ModelInfo(name, is_language_model=False)
    if name in SMOLLM2_CONFIGS:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(**SMOLLM2_CONFIGS[name])
        model = LlamaForCausalLM(config)
        return model, ModelInfo(name, True, config.vocab_size, config.max_position_embeddings)
    raise KeyError(name)


def build_model_skeleton(name: str, model_path: str | Path | None = None) -> nn.Module:
    """The model's modules and shapes on the meta device: nothing allocated, and of a
    checkpoint only its ``config.json`` read. For checks before a launch."""
    if model_path is None:
        with torch.device("meta"):
            return build_model(name)[0]
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path, local_files_only=True)
    with torch.device("meta"):
        result: nn.Module = AutoModelForCausalLM.from_config(config)
        return result


def _load_checkpoint(path: Path, name: str) -> tuple[nn.Module, ModelInfo]:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                 dtype=torch.float32)
    return model, ModelInfo(name, True, config.vocab_size,
                            getattr(config, "max_position_embeddings", None))


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def compute_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy for the MLPs; causal-LM loss (labels shifted inside the model) for LMs."""
    if "input_ids" in batch:
        result: torch.Tensor = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
        return result
    return F.cross_entropy(model(batch["x"]), batch["y"])
