"""The fetch stage's core: corpus source -> cleaned pairs -> train/dev/test TSV files.

Output (``data/raw/``), written atomically as a whole folder:

- ``{train,dev,test}.tsv``: UTF-8, one pair per line, ``source<TAB>target``, no header
  and no quoting (cleaning guarantees neither side holds a tab or newline).
- ``{dev,test}.groups``: each dev/test pair's group id, line by line
  (:mod:`pipeline.data.pairs`, :func:`~pipeline.data.pairs.read_groups`).
- ``corpus.json``: source description, cleaning counts, split sizes, source-length
  histogram per split, the sha256 of each split file, and ``near_duplicates``: per test
  length bucket, the share of test sources that have a training source with word-trigram
  Jaccard >= the threshold, for the split by source sentence without the near-duplicate
  filter (``before``), by chapter without the filter (``chapters_only``, where the split
  takes chapters and filters) and for the split written (``after``).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.config.params import FetchConfig, SplitConfig
from pipeline.data.cleaning import CleanResult, clean_pairs, normalize
from pipeline.data.inputs import check_inputs
from pipeline.data.pairs import groups_text, tsv_text
from pipeline.data.sources import CorpusError, RawCorpus, read_corpus
from pipeline.data.split import (
    Split,
    bucket_label,
    length_bucket,
    near_duplicate_shares,
    split_pairs,
)
from pipeline.io import atomic_dir, write_json

logger = logging.getLogger(__name__)


def length_summary(pairs: list[tuple[str, str]], config: FetchConfig) -> dict[str, Any]:
    split = config.split
    source_words = np.array([len(s.split()) for s, _ in pairs])
    target_words = np.array([len(t.split()) for _, t in pairs])
    buckets = np.bincount(
        [length_bucket(w, split.bucket_width, split.num_buckets) for w in source_words],
        minlength=split.num_buckets,
    )
    percentiles = (0, 5, 25, 50, 75, 95, 100)
    return {
        "pairs": len(pairs),
        "source_words": int(source_words.sum()),
        "target_words": int(target_words.sum()),
        "source_length_percentiles": {
            f"p{p}": float(np.percentile(source_words, p)) for p in percentiles
        },
        "source_length_buckets": {
            bucket_label(i, split.bucket_width, split.num_buckets): int(n)
            for i, n in enumerate(buckets)
        },
    }


def read_excluded(path: str | None) -> frozenset[str]:
    """The source sentences of ``fetch.split.exclude_from_test`` (one per line, ``#``
    lines and blank lines skipped), normalised as cleaning does; a missing file is a
    :class:`~pipeline.data.sources.CorpusError` naming the key."""
    if path is None:
        return frozenset()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorpusError(
            f"fetch.split.exclude_from_test: {path}: no such file (null: exclude nothing)"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise CorpusError(f"fetch.split.exclude_from_test: {path}: {err}") from None
    lines = (line.strip() for line in text.splitlines())
    return frozenset(normalize(line) for line in lines if line and not line.startswith("#"))


def clean_chapters(raw: RawCorpus, cleaned: CleanResult) -> list[str] | None:
    """The chapter of each cleaned pair, where the source has chapters: cleaning keeps the
    first occurrence of a pair, normalised, in order."""
    if raw.chapters is None:
        return None
    first: dict[tuple[str, str], str] = {}
    for (source, target), chapter in zip(raw.pairs, raw.chapters, strict=True):
        first.setdefault((normalize(source), normalize(target)), chapter)
    return [first[pair] for pair in cleaned.pairs]


NEAR_DUPLICATE_THRESHOLD = 0.5
"""The Jaccard similarity at which ``near_duplicates`` is measured when the filter is off."""


def near_duplicate_record(
    pairs: list[tuple[str, str]], chapters: list[str] | None, split: Split, config: SplitConfig
) -> dict[str, Any]:
    """The ``near_duplicates`` entry of corpus.json (see the module docstring)."""
    threshold = config.near_duplicate_jaccard or NEAR_DUPLICATE_THRESHOLD
    unfiltered = config.model_copy(update={"near_duplicate_jaccard": None})
    verse = split_pairs(pairs, unfiltered.model_copy(update={"group_by": "sentence"}), chapters)
    record: dict[str, Any] = {
        "threshold": threshold,
        "filter": config.near_duplicate_jaccard is not None,
        "group_by": split.group_by,
        "before": near_duplicate_shares(verse, config, threshold),
    }
    if split.group_by == "chapter" and config.near_duplicate_jaccard is not None:
        chapter_only = split_pairs(pairs, unfiltered, chapters)
        record["chapters_only"] = near_duplicate_shares(chapter_only, config, threshold)
    record["after"] = near_duplicate_shares(split, config, threshold)
    record["dropped_from_train"] = split.dropped_train_near_duplicate
    return record


def corpus_summary(raw, cleaned, split: Split, config: FetchConfig, hashes: dict) -> dict:
    return {
        "source": raw.description,
        "counts": {
            "read": len(raw.pairs) + raw.fixes.get("placeholder_verse", 0),
            "source_fixes": dict(sorted(raw.fixes.items())),
            "dropped": dict(sorted(cleaned.dropped.items())),
            "clean": len(cleaned.pairs),
            "train_dropped_over_max_words": split.dropped_train_long,
            "train_dropped_over_max_pairs": split.dropped_train_cap,
            "train_dropped_near_duplicate": split.dropped_train_near_duplicate,
            "held_out_chapters_unused": split.unused_held_out,
            "held_out_chapters_unused_inside_train_lengths": split.unused_held_out_inside,
            "test_excluded_decoded_before": split.excluded_from_test,
        },
        "group_by": split.group_by,
        "all_clean": length_summary(cleaned.pairs, config),
        "splits": {
            name: dict(length_summary(pairs, config), sha256=hashes[name])
            for name, pairs in split.as_dict().items()
        },
        "params": config.model_dump(),
    }


def fetch(config: FetchConfig, out_dir: str | Path, inputs: str | Path | None = None) -> dict:
    """Run the whole fetch stage into ``out_dir``; returns the corpus summary. With
    ``inputs`` (the inputs stage's record, :mod:`pipeline.data.inputs`), the corpus must
    still match it."""
    check_inputs(config, inputs)
    raw = read_corpus(config)
    logger.info("read %d pairs; source fixes: %s", len(raw.pairs), dict(raw.fixes))
    cleaned = clean_pairs(raw.pairs, config.clean)
    logger.info("kept %d clean pairs; dropped: %s", len(cleaned.pairs), dict(cleaned.dropped))
    chapters = clean_chapters(raw, cleaned)
    excluded = read_excluded(config.split.exclude_from_test)
    split = split_pairs(cleaned.pairs, config.split, chapters, excluded)
    if excluded:
        logger.info(
            "test holds none of the %d sentences of %s (%d of them in this corpus)",
            len(excluded),
            config.split.exclude_from_test,
            split.excluded_from_test,
        )
    logger.info(
        "split by %s: %d pairs of dev/test chapters unused (%d inside the training lengths),"
        " %d train pairs dropped as near duplicates of dev/test",
        split.group_by,
        split.unused_held_out,
        split.unused_held_out_inside,
        split.dropped_train_near_duplicate,
    )
    near = near_duplicate_record(cleaned.pairs, chapters, split, config.split)
    for key in ("before", "chapters_only", "after"):
        if key in near:
            shares = ", ".join(f"{b} {v:.1%}" for b, v in near[key].items())
            logger.info("test sources with a train near duplicate (%s): %s", key, shares)
    with atomic_dir(out_dir) as tmp:
        hashes = {}
        for name, pairs in split.as_dict().items():
            text = tsv_text(pairs)
            (tmp / f"{name}.tsv").write_text(text, encoding="utf-8")
            hashes[name] = hashlib.sha256(text.encode("utf-8")).hexdigest()
            logger.info("%s: %d pairs", name, len(pairs))
        (tmp / "dev.groups").write_text(groups_text(split.dev_groups), encoding="utf-8")
        (tmp / "test.groups").write_text(groups_text(split.test_groups), encoding="utf-8")
        summary = corpus_summary(raw, cleaned, split, config, hashes)
        summary["near_duplicates"] = near
        summary["exclude_from_test"] = {
            "path": config.split.exclude_from_test,
            "sentences": len(excluded),
            "in_corpus": split.excluded_from_test,
        }
        write_json(tmp / "corpus.json", summary)
    return summary
