"""Sample translations: a few test sentences per length bucket, every scorer's output
side by side with the source and the reference (short sentences and long ones)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline.artifacts import EvalFiles
from pipeline.data.pairs import read_tsv_pairs
from pipeline.report.data import StudyData
from pipeline.scorers import catalogue


@dataclass(frozen=True)
class Sample:
    """One test sentence with the reference and each shown variant's translation."""

    bucket: str  # its length bucket ("11-20")
    training_range: str  # the bucket's: "inside" the training lengths or "beyond"
    index: int  # its line in the test set
    source: str
    reference: str
    outputs: tuple[tuple[str, str, str], ...]  # (scorer, variant, translation)


def sample_translations(data: StudyData, per_bucket: int = 2, seed: int = 1) -> list[Sample]:
    """``per_bucket`` seeded test sentences of each length bucket with the outputs of
    the forward, lowest-seed variant of each scorer at the largest hidden size."""
    if data.raw_dir is None or not (data.raw_dir / "test.tsv").is_file():
        return []
    table = data.first_seeds
    if table.empty:
        return []
    size = table.hidden_size.max()
    systems = table[(table.hidden_size == size) & ~table.reverse_source].copy()
    systems["order"] = systems.scorer.map(catalogue.order_of)
    systems = systems.sort_values(["order", "variant"])
    outputs = {
        row.variant: EvalFiles(data.eval_dir / row.variant)
        .hypotheses.read_text(encoding="utf-8")
        .splitlines()
        for row in systems.itertuples()
    }
    pairs = read_tsv_pairs(data.raw_dir / "test.tsv")
    words = pd.Series([len(s.split()) for s, _ in pairs])
    buckets = list(dict.fromkeys(data.by_length.bucket))
    ranges = dict(zip(data.by_length.bucket, data.by_length.training_range))
    rng = np.random.default_rng(seed)
    samples = []
    for index, bucket in enumerate(buckets):
        low = index * _width(buckets) + 1
        high = np.inf if bucket.endswith("+") else low + _width(buckets) - 1
        members = np.flatnonzero(((words >= low) & (words <= high)).to_numpy())
        chosen = np.sort(rng.choice(members, min(per_bucket, len(members)), replace=False))
        for i in chosen:
            source, reference = pairs[i]
            shown = tuple(
                (row.scorer, row.variant, outputs[row.variant][i]) for row in systems.itertuples()
            )
            samples.append(Sample(bucket, ranges.get(bucket, ""), int(i), source, reference, shown))
    return samples


def _width(buckets: list[str]) -> int:
    first = buckets[0]
    return int(first.split("-")[1]) if "-" in first else 10
