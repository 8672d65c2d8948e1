"""The evaluation in MLflow: a parent run (the study table, the findings, the best scorer
chosen on dev; the report stage adds the report) timed from the stage's start, one
``test:<variant>`` child per variant, timed by its decoding, with its test scores linked
to the variant's training run (this DVC experiment's own, where it has one), its logged
model and the test set, and the registry alias of the variant chosen on dev. Runs are
found by tags, so a rerun or a deleted run never breaks the stage. A training run that a
stage now gone left RUNNING is ended here, by its variant's recorded outcome."""

from __future__ import annotations

import logging
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pipeline.artifacts import COMPARISONS, FINDINGS, STUDY_TABLE, EvalFiles, VariantFiles
from pipeline.evaluate.data import Evaluation
from pipeline.evaluate.tables import metric_name
from pipeline.records.evaluation import EvaluationSummary
from pipeline.records.sweep import SweepRecord, VariantRecord
from pipeline.tracking.store import Tracker, dataset_digest, experiment_key
from pipeline.translate.mlflow_model import save_pyfunc

logger = logging.getLogger(__name__)

TEST_RUN_SUMMARY = (
    "checkpoint_dev_bleu",
    "peak_dev_bleu",
    "checkpoint_epoch",
    "epochs",
    "still_improving",
)
"""The training summary repeated on each ``test`` run, beside its test scores: enough to
say which variant is best and whether it had converged (the rest is on its training
run, ``training_run_id``). In name order they head MLflow's compare table."""
REGISTERED_ALIAS = "dev-best"
"""The registry alias of the variant chosen on dev (``models:/<experiment>@dev-best``)."""


def dev_choice(variants: dict[str, VariantRecord], scorer: str | None) -> str | None:
    """The variant a user would deploy, chosen on dev only: of ``variants`` (of the
    study's best scorer, chosen on dev, when there is one), the one with the highest dev
    BLEU at its best checkpoint."""
    scored = {
        i: v.best_dev_bleu for i, v in variants.items() if scorer is None or v.scorer == scorer
    }
    scored = {i: b for i, b in scored.items() if math.isfinite(b)}
    return max(sorted(scored), key=scored.get) if scored else None


def log_evaluation(
    tracker: Tracker, evaluation: Evaluation, summary: EvaluationSummary, best_bleu: float | None
) -> None:
    """The evaluation's MLflow runs (the module's docstring); ``best_bleu``: the best
    scorer's test BLEU inside the training lengths."""
    config, metrics = evaluation.config, evaluation.scores.metrics
    evaluate_params = {f"evaluate.{k}": v for k, v in config.evaluate.model_dump().items()}
    started = evaluation.started
    scorer = summary.headline.get("best_scorer")  # the study's one "best": chosen on dev
    chosen = dev_choice(evaluation.evaluated, scorer)
    close_training_runs(tracker, evaluation.sweep)
    parent_id = tracker.find_or_start(
        f"evaluate-{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}",
        experiment_key({"kind": "evaluation", "eval_key": summary.eval_key}),
        params={**evaluate_params, "variants": len(metrics)},
        tags={"data_hash": evaluation.sweep.data_hash},
        start_time_ms=int(started * 1000),
    )
    try:
        models = _log_test_runs(tracker, parent_id, evaluation, summary.eval_key, evaluate_params)
        if scorer:
            tracker.log_metrics(parent_id, {"best_test_bleu": best_bleu})
            chosen_on = summary.headline["best_chosen_on"]
            tracker.set_tags(parent_id, {"best_scorer": scorer, "best_chosen_on": chosen_on})
        if chosen in models:
            _register(tracker, parent_id, chosen, models[chosen])
        tracker.finish(parent_id)
    except Exception:
        tracker.finish(parent_id, "FAILED")
        raise


def _register(tracker: Tracker, parent_id: str, variant_id: str, model_id: str) -> None:
    name = tracker.experiment_name
    version = tracker.register(
        name, model_id, REGISTERED_ALIAS, {"variant": variant_id, "chosen_on": "dev BLEU"}
    )
    tracker.set_tags(
        parent_id,
        {
            "registered_model": f"models:/{name}@{REGISTERED_ALIAS}",
            "registered_variant": variant_id,
            "registered_version": version,
        },
    )
    logger.info(
        "MLflow: %s is models:/%s@%s (version %s)", variant_id, name, REGISTERED_ALIAS, version
    )


LEFT_OPEN = "the evaluate stage found it open after its stage had ended; its variant {status}"


def close_training_runs(tracker: Tracker, sweep: SweepRecord) -> None:
    """End the training runs that stages now gone left RUNNING (a killed train stage, an
    end record lost to a full disk) by what ``models/sweep.json`` says of the variant:
    FINISHED, or FAILED with its error."""
    for record in sweep.variants.values():
        status = "FINISHED" if record.finished else "FAILED"
        key = {"kind": "train", "config_hash": record.config_hash}
        for run_id in tracker.close_stale(key, status, LEFT_OPEN.format(status=record.status)):
            if record.error:
                tracker.set_tags(run_id, {"error": record.error})


def training_runs(tracker: Tracker) -> dict[str, Any]:
    """Each config hash's training run: this DVC experiment's own where it trained the
    variant (outside an experiment: a run of none), else the newest of any (the variant
    came from the variant cache, trained elsewhere)."""
    runs = tracker.newest_by("config_hash", {"kind": "train"})
    runs.update(tracker.newest_by("config_hash", experiment_key({"kind": "train"})))
    return runs


def _log_test_runs(
    tracker: Tracker, parent_id: str, evaluation: Evaluation, key: str, evaluate_params: dict
) -> dict[str, str]:
    """One ``test`` run per variant; returns variant -> its logged model's id."""
    paths, test = evaluation.paths, evaluation.test
    training_runs_by_hash = training_runs(tracker)
    dataset = ("test", dataset_digest(test.sha256))
    axes = sorted({k for v in evaluation.sweep.variants.values() for k in v.axes})
    models = {}
    metrics = evaluation.scores.metrics
    for variant_id, result in tqdm(metrics.items(), desc="MLflow test runs", unit="run"):
        record = evaluation.sweep.variants[variant_id]
        trained = record.summary  # evaluated variants are finished: they have one
        train_metrics, tags = trained.mlflow_metrics(), trained.mlflow_tags()
        training = training_runs_by_hash.get(record.config_hash)
        if training is not None:
            tags["training_run_id"] = training.info.run_id
        decoded_at = result.decode_started
        run_id = tracker.find_or_start(
            f"test:{variant_id}",
            experiment_key({"kind": "test", "eval_key": key, "config_hash": record.config_hash}),
            parent_id=parent_id,
            params={**variant_params(record, axes), **evaluate_params},
            tags={"variant": variant_id, "sacrebleu_signature": result.signature, **tags},
            start_time_ms=int(decoded_at * 1000),
        )
        source_run = training.info.run_id if training is not None else run_id
        model_id = variant_model(tracker, record, paths.models / variant_id, source_run)
        if model_id:
            models[variant_id] = model_id
            tracker.set_tags(run_id, {"model_id": model_id})
        values = {"test_bleu": result.bleu, "test_bleu_low": result.bleu_low}
        values.update(test_bleu_high=result.bleu_high, test_chrf=result.chrf)
        values.update({metric_name(b.bucket): b.bleu for b in result.by_length})
        tracker.log_metrics(run_id, values, model_id=model_id, dataset=dataset)
        summary = {k: v for k, v in train_metrics.items() if k in TEST_RUN_SUMMARY}
        tracker.log_metrics(run_id, summary)
        tracker.log_dataset(run_id, "test", test.file, test.sha256, "evaluation")
        files = EvalFiles(paths.out / variant_id)
        tracker.log_artifacts(run_id, [files.metrics, files.by_length, files.hypotheses])
        ended = decoded_at + result.decode_seconds
        tracker.finish(run_id, end_time_ms=int(ended * 1000))
    tracker.log_artifacts(
        parent_id, [paths.out / STUDY_TABLE, paths.out / COMPARISONS, paths.out / FINDINGS]
    )
    return models


def variant_model(tracker: Tracker, record: VariantRecord, folder: Path, run_id: str) -> str | None:
    """The variant's logged model (an MLflow model that translates): the one ``run_id``
    logged, else any of its config. A variant without one (taken from the variant cache,
    or logged by an older version as a bare checkpoint) gets it now, from
    ``models/<variant>/``, as a model of ``run_id``."""
    tags = {"config_hash": record.config_hash}
    model_id = tracker.find_logged_model(tags, run_id) or tracker.find_logged_model(tags)
    if model_id is not None or not tracker.log_models:
        return model_id
    with tempfile.TemporaryDirectory(prefix="model-") as tmp:
        model_dir = save_pyfunc(VariantFiles(folder).translator_files(), Path(tmp) / "model")
        return tracker.log_model(
            run_id,
            folder.name,
            model_dir,
            step=record.summary.best_step if record.summary else 0,
            params=record.settings(),
            tags={"config_hash": record.config_hash, "variant": folder.name},
        )


def variant_params(record: VariantRecord, axes: list[str]) -> dict[str, Any]:
    """A variant's values of the study's grid ``axes`` and its seed, under the names its
    training run logs them with (``model.scorer``, ``train.seed``): the columns that tell
    the test runs apart (a variant of a ``train.grid.include`` entry has them too)."""
    values = {}
    for key in {"seed", *axes}:
        section = "model" if key in type(record.model).model_fields else "train"
        values[f"{section}.{key}"] = record.value(key)
    return dict(sorted(values.items()))
