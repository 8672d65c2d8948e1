"""Deterministic, leak-free, length-stratified train/dev/test split.

- Pairs are grouped by source sentence, and a group goes wholly to one split, so no
  dev or test source sentence appears in train.
- The test set is stratified by source length in words: buckets of ``bucket_width``
  words (1-10, 11-20, ..., the last open-ended, 51+ with the defaults). Every bucket
  first gets ``test_min_per_bucket`` sentences, and the rest of ``test_size`` is shared
  in proportion to bucket sizes. A bucket inside the training lengths gives at most half
  of what it holds; a bucket wholly beyond ``max_train_words`` (whose pairs the cut takes
  out of training anyway) may give all of it. That makes BLEU per bucket meaningful even
  for the rare long sentences, without taking them from training.
- Dev is a uniform sample of what is left inside the training lengths (model selection
  sees the lengths training sees); train is the rest, cut to ``max_train_words`` source
  words (Bahdanau et al. 2014's RNNsearch-30/50) and ``max_train_pairs`` pairs. Long
  pairs beyond the test quotas are used nowhere.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from pipeline.config.params import SplitConfig

logger = logging.getLogger(__name__)


class SplitError(ValueError):
    """The corpus is too small for the requested split."""


@dataclass
class Split:
    train: list[tuple[str, str]]
    dev: list[tuple[str, str]]
    test: list[tuple[str, str]]
    dropped_train_long: int
    dropped_train_cap: int

    def as_dict(self) -> dict[str, list[tuple[str, str]]]:
        return {"train": self.train, "dev": self.dev, "test": self.test}


def length_bucket(words: int, width: int, count: int) -> int:
    """Bucket index of a sentence of ``words`` words: 1..width -> 0, ..., last open."""
    return min((max(words, 1) - 1) // width, count - 1)


def bucket_label(index: int, width: int, count: int) -> str:
    low = index * width + 1
    return f"{low}+" if index == count - 1 else f"{low}-{low + width - 1}"


def beyond_cut(index: int, config: SplitConfig) -> bool:
    """True if every sentence of bucket ``index`` is longer than ``max_train_words``."""
    cut = config.max_train_words
    return cut is not None and index * config.bucket_width + 1 > cut


def _test_quotas(sizes: np.ndarray, config: SplitConfig) -> np.ndarray:
    beyond = np.array([beyond_cut(b, config) for b in range(len(sizes))], dtype=bool)
    available = np.where(beyond, sizes, sizes // 2)  # in range: half stays for train/dev
    floors = np.minimum(config.test_min_per_bucket, available)
    short = np.flatnonzero(floors < config.test_min_per_bucket)
    for index in short:
        logger.warning(
            "test bucket %s has only %d source sentences; it gets %d, not %d",
            bucket_label(index, config.bucket_width, config.num_buckets),
            sizes[index],
            floors[index],
            config.test_min_per_bucket,
        )
    rest = max(config.test_size - int(floors.sum()), 0)
    spare = available - floors
    share = np.floor(rest * sizes / max(sizes.sum(), 1)).astype(int)
    return floors + np.minimum(share, spare)


def split_pairs(pairs: list[tuple[str, str]], config: SplitConfig) -> Split:
    """Split ``pairs`` as described in the module docstring, reproducibly by seed."""
    rng = np.random.default_rng(config.seed)
    groups: dict[str, list[int]] = {}
    for index, (source, _) in enumerate(pairs):
        groups.setdefault(source, []).append(index)
    sources = list(groups)  # first-occurrence order: deterministic for a given input
    if len(sources) < config.dev_size + config.test_size + 1:
        raise SplitError(
            f"corpus has {len(sources)} distinct source sentences; fetch.split needs more"
            f" than dev_size + test_size = {config.dev_size + config.test_size}"
        )
    words = np.array([len(s.split()) for s in sources])
    buckets = np.array([length_bucket(w, config.bucket_width, config.num_buckets) for w in words])
    sizes = np.bincount(buckets, minlength=config.num_buckets)
    quotas = _test_quotas(sizes, config)
    test_groups = np.concatenate(
        [
            rng.choice(np.flatnonzero(buckets == b), size=quotas[b], replace=False)
            for b in range(config.num_buckets)
        ]
    )
    remaining = np.setdiff1d(np.arange(len(sources)), test_groups)
    long = 0
    if config.max_train_words is not None:  # dev and train: inside the training lengths
        inside = words[remaining] <= config.max_train_words
        long = sum(len(groups[sources[g]]) for g in remaining[~inside])
        remaining = remaining[inside]
    if len(remaining) < config.dev_size + 1:
        raise SplitError(
            f"fetch.split: {len(remaining)} source sentences of at most max_train_words = "
            f"{config.max_train_words} words are left after the test set; dev_size needs more"
        )
    dev_groups = rng.choice(remaining, size=min(config.dev_size, len(remaining) - 1), replace=False)
    train_groups = np.setdiff1d(remaining, dev_groups)

    def collect(group_ids: np.ndarray) -> list[tuple[str, str]]:
        return [pairs[i] for g in np.sort(group_ids) for i in groups[sources[g]]]

    train = collect(train_groups)
    capped = 0
    if config.max_train_pairs is not None and len(train) > config.max_train_pairs:
        keep = np.sort(rng.choice(len(train), size=config.max_train_pairs, replace=False))
        capped, train = len(train) - len(keep), [train[i] for i in keep]
    if not train:
        raise SplitError("fetch.split: the train split is empty after the length cut")
    return Split(train, collect(dev_groups), collect(test_groups), long, capped)
