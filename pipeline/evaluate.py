"""The evaluate stage's core: decode the test set with every trained variant and score it.

Outputs (``eval/``, swapped in whole when everything succeeded):

- ``<variant>/``: ``hypotheses.txt``, ``metrics.json`` (BLEU with 95% bootstrap
  interval, chrF, sacreBLEU signature, BLEU per length bucket, attention statistics),
  ``by_length.csv``, ``attention.npz`` + ``attention.json`` (example matrices in
  original source order, with their subword pieces).
- ``summary.json``: every variant's headline numbers, failed variants, the sacreBLEU
  signature and the attention example ids; ``significance.csv``: sacreBLEU's paired
  tests of twins (vs ``none``, reversed vs forward, vs the best scorer, additive vs
  general) with Holm-adjusted p; ``learning_curves.csv``: every variant's history.

And for DVC (``metrics_dir``, default ``metrics/``): ``test.json``, a dozen headline
numbers (best test BLEU per scorer, mean paired gains; the columns of ``dvc exp show``);
``bleu_by_length.csv``, the long table variant x bucket, and ``test_bleu.csv``, one row
per variant (``dvc plots show``/``diff``).

MLflow (:mod:`pipeline.tracking`): an ``evaluation`` run keyed by ``eval_key`` (the hash
of the evaluate params, the test set and the evaluated variants' config hashes, also in
``eval/summary.json``) with one ``test`` child per variant holding its test scores next
to its training summary, tagged with the DVC experiment.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from pipeline.artifacts import (
    EVAL_SUMMARY,
    LEARNING_CURVES,
    METRICS_FILE,
    PLOTS_FILE,
    SIGNIFICANCE,
    STUDY_TABLE,
    SWEEP_FILE,
    VARIANT_PLOTS_FILE,
    EvalFiles,
    VariantFiles,
)
from pipeline.cluster import TaskResources, init_ray, run_tasks
from pipeline.config import Config
from pipeline.data.fetch import read_tsv_pairs
from pipeline.data.tokenized import TokenizedData
from pipeline.decoding import DecodeSpec, attention_example_indices, decode_variant
from pipeline.evaluation import Buckets, Scorer, holm, score_system
from pipeline.infra import Infra
from pipeline.io import atomic_dir, atomic_path, write_json, write_text
from pipeline.tracking import Tracker, experiment_key, training_summary
from pipeline.twins import twins

logger = logging.getLogger(__name__)


TEST_RUN_SUMMARY = ("best_dev_bleu", "best_epoch", "epochs", "still_improving")
"""The training summary repeated on each ``test`` run, beside its test scores: enough to
say which variant is best and whether it had converged (the rest is on its training
run, ``training_run_id``). In name order they head MLflow's compare table."""


class EvaluationError(ValueError):
    """Missing or unusable inputs of the evaluate stage."""


def load_sweep(models_dir: Path) -> dict[str, Any]:
    path = models_dir / SWEEP_FILE
    if not path.is_file():
        raise EvaluationError(f"{path}: not found (run `dvc repro train`)")
    return json.loads(path.read_text())


def _comparisons(trained: dict[str, dict], bleu: dict[str, float]) -> list[tuple[str, str, str]]:
    """(kind, variant, baseline) pairs of twins (:mod:`pipeline.twins`): each scorer vs
    its ``none`` twin, reversed vs forward, each other attention scorer vs the best
    scorer's twin (the ranking), and additive vs general (Britz et al. 2017)."""
    pairs = [("vs_none", v, b) for v, b in twins(trained, "scorer", "none")]
    pairs += [("reversed_vs_forward", v, b) for v, b in twins(trained, "reverse_source", False)]
    best = best_scorer(trained, bleu)
    duel = {"additive", "general"}
    if best is not None:
        others = lambda s: s != "none" and not ({s, best} == duel)  # noqa: E731
        pairs += [("vs_best", v, b) for v, b in twins(trained, "scorer", best, others)]
    pairs += [
        ("additive_vs_general", v, b) for v, b in twins(trained, "scorer", "general", "additive")
    ]
    return pairs


def best_scorer(trained: dict[str, dict], bleu: dict[str, float]) -> str | None:
    """The attention scorer with the highest mean test BLEU over its variants."""
    means = (
        pd.DataFrame(
            [{"scorer": trained[i]["model"]["scorer"], "bleu": b} for i, b in bleu.items()]
        )
        .query("scorer != 'none'")
        .groupby("scorer")
        .bleu.mean()
    )
    return None if means.empty else str(means.idxmax())


def _metric_name(bucket: str) -> str:
    return "test_bleu_len_" + bucket.replace("+", "plus").replace("-", "_")


def evaluate(
    config: Config,
    infra: Infra,
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
    tracker = Tracker(infra)  # a store that cannot be used fails before decoding
    test_file = raw_dir / "test.tsv"
    pairs = read_tsv_pairs(test_file)
    test_sha = hashlib.sha256(test_file.read_bytes()).hexdigest()
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
    resources = TaskResources.from_config(infra.ray)
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
    init_ray(infra.ray)
    decoded = run_tasks(decode_variant, specs, resources, "decode test", (data,))
    with atomic_dir(out_dir) as tmp:
        for variant_id, result in decoded.items():
            result.write(tmp / variant_id)
        scorer = Scorer(_target_language(raw_dir), seed=config.evaluate.bootstrap_seed)
        metrics = {}
        for variant_id in tqdm(trained, desc="score test", unit="variant"):
            hypotheses = decoded[variant_id].hypotheses
            result = score_system(
                scorer,
                hypotheses,
                references,
                source_words,
                buckets,
                config.evaluate.bootstrap_samples,
                split_cfg.max_train_words,
            )
            result.update(decoded[variant_id].stats)
            result["beam_size"] = config.evaluate.beam_size
            files = EvalFiles(tmp / variant_id)
            write_json(files.metrics, result)
            pd.DataFrame(result["by_length"]).to_csv(files.by_length, index=False)
            metrics[variant_id] = result
        hypotheses = {i: decoded[i].hypotheses for i in trained}
        bleu = {i: m["bleu"] for i, m in metrics.items()}
        significance = _significance(scorer, trained, hypotheses, references, bleu, config)
        significance.to_csv(tmp / SIGNIFICANCE, index=False)
        learning_curves(models_dir, trained).to_csv(tmp / LEARNING_CURVES, index=False)
        key = eval_key(config, trained, test_sha)
        summary = _summary(tmp, metrics, sweep, examples, key)
        table = study_table(sweep, summary)
        table.to_csv(tmp / STUDY_TABLE, index=False)
    write_json(metrics_dir / METRICS_FILE, headline(table, significance))
    rows = [{"variant": i, **entry} for i, r in metrics.items() for entry in r["by_length"]]
    with atomic_path(metrics_dir / PLOTS_FILE) as path:
        pd.DataFrame(rows).to_csv(path, index=False)
    with atomic_path(metrics_dir / VARIANT_PLOTS_FILE) as path:
        table[table.status == "finished"][["variant", "bleu"]].to_csv(path, index=False)
    try:  # the outputs are written: tracking trouble is a warning, not a failed stage
        _log_to_mlflow(tracker, config, sweep, metrics, out_dir, (test_file, test_sha), key)
    except Exception as err:
        logger.warning("MLflow logging of the evaluation incomplete: %s: %s",
                       type(err).__name__, err)  # fmt: skip
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


def _significance(scorer, trained, hypotheses, references, bleu, config) -> pd.DataFrame:
    """Every comparison of :func:`_comparisons` with sacreBLEU's paired approximate
    randomization and paired bootstrap tests, and Holm-adjusted AR p-values over all of
    them (the family is every comparison the study reports)."""
    pairs = _comparisons(trained, bleu)
    by_baseline: dict[str, list[str]] = {}
    for _, variant_id, baseline in pairs:
        by_baseline.setdefault(baseline, []).append(variant_id)
    results: dict[tuple[str, str], dict[str, float]] = {}
    for baseline, variants in tqdm(by_baseline.items(), desc="paired tests", unit="baseline"):
        systems = {v: hypotheses[v] for v in dict.fromkeys(variants)}
        same = {v for v, h in systems.items() if h == hypotheses[baseline]}
        tested = scorer.paired_tests(
            references,
            (baseline, hypotheses[baseline]),
            {v: h for v, h in systems.items() if v not in same},
            ar_trials=config.evaluate.ar_trials,
            bootstrap_samples=config.evaluate.bootstrap_samples,
        )
        for variant_id in same:  # sacreBLEU's tests give p ~ 0 for identical outputs
            tested[variant_id] = {"bleu": bleu[variant_id], "baseline_bleu": bleu[baseline],
                                  "delta": 0.0, "p_ar": 1.0, "p_bs": 1.0}  # fmt: skip
        results.update({(v, baseline): r for v, r in tested.items()})
    rows = [
        {"comparison": kind, "variant": v, "baseline": b, **results[(v, b)]} for kind, v, b in pairs
    ]
    columns = ["comparison", "variant", "baseline", "bleu", "baseline_bleu", "delta",
               "p_ar", "p_bs", "p_holm"]  # fmt: skip
    table = pd.DataFrame(rows, columns=columns[:-1])
    table["p_holm"] = holm(table.p_ar.tolist())
    return table


def learning_curves(models_dir: Path, trained: dict[str, dict]) -> pd.DataFrame:
    """Every trained variant's ``history.csv`` (one row per dev evaluation), stacked with
    a ``variant`` column: the report's learning curves."""
    frames = []
    for variant_id in trained:
        path = VariantFiles(models_dir / variant_id).history
        if path.is_file():
            frames.append(pd.read_csv(path).assign(variant=variant_id))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["variant"])


def eval_key(config: Config, trained: dict[str, dict], test_sha: str) -> str:
    """What an evaluation's numbers depend on: the evaluate params, the test set and the
    evaluated variants' config hashes (its MLflow runs' key; stable across reruns)."""
    payload = {
        "evaluate": config.evaluate.model_dump(),
        "buckets": [config.fetch.split.bucket_width, config.fetch.split.num_buckets],
        "max_decode_ratio": config.train.max_decode_ratio,
        "test": test_sha,
        "variants": {i: v["config_hash"] for i, v in sorted(trained.items())},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def study_table(sweep: dict, summary: dict) -> pd.DataFrame:
    """One row per variant of the grid: axes, test scores, training summary."""
    rows = []
    for variant_id, info in sweep["variants"].items():
        test = summary["variants"].get(variant_id, {})
        train_metrics, tags = training_summary(info) if info["status"] != "failed" else ({}, {})
        rows.append(
            {
                "variant": variant_id,
                "status": "finished" if test else "failed",
                **{k: info["model"].get(k) for k in ("scorer", "reverse_source", "hidden_size")},
                **{k: v for k, v in info["axes"].items() if k not in info["model"]},
                "bleu": test.get("bleu"),
                "bleu_low": test.get("bleu_low"),
                "bleu_high": test.get("bleu_high"),
                "chrf": test.get("chrf"),
                **train_metrics,
                **tags,
                "error": info.get("error") or "",
            }
        )
    return pd.DataFrame(rows)


def headline(table: pd.DataFrame, significance: pd.DataFrame) -> dict[str, Any]:
    """``metrics/test.json``: the numbers ``dvc exp show`` lists as columns. Best test BLEU
    per scorer (over the other axes) and the mean paired gains: each scorer over its
    ``none`` twins, reversal over forward (no-attention and attention twins)."""

    def rounded(value: float) -> float | None:
        return None if pd.isna(value) else round(float(value), 2)

    done = table[table.status == "finished"]
    out: dict[str, Any] = {
        "best_bleu": rounded(done.bleu.max()) if len(done) else None,
        "bleu": {s: rounded(g.bleu.max()) for s, g in done.groupby("scorer", sort=False)},
    }
    if len(significance):
        scorer = significance.variant.map(dict(zip(table.variant, table.scorer)))
        vs_none = significance[significance.comparison == "vs_none"]
        out["gain_vs_none"] = {
            s: rounded(g.delta.mean()) for s, g in vs_none.groupby(scorer[vs_none.index])
        }
        reversal = significance[significance.comparison == "reversed_vs_forward"]
        groups = np.where(scorer[reversal.index] == "none", "none", "attention")
        out["reversal_gain"] = {g: rounded(d.delta.mean()) for g, d in reversal.groupby(groups)}
    out["failed_variants"] = int((table.status != "finished").sum())
    return out


def _summary(tmp: Path, metrics: dict, sweep: dict, examples: np.ndarray, key: str) -> dict:
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
        "eval_key": key,
        "variants": top,
        "failed_variants": failed,
        "signature": next(iter(metrics.values()))["signature"],
        "attention_examples": examples.tolist(),
    }
    write_json(tmp / EVAL_SUMMARY, summary)
    write_text(tmp / "README.txt", "Generated by `dvc repro evaluate`; see pipeline/evaluate.py.\n")
    return summary


def _log_to_mlflow(
    tracker: Tracker,
    config: Config,
    sweep: dict,
    metrics: dict,
    out_dir: Path,
    test: tuple[Path, str],
    key: str,
) -> None:
    """The evaluation's MLflow runs: a parent (the study table, significance; the report
    stage adds the report) and one ``test`` child per variant with its test scores next
    to its training summary and a link to its training run. Found by tags, so a rerun or
    a deleted run never breaks the stage."""
    evaluate_params = {f"evaluate.{k}": v for k, v in config.evaluate.model_dump().items()}
    parent_id = tracker.find_or_start(
        f"evaluate-{time.strftime('%Y%m%d-%H%M%S')}",
        experiment_key({"kind": "evaluation", "eval_key": key}),
        params={**evaluate_params, "variants": len(metrics)},
        tags={"data_hash": sweep.get("data_hash", "")},
    )
    try:
        _log_test_runs(tracker, parent_id, sweep, metrics, out_dir, test, key, evaluate_params)
    except Exception:
        tracker.finish(parent_id, "FAILED")
        raise


def _log_test_runs(tracker, parent_id, sweep, metrics, out_dir, test, key, evaluate_params):
    test_file, test_sha = test
    training_runs = tracker.newest_by("config_hash", {"kind": "train"})
    best = {}
    for variant_id, result in tqdm(metrics.items(), desc="MLflow test runs", unit="run"):
        info = sweep["variants"][variant_id]
        train_metrics, tags = training_summary(info)
        if info["config_hash"] in training_runs:
            tags["training_run_id"] = training_runs[info["config_hash"]].info.run_id
        run_id = tracker.find_or_start(
            variant_id,
            experiment_key({"kind": "test", "eval_key": key, "config_hash": info["config_hash"]}),
            parent_id=parent_id,
            params={**_variant_params(info), **evaluate_params},
            tags={"variant": variant_id, "sacrebleu_signature": result["signature"], **tags},
        )
        values = {"test_bleu": result["bleu"], "test_bleu_low": result["bleu_low"]}
        values.update(test_bleu_high=result["bleu_high"], test_chrf=result["chrf"])
        values.update({_metric_name(b["bucket"]): b["bleu"] for b in result["by_length"]})
        summary = {k: v for k, v in train_metrics.items() if k in TEST_RUN_SUMMARY}
        tracker.log_metrics(run_id, {**values, **summary})
        tracker.log_dataset(run_id, "test", test_file, test_sha, "evaluation")
        files = EvalFiles(out_dir / variant_id)
        tracker.log_artifacts(run_id, [files.metrics, files.by_length, files.hypotheses])
        tracker.finish(run_id)
        best[variant_id] = result["bleu"]
    top = max(best, key=best.get)
    tracker.log_metrics(parent_id, {"best_test_bleu": best[top]})
    tracker.set_tags(parent_id, {"best_variant": top})
    tracker.log_artifacts(parent_id, [out_dir / STUDY_TABLE, out_dir / SIGNIFICANCE])
    tracker.finish(parent_id)


def _variant_params(info: dict) -> dict[str, Any]:
    params = {f"model.{k}": v for k, v in info["model"].items()}
    params.update({f"axis.{k}": v for k, v in info["axes"].items()})
    return params
