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

MNIST_FEATURES = 784
MNIST_CLASSES = 10

#: Layer widths, input to output. small/medium/large are seed 000's; its xlarge (8 layers, 52M)
#: gives no widths, so this one adds a third 4096-wide layer to large: 51,993,098 parameters.
MLP_WIDTHS: dict[str, list[int]] = {
    "mlp-tiny": [MNIST_FEATURES, 64, 48, 32, MNIST_CLASSES],
    "mlp-small": [MNIST_FEATURES, 1024, 512, 256, MNIST_CLASSES],
    "mlp-medium": [MNIST_FEATURES, 2048, 2048, 1024, 512, MNIST_CLASSES],
    "mlp-large": [MNIST_FEATURES, 4096, 4096, 2048, 2048, 1024, 512, MNIST_CLASSES],
    "mlp-xlarge": [MNIST_FEATURES, 4096, 4096, 4096, 2048, 2048, 1024, 512, MNIST_CLASSES],
}

_SMOLLM2_COMMON = dict(
    hidden_act="silu", rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
    attention_bias=False, mlp_bias=False, bos_token_id=0, eos_token_id=0,
)
#: The published SmolLM2 architectures (HuggingFaceTB/SmolLM2-135M and -360M config.json), and
#: a tiny one of the same shape for tests.
SMOLLM2_CONFIGS: dict[str, dict] = {
    "smollm2-135m": dict(_SMOLLM2_COMMON, vocab_size=49152, hidden_size=576,
                         intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, max_position_embeddings=8192),
    "smollm2-360m": dict(_SMOLLM2_COMMON, vocab_size=49152, hidden_size=960,
                         intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15,
                         num_key_value_heads=5, max_position_embeddings=8192),
    "smollm2-tiny": dict(_SMOLLM2_COMMON, vocab_size=512, hidden_size=64,
                         intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=512),
}

MODEL_NAMES: tuple[str, ...] = (*MLP_WIDTHS, *SMOLLM2_CONFIGS)


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


def mlp_parameter_count(widths: list[int]) -> int:
    """Weights plus biases of each Linear layer: sum of (fan_in + 1) * fan_out."""
    return sum((fan_in + 1) * fan_out for fan_in, fan_out in itertools.pairwise(widths))


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
        return model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
    return F.cross_entropy(model(batch["x"]), batch["y"])
