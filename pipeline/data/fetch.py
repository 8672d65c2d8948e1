"""The fetch stage's core: corpus source -> cleaned pairs -> train/dev/test TSV files.

Output (``data/raw/``), written atomically as a whole folder:

- ``{train,dev,test}.tsv``: UTF-8, one pair per line, ``source<TAB>target``, no header
  and no quoting (cleaning guarantees neither side holds a tab or newline).
- ``corpus.json``: source description, cleaning counts, split sizes, source-length
  histogram per split and the sha256 of each split file.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.config.params import FetchConfig
from pipeline.data.cleaning import clean_pairs
from pipeline.data.inputs import check_inputs
from pipeline.data.pairs import tsv_text
from pipeline.data.sources import read_corpus
from pipeline.data.split import Split, bucket_label, length_bucket, split_pairs
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
        },
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
    split = split_pairs(cleaned.pairs, config.split)
    with atomic_dir(out_dir) as tmp:
        hashes = {}
        for name, pairs in split.as_dict().items():
            text = tsv_text(pairs)
            (tmp / f"{name}.tsv").write_text(text, encoding="utf-8")
            hashes[name] = hashlib.sha256(text.encode("utf-8")).hexdigest()
            logger.info("%s: %d pairs", name, len(pairs))
        summary = corpus_summary(raw, cleaned, split, config, hashes)
        write_json(tmp / "corpus.json", summary)
    return summary
