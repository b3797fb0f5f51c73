"""Deterministic batches: every rank can build global batch ``i`` and take its own shard.

A global micro-batch is a pure function of (seed, index), so ``single`` trained on the global
batch and N ranks trained on its shards see exactly the same samples.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import torch

from .models import MNIST_CLASSES, MNIST_FEATURES

Batch = dict[str, torch.Tensor]
#: Byte-level fallback tokenizer: ids 0-255 are bytes, 256 separates documents.
BYTE_VOCAB_SIZE = 257
BYTE_EOS_ID = 256


class BatchSource(Protocol):
    def global_batch(self, index: int, size: int) -> Batch: ...


class SyntheticImages:
    """A fixed, seeded pool of MNIST-shaped samples (784 features, 10 classes), as in seed 000;
    global batch ``i`` is the next ``size`` samples of the pool, wrapping around."""

    def __init__(self, n_samples: int = 32768, seed: int = 42) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n_samples, MNIST_FEATURES, generator=generator)
        self.y = torch.randint(0, MNIST_CLASSES, (n_samples,), generator=generator)

    def global_batch(self, index: int, size: int) -> Batch:
        rows = (torch.arange(size) + index * size) % len(self.x)
        return {"x": self.x[rows], "y": self.y[rows]}


class SyntheticTokens:
    """Uniform random token ids, drawn from a generator seeded by (seed, batch index)."""

    def __init__(self, vocab_size: int, seq_len: int, seed: int = 42) -> None:
        self.vocab_size, self.seq_len, self.seed = vocab_size, seq_len, seed

    def global_batch(self, index: int, size: int) -> Batch:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        ids = torch.randint(0, self.vocab_size, (size, self.seq_len), generator=generator)
        return {"input_ids": ids, "labels": ids}


class TokenStream:
    """Fixed-length sequences cut from a tokenized local corpus; batch ``i`` takes the next
    ``size`` sequences, wrapping around."""

    def __init__(self, token_ids: list[int], seq_len: int) -> None:
        n_sequences = len(token_ids) // seq_len
        if n_sequences == 0:
            raise ValueError(f"the corpus has {len(token_ids)} tokens, fewer than one sequence "
                             f"of {seq_len}")
        self.sequences = torch.tensor(token_ids[: n_sequences * seq_len]).view(-1, seq_len)

    def global_batch(self, index: int, size: int) -> Batch:
        rows = (torch.arange(size) + index * size) % len(self.sequences)
        ids = self.sequences[rows]
        return {"input_ids": ids, "labels": ids}


def read_documents(path: Path) -> Iterator[str]:
    """Documents of a ``.jsonl`` file (its ``text`` field) or of a text file (blank-line
    separated paragraphs)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        for line_number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not JSON ({error.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError(f"{path}:{line_number}: no string field 'text'")
            yield record["text"]
    else:
        yield from (p for p in text.split("\n\n") if p.strip())


def tokenize(documents: Iterator[str], tokenizer_path: Path | None) -> tuple[list[int], int]:
    """Token ids of the documents joined by EOS, and the vocabulary size they need."""
    ids: list[int] = []
    if tokenizer_path is None:
        for document in documents:
            ids.extend(document.encode("utf-8"))
            ids.append(BYTE_EOS_ID)
        return ids, BYTE_VOCAB_SIZE
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
    eos = tokenizer.eos_token_id
    for document in documents:
        ids.extend(tokenizer(document, add_special_tokens=False)["input_ids"])
        if eos is not None:
            ids.append(eos)
    return ids, len(tokenizer)


def checkpoint_tokenizer(model_path: Path | None) -> Path | None:
    """``model_path`` if that checkpoint folder carries a tokenizer, else None (bytes)."""
    if model_path is None:
        return None
    has_tokenizer = any((model_path / name).is_file()
                        for name in ("tokenizer.json", "tokenizer_config.json"))
    return model_path if has_tokenizer else None


def build_data(*, is_language_model: bool, vocab_size: int | None, seq_len: int,
               data_path: Path | None = None, tokenizer_path: Path | None = None,
               seed: int = 42) -> BatchSource:
    if not is_language_model:
        if data_path is not None:
            raise ValueError("--data is for language models; the MLPs train on synthetic data")
        return SyntheticImages(seed=seed)
    assert vocab_size is not None
    if data_path is None:
        return SyntheticTokens(vocab_size, seq_len, seed)
    token_ids, needed_vocab = tokenize(read_documents(data_path), tokenizer_path)
    if needed_vocab > vocab_size:
        raise ValueError(f"{data_path}: the tokenizer needs {needed_vocab} token ids but the model "
                         f"has a vocabulary of {vocab_size}")
    return TokenStream(token_ids, seq_len)


def shard(batch: Batch, index: int, count: int) -> Batch:
    """The ``index``-th contiguous 1/``count`` of a global batch: a rank's shard, ``index`` its
    rank and ``count`` the world size, or, where ranks split the model between them (tensor
    parallelism), its data-parallel coordinate and size (``DataParallel.data_shard``)."""
    size = next(iter(batch.values())).shape[0]
    per_shard = size // count
    return {k: v[index * per_shard:(index + 1) * per_shard] for k, v in batch.items()}
