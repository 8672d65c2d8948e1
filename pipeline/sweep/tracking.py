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
from pipeline.config.infra import Infra
from pipeline.data.dataset import TokenizedData
from pipeline.io import DiskFullError
from pipeline.records.train import EPOCH_METRICS, TrainSummary
from pipeline.runtime.cluster import root_cause
from pipeline.sweep.callbacks import OutputsCallback, trial_error
from pipeline.tracking.outbox import Outbox, pending_journals
from pipeline.tracking.store import UNFINISHED, Tracker, TrackingError
from pipeline.translate.mlflow_model import save_pyfunc

logger = logging.getLogger(__name__)

RESOLVED_TAGS = ("precision", "device", "node_id", "energy_kernel")
"""Tagged from a finished variant's summary: what ``precision: auto`` became, where it
ran, and which additive-energy implementation trained it (pipeline.kernels.native)."""


def _guarded(method):
    """Tracking never fails a trial: a failure to record is a warning, and one for lack of
    space goes to the disk watch (no line here: the sweep stops and the stage names it)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except DiskFullError as err:
            self.outputs.disk.report(err)
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
            error = self.outputs.errors.get(spec.variant.id, "outputs not collected")
            self.outbox.set_tags(ref, {"error": error})
            self.outbox.finish(ref, "FAILED")
            return
        try:
            self._log_finished(ref, spec, files, result.summary)
        except DiskFullError as err:  # the run still ends: a later stage logs the model
            self.outputs.disk.report(err)
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
        self.outbox.set_tags(ref, {"error": root_cause(trial_error(trial))})
        self.outbox.finish(ref, "FAILED")


CACHED_RUN = "a later train stage took the variant from the variant cache: it is finished"
OPEN_SWEEP = "a later train stage of this grid found it open: its stage had ended"


def close_cached_runs(outbox: Outbox, cached: list) -> None:
    """End the runs that stages now gone left RUNNING for the variants ``cached`` (trial
    specs) that this run takes from the variant cache: finished, their end record was
    lost to a kill or a full disk."""
    for spec in cached:
        key = {"kind": "train", "config_hash": spec.config_hash}
        outbox.close_stale(key, "FINISHED", CACHED_RUN)


def close_earlier_runs(infra: Infra, specs: list, sweep_key: dict[str, str]) -> None:
    """Nothing to train: send what an earlier run could not, and end the runs it left
    open (the runs of the variants ``specs``, FINISHED; the sweep run ``sweep_key`` of
    this grid, FAILED); best effort."""
    try:
        tracker = Tracker(infra)
    except TrackingError as err:
        if pending_journals(infra.cache_dir):
            logger.warning("tracking records of earlier runs not sent yet: %s", err)
        return
    try:
        outbox = Outbox(tracker, infra.cache_dir)
        close_cached_runs(outbox, specs)
        outbox.close_stale(sweep_key, "FAILED", OPEN_SWEEP)
    except (OSError, DiskFullError) as err:
        logger.warning("MLflow: runs left open by earlier stages not closed: %s", err)
        return
    outbox.close(infra.tracking.outage_wait_seconds)
