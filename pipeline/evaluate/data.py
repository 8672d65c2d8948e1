"""What the evaluate stage's jobs hand each other: its paths, the test set as scoring
sees it, the decodings, the scores, and the evaluation they add up to."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.config.params import Config
from pipeline.data.pairs import parse_tsv_pairs, read_groups
from pipeline.data.split import length_bucket
from pipeline.errors import StageError
from pipeline.evaluate.decode import DecodeResult
from pipeline.evaluate.metrics import Buckets
from pipeline.records.evaluation import VariantMetrics
from pipeline.records.sweep import SweepRecord, VariantRecord


def attention_example_indices(
    source_words: np.ndarray, per_bucket: int, width: int, count: int, seed: int
) -> np.ndarray:
    """A fixed, seeded choice of test sentences spread over the length buckets.

    ``per_bucket`` examples are drawn in total, round-robin over buckets from short to
    long, so every variant shows the same sentences.
    """
    rng = np.random.default_rng(seed)
    buckets = np.array([length_bucket(int(w), width, count) for w in source_words])
    pools = [list(rng.permutation(np.flatnonzero(buckets == b))) for b in range(count)]
    chosen: list[int] = []
    while len(chosen) < per_bucket and any(pools):
        for pool in pools:
            if pool and len(chosen) < per_bucket:
                chosen.append(int(pool.pop()))
    return np.array(sorted(chosen, key=lambda i: (source_words[i], i)), dtype=np.int64)


class EvaluationError(StageError):
    """Missing or unusable inputs of the evaluate stage."""


@dataclass(frozen=True)
class EvaluatePaths:
    """The evaluate stage's folders: what it reads (``tok``, ``raw``, ``models``) and
    writes (``out``: ``eval/``; ``metrics``: DVC's ``metrics/``)."""

    tok: Path
    raw: Path
    models: Path
    out: Path
    metrics: Path


@dataclass(frozen=True)
class TestSet:
    """The test split as the scoring sees it."""

    file: Path
    sha256: str
    references: list[str]
    source_words: np.ndarray  # words per source sentence
    buckets: Buckets
    examples: np.ndarray  # sentences whose attention is kept
    target_language: str | None
    clusters: list[str] | None = None  # a chapter per sentence (test.groups), if written


def load_test_set(config: Config, raw_dir: Path) -> TestSet:
    test_file = raw_dir / "test.tsv"
    if not test_file.is_file():
        raise EvaluationError(f"{test_file}: not found (run `dvc repro fetch`)")
    raw = test_file.read_bytes()  # read once: parsed and hashed
    pairs = parse_tsv_pairs(raw.decode("utf-8"))
    source_words = np.array([len(s.split()) for s, _ in pairs])
    split_cfg = config.fetch.split
    buckets = Buckets(split_cfg.bucket_width, split_cfg.num_buckets)
    examples = attention_example_indices(
        source_words,
        config.evaluate.attention_examples,
        buckets.width,
        buckets.count,
        config.evaluate.bootstrap_seed,
    )
    return TestSet(
        test_file,
        hashlib.sha256(raw).hexdigest(),
        [t for _, t in pairs],
        source_words,
        buckets,
        examples,
        _target_language(raw_dir),
        _clusters(raw_dir / "test.groups", len(pairs)),
    )


def _clusters(path: Path, sentences: int) -> list[str] | None:
    """The test sentences' cluster ids (one per line, e.g. ``book:chapter``), or None when
    the fetch stage wrote none; a file of the wrong length is an error."""
    if not path.exists():
        return None
    ids = read_groups(path)
    if len(ids) != sentences:
        raise EvaluationError(f"{path}: {len(ids)} cluster ids for {sentences} test sentences")
    return ids


def _target_language(raw_dir: Path) -> str | None:
    corpus = raw_dir / "corpus.json"
    if corpus.is_file():
        return json.loads(corpus.read_text()).get("source", {}).get("target_language")
    return None


@dataclass
class Decoded:
    """Every variant's decodings: the main one (beam, or greedy when the beam is 1) with
    its attention examples, and the greedy hypotheses beside a beam."""

    results: dict[str, DecodeResult]  # variant -> the main decoding
    greedy: dict[str, list[str]] | None = None  # variant -> greedy hypotheses (beside a beam)

    @property
    def main(self) -> str:
        return "greedy" if self.greedy is None else "beam"

    @property
    def hypotheses(self) -> dict[str, dict[str, list[str]]]:
        """Decoding -> variant -> hypotheses."""
        main = {i: r.hypotheses for i, r in self.results.items()}
        return {self.main: main} if self.greedy is None else {"beam": main, "greedy": self.greedy}


@dataclass
class Scores:
    main: str
    metrics: dict[str, VariantMetrics]  # variant -> eval/<variant>/metrics.json
    stats: dict[str, dict[str, np.ndarray]]  # decoding -> variant -> sentence statistics


@dataclass(frozen=True)
class Evaluation:
    """One evaluation, as the stage's last jobs (the DVC metrics, MLflow) see it."""

    config: Config
    paths: EvaluatePaths
    sweep: SweepRecord
    test: TestSet
    scores: Scores
    started: float  # the stage's start (epoch seconds)

    @property
    def evaluated(self) -> dict[str, VariantRecord]:
        return {i: self.sweep.variants[i] for i in self.scores.metrics}
