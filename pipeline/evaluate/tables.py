"""The evaluate stage's tables and headline: the study table, the learning curves, BLEU
by length per configuration, ``eval/summary.json`` and DVC's ``metrics/`` files."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from pipeline.artifacts import (
    CURVES_PLOTS_FILE,
    METRICS_FILE,
    PLOTS_FILE,
    VARIANT_PLOTS_FILE,
    VariantFiles,
)
from pipeline.config.grid import COMPARED
from pipeline.config.params import Config, ModelConfig
from pipeline.evaluate.data import TestSet
from pipeline.evaluate.verdicts import StudyFindings
from pipeline.io import atomic_path, write_json
from pipeline.records.evaluation import EvaluationSummary, VariantMetrics
from pipeline.records.sweep import FAILED, FINISHED, SweepRecord, VariantRecord
from pipeline.study.findings import VERDICTS

CURVE_COLUMNS = ["variant", "scorer", "step", "dev_bleu", "dev_loss"]


def metric_name(bucket: str) -> str:
    """The MLflow metric of a length bucket's test BLEU (``test_bleu_len_1_10``)."""
    return "test_bleu_len_" + bucket.replace("+", "plus").replace("-", "_")


def eval_key(config: Config, evaluated: dict[str, VariantRecord], test_sha: str) -> str:
    """What an evaluation's numbers depend on: the evaluate params, the test set and the
    evaluated variants' config hashes (its MLflow runs' key; stable across reruns)."""
    payload = {
        "evaluate": config.evaluate.model_dump(),
        "buckets": [config.fetch.split.bucket_width, config.fetch.split.num_buckets],
        "max_decode_ratio": config.train.max_decode_ratio,
        "test": test_sha,
        "variants": {i: v.config_hash for i, v in sorted(evaluated.items())},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def learning_curves(models_dir: Path, variants) -> pd.DataFrame:
    """Every variant's ``history.csv`` (one row per dev evaluation), stacked with a
    ``variant`` column: the report's learning curves."""
    frames = []
    for variant_id in variants:
        path = VariantFiles(models_dir / variant_id).history
        if path.is_file():
            frames.append(pd.read_csv(path).assign(variant=variant_id))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["variant"])


def configurations(sweep: SweepRecord, variants) -> dict[str, str]:
    """Each variant's configuration: its values of the grid axes that vary, but the seed
    (``additive``, ``additive, reverse_source=True``); a variant without an axis (a
    ``train.grid.include`` entry) takes its config's value."""
    records = {i: sweep.variants[i] for i in variants}
    keys = sorted({k for v in records.values() for k in v.axes} - {"scorer", "seed"})
    varying = [k for k in keys if len({str(v.value(k)) for v in records.values()}) > 1]
    return {
        i: ", ".join([str(v.scorer)] + [f"{k}={v.value(k)}" for k in varying])
        for i, v in records.items()
    }


def setting(record: VariantRecord) -> str:
    """A configuration's settings but its scorer, short enough for a legend: source order
    and hidden size (``fwd h256``), then any other axis (``lr0.01``); the scorer is the
    plot's colour, the setting its dash."""
    parts = ["rev" if record.model.reverse_source else "fwd", f"h{record.model.hidden_size}"]
    extra = sorted(k for k in record.axes if k not in (*COMPARED, "seed"))
    return " ".join(parts + [f"{k}={record.axes[k]}" for k in extra])


def length_plot_table(metrics: dict[str, VariantMetrics], sweep: SweepRecord) -> pd.DataFrame:
    """BLEU per length bucket, the mean over seeds of each configuration: one line per
    configuration in ``dvc plots show``, coloured by scorer; with each bucket's test
    sentences, whether its lengths were inside the training lengths, and a 95% interval
    (``low``, ``high``): over the seeds (mean +- t * sd / sqrt(k)), or with one seed its
    bootstrap interval over the bucket's sentences (test sampling only)."""
    names = configurations(sweep, metrics)
    rows = [
        {
            "configuration": names[i],
            "setting": setting(sweep.variants[i]),
            "scorer": sweep.variants[i].scorer,
            "bucket": entry.bucket,
            "sentences": entry.sentences,
            "training_range": entry.training_range,
            "bleu": entry.bleu,
            "bleu_low": entry.bleu_low,
            "bleu_high": entry.bleu_high,
        }
        for i, result in metrics.items()
        for entry in result.by_length
    ]
    keys = ["configuration", "setting", "scorer", "bucket", "sentences", "training_range"]
    frame = pd.DataFrame(rows, columns=[*keys, "bleu", "bleu_low", "bleu_high"])
    out = frame.groupby(keys, sort=False).apply(_seed_interval, include_groups=False)
    out = out.reset_index().astype({"seeds": int})
    return out.round({"bleu": 2, "low": 2, "high": 2})


def _seed_interval(rows: pd.DataFrame) -> pd.Series:
    k, mean = len(rows), float(rows.bleu.mean())
    if k > 1:
        half = float(scipy_stats.t.ppf(0.975, k - 1) * rows.bleu.std(ddof=1) / np.sqrt(k))
        low, high = mean - half, mean + half
    else:
        low, high = float(rows.bleu_low.iloc[0]), float(rows.bleu_high.iloc[0])
    return pd.Series({"bleu": mean, "seeds": k, "low": low, "high": high})


def study_table(sweep: SweepRecord, summary: EvaluationSummary) -> pd.DataFrame:
    """One row per variant of the grid: axes, test scores, training summary."""
    rows = []
    for variant_id, record in sweep.variants.items():
        test = summary.variants.get(variant_id, {})
        trained = record.summary if record.finished else None
        rows.append(
            {
                "variant": variant_id,
                "status": FINISHED if test else FAILED,
                **{k: getattr(record.model, k) for k in COMPARED},
                **{k: v for k, v in record.axes.items() if k not in ModelConfig.model_fields},
                "bleu": test.get("bleu"),
                "bleu_low": test.get("bleu_low"),
                "bleu_high": test.get("bleu_high"),
                "chrf": test.get("chrf"),
                "train_precision": record.summary and record.summary.precision,
                "decode_precision": summary.decode_precision.get(variant_id),
                **(trained.mlflow_metrics() if trained else {}),
                **(trained.mlflow_tags() if trained else {}),
                "error": record.error or "",
            }
        )
    return pd.DataFrame(rows)


def verdict_counts(verdicts) -> dict[str, int]:
    """How many findings got each verdict, keyed in snake_case (``smaller_than_claimed``,
    ``claimed_direction_not_shown_to_reach_it``): every word of
    :data:`~pipeline.study.findings.VERDICTS` (0 when none got it, so ``dvc exp show``'s
    columns stay the same between experiments), then any other word found, so that no
    finding goes uncounted. All numeric."""
    verdicts = list(verdicts)
    words = dict.fromkeys([*VERDICTS, *verdicts])
    return {_snake(v): sum(x == v for x in verdicts) for v in words}


def _snake(word: object) -> str:
    """A verdict word as a metrics key: lower case, runs of other characters as ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", str(word).lower()).strip("_")


def headline(table: pd.DataFrame, study: StudyFindings) -> tuple[dict, dict]:
    """The study's answer, as numbers and as words.

    Numbers (``metrics/test.json``, what ``dvc metrics diff`` and ``dvc exp show``
    compare; all numeric, snake_case): the test BLEU of the one "best" scorer (chosen on
    dev) and each scorer's mean over seeds at the findings' configuration, inside the
    training lengths and on all of test; how many findings got each verdict; failed and
    capped variants. Words (``eval/summary.json``'s ``headline``): the best scorer's
    name, how it was chosen, and each finding's verdict per decoding."""

    def rounded(value: float) -> float | None:
        return None if pd.isna(value) else round(float(value), 2)

    ranking = study.ranking[study.main]
    by_scorer = ranking.set_index("scorer") if len(ranking) else pd.DataFrame()
    best = study.reference
    verdicts = {f.title: f.verdict for f in study.findings[study.main]}
    numbers: dict[str, Any] = {
        "best_bleu_inside": rounded(by_scorer.loc[best, "bleu_inside"]) if best else None,
        "best_bleu_all": rounded(by_scorer.loc[best, "bleu_all"]) if best else None,
        "bleu_inside": {s: rounded(r.bleu_inside) for s, r in by_scorer.iterrows()},
        "bleu_all": {s: rounded(r.bleu_all) for s, r in by_scorer.iterrows()},
        "findings": verdict_counts(verdicts.values()),
        "failed_variants": int((table.status != "finished").sum()),
        "capped_variants": len(study.excluded),  # stopped at the step cap: not confirmatory
    }
    words: dict[str, Any] = {
        "best_scorer": best,
        "best_chosen_on": "dev BLEU, mean over equal seeds",
        "verdicts": verdicts,
    }
    if len(study.findings) > 1:
        words["verdicts_greedy"] = {f.title: f.verdict for f in study.findings["greedy"]}
    return numbers, words


def evaluation_summary(
    metrics: dict[str, VariantMetrics], sweep: SweepRecord, test: TestSet, key: str
) -> EvaluationSummary:
    """``eval/summary.json`` before its headline: each variant's test numbers, the
    variants not evaluated, the signature, the attention examples, the precisions."""
    top = {
        variant_id: {
            "bleu": result.bleu,
            "bleu_low": result.bleu_low,
            "bleu_high": result.bleu_high,
            "chrf": result.chrf,
            **{metric_name(b.bucket)[5:]: b.bleu for b in result.by_length},
        }
        for variant_id, result in metrics.items()
    }
    return EvaluationSummary(
        eval_key=key,
        variants=top,
        failed_variants=sorted(i for i in sweep.variants if i not in metrics),
        signature=next(iter(metrics.values())).signature,
        attention_examples=test.examples.tolist(),
        decode_precision={i: r.precision for i, r in sorted(metrics.items())},
    )


def write_dvc_metrics(
    metrics_dir: Path,
    top: dict,
    metrics: dict[str, VariantMetrics],
    sweep: SweepRecord,
    curves: pd.DataFrame,
) -> None:
    """``metrics/``: the headline numbers (``test.json``) and the plots' tables: BLEU by
    length per configuration (seed means), test BLEU per variant, learning curves."""
    write_json(metrics_dir / METRICS_FILE, top)
    with atomic_path(metrics_dir / PLOTS_FILE) as path:
        length_plot_table(metrics, sweep).to_csv(path, index=False)
    with atomic_path(metrics_dir / VARIANT_PLOTS_FILE) as path:
        rows = [{"variant": i, "bleu": r.bleu} for i, r in metrics.items()]
        pd.DataFrame(rows, columns=["variant", "bleu"]).to_csv(path, index=False)
    scorer = {i: v.scorer for i, v in sweep.variants.items()}
    if len(curves):
        curves = curves.assign(scorer=curves.variant.map(scorer))
    with atomic_path(metrics_dir / CURVES_PLOTS_FILE) as path:
        curves.reindex(columns=CURVE_COLUMNS).to_csv(path, index=False)
