"""The evaluate stage's core: decode the test set with every trained variant and score it.

Outputs (``eval/``, swapped in whole when everything succeeded):

- ``<variant>/``: ``hypotheses.txt``, ``metrics.json`` (BLEU with 95% bootstrap
  interval, chrF, sacreBLEU signature, BLEU per length bucket, attention statistics),
  ``by_length.csv``, ``attention.npz`` + ``attention.json`` (example matrices in
  original source order, with their subword pieces).
- ``summary.json``: every variant's headline numbers, failed variants, the sacreBLEU
  signature and the attention example ids; ``significance.csv``: paired bootstrap of
  each scorer vs ``none`` and each reversed variant vs its forward twin.

And for DVC (``metrics_dir``, default ``metrics/``): ``test.json``, the headline numbers
(``dvc metrics show``/``diff``), and ``bleu_by_length.csv``, the long table variant x
bucket (``dvc plots show``, template ``.dvc/plots/bleu_by_length.json``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.artifacts import (
    EVAL_SUMMARY,
    METRICS_FILE,
    PLOTS_FILE,
    SIGNIFICANCE,
    SWEEP_FILE,
    EvalFiles,
    VariantFiles,
)
from pipeline.cluster import TaskResources, init_ray, run_tasks
from pipeline.config import Config
from pipeline.data.fetch import read_tsv_pairs
from pipeline.data.tokenized import TokenizedData
from pipeline.decoding import DecodeSpec, attention_example_indices, decode_variant
from pipeline.evaluation import Buckets, Scorer, paired_bootstrap, score_system
from pipeline.io import atomic_dir, atomic_path, write_json, write_text
from pipeline.tracking import Tracker

logger = logging.getLogger(__name__)


class EvaluationError(ValueError):
    """Missing or unusable inputs of the evaluate stage."""


def load_sweep(models_dir: Path) -> dict[str, Any]:
    path = models_dir / SWEEP_FILE
    if not path.is_file():
        raise EvaluationError(f"{path}: not found (run `dvc repro train`)")
    return json.loads(path.read_text())


def _comparisons(variants: dict[str, dict]) -> list[tuple[str, str, str]]:
    """(kind, variant, baseline): scorer vs ``none`` and reversed vs forward twins."""

    def key(axes: dict, drop: str) -> str:
        return json.dumps({k: v for k, v in axes.items() if k != drop}, sort_keys=True)

    by_scorer_key = {
        (key(v["axes"], "scorer"), v["model"]["scorer"]): i for i, v in variants.items()
    }
    by_rev_key = {
        (key(v["axes"], "reverse_source"), v["model"]["reverse_source"]): i
        for i, v in variants.items()
    }
    pairs = []
    for variant_id, info in variants.items():
        model = info["model"]
        if model["scorer"] != "none":
            base = by_scorer_key.get((key(info["axes"], "scorer"), "none"))
            if base:
                pairs.append(("vs_none", variant_id, base))
        if model["reverse_source"]:
            base = by_rev_key.get((key(info["axes"], "reverse_source"), False))
            if base:
                pairs.append(("reversed_vs_forward", variant_id, base))
    return pairs


def _metric_name(bucket: str) -> str:
    return "test_bleu_len_" + bucket.replace("+", "plus").replace("-", "_")


def evaluate(
    config: Config,
    root: Path,
    tok_dir: Path,
    raw_dir: Path,
    models_dir: Path,
    out_dir: Path,
    metrics_dir: Path,
) -> dict[str, Any]:
    """Run the whole evaluate stage; returns the top-level metrics."""
    sweep = load_sweep(models_dir)
    trained = {i: v for i, v in sweep["variants"].items() if v["status"] in ("finished", "cached")}
    if not trained:
        raise EvaluationError(f"{models_dir / SWEEP_FILE}: no trained variant to evaluate")
    pairs = read_tsv_pairs(raw_dir / "test.tsv")
    references = [t for _, t in pairs]
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
    data = TokenizedData.load(tok_dir)
    resources = TaskResources.from_config(config.train.ray)
    specs = {
        variant_id: DecodeSpec(
            variant_id,
            _checkpoint_bytes(models_dir / variant_id),
            "test",
            config.evaluate,
            config.train.max_decode_ratio,
            tuple(int(i) for i in examples),
            resources,
        )
        for variant_id in trained
    }
    init_ray(config.train.ray)
    decoded = run_tasks(decode_variant, specs, resources, "decode test", (data,))
    with atomic_dir(out_dir) as tmp:
        for variant_id, result in decoded.items():
            result.write(tmp / variant_id)
        scorer = Scorer(target_language=_target_language(raw_dir))
        metrics, statistics = {}, {}
        for variant_id in trained:
            hypotheses = decoded[variant_id].hypotheses
            result = score_system(
                scorer,
                hypotheses,
                references,
                source_words,
                buckets,
                config.evaluate.bootstrap_samples,
                config.evaluate.bootstrap_seed,
            )
            result.update(decoded[variant_id].stats)
            result["beam_size"] = config.evaluate.beam_size
            files = EvalFiles(tmp / variant_id)
            write_json(files.metrics, result)
            pd.DataFrame(result["by_length"]).to_csv(files.by_length, index=False)
            metrics[variant_id] = result
            statistics[variant_id] = scorer.statistics(hypotheses, references)
        significance = _significance(scorer, trained, statistics, config)
        significance.to_csv(tmp / SIGNIFICANCE, index=False)
        summary = _summary(tmp, metrics, sweep, examples)
    write_json(metrics_dir / METRICS_FILE, summary["variants"])
    rows = [{"variant": i, **entry} for i, r in metrics.items() for entry in r["by_length"]]
    with atomic_path(metrics_dir / PLOTS_FILE) as path:
        pd.DataFrame(rows).to_csv(path, index=False)
    _log_to_mlflow(config, root, sweep, metrics, out_dir)
    return summary


def _checkpoint_bytes(folder: Path) -> bytes:
    path = VariantFiles(folder).checkpoint
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise EvaluationError(f"{path}: not found (run `dvc repro train`)") from None


def _target_language(raw_dir: Path) -> str | None:
    corpus = raw_dir / "corpus.json"
    if corpus.is_file():
        return json.loads(corpus.read_text()).get("source", {}).get("target_language")
    return None


def _significance(scorer, trained, statistics, config) -> pd.DataFrame:
    rows = []
    for kind, variant_id, baseline in _comparisons(trained):
        result = paired_bootstrap(
            scorer,
            statistics[variant_id],
            statistics[baseline],
            config.evaluate.bootstrap_samples,
            config.evaluate.bootstrap_seed,
        )
        rows.append({"comparison": kind, "variant": variant_id, "baseline": baseline, **result})
    columns = ["comparison", "variant", "baseline", "delta", "delta_low", "delta_high", "p_value"]
    return pd.DataFrame(rows, columns=columns)


def _summary(tmp: Path, metrics: dict, sweep: dict, examples: np.ndarray) -> dict:
    top = {
        variant_id: {
            "bleu": result["bleu"],
            "bleu_low": result["bleu_low"],
            "bleu_high": result["bleu_high"],
            "chrf": result["chrf"],
            **{_metric_name(b["bucket"])[5:]: b["bleu"] for b in result["by_length"]},
        }
        for variant_id, result in metrics.items()
    }
    failed = sorted(i for i, v in sweep["variants"].items() if i not in metrics)
    summary = {
        "variants": top,
        "failed_variants": failed,
        "signature": next(iter(metrics.values()))["signature"],
        "attention_examples": examples.tolist(),
    }
    write_json(tmp / EVAL_SUMMARY, summary)
    write_text(tmp / "README.txt", "Generated by `dvc repro evaluate`; see pipeline/evaluate.py.\n")
    return summary


def _log_to_mlflow(config: Config, root: Path, sweep: dict, metrics: dict, out_dir: Path) -> None:
    """Add test metrics and the by-length table to each variant's existing child run."""
    tracker = Tracker(config.tracking, root)
    for variant_id, result in metrics.items():
        run_id = sweep["variants"][variant_id].get("run_id")
        if not run_id:
            continue
        values = {"test_bleu": result["bleu"], "test_chrf": result["chrf"]}
        values.update({_metric_name(b["bucket"]): b["bleu"] for b in result["by_length"]})
        tracker.log_metrics(run_id, values, step=0)
        tracker.set_tags(run_id, {"sacrebleu_signature": result["signature"]})
        files = EvalFiles(out_dir / variant_id)
        tracker.log_artifacts(run_id, [files.metrics, files.by_length], "test")
