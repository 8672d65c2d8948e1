"""Batch layout, source reversal, token bucketing and inference batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.data.batching import (
    batch_difficulty,
    competence,
    epoch_batches,
    inference_batches,
    make_batch,
    padding_fraction,
    source_order_attention,
    token_batches,
)
from pipeline.data.dataset import BOS_ID, EOS_ID, PAD_ID, TokenizedSplit
from pipeline.models.encoder import Encoder


@pytest.fixture
def split() -> TokenizedSplit:
    src = [[10, 11, 12], [20], [30, 31, 32, 33, 34], [40, 41]]
    tgt = [[50, 51], [60, 61, 62, 63], [70], [80, 81, 82]]
    return TokenizedSplit.from_sequences(src, tgt)


def test_batch_layout(split):
    batch = make_batch(split, np.array([0, 1, 3]))
    assert batch.src.tolist() == [
        [10, 11, 12, EOS_ID],
        [20, EOS_ID, PAD_ID, PAD_ID],
        [40, 41, EOS_ID, PAD_ID],
    ]
    assert batch.src_lengths.tolist() == [4, 2, 3]
    assert batch.src_mask.tolist() == [
        [True, True, True, True],
        [True, True, False, False],
        [True, True, True, False],
    ]
    assert batch.tgt_in.tolist() == [
        [BOS_ID, 50, 51, PAD_ID, PAD_ID],
        [BOS_ID, 60, 61, 62, 63],
        [BOS_ID, 80, 81, 82, PAD_ID],
    ]
    assert batch.tgt_out.tolist() == [
        [50, 51, EOS_ID, PAD_ID, PAD_ID],
        [60, 61, 62, 63, EOS_ID],
        [80, 81, 82, EOS_ID, PAD_ID],
    ]
    assert batch.indices.tolist() == [0, 1, 3]
    assert batch.n_tokens == int((batch.tgt_out != PAD_ID).sum()) == 3 + 5 + 4
    assert batch.src.dtype == torch.long and batch.src_mask.dtype == torch.bool


def test_reversal_keeps_eos_padding_and_mask(split):
    forward = make_batch(split, np.array([2, 1, 0]))
    reverse = make_batch(split, np.array([2, 1, 0]), reverse_source=True)
    assert reverse.src.tolist() == [
        [34, 33, 32, 31, 30, EOS_ID],
        [20, EOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID],
        [12, 11, 10, EOS_ID, PAD_ID, PAD_ID],
    ]
    assert torch.equal(reverse.src_mask, forward.src_mask)
    assert torch.equal(reverse.src_lengths, forward.src_lengths)
    assert torch.equal(reverse.tgt_in, forward.tgt_in)  # the target is never reversed
    assert reverse.reversed_source and not forward.reversed_source


def test_encoder_sees_reversed_tokens(split):
    encoder = Encoder(100, 4, 6)
    seen = []
    encoder.embedding.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    batch = make_batch(split, np.array([0]), reverse_source=True)
    encoder(batch.src, batch.src_lengths)
    assert seen[0].tolist() == [[12, 11, 10, EOS_ID]]


def test_source_order_attention_maps_back():
    # sentence of n = 3 tokens, padded source width 6; rows = 2 decoder steps
    attention = np.array([[0.1, 0.2, 0.3, 0.4, 0.0, 0.0], [0.5, 0.0, 0.25, 0.25, 0.0, 0.0]])
    restored = source_order_attention(attention, 3, reversed_source=True)
    assert restored.tolist() == [[0.3, 0.2, 0.1, 0.4], [0.25, 0.0, 0.5, 0.25]]
    unchanged = source_order_attention(attention, 3, reversed_source=False)
    assert unchanged.tolist() == attention[:, :4].tolist()


def test_reversal_and_mapping_back_round_trip(split):
    """Attention on the reversed source mapped back equals the same attention on the
    original source: simulate 'attend to token id' weights on both layouts."""
    for reverse in (False, True):
        batch = make_batch(split, np.arange(len(split)), reverse_source=reverse)
        weights = batch.src.double() * batch.src_mask  # weight = token id at its position
        for row, index in enumerate(batch.indices):
            n = len(split.source(index))
            restored = source_order_attention(weights[row : row + 1].numpy(), n, reverse)
            assert restored[0].tolist() == [*split.source(index).tolist(), EOS_ID]


def _lengths(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 60, count), rng.integers(1, 70, count)


def test_token_batches_cover_every_sentence_within_budget():
    src_lengths, tgt_lengths = _lengths(500, 0)
    batches = token_batches(src_lengths, tgt_lengths, 400, np.random.default_rng(1))
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(500))
    for batch in batches:
        cost = len(batch) * (tgt_lengths[batch].max() + 1)
        assert cost <= 400 or len(batch) == 1
    sizes = [len(batch) * (tgt_lengths[batch].max() + 1) for batch in batches]
    assert np.mean(sizes) > 0.8 * 400  # groups are filled, not one sentence each


def test_token_batches_one_oversized_sentence_gets_its_own_batch():
    batches = token_batches(np.array([3, 3, 3]), np.array([2, 500, 2]), 100)
    assert [b.tolist() for b in batches] == [[0, 2], [1]]


def test_epoch_batches_are_seeded_and_shuffled_per_epoch():
    src_lengths, tgt_lengths = _lengths(300, 2)
    split = TokenizedSplit.from_sequences(
        [[5] * n for n in src_lengths], [[6] * n for n in tgt_lengths]
    )
    first = epoch_batches(split, 300, seed=7, epoch=1)
    again = epoch_batches(split, 300, seed=7, epoch=1)
    second = epoch_batches(split, 300, seed=7, epoch=2)
    other_seed = epoch_batches(split, 300, seed=8, epoch=1)
    assert [b.tolist() for b in first] == [b.tolist() for b in again]
    assert [b.tolist() for b in first] != [b.tolist() for b in second]
    assert [b.tolist() for b in first] != [b.tolist() for b in other_seed]
    # the order is shuffled: not sorted by length
    longest = [int(tgt_lengths[b].max()) for b in first]
    assert longest != sorted(longest)


def _length_split(count: int, seed: int) -> tuple[TokenizedSplit, np.ndarray]:
    src_lengths, tgt_lengths = _lengths(count, seed)
    split = TokenizedSplit.from_sequences(
        [[5] * n for n in src_lengths], [[6] * n for n in tgt_lengths]
    )
    return split, tgt_lengths


def test_competence_is_the_square_root_schedule():
    assert competence(0.0) == pytest.approx(0.01)
    assert competence(0.25) == pytest.approx(np.sqrt(0.25 * (1 - 1e-4) + 1e-4))
    assert competence(1.0) == competence(3.0) == 1.0
    values = [competence(t / 100) for t in range(101)]
    assert values == sorted(values)


def test_batch_difficulty_is_the_length_cdf_of_the_longest_target():
    lengths = np.array([1, 2, 2, 3, 10])
    difficulty = batch_difficulty(lengths, [np.array([0]), np.array([1, 2]), np.array([3, 4])])
    assert difficulty.tolist() == [0.2, 0.6, 1.0]


def test_curriculum_draws_only_batches_within_the_competence():
    split, tgt_lengths = _length_split(400, 3)
    plain = epoch_batches(split, 300, seed=7, epoch=1)
    steps = len(plain) * 2  # the curriculum spans two epochs
    first = epoch_batches(split, 300, seed=7, epoch=1, curriculum_steps=steps)
    ordered = np.sort(tgt_lengths)
    smallest_batch = min(int(tgt_lengths[b].max()) for b in plain)
    for position, batch in enumerate(first):
        share = competence(position / steps)
        allowed = ordered[max(0, int(np.ceil(share * len(ordered))) - 1)]
        assert tgt_lengths[batch].max() <= max(allowed, smallest_batch)
    # early steps are short, and the batches come from the epoch's own set of batches
    early = np.mean([tgt_lengths[b].max() for b in first[: len(first) // 4]])
    assert early < np.mean([tgt_lengths[b].max() for b in plain])
    plain_sets = {tuple(sorted(b.tolist())) for b in plain}
    assert all(tuple(sorted(b.tolist())) in plain_sets for b in first)
    # deterministic, and the epoch after the curriculum is the plain shuffled one
    again = epoch_batches(split, 300, seed=7, epoch=1, curriculum_steps=steps)
    assert [b.tolist() for b in first] == [b.tolist() for b in again]
    third = epoch_batches(split, 300, seed=7, epoch=3, curriculum_steps=steps)
    assert [b.tolist() for b in third] == [
        b.tolist() for b in epoch_batches(split, 300, seed=7, epoch=3)
    ]


def test_curriculum_ending_mid_epoch_keeps_the_rest_of_that_epoch():
    split, _ = _length_split(400, 4)
    plain = epoch_batches(split, 300, seed=7, epoch=2)
    steps = len(plain) + 5  # ends 5 steps into epoch 2
    second = epoch_batches(split, 300, seed=7, epoch=2, curriculum_steps=steps)
    assert [b.tolist() for b in second[5:]] == [b.tolist() for b in plain[5:]]
    assert [b.tolist() for b in second[:5]] != [b.tolist() for b in plain[:5]]


def test_padding_fraction(split):
    batches = [np.array([0, 1]), np.array([2, 3])]
    fraction = padding_fraction(split, batches)
    # src: real 4+2 | 6+3 = 15 of 4*2 + 6*2 = 20 ; tgt: real 3+5 | 2+4 = 14 of 5*2 + 4*2 = 18
    assert fraction["src"] == pytest.approx(1 - 15 / 20)
    assert fraction["tgt"] == pytest.approx(1 - 14 / 18)
    sorted_batches = token_batches(split.src_lengths, split.tgt_lengths, 10)
    assert padding_fraction(split, sorted_batches)["tgt"] <= fraction["tgt"]


def test_inference_batches_keep_original_order(split):
    batches = list(inference_batches(split, batch_size=3))
    assert [b.indices.tolist() for b in batches] == [[0, 1, 2], [3]]
    assert batches[0].src[1].tolist()[:2] == [20, EOS_ID]
    chosen = list(inference_batches(split, batch_size=2, indices=np.array([3, 1, 0])))
    assert [b.indices.tolist() for b in chosen] == [[3, 1], [0]]


def test_empty_target_still_gets_bos_and_eos():
    split = TokenizedSplit.from_sequences([[9, 9]], [[]])
    batch = make_batch(split, np.array([0]))
    assert batch.tgt_in.tolist() == [[BOS_ID]] and batch.tgt_out.tolist() == [[EOS_ID]]
