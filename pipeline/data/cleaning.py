"""Generic cleaning of sentence pairs, applied to every source.

Rules, in order, each counted: Unicode NFKC and whitespace normalisation (tabs and
newlines become spaces, so the TSV format stays sound); empty sides; sentences outside
``[min_words, max_words]``; word-length ratio target/source outside
``[min_length_ratio, max_length_ratio]`` (misaligned pairs); exact duplicate pairs.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from pipeline.config.params import CleanConfig

_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """NFKC, drop control characters, collapse every whitespace run to one space."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if c in "\t\n" or unicodedata.category(c) != "Cc")
    return _SPACE.sub(" ", text).strip()


def word_count(text: str) -> int:
    return len(text.split())


@dataclass
class CleanResult:
    pairs: list[tuple[str, str]]
    dropped: Counter


def clean_pairs(pairs: list[tuple[str, str]], config: CleanConfig) -> CleanResult:
    """Normalise and filter ``pairs``; ``dropped`` counts the pairs each rule removed."""
    dropped: Counter = Counter()
    seen: set[tuple[str, str]] = set()
    kept = []
    for raw_source, raw_target in pairs:
        source, target = normalize(raw_source), normalize(raw_target)
        rule = _rejection(source, target, config)
        if rule is None and (source, target) in seen:
            rule = "duplicate"
        if rule is not None:
            dropped[rule] += 1
            continue
        seen.add((source, target))
        kept.append((source, target))
    return CleanResult(kept, dropped)


def _rejection(source: str, target: str, config: CleanConfig) -> str | None:
    if not source or not target:
        return "empty"
    source_words, target_words = word_count(source), word_count(target)
    if min(source_words, target_words) < config.min_words:
        return "too_short"
    if max(source_words, target_words) > config.max_words:
        return "too_long"
    ratio = target_words / source_words
    if not config.min_length_ratio <= ratio <= config.max_length_ratio:
        return "length_ratio"
    return None
