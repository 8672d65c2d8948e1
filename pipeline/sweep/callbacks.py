"""Driver-side Tune callbacks: collecting finished variants, the study's progress bar, and
the stoppers that end a sweep early (a cluster short of resources, a full disk).
(MLflow logging is :mod:`pipeline.sweep.tracking`.)"""

from __future__ import annotations

import logging
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from ray import cloudpickle, tune
from ray.tune.experiment import Trial
from ray.tune.stopper import Stopper
from tqdm import tqdm

from pipeline.artifacts import VariantFiles
from pipeline.io import DiskFullError, ensure_space, is_disk_full, space_for, tree_bytes
from pipeline.records.train import TrainSummary
from pipeline.runtime.cluster import (
    WAIT_POLL_S,
    ClusterError,
    ResourceWatch,
    TaskResources,
    root_cause,
)
from pipeline.sweep.cache import VariantCache, checkpoint_uri
from pipeline.sweep.trial import SETUP_ERROR, TrialSpec

logger = logging.getLogger(__name__)


class DiskWatch(tune.Callback, Stopper):
    """Driver side: ends the sweep at the first write that failed for lack of space, the
    driver's own (a resume record, the variant cache, ``models/``, the tracking journal:
    :meth:`report`) or a trial's (its Tune checkpoint, its scratch folder), so that no
    trial trains what could not be kept. Running trials stop at their last checkpoint,
    which a rerun resumes; none starts. :attr:`error` is the first failure."""

    def __init__(self):
        self.error: DiskFullError | None = None

    def report(self, err: DiskFullError) -> None:
        if self.error is None:
            self.error = err

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._check(trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._check(trial)

    def _check(self, trial) -> None:
        found = trial_disk_full(trial_error(trial), trial.path)
        if found is not None:
            self.report(found)

    def __call__(self, trial_id, result) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.error is not None


def trial_error(trial) -> BaseException | str | None:
    """A failed trial's latest error, as Tune recorded it: on the driver's staging copy
    first (a callback runs before Tune copies it to its storage), else in storage."""
    for path in (trial.pickled_error_file, trial.error_file):
        if path and Path(path).is_file():
            try:
                if path == trial.pickled_error_file:
                    return cloudpickle.loads(Path(path).read_bytes())
                return Path(path).read_text(errors="replace")
            except Exception as err:  # an error that does not unpickle here: its text
                logger.debug("%s: %s unreadable (%s)", trial, path, err)
    return trial.get_pickled_error() or trial.get_error()


def trial_disk_full(error, where: str) -> DiskFullError | None:
    """A trial's error as a :class:`DiskFullError` when a write failed for lack of space:
    the one it raised, or one made from its text (naming the path it quotes, else
    ``where``); ``None`` for any other error."""
    inner = error
    for _ in range(20):
        if inner is None or isinstance(inner, DiskFullError):
            break
        inner = getattr(inner, "cause", None) or getattr(inner, "__cause__", None)
    if isinstance(inner, DiskFullError):  # a copy: Ray's wrapper has its own text
        return DiskFullError(inner.path, inner.free, inner.needed, inner.advice, inner.at_least)
    text = root_cause(error) if error is not None else ""
    if not is_disk_full(RuntimeError(text)):
        return None
    quoted = re.search(r"'(/[^']+)'", text)
    return DiskFullError(quoted.group(1) if quoted else where, None)


class OutputsCallback(tune.Callback):
    """Driver side: records each trial's latest checkpoint (for resuming a killed sweep)
    and turns a completed trial's last checkpoint into ``models/<id>/`` (through the
    variant cache), with the subword models ``tokenizers`` beside it: a folder translates
    as soon as its variant finished, while the others still train. A write that fails for
    lack of space is reported to ``disk``, which ends the sweep."""

    def __init__(
        self,
        specs: dict[str, TrialSpec],
        models_dir: Path,
        cache: VariantCache,
        tokenizers: dict[str, bytes],
        disk: DiskWatch | None = None,
    ):
        self.specs, self.models_dir, self.cache = specs, models_dir, cache
        self.tokenizers = tokenizers
        self.disk = disk or DiskWatch()
        self.attempts: dict[str, int] = {}
        self.finished: dict[str, TrainSummary] = {}
        self.errors: dict[str, str] = {}
        self.setup_failed: set[str] = set()  # failed before their first step: not retried
        self.latest: dict[str, Any] = {}  # variant -> its trial's latest Tune checkpoint

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(SETUP_ERROR):
            variant_id = trial.config["variant"]
            self.setup_failed.add(variant_id)
            self.errors[variant_id] = result[SETUP_ERROR]

    def on_trial_start(self, iteration, trials, trial, **info):
        variant_id = trial.config["variant"]
        self.attempts[variant_id] = self.attempts.get(variant_id, 0) + 1

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        spec = self.specs[trial.config["variant"]]
        try:
            self.cache.set_resume(spec.config_hash, spec.variant.id, checkpoint_uri(checkpoint))
        except DiskFullError as err:  # the record still names the previous one: keep it
            self.disk.report(err)
            return
        previous = self.latest.get(spec.variant.id)
        self.latest[spec.variant.id] = checkpoint
        if previous is not None and previous.path != checkpoint.path:
            try:  # the resume record names the new one: the old one is never read again
                previous.filesystem.delete_dir(previous.path)
            except OSError as err:
                logger.debug("%s: previous checkpoint not deleted (%s)", spec.variant.id, err)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.collect(trial.config["variant"], trial.checkpoint)

    def collect(self, variant_id: str, checkpoint) -> None:
        """Copy a finished trial's checkpoint into ``models/<id>/`` (atomically)."""
        if variant_id in self.finished or variant_id in self.setup_failed:
            return
        spec = self.specs[variant_id]
        try:
            if checkpoint is None:
                raise ClusterError("the trial completed without a checkpoint")
            self._store(spec, checkpoint)
            result = self.cache.restore(spec.config_hash, self.models_dir / variant_id)
            VariantFiles(self.models_dir / variant_id).add_tokenizers(self.tokenizers)
        except DiskFullError as err:  # a rerun collects it from its checkpoint, untrained
            self.errors[variant_id] = f"{type(err).__name__}: {err}"
            self.disk.report(err)
            return
        except (OSError, ValueError, ClusterError) as err:
            self.errors[variant_id] = f"{type(err).__name__}: {err}"
            logger.error("%s: could not collect its outputs: %s", variant_id, err)
            return
        self.finished[variant_id] = result.summary
        self.cache.set_resume(spec.config_hash, variant_id, None)

    def _store(self, spec: TrialSpec, checkpoint) -> None:
        """A finished trial's checkpoint into the variant cache, through a temporary
        folder beside it (checked for room first where the checkpoint is local)."""
        folder = self.cache.folder
        local = getattr(checkpoint.filesystem, "type_name", "") == "local"
        size = tree_bytes(checkpoint.path) if local else None
        with space_for(folder, size):
            folder.mkdir(parents=True, exist_ok=True)
            if size:
                ensure_space(folder, size)
            with tempfile.TemporaryDirectory(dir=folder, prefix=".collect-") as tmp:
                checkpoint.to_directory(tmp)
                files = VariantFiles(Path(tmp))
                if files.finished(spec.config_hash) is None:
                    raise ClusterError(f"its checkpoint holds no {files.RESULT} of this config")
                self.cache.store(Path(tmp), spec.config_hash)


class StudyProgress(tune.Callback):
    """Driver side: one progress bar over the variants to train ("7/18 variants, 41:10
    left"), with the steps of the running trials and the failures so far, beside Tune's
    per-trial table. Only trained variants count as done: a failed one is named in the
    bar's text, never added to its count. The ETA is tqdm's, from the variants trained."""

    def __init__(self, total: int):
        self.bar = tqdm(total=total, desc="study", unit="variant", dynamic_ncols=True)
        self.steps: dict[str, int] = {}
        self.failed: set[str] = set()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        variant_id = trial.config["variant"]
        if result.get(SETUP_ERROR):
            self.failed.add(variant_id)
        elif not result.get("variant_finished"):
            self.steps[variant_id] = int(result.get("step", 0))
        self._show()

    def _show(self) -> None:
        running = [f"{v} step {s}" for v, s in self.steps.items()]
        if self.failed:
            running.append(f"{len(self.failed)} failed")
        self.bar.set_postfix_str(", ".join(running), refresh=True)

    def on_trial_complete(self, iteration, trials, trial, **info):
        variant_id = trial.config["variant"]
        self.steps.pop(variant_id, None)
        if variant_id not in self.failed:
            self.bar.update()
        self._show()

    def on_trial_error(self, iteration, trials, trial, **info):
        self.steps.pop(trial.config["variant"], None)
        self.failed.add(trial.config["variant"])
        self._show()

    def on_experiment_end(self, trials, **info):
        self.bar.close()


class PendingWatch(tune.Callback, Stopper):
    """Driver side: ends the sweep when the cluster has had fewer resources than one trial
    for ``ray.pending_timeout_minutes`` in a row while trials wait (workers lost, a label
    no node has). Tune calls :meth:`on_step_begin` every loop and :meth:`stop_all` after;
    the driver raises :attr:`reason` after ``fit()``."""

    def __init__(self, resources: TaskResources, minutes: float):
        self.watch = ResourceWatch(resources, minutes, "trial")
        self.reason: str | None = None
        self._next = 0.0

    def on_step_begin(self, iteration, trials, **info):
        if self.reason or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + WAIT_POLL_S
        if any(t.status == Trial.PENDING for t in trials):
            self.reason = self.watch.poll()

    def __call__(self, trial_id, result) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.reason is not None
