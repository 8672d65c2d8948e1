"""Score the decodings: sacreBLEU per variant (overall and per length bucket, with
bootstrap intervals), the per-sentence statistics of every decoding, and each variant's
``eval/<variant>/`` files."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from pipeline.artifacts import GREEDY_HYPOTHESES, SENTENCE_STATS, EvalFiles
from pipeline.config.params import Config
from pipeline.evaluate.data import Decoded, Scores, TestSet
from pipeline.evaluate.decode import write_hypotheses
from pipeline.evaluate.metrics import Scorer, score_system
from pipeline.io import atomic_path
from pipeline.records.evaluation import VariantMetrics
from pipeline.study.statistics import sentence_stats


def score(config: Config, test: TestSet, decoded: Decoded) -> Scores:
    """sacreBLEU per variant (overall and per length bucket, with bootstrap intervals)
    and the per-sentence statistics of every decoding, for the findings."""
    scorer = Scorer(test.target_language, seed=config.evaluate.bootstrap_seed)
    decodings = decoded.hypotheses
    metrics, stats = {}, {name: {} for name in decodings}
    for variant_id in tqdm(decoded.results, desc="score test", unit="variant"):
        for name, hypotheses in decodings.items():
            stats[name][variant_id] = sentence_stats(
                hypotheses[variant_id], test.references, scorer.target_language
            )
        result = score_system(
            scorer,
            decoded.results[variant_id].hypotheses,
            test.references,
            test.source_words,
            test.buckets,
            config.evaluate.bootstrap_samples,
            config.fetch.split.max_train_words,
        )
        result.update(decoded.results[variant_id].stats, beam_size=config.evaluate.beam_size)
        metrics[variant_id] = VariantMetrics.from_json(result, f"metrics of {variant_id}")
    return Scores(decoded.main, metrics, stats)


def write_variants(out: Path, decoded: Decoded, scores: Scores) -> None:
    """``<out>/<variant>/``: hypotheses, attention examples, metrics, by-length table and
    sentence statistics."""
    for variant_id, result in decoded.results.items():
        result.write(out / variant_id)
        files = EvalFiles(out / variant_id)
        if decoded.greedy is not None:
            write_hypotheses(files.folder / GREEDY_HYPOTHESES, decoded.greedy[variant_id])
        with atomic_path(files.folder / SENTENCE_STATS) as path, open(path, "wb") as handle:
            np.savez_compressed(handle, **{n: s[variant_id] for n, s in scores.stats.items()})
        metrics = scores.metrics[variant_id]
        metrics.write(files.metrics)
        by_length = pd.DataFrame([asdict(bucket) for bucket in metrics.by_length])
        by_length.to_csv(files.by_length, index=False)
