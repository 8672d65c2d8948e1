"""Translation quality: sacreBLEU/chrF, BLEU by source length, intervals.

A variant's 95% intervals are sacreBLEU's own bootstrap (``sacrebleu --confidence``),
seeded through ``evaluate.bootstrap_seed`` and read through sacreBLEU's public
``Score.format(is_json=True)``. The comparisons between variants (the paired bootstrap over
test sentences, whose intervals also cover seeds) are :mod:`pipeline.study.statistics`';
Holm's correction there comes from statsmodels.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Score

from pipeline.data.split import bucket_label, length_bucket


@dataclass(frozen=True)
class Buckets:
    width: int = 10
    count: int = 6

    def index(self, words: int) -> int:
        return length_bucket(words, self.width, self.count)

    def label(self, index: int) -> str:
        return bucket_label(index, self.width, self.count)

    def training_range(self, index: int, max_train_words: int | None) -> str:
        """``inside`` if every sentence of bucket ``index`` is within the training cut,
        else ``beyond`` (the model never saw a source that long in training)."""
        if max_train_words is None:
            return "inside"
        last = index == self.count - 1
        return "inside" if not last and (index + 1) * self.width <= max_train_words else "beyond"


class Scorer:
    """sacreBLEU BLEU and chrF of one target language, with sacreBLEU's own bootstrap
    intervals."""

    def __init__(self, target_language: str | None = None, seed: int = 12345):
        self.target_language = target_language or ""
        self.bleu = BLEU(trg_lang=self.target_language)
        self.chrf = CHRF()
        self.seed = seed

    @property
    def signature(self) -> str:
        return str(self.bleu.get_signature())

    def bleu_interval(
        self, hypotheses: list[str], references: list[str], samples: int
    ) -> tuple[float, float, float]:
        """Corpus BLEU and its 95% interval: sacreBLEU's bootstrap (``--confidence``),
        mean +- half the 2.5-97.5 percentile range of ``samples`` resamples."""
        if len(hypotheses) != len(references):
            raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
        if samples < 2:
            raise ValueError(f"samples must be at least 2 for an interval, got {samples}")
        with _sacrebleu_seed(self.seed):
            score = self.bleu.corpus_score(hypotheses, [references], n_bootstrap=samples)
        mean, half = bootstrap_interval(score, self.signature)
        return float(score.score), float(mean - half), float(mean + half)

    def chrf_score(self, hypotheses: list[str], references: list[str]) -> float:
        return float(self.chrf.corpus_score(hypotheses, [references]).score)


_DECIMALS = 30
"""Decimals asked of ``Score.format``: enough that its numbers read back as the exact floats
(at least 17 significant digits for any value above 1e-13)."""


def bootstrap_interval(score: Score, signature: str) -> tuple[float, float]:
    """The bootstrap mean and half-width of sacreBLEU's 95% interval around ``score`` (a
    ``corpus_score(..., n_bootstrap=N)`` result), from its public JSON form.

    sacreBLEU leaves the interval out when the bootstrap mean is 0. A corpus BLEU of 0 (no
    matching unigram, or no n-gram of some order) leaves every resample at 0 too, so its
    interval is exactly [0, 0]; any other score without an interval did not come from a
    bootstrap run, and is an error rather than a silent 0."""
    fields = json.loads(score.format(width=_DECIMALS, signature=signature, is_json=True))
    if "confidence_mean" in fields and "confidence_var" in fields:
        return float(fields["confidence_mean"]), float(fields["confidence_var"])
    if score.score == 0:
        return 0.0, 0.0
    raise ValueError(
        f"sacreBLEU gave no bootstrap interval for BLEU {score.score:.2f} ({signature}): "
        "score it with corpus_score(..., n_bootstrap=N), N > 1"
    )


@contextmanager
def _sacrebleu_seed(seed: int):
    """sacreBLEU seeds its resampling from ``SACREBLEU_SEED`` (default 12345)."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = old


def score_system(
    scorer: Scorer,
    hypotheses: list[str],
    references: list[str],
    source_words: np.ndarray,
    buckets: Buckets,
    samples: int,
    max_train_words: int | None = None,
) -> dict[str, Any]:
    """Overall BLEU/chrF with 95% intervals, and BLEU per source-length bucket. A bucket
    is ``inside`` the training lengths when all its sentences are at most
    ``max_train_words`` long (the training cut), else ``beyond`` (extrapolation)."""
    bleu, low, high = scorer.bleu_interval(hypotheses, references, samples)
    bucket_ids = np.array([buckets.index(int(w)) for w in source_words])
    by_length = []
    for index in range(buckets.count):
        rows = np.flatnonzero(bucket_ids == index)
        entry: dict[str, Any] = {
            "bucket": buckets.label(index),
            "sentences": int(len(rows)),
            "training_range": buckets.training_range(index, max_train_words),
        }
        if len(rows):
            b, lo, hi = scorer.bleu_interval(
                [hypotheses[i] for i in rows], [references[i] for i in rows], samples
            )
            entry.update(bleu=b, bleu_low=lo, bleu_high=hi)
        else:
            entry.update(bleu=float("nan"), bleu_low=float("nan"), bleu_high=float("nan"))
        by_length.append(entry)
    return {
        "bleu": bleu,
        "bleu_low": low,
        "bleu_high": high,
        "chrf": scorer.chrf_score(hypotheses, references),
        "sentences": len(hypotheses),
        "signature": scorer.signature,
        "by_length": by_length,
    }


def attention_entropy(matrix: np.ndarray) -> float:
    """Mean entropy (nats) of the attention rows of one (T, S) matrix."""
    p = np.clip(matrix, 1e-12, 1.0)
    return float(np.mean(-(p * np.log(p)).sum(axis=1)))


def monotonicity_gap(matrix: np.ndarray) -> float:
    """How far the argmax alignment is from the diagonal: mean |argmax_t/S - t/T|.

    0 for a perfectly diagonal alignment, up to ~0.5 for an anti-diagonal one.
    """
    steps, positions = matrix.shape
    if steps == 0 or positions == 0:
        return float("nan")
    aligned = matrix.argmax(axis=1) / max(positions - 1, 1)
    diagonal = np.arange(steps) / max(steps - 1, 1)
    return float(np.mean(np.abs(aligned - diagonal)))
