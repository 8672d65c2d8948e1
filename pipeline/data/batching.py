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

With a curriculum (``curriculum_steps`` T > 0), step t < T draws its batch at random from
the easiest batches only: those whose longest target is within the shortest
``competence(t / T)`` share of the training targets (Platanios et al. 2019, "Competence-
based Curriculum Learning for Neural Machine Translation": sentence-length difficulty,
eq. 3, square-root competence, eq. 7). Steps from T on take the shuffled epoch as usual.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch

from pipeline.data.dataset import BOS_ID, EOS_ID, PAD_ID, TokenizedSplit


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
    split: TokenizedSplit,
    batch_tokens: int,
    *,
    seed: int,
    epoch: int,
    curriculum_steps: int = 0,
) -> list[np.ndarray]:
    """Training batches (index arrays) of one epoch, a pure function of ``(seed, epoch)``
    (and ``curriculum_steps``: the positions of the epoch that fall in the first
    ``curriculum_steps`` steps of training take a competence-sampled batch instead)."""
    rng = np.random.default_rng([seed, epoch])
    batches = token_batches(split.src_lengths, split.tgt_lengths, batch_tokens, rng)
    # Every epoch has the same number of batches: the cuts depend on the sorted lengths
    # only, not on the tie-break. So epoch e starts at step (e - 1) * len(batches).
    first_step = (epoch - 1) * len(batches)
    if first_step >= curriculum_steps:
        return batches
    difficulty = batch_difficulty(split.tgt_lengths, batches)
    easiest = np.argsort(difficulty, kind="stable")
    ranked = difficulty[easiest]
    pick = np.random.default_rng([seed, epoch, 1])  # not the epoch's shuffle stream
    out = list(batches)
    for position in range(min(len(batches), curriculum_steps - first_step)):
        share = competence((first_step + position) / curriculum_steps)
        eligible = max(1, int(np.searchsorted(ranked, share, side="right")))
        out[position] = batches[easiest[pick.integers(eligible)]]
    return out


def competence(progress: float, initial: float = 0.01) -> float:
    """The share of the training data (easiest first) a curriculum step may draw from,
    ``progress`` = t / T: sqrt(t (1 - c0^2) / T + c0^2), 1 from T on (Platanios et al.
    2019, eq. 7, with their c0 = 0.01)."""
    if progress >= 1:
        return 1.0
    return math.sqrt(progress * (1 - initial**2) + initial**2)


def batch_difficulty(tgt_lengths: np.ndarray, batches: list[np.ndarray]) -> np.ndarray:
    """Per batch, the share of sentences whose target is no longer than the batch's
    longest: the empirical length CDF (Platanios et al. 2019, sec. 3.1) of the length the
    batch was cut by (its padded width)."""
    ordered = np.sort(tgt_lengths)
    longest = np.array([tgt_lengths[b].max() for b in batches])
    return np.searchsorted(ordered, longest, side="right") / max(len(ordered), 1)


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
