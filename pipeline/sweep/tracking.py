"""Driver-side bridge from Ray Tune's trial events to MLflow child runs.

It runs in the driver process only, so the MLflow store has a single writer whatever
the cluster. A variant's run is found by its ``config_hash`` tag (:mod:`pipeline.tracking.store`):
a resumed sweep continues the same run, and a run that vanished from the store is
recreated.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from ray import tune

from pipeline.artifacts import VariantFiles
from pipeline.data.dataset import TokenizedData
from pipeline.runtime.cluster import root_cause
from pipeline.sweep.callbacks import OutputsCallback
from pipeline.tracking.store import UNFINISHED, Tracker, training_summary

logger = logging.getLogger(__name__)

EPOCH_METRICS = (
    "train_loss",
    "dev_loss",
    "dev_bleu",
    "tokens_per_s",
    "learning_rate",
    "wall_time",
)
RESOLVED_TAGS = ("precision", "device", "node_id", "energy_kernel")
"""Read from a trial's final report: what ``precision: auto`` became, where it ran, and
which additive-energy implementation trained it (pipeline.kernels.native)."""


def _guarded(method):
    """Tracking must never stop a sweep: an MLflow error in a callback is a warning."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as err:
            logger.warning("MLflow (%s): %s: %s", method.__name__, type(err).__name__, err)
            return None

    return wrapper


class MlflowCallback(tune.Callback):
    """One child run per variant under the sweep's parent run. It logs the files that
    ``outputs`` collects into ``models/<id>/``: on a trial's completion it has ``outputs``
    collect them first (a no-op when already done), whatever the callbacks' order."""

    def __init__(
        self,
        tracker: Tracker,
        parent_id: str,
        outputs: OutputsCallback,
        data: TokenizedData,
        data_dir: Path,
    ):
        self.tracker, self.parent_id, self.outputs = tracker, parent_id, outputs
        self.specs, self.models_dir = outputs.specs, outputs.models_dir
        self.data, self.data_dir = data, data_dir
        self.runs: dict[str, str] = {}

    def _run_for(self, trial) -> str:
        spec = self.specs[trial.config["variant"]]
        variant_id = spec.variant.id
        if variant_id not in self.runs:
            self.runs[variant_id] = self.tracker.find_or_start(
                variant_id,
                {"kind": "train", "config_hash": spec.config_hash},
                reuse=UNFINISHED,  # an interrupted or failed attempt continues its run
                parent_id=self.parent_id,
                params=spec.variant.flat_params(),
                tags={"variant": variant_id, "data_hash": self.data.fingerprint()},
            )
        return self.runs[variant_id]

    @_guarded
    def on_trial_start(self, iteration, trials, trial, **info):
        self._run_for(trial)

    @_guarded
    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "epoch" in result:  # an evaluation row (the final report carries a summary)
            metrics = {k: result[k] for k in EPOCH_METRICS if k in result}
            self.tracker.log_metrics(self._run_for(trial), metrics, step=int(result["step"]))

    @_guarded
    def on_trial_complete(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        spec = self.specs[trial.config["variant"]]
        self.outputs.collect(spec.variant.id, trial.checkpoint)
        files = VariantFiles(self.models_dir / spec.variant.id)
        result = files.finished(spec.config_hash)
        if result is None:  # the driver could not collect it
            self.tracker.set_tags(run_id, {"error": "outputs not collected"})
            self.tracker.finish(run_id, "FAILED")
            return
        try:
            self._log_finished(run_id, spec, files, result["summary"], trial.last_result or {})
        except Exception as err:  # tracking must never cost a trained variant
            logger.warning("%s: MLflow logging incomplete: %s", spec.variant.id, err)
            self.tracker.set_tags(run_id, {"tracking_error": f"{type(err).__name__}: {err}"})
        self.tracker.finish(run_id, "FINISHED")

    def _log_finished(self, run_id: str, spec, files: VariantFiles, summary: dict, final: dict):
        metrics, tags = training_summary(summary)
        tags.update({k: str(final[k]) for k in RESOLVED_TAGS if k in final})  # what auto became
        self.tracker.log_metrics(run_id, metrics, step=int(summary.get("steps", 0)))
        self.tracker.set_tags(run_id, tags)
        self.tracker.log_dataset(
            run_id, "train", self.data_dir, self.data.fingerprint(), context="training"
        )
        self.tracker.log_artifacts(run_id, files.logged())
        self.tracker.log_model(
            run_id,
            spec.variant.id,
            [files.checkpoint, files.config],
            step=int(summary.get("best_step", 0)),
            params=spec.variant.flat_params(),
            tags={"config_hash": spec.config_hash, "variant": spec.variant.id},
        )

    @_guarded
    def on_trial_error(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        error = trial.get_pickled_error() or trial.get_error()
        self.tracker.set_tags(run_id, {"error": root_cause(error)})
        self.tracker.finish(run_id, "FAILED")
