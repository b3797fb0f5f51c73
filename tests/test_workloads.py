"""Models, parameter counts, local checkpoints and data."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import torch

from workloads.data import (
    BYTE_EOS_ID,
    SyntheticImages,
    SyntheticTokens,
    build_data,
    read_documents,
    shard,
)
from workloads.models import (
    MLP_WIDTHS,
    SMOLLM2_CONFIGS,
    build_model,
    compute_loss,
    count_parameters,
    mlp_parameter_count,
)

SHIPPED_CORPUS = resources.files("workloads") / "sample_data" / "tiny_corpus.jsonl"


@pytest.mark.parametrize(("name", "published_millions"), [
    ("mlp-small", 1.5), ("mlp-medium", 8.4), ("mlp-large", 35.2), ("mlp-xlarge", 52.0)])
def test_mlp_sizes_match_seed_000(name, published_millions):
    model, info = build_model(name)
    assert not info.is_language_model
    assert count_parameters(model) == mlp_parameter_count(MLP_WIDTHS[name])
    assert round(count_parameters(model) / 1e6, 1) == published_millions
    # seed 000's layer counts: small 4, medium 5, large 7, xlarge 8 Linear layers
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert linears == {"mlp-small": 4, "mlp-medium": 5, "mlp-large": 7, "mlp-xlarge": 8}[name]


@pytest.mark.parametrize(("name", "published_millions"), [
    ("smollm2-135m", 135), ("smollm2-360m", 360)])
def test_smollm2_sizes_match_their_names(name, published_millions):
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):  # the architecture without allocating its weights
        model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_CONFIGS[name]))
    millions = count_parameters(model) / 1e6
    assert abs(millions - published_millions) / published_millions < 0.01
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as published


def test_smollm2_tiny_trains():
    torch.manual_seed(0)
    model, info = build_model("smollm2-tiny")
    data = build_data(is_language_model=True, vocab_size=info.vocab_size, seq_len=16)
    batch = data.global_batch(0, 4)
    loss = compute_loss(model, batch)
    # random weights: close to the uniform-guess loss ln(vocab)
    assert abs(loss.item() - torch.log(torch.tensor(info.vocab_size)).item()) < 0.5
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_local_checkpoint_loads_its_weights(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    saved = LlamaForCausalLM(LlamaConfig(**SMOLLM2_CONFIGS["smollm2-tiny"]))
    saved.save_pretrained(tmp_path)
    loaded, info = build_model("my-checkpoint", model_path=tmp_path)
    assert info.is_language_model and info.vocab_size == 512
    for (name, a), (_, b) in zip(saved.state_dict().items(), loaded.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name


def test_shards_partition_the_global_batch():
    data = SyntheticImages(n_samples=64)
    whole = data.global_batch(3, 16)
    parts = [shard(whole, rank, 4) for rank in range(4)]
    assert torch.equal(torch.cat([p["x"] for p in parts]), whole["x"])
    assert torch.equal(data.global_batch(3, 16)["x"], whole["x"])  # deterministic
    assert not torch.equal(data.global_batch(4, 16)["x"], whole["x"])


def test_synthetic_tokens_are_deterministic_and_in_range():
    data = SyntheticTokens(vocab_size=50, seq_len=8, seed=3)
    a, b = data.global_batch(2, 4), data.global_batch(2, 4)
    assert torch.equal(a["input_ids"], b["input_ids"])
    assert int(a["input_ids"].max()) < 50


def test_shipped_jsonl_with_byte_fallback():
    documents = list(read_documents(SHIPPED_CORPUS))
    assert len(documents) == 40
    data = build_data(is_language_model=True, vocab_size=512, seq_len=32,
                      data_path=SHIPPED_CORPUS)
    ids = data.global_batch(0, 2)["input_ids"]
    assert ids.shape == (2, 32)
    expected = list(documents[0].encode("utf-8")[:32])
    assert ids[0].tolist() == expected
    assert BYTE_EOS_ID in data.sequences.flatten().tolist()


def test_plain_text_file_is_split_into_paragraphs(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("first paragraph\nstill first\n\nsecond paragraph\n")
    assert list(read_documents(path)) == ["first paragraph\nstill first", "second paragraph\n"]


def test_local_tokenizer_folder(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    texts = list(read_documents(SHIPPED_CORPUS))
    tokenizer.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]",
                                                                                   "</s>"]))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]",
                            eos_token="</s>").save_pretrained(tmp_path)
    data = build_data(is_language_model=True, vocab_size=512, seq_len=8,
                      data_path=SHIPPED_CORPUS, tokenizer_path=tmp_path)
    ids = data.global_batch(0, 1)["input_ids"][0].tolist()
    assert ids == tokenizer.encode(texts[0]).ids[:8]
    assert tokenizer.token_to_id("[UNK]") not in ids


def test_bad_jsonl_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"text": "ok"}) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not JSON"):
        list(read_documents(path))


def test_tokens_beyond_the_vocabulary_are_refused():
    with pytest.raises(ValueError, match="vocabulary of 100"):
        build_data(is_language_model=True, vocab_size=100, seq_len=8, data_path=SHIPPED_CORPUS)


def test_step_peaks_by_hand():
    from workloads.memory import ProfiledPeaks, step_peaks

    # three steps; the last is dropped (analyze's window). Step 0 [0, 10]: +100 +50 -120 +30
    # rises to 150; step 1 [20, 30]: -10 +40 rises to 30 above its start; an event between
    # steps belongs to none; step 2's +999 is outside the window.
    steps = [(20, 30, "ProfilerStep#1"), (0, 10, "ProfilerStep#0"), (40, 50, "ProfilerStep#2")]
    memory = [(1, 100), (2, 50), (3, -120), (10, 30), (15, 500), (20, -10), (25, 40),
              (45, 999)]
    assert step_peaks(steps, memory) == ProfiledPeaks(None, 150)
    # with the level at each step's start (GPU): 1000 + 150 and 2000 + 30
    peaks = step_peaks(steps, memory, {0: 1000, 1: 2000, 2: 0})
    assert (peaks.peak_allocated_bytes, peaks.step_peak_rise_bytes) == (2030, 150)
    # one step is the whole window; no allocation at all: unknown
    assert step_peaks(steps[1:2], memory).step_peak_rise_bytes == 150
    assert step_peaks(steps, []).step_peak_rise_bytes is None


def test_profiled_peaks_come_from_the_profiler_in_process():
    from workloads.memory import profiled_peaks

    megabytes = 1_000_000

    def found(prof):
        nonlocal peaks
        peaks = profiled_peaks(prof, torch.device("cpu"), {})

    peaks = None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=0, warmup=1, active=3,
                                                                 repeat=1),
                                profile_memory=True, on_trace_ready=found) as prof:
        for step in range(4):
            # step k holds (k + 1) MB and 1 MB more at once, then frees them; step 0 warms up
            held = torch.empty((step + 1) * megabytes, dtype=torch.uint8)
            more = torch.empty(megabytes, dtype=torch.uint8)
            del held, more
            prof.step()
    # profiled: steps 1 to 3; the last (4 + 1 MB) is dropped: step 2's 3 + 1 MB
    assert peaks.step_peak_rise_bytes == 4 * megabytes and peaks.peak_allocated_bytes is None
