"""The evaluate stage's statistics: from the sweep and each decoding's sentence statistics
to the findings, the exploratory comparisons and the scorer ranking
(:mod:`pipeline.study.findings`, :mod:`pipeline.study.statistics`), written to ``eval/``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.artifacts import COMPARISONS, FINDINGS, RANKING
from pipeline.config.grid import COMPARED
from pipeline.config.params import Config
from pipeline.evaluate.data import Scores, TestSet
from pipeline.evaluate.metrics import Buckets
from pipeline.io import atomic_path
from pipeline.records.sweep import VariantRecord, variant_table
from pipeline.study.declarations import PILOT, paper_baseline_ratio
from pipeline.study.design import DesignCheck, DesignLock, check
from pipeline.study.findings import (
    Finding,
    Grid,
    baseline_ratio,
    choose_reference,
    comparisons_table,
    exploratory,
    judge,
    measured_gates,
    ranking,
)
from pipeline.study.record import BaselineRatio, Family, StudyRecord, finite
from pipeline.study.statistics import ALPHA, ContrastEstimator, Resampler

BOOTSTRAP_CLUSTERED = (
    "chapters within length buckets (a chapter's sentences of one bucket together)"
)


@dataclass
class StudyFindings:
    main: str  # the decoding the headline numbers use: beam (or greedy when beam_size is 1)
    reference: str | None
    reference_dev_bleu: dict[str, float]
    findings: dict[str, list[Finding]]  # decoding -> findings
    comparisons: pd.DataFrame
    ranking: dict[str, pd.DataFrame]
    excluded: list[str]  # variants kept out of confirmatory tests (stopped at the step cap)
    baseline_ratio: float | None = None  # none's BLEU over additive's, inside the lengths
    clustered: bool = False  # the bootstrap drew chapters (within length buckets)
    train_cut: int | None = 30  # fetch.split.max_train_words
    design: DesignCheck | None = None  # the design lock against the design declared now

    def decoding_dependent(self) -> list[str]:
        """Findings whose verdict differs between the decodings."""
        if len(self.findings) < 2:
            return []
        verdicts = [{f.title: f.verdict for f in fs} for fs in self.findings.values()]
        return [t for t in verdicts[0] if len({v.get(t) for v in verdicts}) > 1]

    def family(self) -> Family:
        """The primary family: its size (confirmatory findings only), the level of each
        interval in it, and the exploratory findings' primary parts and their level."""
        findings = next(iter(self.findings.values()), [])
        size = sum(1 for f in findings for p in f.parts if p.primary and f.confirmatory)
        left = sum(1 for f in findings for p in f.parts if p.primary and not f.confirmatory)
        level = 1 - ALPHA / max(size + left, 1) if left else None
        return Family(size, "Bonferroni", ALPHA, 1 - ALPHA / max(size, 1), left, level)

    def record(self) -> StudyRecord:
        """``eval/findings.json`` (:class:`~pipeline.study.record.StudyRecord`)."""
        return StudyRecord(
            main_decoding=self.main,
            reference=self.reference,
            reference_chosen_on="mean best dev BLEU over the seeds every candidate has",
            reference_dev_bleu=self.reference_dev_bleu,
            excluded_from_confirmatory=tuple(self.excluded),
            family=self.family(),
            power_from=PILOT.source,
            bootstrap=BOOTSTRAP_CLUSTERED if self.clustered else "sentences within length strata",
            baseline_ratio=BaselineRatio(
                finite(self.baseline_ratio),
                paper_baseline_ratio(self.train_cut),
                "none's test BLEU over additive's inside the training lengths; the paper's "
                "RNNencdec-30 over RNNsearch-30 (Table 1)",
            ),
            decoding_dependent=tuple(self.decoding_dependent()),
            findings={d: tuple(f.record() for f in fs) for d, fs in self.findings.items()},
            gates={
                d: tuple(g.record() for g in measured_gates(fs)) for d, fs in self.findings.items()
            },
            design_lock=None if self.design is None else self.design.record(),
        )

    def write(self, folder: Path) -> None:
        self.record().write(folder / FINDINGS)
        with atomic_path(folder / COMPARISONS) as path:
            self.comparisons.to_csv(path, index=False)
        frames = [t.assign(decoding=d) for d, t in self.ranking.items() if len(t)]
        with atomic_path(folder / RANKING) as path:
            (pd.concat(frames) if frames else pd.DataFrame()).to_csv(path, index=False)


VARIANT_COLUMNS = ["variant", *COMPARED, "seed", "plateaued", "best_dev_bleu", "rest"]
"""What the findings' :class:`~pipeline.study.findings.Grid` reads of each variant."""


def subsets(source_words: np.ndarray, buckets: Buckets, max_train_words: int | None):
    """Sentence subsets by name (``all``, ``inside`` the training lengths, ``beyond``
    them, each bucket), the bucket index of each sentence (the bootstrap's strata), and
    the buckets inside."""
    index = np.array([buckets.index(int(w)) for w in source_words])
    named = {"all": np.arange(len(source_words))}
    cut = max_train_words if max_train_words is not None else np.inf
    named["inside"] = np.flatnonzero(source_words <= cut)
    named["beyond"] = np.flatnonzero(source_words > cut)
    inside = []
    for i in range(buckets.count):
        rows = np.flatnonzero(index == i)
        named[buckets.label(i)] = rows
        if len(rows) and buckets.training_range(i, max_train_words) == "inside":
            inside.append(buckets.label(i))
    return named, index, inside


def study_findings(
    config: Config,
    variants: dict[str, VariantRecord],
    test: TestSet,
    scores: Scores,
    lock: DesignLock | None = None,
) -> StudyFindings:
    """Findings, exploratory comparisons and ranking for each decoding of ``scores``
    over the evaluated ``variants``. The test set's clusters (a chapter per sentence,
    when the corpus has them) make the bootstrap draw whole chapters. ``lock``: the
    design locked when training started (``models/design.json``); without one every
    finding is exploratory, and so is each whose declaration differs from the lock's
    (:func:`pipeline.study.design.check`)."""
    design = check(lock, config)
    stats, main, clusters = scores.stats, scores.main, test.clusters
    source_words, buckets = test.source_words, test.buckets
    table = variant_table(variants.values())[VARIANT_COLUMNS]
    grid = Grid(table)
    reference, dev_means = choose_reference(grid)
    named, strata, _ = subsets(source_words, buckets, config.fetch.split.max_train_words)
    available = {name for name, rows in named.items() if len(rows)}
    resampler = Resampler(
        strata, config.evaluate.bootstrap_samples, config.evaluate.bootstrap_seed, clusters
    )
    findings, frames, ranked, ratio = {}, [], {}, None
    for decoding, by_variant in stats.items():
        estimator = ContrastEstimator(
            by_variant, named, resampler, configurations=grid.configurations()
        )
        findings[decoding] = judge(
            estimator,
            grid,
            available,
            comparisons=config.evaluate.comparisons,
            train_cut=config.fetch.split.max_train_words,
            design_status=design.status,
            exploratory=config.evaluate.exploratory,
        )
        if decoding == main:
            ratio = baseline_ratio(estimator, grid)
        explore = exploratory(estimator, grid, reference)
        frames.append(comparisons_table(findings[decoding], explore).assign(decoding=decoding))
        ranked[decoding] = ranking(estimator, grid, reference)
    excluded = sorted(table[~table.plateaued].variant)
    comparisons = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return StudyFindings(
        main,
        reference,
        dev_means,
        findings,
        comparisons,
        ranked,
        excluded,
        ratio,
        clusters is not None,
        config.fetch.split.max_train_words,
        design,
    )
