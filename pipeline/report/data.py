"""Collect what the report shows: one table row per variant, by-length curves, tests.

Failed variants stay in the table (status ``failed``, with their error) so a reader sees
what is missing instead of a silently smaller grid.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from pipeline.artifacts import COMPARISONS, FINDINGS, LEARNING_CURVES, RANKING, EvalFiles
from pipeline.records.base import RecordError, read_record
from pipeline.records.evaluation import EvaluationSummary, VariantMetrics
from pipeline.records.sweep import SweepRecord
from pipeline.scorers import catalogue
from pipeline.study.record import StudyRecord


class ReportInputError(RecordError):
    """A missing or malformed input of the report stage."""


def _read_json(path: Path) -> dict[str, Any]:
    return read_record(path, "dvc repro evaluate")


@dataclass(frozen=True)
class ReportPaths:
    """The report stage's folders: the project ``root`` (its git state, for the
    provenance), what it reads (``models``, ``eval``, ``raw``) and writes (``out``)."""

    root: Path
    models: Path
    eval: Path
    raw: Path
    out: Path


@dataclass
class StudyData:
    table: pd.DataFrame  # one row per variant of the grid
    by_length: pd.DataFrame  # variant x bucket
    comparisons: pd.DataFrame  # eval/comparisons.csv: every contrast, every decoding
    sweep: SweepRecord
    evaluation: EvaluationSummary
    corpus: dict[str, Any]
    eval_dir: Path
    curves: pd.DataFrame = None  # every dev evaluation of every variant (history rows)
    raw_dir: Path | None = None
    findings: StudyRecord | None = None  # eval/findings.json
    ranking: pd.DataFrame | None = None  # eval/ranking.csv, the main decoding's rows

    @property
    def main_decoding(self) -> str:
        return self.findings.main_decoding if self.findings is not None else "beam"

    @property
    def evaluated(self) -> pd.DataFrame:
        return self.table[self.table["evaluated"]]

    @property
    def first_seeds(self) -> pd.DataFrame:
        """Evaluated variants, one per configuration: the lowest seed (the attention
        heatmaps and sample translations show these; BLEU by length shows every seed's
        mean, :func:`length_means`)."""
        table = self.evaluated
        return table[table.seed == table.groupby("config").seed.transform("min")]


def load_study(models_dir: Path, eval_dir: Path, raw_dir: Path) -> StudyData:
    sweep = SweepRecord.load(models_dir)
    evaluation = EvaluationSummary.load(eval_dir)
    corpus = _read_json(raw_dir / "corpus.json") if (raw_dir / "corpus.json").is_file() else {}
    findings = StudyRecord.load(eval_dir / FINDINGS)
    comparisons = _read_csv(eval_dir / COMPARISONS)
    ranking = _read_csv(eval_dir / RANKING)
    if len(ranking):
        ranking = ranking[ranking.decoding == findings.main_decoding].reset_index(drop=True)
    rows, curves = [], []
    for row in sweep.table().to_dict("records"):
        variant_id = row["variant"]
        row["evaluated"] = False
        # the numerics each variant actually trained and decoded in (the provenance's)
        trained = sweep.variants[variant_id].summary
        row["train_precision"] = trained.precision if trained else None
        row["decode_precision"] = evaluation.decode_precision.get(variant_id)
        metrics_file = EvalFiles(eval_dir / variant_id).metrics
        if variant_id in evaluation.variants and metrics_file.is_file():
            metrics = VariantMetrics.load(metrics_file)
            row.update(_metric_columns(metrics), evaluated=True)
            curves += [{"variant": variant_id, **asdict(b)} for b in metrics.by_length]
        rows.append(row)
    table = pd.DataFrame(rows)
    for column in ("bleu", "bleu_low", "bleu_high", "chrf", "attention_entropy"):
        if column not in table:
            table[column] = np.nan
    by_length = pd.DataFrame(curves)
    if not by_length.empty:
        columns = ["variant", "scorer", "reverse_source", "hidden_size", "seed", "config"]
        by_length = by_length.merge(table[columns], on="variant")
    path = eval_dir / LEARNING_CURVES
    history = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=["variant"])
    return StudyData(
        table,
        by_length,
        comparisons,
        sweep,
        evaluation,
        corpus,
        eval_dir,
        history,
        raw_dir,
        findings,
        ranking,
    )


def _read_csv(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise ReportInputError(f"{path}: not found (run `dvc repro evaluate`)")
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def _metric_columns(metrics: VariantMetrics) -> dict[str, Any]:
    def present(value: float | None) -> float:
        return np.nan if value is None else value

    return {
        "bleu": metrics.bleu,
        "bleu_low": metrics.bleu_low,
        "bleu_high": metrics.bleu_high,
        "chrf": metrics.chrf,
        "attention_entropy": present(metrics.attention_entropy),
        "monotonicity_gap": present(metrics.attention_monotonicity_gap),
    }


LENGTH_KEYS = ["config", "scorer", "reverse_source", "hidden_size"]
"""A configuration of the BLEU-by-length figure: every setting but the seed."""


def length_means(by_length: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """BLEU per length bucket of each configuration: the mean over its seeds with an
    interval that covers the seeds (mean +- t * sd / sqrt(k), k - 1 degrees of freedom;
    the test sentences are the same for every seed). With one seed: that seed's bootstrap
    interval over test sentences (``interval`` says which). One row per configuration and
    bucket, buckets in their order, with the bucket's sentences and training range."""
    columns = [
        *LENGTH_KEYS,
        *("bucket", "sentences", "training_range", "seeds", "seed_list"),
        *("bleu", "low", "high", "interval"),
    ]
    if by_length.empty:
        return pd.DataFrame(columns=columns)
    buckets = list(dict.fromkeys(by_length["bucket"]))
    rows = []
    for keys, group in by_length.groupby([*LENGTH_KEYS, "bucket"], sort=False):
        scored = group[group["bleu"].notna()]
        k = len(scored)
        row = dict(zip([*LENGTH_KEYS, "bucket"], keys))
        row.update(
            sentences=group["sentences"].iloc[0] if "sentences" in group else np.nan,
            training_range=group["training_range"].iloc[0]
            if "training_range" in group
            else "inside",
            seeds=k,
            seed_list=sorted(int(s) for s in scored["seed"]),
            bleu=float(scored["bleu"].mean()) if k else np.nan,
        )
        if k >= 2:
            half = stats.t.ppf(0.5 + level / 2, k - 1) * scored["bleu"].std(ddof=1) / np.sqrt(k)
            row.update(low=row["bleu"] - half, high=row["bleu"] + half, interval="seeds")
        elif k == 1:
            one = scored.iloc[0]
            low, high = one.get("bleu_low", np.nan), one.get("bleu_high", np.nan)
            row.update(low=low, high=high, interval="test sentences")
        else:
            row.update(low=np.nan, high=np.nan, interval="none")
        rows.append(row)
    out = pd.DataFrame(rows, columns=columns)
    order = {
        "_scorer": out["scorer"].map(catalogue.order_of),
        "_bucket": out["bucket"].map(buckets.index),
    }
    out = out.assign(**order).sort_values(
        ["hidden_size", "reverse_source", "_scorer", "config", "_bucket"], kind="stable"
    )
    return out.drop(columns=list(order)).reset_index(drop=True)
