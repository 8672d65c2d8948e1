"""Driver-side bridge from Ray Tune's trial events to MLflow child runs.

It runs in the driver process only, so the MLflow store has a single writer whatever
the cluster. Child run ids are kept in the sweep state (:mod:`pipeline.sweep_state`), so
a resumed sweep continues the same runs; a run that vanished from the store is recreated.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ray import tune

from pipeline.artifacts import VariantFiles
from pipeline.cluster import root_cause
from pipeline.sweep_state import SweepState
from pipeline.tracking import Tracker

if TYPE_CHECKING:
    from pipeline.sweep import TrialSpec

EPOCH_METRICS = (
    "train_loss",
    "dev_loss",
    "dev_bleu",
    "tokens_per_s",
    "learning_rate",
    "wall_time",
)
RESOLVED_TAGS = ("precision", "device", "node_id")
"""Read from a trial's final report: what ``precision: auto`` became, where it ran."""


class MlflowCallback(tune.Callback):
    """One child run per variant under the sweep's parent run (must follow
    :class:`pipeline.sweep.OutputsCallback`, which writes the files it logs)."""

    def __init__(
        self,
        tracker: Tracker,
        parent_id: str,
        specs: dict[str, TrialSpec],
        tags: dict[str, str],
        state: SweepState,
        models_dir: Path,
    ):
        self.tracker, self.parent_id, self.specs, self.tags = tracker, parent_id, specs, tags
        self.state, self.models_dir = state, models_dir

    def _run_for(self, trial) -> str:
        spec = self.specs[trial.config["variant"]]
        variant_id, config_hash = spec.variant.id, spec.config_hash
        run_id = self.state.get(variant_id, config_hash, "run_id")
        if run_id and self.tracker.reopen(run_id):
            return run_id
        tags = {**self.tags, "variant": variant_id, "config_hash": config_hash}
        run_id = self.tracker.start_run(
            variant_id, parent_id=self.parent_id, params=spec.variant.flat_params(), tags=tags
        )
        self.state.set(variant_id, config_hash, "run_id", run_id)
        return run_id

    def on_trial_start(self, iteration, trials, trial, **info):
        self._run_for(trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "epoch" in result:  # an epoch row (the final report carries a summary)
            metrics = {k: result[k] for k in EPOCH_METRICS if k in result}
            self.tracker.log_metrics(self._run_for(trial), metrics, step=int(result["epoch"]))

    def on_trial_complete(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        spec = self.specs[trial.config["variant"]]
        files = VariantFiles(self.models_dir / spec.variant.id)
        if not files.finished(spec.config_hash):  # the driver could not collect it
            self.tracker.set_tags(run_id, {"error": "outputs not collected"})
            self.tracker.finish(run_id, "FAILED")
            return
        self.tracker.log_artifacts(run_id, files.logged())
        final = trial.last_result or {}  # the trial's final report carries its summary
        resolved = {k: str(final[k]) for k in RESOLVED_TAGS if k in final}
        if resolved:
            self.tracker.set_tags(run_id, resolved)
        self.tracker.finish(run_id, "FINISHED")

    def on_trial_error(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        error = trial.get_pickled_error() or trial.get_error()
        self.tracker.set_tags(run_id, {"error": root_cause(error)})
        self.tracker.finish(run_id, "FAILED")
