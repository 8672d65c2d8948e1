"""The analytic matmul FLOPs (benchmarks.flops) against torch's FlopCounterMode, which
counts the products a forward pass really issues (the benchmark's share-of-ceiling
figures rest on these counts)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.flops import BatchShape, forward_flops, rnn_flops
from pipeline.data.batching import make_batch
from pipeline.data.dataset import TokenizedSplit
from pipeline.models.seq2seq import Seq2Seq

VOCAB = 50


def _counted(config, batch) -> int:
    model = Seq2Seq(config, VOCAB, VOCAB).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.loss(batch)
    return counter.get_total_flops()


@pytest.fixture
def batch():
    """Equal lengths: the padded encoder run then has no padding to count."""
    rng = np.random.default_rng(0)
    sources = [rng.integers(4, VOCAB, 7) for _ in range(5)]
    targets = [rng.integers(4, VOCAB, 6) for _ in range(5)]
    split = TokenizedSplit.from_sequences(sources, targets)
    return make_batch(split, np.arange(5))


@pytest.mark.parametrize(
    "overrides",
    [
        {"scorer": "none"},  # the RNN Encoder-Decoder: c in every decoder input and the readout
        {"scorer": "none", "baseline": "init_only"},
        {"scorer": "dot"},
        {"scorer": "general", "wiring": "bahdanau"},
        {"scorer": "scaled_dot", "input_feeding": True},
    ],
)
def test_gru_models_count_what_torch_counts(overrides, batch, tiny_model_config):
    """torch's CPU GRU issues its products as ordinary matmuls, so every one is counted."""
    config = tiny_model_config(**overrides)
    counts = forward_flops(config, VOCAB, BatchShape.of(batch))
    assert sum(counts.values()) == _counted(config, batch)


def test_lstm_models_count_four_gates(batch, tiny_model_config):
    """An LSTM layer runs as one oneDNN primitive that the counter does not see: all the
    other products match, and the two RNNs count 4/3 of a GRU's."""
    config = tiny_model_config(scorer="dot", cell="lstm")
    counts = forward_flops(config, VOCAB, BatchShape.of(batch))
    rnns = counts["encoder_rnn"] + counts["decoder_rnn"]
    assert sum(counts.values()) - rnns == _counted(config, batch)
    gru = forward_flops(tiny_model_config(scorer="dot"), VOCAB, BatchShape.of(batch))
    assert rnns * 3 == (gru["encoder_rnn"] + gru["decoder_rnn"]) * 4
    assert rnn_flops(10, 16, 32, "lstm") == 10 * 2 * 4 * 32 * (16 + 32)
