"""Driver-side bridge from Ray Tune's trial events to MLflow child runs.

It runs in the driver process only, so the MLflow store has a single writer whatever
the cluster. It hands records to the driver's :class:`~pipeline.tracking.outbox.Outbox`
and returns at once: a slow or unreachable tracking server never holds up Tune's event
loop, hence never a trial waiting in ``tune.report``. A variant's run is found by its
``config_hash`` tag (:mod:`pipeline.tracking.store`): a resumed sweep continues the same
run, and a run that vanished from the store is recreated.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from pathlib import Path

from ray import tune

from pipeline.artifacts import VariantFiles
from pipeline.data.dataset import TokenizedData
from pipeline.records.train import EPOCH_METRICS, TrainSummary
from pipeline.runtime.cluster import root_cause
from pipeline.sweep.callbacks import OutputsCallback
from pipeline.tracking.outbox import Outbox
from pipeline.tracking.store import UNFINISHED
from pipeline.translate.mlflow_model import save_pyfunc

logger = logging.getLogger(__name__)

RESOLVED_TAGS = ("precision", "device", "node_id", "energy_kernel")
"""Tagged from a finished variant's summary: what ``precision: auto`` became, where it
ran, and which additive-energy implementation trained it (pipeline.kernels.native)."""


def _guarded(method):
    """Tracking must never stop a sweep: a failure to record (a full disk) is a warning."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as err:
            logger.warning("tracking (%s): %s: %s", method.__name__, type(err).__name__, err)
            return None

    return wrapper


class MlflowCallback(tune.Callback):
    """One child run per variant under the sweep's parent run. It logs the files that
    ``outputs`` collects into ``models/<id>/``: on a trial's completion it has ``outputs``
    collect them first (a no-op when already done), whatever the callbacks' order."""

    def __init__(
        self,
        outbox: Outbox,
        parent: str,
        outputs: OutputsCallback,
        data: TokenizedData,
        data_dir: Path,
    ):
        self.outbox, self.parent, self.outputs = outbox, parent, outputs
        self.specs, self.models_dir = outputs.specs, outputs.models_dir
        self.data, self.data_dir = data, data_dir
        self.started: set[str] = set()

    @staticmethod
    def _ref(spec) -> str:
        return f"train:{spec.config_hash}"

    def _run_for(self, trial) -> str:
        spec = self.specs[trial.config["variant"]]
        ref = self._ref(spec)
        if ref not in self.started:
            self.outbox.start_run(
                ref,
                spec.variant.id,
                {"kind": "train", "config_hash": spec.config_hash},
                reuse=UNFINISHED,  # an interrupted or failed attempt continues its run
                parent=self.parent,
                params=spec.variant.flat_params(),
                tags={"variant": spec.variant.id, "data_hash": self.data.fingerprint()},
            )
            self.started.add(ref)
        return ref

    def __getstate__(self) -> dict:
        """Tune pickles its callbacks into the experiment state (for ``Tuner.restore``,
        which this project does not use): the outbox (a thread, OS locks) stays here."""
        return {**self.__dict__, "outbox": None}

    @property
    def runs(self) -> dict[str, str]:
        """Variant id -> MLflow run id, for the runs sent so far."""
        ids = self.outbox.run_ids()
        return {
            spec.variant.id: ids[self._ref(spec)]
            for spec in self.specs.values()
            if self._ref(spec) in ids
        }

    @_guarded
    def on_trial_start(self, iteration, trials, trial, **info):
        self._run_for(trial)

    @_guarded
    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "epoch" in result:  # an evaluation row (the final report carries a summary)
            metrics = {k: result[k] for k in EPOCH_METRICS if k in result}
            self.outbox.log_metrics(self._run_for(trial), metrics, step=int(result["step"]))

    @_guarded
    def on_trial_complete(self, iteration, trials, trial, **info):
        ref = self._run_for(trial)
        spec = self.specs[trial.config["variant"]]
        self.outputs.collect(spec.variant.id, trial.checkpoint)
        files = VariantFiles(self.models_dir / spec.variant.id)
        result = files.finished(spec.config_hash)
        if result is None:  # the driver could not collect it
            self.outbox.set_tags(ref, {"error": "outputs not collected"})
            self.outbox.finish(ref, "FAILED")
            return
        self._log_finished(ref, spec, files, result.summary)
        self.outbox.finish(ref, "FINISHED")

    def _log_finished(self, ref: str, spec, files: VariantFiles, summary: TrainSummary):
        tags = summary.mlflow_tags()
        tags.update({k: str(getattr(summary, k)) for k in RESOLVED_TAGS})  # what auto became
        self.outbox.log_metrics(ref, summary.mlflow_metrics(), step=summary.steps)
        self.outbox.set_tags(ref, tags)
        self.outbox.log_dataset(
            ref, "train", self.data_dir, self.data.fingerprint(), context="training"
        )
        self.outbox.log_artifacts(ref, files.logged())
        if not self.outbox.tracker.log_models:
            return
        # about a second to build; the journal keeps a copy, the evaluate stage retries a miss
        with tempfile.TemporaryDirectory(prefix="model-") as tmp:
            try:
                model_dir = save_pyfunc(files.translator_files(self.data_dir), Path(tmp) / "model")
            except Exception as err:  # the run still finishes; the model is logged later
                logger.warning(
                    "%s: no MLflow model logged (%s: %s)", spec.variant.id, type(err).__name__, err
                )
                self.outbox.set_tags(ref, {"model_error": f"{type(err).__name__}: {err}"})
                return
            self.outbox.log_model(
                ref,
                spec.variant.id,
                model_dir,
                step=summary.best_step,
                params=spec.variant.flat_params(),
                tags={"config_hash": spec.config_hash, "variant": spec.variant.id},
            )

    @_guarded
    def on_trial_error(self, iteration, trials, trial, **info):
        ref = self._run_for(trial)
        error = trial.get_pickled_error() or trial.get_error()
        self.outbox.set_tags(ref, {"error": root_cause(error)})
        self.outbox.finish(ref, "FAILED")
