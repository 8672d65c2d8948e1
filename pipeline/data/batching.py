"""Batches of a :class:`TokenizedSplit`: padding, masks, source reversal, token buckets.

A batch is built once, with numpy vector ops (no per-token Python):

- ``src``: the source ids followed by EOS, then PAD. The appended EOS gives every source
  an explicit end marker: the encoder's final state is always read after the same token,
  and attention has a "nothing left to align" position (Sutskever 2014, Bahdanau 2014).
- With ``reverse_source`` (Sutskever 2014) the ``n`` real tokens are reversed in place;
  EOS stays at position ``n`` and padding stays at the end, so ``src_mask`` is unchanged.
  :func:`source_order_attention` maps an attention matrix back to the original order.
- ``tgt_in`` = ``BOS y_1 .. y_n`` and ``tgt_out`` = ``y_1 .. y_n EOS`` (teacher forcing).

Training batches are token-bucketed (:func:`epoch_batches`): sentences sorted by length
(random tie-break), grouped so that a batch holds about ``batch_tokens`` *padded* target
tokens, and the batch order shuffled per epoch from ``(seed, epoch)`` alone, so a resumed
run sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch

from pipeline.data.tokenized import BOS_ID, EOS_ID, PAD_ID, TokenizedSplit


@dataclass(frozen=True)
class Batch:
    """Padded tensors of ``B`` sentence pairs (see module docstring for the layout)."""

    src: torch.Tensor  # (B, S) long, source ids + EOS (reversed if reversed_source), PAD
    src_lengths: torch.Tensor  # (B,) long, real source tokens including the EOS
    src_mask: torch.Tensor  # (B, S) bool, True on real tokens (EOS included)
    tgt_in: torch.Tensor  # (B, T) long, BOS y_1 .. y_n, PAD
    tgt_out: torch.Tensor  # (B, T) long, y_1 .. y_n EOS, PAD
    indices: np.ndarray  # (B,) int64, positions of the sentences in their split
    n_tokens: int  # real target tokens (EOS included): the loss denominator
    reversed_source: bool = False

    def __len__(self) -> int:
        return len(self.indices)

    def to(self, device: torch.device | str) -> Batch:
        """The same batch with its tensors on ``device``. To a GPU the copies go from
        pinned memory without blocking, so moving a batch never waits for the steps the
        GPU still has queued."""
        target = torch.device(device)
        pinned = target.type == "cuda"

        def move(t: torch.Tensor) -> torch.Tensor:
            return (t.pin_memory() if pinned else t).to(target, non_blocking=pinned)

        return replace(
            self,
            src=move(self.src),
            src_lengths=move(self.src_lengths),
            src_mask=move(self.src_mask),
            tgt_in=move(self.tgt_in),
            tgt_out=move(self.tgt_out),
        )


def _gather_padded(
    ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int, reverse: bool = False
) -> np.ndarray:
    """Rows ``ids[start:start + length]`` (optionally reversed), right-padded to ``width``."""
    positions = np.arange(width)[None, :]  # (1, W)
    real = positions < lengths[:, None]  # (B, W)
    if ids.size == 0:
        return np.full(real.shape, PAD_ID, dtype=np.int64)
    offsets = (lengths[:, None] - 1 - positions) if reverse else positions
    flat = np.clip(starts[:, None] + offsets, 0, ids.size - 1)  # (B, W)
    return np.where(real, ids[flat], PAD_ID).astype(np.int64)


def make_batch(
    split: TokenizedSplit, indices: np.ndarray, *, reverse_source: bool = False
) -> Batch:
    """The batch of sentences ``indices`` of ``split`` (in that order)."""
    indices = np.asarray(indices, dtype=np.int64)
    rows = np.arange(len(indices))
    src_len = split.src_lengths[indices]
    tgt_len = split.tgt_lengths[indices]
    src = _gather_padded(
        split.src_ids, split.src_offsets[indices], src_len, int(src_len.max()) + 1, reverse_source
    )
    src[rows, src_len] = EOS_ID
    tgt = _gather_padded(split.tgt_ids, split.tgt_offsets[indices], tgt_len, int(tgt_len.max()) + 1)
    tgt_out = tgt.copy()
    tgt_out[rows, tgt_len] = EOS_ID
    tgt_in = np.concatenate([np.full((len(rows), 1), BOS_ID), tgt[:, :-1]], axis=1)
    src_lengths = torch.from_numpy(src_len + 1)
    return Batch(
        src=torch.from_numpy(src),
        src_lengths=src_lengths,
        src_mask=torch.arange(src.shape[1])[None, :] < src_lengths[:, None],
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        indices=indices,
        n_tokens=int(tgt_len.sum() + len(rows)),
        reversed_source=reverse_source,
    )


def token_batches(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    batch_tokens: int,
    rng: np.random.Generator | None = None,
) -> list[np.ndarray]:
    """Group sentences into batches of at most ``batch_tokens`` padded target tokens.

    Sentences are sorted by target length, then source length, ties broken at random
    (by ``rng``; by index when ``rng`` is None), and cut greedily so that
    ``len(batch) * (longest target + 1)`` stays within ``batch_tokens``; a sentence longer
    than that gets a batch of its own. With ``rng`` the batch order is shuffled.
    """
    count = len(tgt_lengths)
    tie_break = rng.random(count) if rng is not None else np.arange(count)
    order = np.lexsort((tie_break, src_lengths, tgt_lengths))
    padded = (np.asarray(tgt_lengths) + 1)[order]
    bounds, start = [0], 0
    for end in range(1, count + 1):
        if end - start > 1 and (end - start) * padded[end - 1] > batch_tokens:
            bounds.append(end - 1)
            start = end - 1
    bounds.append(count)
    batches = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def epoch_batches(
    split: TokenizedSplit, batch_tokens: int, *, seed: int, epoch: int
) -> list[np.ndarray]:
    """Training batches (index arrays) of one epoch, a pure function of ``(seed, epoch)``."""
    rng = np.random.default_rng([seed, epoch])
    return token_batches(split.src_lengths, split.tgt_lengths, batch_tokens, rng)


def padding_fraction(split: TokenizedSplit, batches: list[np.ndarray]) -> dict[str, float]:
    """Share of padded positions among all positions, per side (EOS/BOS count as real)."""
    out = {}
    for side, lengths in (("src", split.src_lengths), ("tgt", split.tgt_lengths)):
        real = sum(int(lengths[b].sum()) + len(b) for b in batches)
        total = sum((int(lengths[b].max()) + 1) * len(b) for b in batches)
        out[side] = 1.0 - real / total if total else 0.0
    return out


def inference_batches(
    split: TokenizedSplit,
    *,
    batch_size: int = 64,
    reverse_source: bool = False,
    indices: np.ndarray | None = None,
) -> Iterator[Batch]:
    """Consecutive batches of ``batch_size`` sentences in original order (or in the order
    of ``indices``, e.g. sorted by length for less padding; ``batch.indices`` says which)."""
    order = np.arange(len(split)) if indices is None else np.asarray(indices, dtype=np.int64)
    for start in range(0, len(order), batch_size):
        yield make_batch(split, order[start : start + batch_size], reverse_source=reverse_source)


def source_order_attention(
    attention: np.ndarray, source_length: int, reversed_source: bool
) -> np.ndarray:
    """Attention ``(T, S_padded)`` -> ``(T, n + 1)`` columns in original source order.

    ``source_length`` is ``n``, the source tokens without the appended EOS. The columns
    are the ``n`` source tokens then EOS; with reversal, ``attention[:, :n]`` is flipped
    along the source axis and the EOS column stays last.
    """
    attention = np.asarray(attention)[:, : source_length + 1]
    if reversed_source:
        attention = np.concatenate(
            [attention[:, :source_length][:, ::-1], attention[:, source_length:]], axis=1
        )
    return np.ascontiguousarray(attention)
