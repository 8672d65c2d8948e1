"""What the benchmarks time, in-process: data, models, training steps, decoding, matmul.

``benchmarks.worker`` runs one of these per subprocess (fresh interpreter, its own thread
count, its own peak RSS); ``benchmarks.profile_step`` calls them directly.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.flops import BatchShape, training_flops
from benchmarks.reference import ReferenceSeq2Seq
from pipeline.config.params import EvaluateConfig, ModelConfig, TrainConfig
from pipeline.data.batching import Batch, epoch_batches, make_batch
from pipeline.data.dataset import TokenizedSplit
from pipeline.evaluate.decode import decode_split
from pipeline.models.search import batch_sentences
from pipeline.models.seq2seq import Seq2Seq
from pipeline.train import trainer as training

VOCAB_SIZE = 4000
"""Source and target vocabulary of the benchmark models (``tokenize.vocab_size``)."""
LABEL_SMOOTHING = 0.1  # train.label_smoothing
CLIP_NORM = 1.0  # train.clip_norm
LEARNING_RATE = 2e-3  # train.learning_rate
MAX_DECODE_RATIO = 2.0  # train.max_decode_ratio
IMPLEMENTATIONS: dict[str, type[nn.Module]] = {"pipeline": Seq2Seq, "reference": ReferenceSeq2Seq}


def random_corpus(sentences: int, vocab: int, seed: int) -> TokenizedSplit:
    """Random ids; source lengths ~N(30, 9), target ~1.2 x source (mean ~35)."""
    rng = np.random.default_rng(seed)
    src_lengths = np.clip(rng.normal(30, 9, sentences), 3, 80).astype(int)
    tgt_lengths = np.clip(src_lengths * 1.2 + rng.normal(0, 3, sentences), 3, 95).astype(int)
    src = [rng.integers(4, vocab, n) for n in src_lengths]
    tgt = [rng.integers(4, vocab, n) for n in tgt_lengths]
    return TokenizedSplit.from_sequences(src, tgt)


def load_split(
    tok_dir: str | Path, name: str, vocab: int = VOCAB_SIZE
) -> tuple[TokenizedSplit, str]:
    """``tok_dir/<name>.npz`` if it exists, else random ids; and where the data came from."""
    path = Path(tok_dir) / f"{name}.npz"
    if not path.is_file():
        return random_corpus(3000, vocab, seed=0), "random ids (no tokenized data)"
    split = TokenizedSplit.load(path)
    largest = max(int(split.src_ids.max()), int(split.tgt_ids.max()))
    if largest >= vocab:
        raise ValueError(f"{path}: id {largest} does not fit a vocabulary of {vocab}")
    return split, f"real ({os.path.relpath(path)})"


def sample_batches(split: TokenizedSplit, batch_tokens: int, count: int, seed: int) -> list[Batch]:
    """The first ``count`` training batches of epoch 1 (token-bucketed, shuffled)."""
    indices = epoch_batches(split, batch_tokens, seed=seed, epoch=1)
    return [make_batch(split, indices[i % len(indices)]) for i in range(count)]


def build_model(implementation: str, config: ModelConfig, vocab: int) -> nn.Module:
    """A freshly initialised model (seed 0) of ``implementation`` in training mode."""
    torch.manual_seed(0)
    return IMPLEMENTATIONS[implementation](config, vocab, vocab).train()


def loss_agreement(config: ModelConfig, vocab: int, batch: Batch) -> float:
    """Relative difference of the pipeline's and the reference's loss with equal weights
    (evaluation mode, no dropout): checks that both compute the same model."""
    pipeline = build_model("pipeline", config, vocab).eval()
    reference = build_model("reference", config, vocab).eval()
    reference.load_pipeline_weights(pipeline)
    with torch.no_grad():
        expected = pipeline.loss(batch, LABEL_SMOOTHING)[0].item()
        found = reference.loss(batch, LABEL_SMOOTHING)[0].item()
    return abs(found - expected) / abs(expected)


def make_optimizer(implementation: str, model: nn.Module) -> torch.optim.Optimizer:
    """The trainer's optimizer for the pipeline; the tutorials' plain Adam for the reference."""
    if implementation == "pipeline":
        return training.make_optimizer(model, LEARNING_RATE)
    return torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)


def training_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, precision: str = "fp32"
) -> int:
    """One optimizer step, the trainer's own (:func:`pipeline.train.trainer.optimizer_step`),
    with the matrix products in ``precision`` (resolved: fp32 or bf16)."""
    cfg = TrainConfig(label_smoothing=LABEL_SMOOTHING, clip_norm=CLIP_NORM)
    return training.optimizer_step(model, optimizer, batch, cfg, precision, "cpu")[1]


def prebuild(
    model: nn.Module, optimizer: torch.optim.Optimizer, batches: list[Batch], precision: str
) -> None:
    """One untimed training step on each of ``batches``, so that the timed steps on them
    find their shapes' oneDNN primitives built.

    bf16 products build a oneDNN primitive per shape, 1.1 ms each on average, and a
    batch of new shapes needs about 15 (594 for the first 40 batches of epoch 1, additive
    h256, 1000 tokens): a benchmark that times each batch on first sight charges every
    step for building that training does once per shape per process (2,799 primitives
    in its first 1,800 steps, about 1.5 a step: pipeline.runtime.onednn). After this pass the
    timings measure what training does at almost every step. Float32 products (the
    reference) build nothing; the extra steps only change the weights the timed steps
    start from."""
    for batch in batches:
        training_step(model, optimizer, batch, precision)


def time_training(
    model: nn.Module,
    config: ModelConfig,
    batches: list[Batch],
    *,
    warmup: int,
    steps: int,
    implementation: str = "pipeline",
    precision: str = "fp32",
    window_seconds: float = 0.0,
    vocab: int = VOCAB_SIZE,
    before_timing: Callable[[], None] | None = None,
) -> dict:
    """Train ``warmup`` untimed steps (at least one: its matmul FLOPs are counted by
    torch's ``FlopCounterMode``, a check of ``benchmarks.flops`` and, for the reference,
    what it executes), then one untimed step on each batch that will be timed (see
    :func:`prebuild`), call ``before_timing`` (a start barrier), then time
    ``steps`` steps, or as many as start within ``window_seconds`` when that is set.
    Timed steps cycle through ``batches[warmup:]``. Only the steps themselves are timed."""
    optimizer = make_optimizer(implementation, model)
    with FlopCounterMode(display=False) as counter:  # the first warm-up step, counted
        training_step(model, optimizer, batches[0], precision)
    executed = {
        "counted_flops_first_batch": counter.get_total_flops(),
        "model_flops_first_batch": training_flops(config, vocab, BatchShape.of(batches[0])),
    }
    for index in range(1, warmup):
        training_step(model, optimizer, batches[index % len(batches)], precision)
    prebuild(model, optimizer, batches[warmup:], precision)
    if before_timing is not None:
        before_timing()
    tokens, flops, seconds, count = 0, 0, 0.0, 0
    window_start = time.time()
    while (count < steps) if not window_seconds else (time.time() - window_start < window_seconds):
        batch = batches[warmup + count % (len(batches) - warmup)]
        start = time.perf_counter()
        tokens += training_step(model, optimizer, batch, precision)
        seconds += time.perf_counter() - start
        flops += training_flops(config, vocab, BatchShape.of(batch))
        count += 1
    return {
        "steps": count,
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "seconds_per_step": seconds / count,
        "flops_per_step": flops / count,
        "flops_per_s": flops / seconds,
        "window_start": window_start,
        "window_end": time.time(),
        **executed,
    }


def batch_statistics(batches: list[Batch]) -> dict[str, float]:
    """Mean sentences, padded source and target positions of the timed batches, and the
    share of padding among all source and target positions."""
    shapes = [BatchShape.of(b) for b in batches]
    source_cells = sum(b.src_mask.numel() for b in batches)
    target_cells = sum(b.tgt_out.numel() for b in batches)
    return {
        "mean_sentences": float(np.mean([s.sentences for s in shapes])),
        "mean_source_positions": float(np.mean([s.source_positions for s in shapes])),
        "mean_target_positions": float(np.mean([s.target_positions for s in shapes])),
        "source_padding": 1 - sum(int(b.src_mask.sum()) for b in batches) / source_cells,
        "target_padding": 1 - sum(b.n_tokens for b in batches) / target_cells,
    }


def time_decoding(
    model: Seq2Seq, split: TokenizedSplit, beam_size: int, precision: str = "fp32"
) -> dict:
    """Sentences/s of ``pipeline.evaluate.decode.decode_split`` (its batch sizes, length-sorted)."""
    config = EvaluateConfig(beam_size=beam_size, precision=precision)
    decode_split(model, split.subset(np.arange(16)), config, MAX_DECODE_RATIO, "cpu")
    start = time.perf_counter()
    hypotheses, _ = decode_split(model, split, config, MAX_DECODE_RATIO, "cpu")
    seconds = time.perf_counter() - start
    limits = np.floor(MAX_DECODE_RATIO * split.src_lengths) + 10
    lengths = np.array([len(h) for h in hypotheses])
    return {
        "beam_size": beam_size,
        "precision": precision,
        "batch_sentences": batch_sentences(beam_size),
        "sentences": len(split),
        "seconds": seconds,
        "sentences_per_s": len(split) / seconds,
        "mean_hypothesis_tokens": float(lengths.mean()),
        "mean_reference_tokens": float(split.tgt_lengths.mean()),
        "share_at_length_limit": float(np.mean(lengths >= limits)),
    }


def time_matmul(
    size: int,
    seconds: float,
    before_timing: Callable[[], None] | None = None,
    dtype: torch.dtype = torch.float32,
) -> dict:
    """``size x size @ size x size`` FLOP/s in ``dtype``, repeated for ``seconds`` after 2
    warm-ups."""
    left, right = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    out = torch.empty(size, size, dtype=dtype)
    for _ in range(2):
        torch.mm(left, right, out=out)
    if before_timing is not None:
        before_timing()
    rates, window_start = [], time.time()
    while time.time() - window_start < seconds or len(rates) < 3:
        start = time.perf_counter()
        torch.mm(left, right, out=out)
        rates.append(2 * size**3 / (time.perf_counter() - start))
    return {
        "size": size,
        "repeats": len(rates),
        "flops_per_s": float(np.median(rates)),
        "max_flops_per_s": float(np.max(rates)),
        "window_start": window_start,
        "window_end": time.time(),
    }
