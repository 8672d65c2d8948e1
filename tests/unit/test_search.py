"""Greedy and beam search: equivalence, batching, length limits, attention order."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.data.batching import make_batch, source_order_attention
from pipeline.data.dataset import BOS_ID, EOS_ID, TokenizedSplit
from pipeline.models.attention import Memory
from pipeline.models.decoder import DecoderState
from pipeline.models.search import beam_search, greedy_search, max_lengths, translate
from pipeline.models.seq2seq import Seq2Seq

VOCAB = 30
CONFIGS = [
    {"scorer": "none"},
    {"scorer": "dot"},
    {"scorer": "scaled_dot", "wiring": "bahdanau"},
    {"scorer": "general", "input_feeding": True},
    {"scorer": "additive", "wiring": "bahdanau", "cell": "lstm", "layers": 2},
    {"scorer": "location", "reverse_source": True},
    {"scorer": "additive", "reverse_source": True, "bidirectional": True},
]


def _random_split(count: int = 9, seed: int = 0) -> TokenizedSplit:
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, VOCAB, rng.integers(1, 12)).tolist() for _ in range(count)]
    tgt = [rng.integers(4, VOCAB, rng.integers(1, 12)).tolist() for _ in range(count)]
    return TokenizedSplit.from_sequences(src, tgt)


def _model(tiny_model_config, **overrides) -> Seq2Seq:
    torch.manual_seed(0)
    model = Seq2Seq(tiny_model_config(**overrides), VOCAB, VOCAB)
    with torch.no_grad():  # an untrained model that still stops now and then
        model.generator.bias[EOS_ID] += 2.0
    return model


def _assert_same(first, second):
    assert first[0] == second[0]
    for a, b in zip(first[1], second[1]):
        assert (a is None and b is None) or np.array_equal(a, b)


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: "-".join(map(str, o.values())))
def test_beam_size_one_is_greedy(overrides, tiny_model_config):
    model = _model(tiny_model_config, **overrides)
    split = _random_split()
    batch = make_batch(split, np.arange(len(split)), reverse_source=model.config.reverse_source)
    greedy = greedy_search(model, batch)
    assert any(len(h) < 10 for h in greedy[0])  # some stopped early, some ran long
    for alpha in (0.0, 1.0):
        _assert_same(greedy, beam_search(model, batch, beam_size=1, length_penalty=alpha))


@pytest.mark.parametrize("overrides", CONFIGS[:2] + CONFIGS[4:], ids=lambda o: o["scorer"])
def test_batched_search_equals_sentence_by_sentence(overrides, tiny_model_config):
    model = _model(tiny_model_config, **overrides)
    split, reverse = _random_split(6, seed=1), model.config.reverse_source
    batch = make_batch(split, np.arange(len(split)), reverse_source=reverse)
    together = [greedy_search(model, batch), beam_search(model, batch, beam_size=4)]
    for row in range(len(split)):
        alone = make_batch(split, np.array([row]), reverse_source=reverse)
        for found, search in zip(together, (greedy_search, beam_search)):
            hypothesis, attention = search(model, alone)
            assert hypothesis[0] == found[0][row]
            if attention[0] is not None:
                np.testing.assert_allclose(attention[0], found[1][row], atol=1e-5)


def test_max_length_is_ratio_times_source_plus_ten(tiny_model_config):
    model = _model(tiny_model_config, scorer="general")
    with torch.no_grad():
        model.generator.bias[EOS_ID] = -1e4  # never stops by itself
    split = _random_split(5, seed=2)
    batch = make_batch(split, np.arange(5))
    limits = [math.floor(1.5 * len(split.source(i))) + 10 for i in range(5)]
    assert max_lengths(batch, 1.5).tolist() == limits
    for found in (
        greedy_search(model, batch, max_ratio=1.5),
        beam_search(model, batch, beam_size=3, max_ratio=1.5),
    ):
        assert [len(h) for h in found[0]] == limits
        assert [a.shape for a in found[1]] == [
            (limit, len(split.source(i)) + 1) for i, limit in enumerate(limits)
        ]


@pytest.mark.parametrize("wiring", ["luong", "bahdanau"])
def test_search_attention_is_in_original_source_order(wiring, tiny_model_config):
    """Search attention == teacher-forced attention of the same hypothesis on the
    reversed source, mapped back by flipping the first n columns."""
    model = _model(tiny_model_config, scorer="additive", wiring=wiring, reverse_source=True)
    split = _random_split(4, seed=3)
    batch = make_batch(split, np.arange(4), reverse_source=True)
    hypotheses, attentions = greedy_search(model, batch)
    forced = TokenizedSplit.from_sequences([split.source(i) for i in range(4)], hypotheses)
    forced_batch = make_batch(forced, np.arange(4), reverse_source=True)
    with torch.no_grad():
        _, teacher = model.eval().teacher_forced(forced_batch)  # (B, T, S) reversed order
    for row, attention in enumerate(attentions):
        n = len(split.source(row))
        expected = source_order_attention(teacher[row].numpy(), n, reversed_source=True)
        np.testing.assert_allclose(attention, expected[: len(attention)], atol=1e-5)
        reversed_order = teacher[row, : len(attention), : n + 1].numpy()
        np.testing.assert_allclose(attention[:, :n], reversed_order[:, :n][:, ::-1], atol=1e-5)


def test_translate_returns_split_order(tiny_model_config):
    model = _model(tiny_model_config, scorer="dot", reverse_source=True)
    split = _random_split(11, seed=4)
    hypotheses, attentions = translate(model, split, batch_size=4)
    for index in range(len(split)):
        alone = make_batch(split, np.array([index]), reverse_source=True)
        hypothesis, attention = greedy_search(model, alone)
        assert hypotheses[index] == hypothesis[0]
        np.testing.assert_allclose(attentions[index], attention[0], atol=1e-5)
    beams, _ = translate(model, split, beam_size=3, batch_size=4)
    assert len(beams) == len(split)


class MarkovModel(nn.Module):
    """A stand-in model whose next-token log-probs depend only on the previous token."""

    def __init__(self, table: dict[int, dict[int, float]], vocab_size: int = 8):
        super().__init__()
        self.tgt_vocab_size = vocab_size
        probs = torch.full((vocab_size, vocab_size), 1e-6)
        for previous, row in table.items():
            for token, p in row.items():
                probs[previous, token] = p
        self.log_probs = (probs / probs.sum(-1, keepdim=True)).log()

    def encode(self, src, src_lengths, src_mask):
        memory = Memory(torch.zeros(*src.shape, 1), None, src_mask)
        return memory, DecoderState(torch.zeros(1, len(src), 1))

    def step(self, tokens, memory, state, normalize=True):
        """Log-probabilities either way: greedy's unnormalised scores rank the same."""
        return self.log_probs[tokens].clone(), state, None


def test_beam_search_uses_length_normalisation_and_beats_greedy():
    # after BOS: EOS 0.5, token 5 0.4, token 6 0.1; after 5: EOS 0.99; after 6: 6 0.99
    model = MarkovModel({BOS_ID: {EOS_ID: 0.5, 5: 0.4, 6: 0.1}, 5: {EOS_ID: 0.99}, 6: {6: 0.99}})
    batch = make_batch(TokenizedSplit.from_sequences([[4, 4]], [[5]]), np.array([0]))
    assert greedy_search(model, batch)[0] == [[]]
    # log 0.5 = -0.69 beats log 0.4 + log 0.99 = -0.93 unnormalised ...
    assert beam_search(model, batch, beam_size=2, length_penalty=0.0)[0] == [[]]
    # ... but per token (-0.69 / 1 vs -0.93 / 2) the longer hypothesis wins
    assert beam_search(model, batch, beam_size=2, length_penalty=1.0)[0] == [[5]]
    assert beam_search(model, batch, beam_size=2, length_penalty=1.0)[1] == [None]


def test_beam_search_never_emits_bos_or_pad():
    model = MarkovModel({BOS_ID: {0: 0.6, BOS_ID: 0.3, 7: 0.1}, 7: {EOS_ID: 1.0}})
    batch = make_batch(TokenizedSplit.from_sequences([[4]], [[7]]), np.array([0]))
    assert greedy_search(model, batch)[0] == [[7]]
    assert beam_search(model, batch, beam_size=3)[0] == [[7]]
