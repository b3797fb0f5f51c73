"""The models' definitions as plain data, and their parameter counts derived without torch.

``workloads.models`` builds the models from these; ``ddpprof memory`` counts their parameters
from them without importing torch (a test checks the counts against the built models).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

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
SMOLLM2_CONFIGS: dict[str, dict[str, Any]] = {
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


def mlp_parameter_count(widths: list[int]) -> int:
    """Weights plus biases of each Linear layer: sum of (fan_in + 1) * fan_out."""
    return sum((fan_in + 1) * fan_out for fan_in, fan_out in itertools.pairwise(widths))


def llama_parameter_count(config: dict[str, Any]) -> int:
    """Distinct parameters of transformers' ``LlamaForCausalLM`` with this config: the token
    embedding; per layer the q/k/v/o projections (k and v sized by the key-value heads), the
    gate/up/down projections, two RMSNorm weights, and the biases the config asks for; the final
    norm; and ``lm_head`` unless it is tied to the embedding."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv_dim = config.get("num_key_value_heads", heads) * head_dim
    q_dim = heads * head_dim
    attention = hidden * q_dim + 2 * hidden * kv_dim + q_dim * hidden
    if config.get("attention_bias", False):
        attention += q_dim + 2 * kv_dim + hidden
    mlp = 3 * hidden * config["intermediate_size"]
    if config.get("mlp_bias", False):
        mlp += 2 * config["intermediate_size"] + hidden
    layer = attention + mlp + 2 * hidden
    head = 0 if config.get("tie_word_embeddings", True) else vocab * hidden
    result: int = vocab * hidden + config["num_hidden_layers"] * layer + hidden + head
    return result


def model_parameter_count(name: str) -> int:
    """Trainable parameters of the named model (tied weights once), without building it."""
    if name in MLP_WIDTHS:
        return mlp_parameter_count(MLP_WIDTHS[name])
    return llama_parameter_count(SMOLLM2_CONFIGS[name])


def checkpoint_parameter_count(path: Path) -> int:
    """Distinct trainable parameters of the Hugging Face checkpoint folder ``path``, its
    architecture built on the meta device (no weights read, nothing allocated). Imports torch
    and transformers."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
