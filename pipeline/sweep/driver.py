"""The grid sweep: Ray Tune runs one trial per variant; nodes share only Tune's storage.

- **In through Ray.** The tokenized data (the bytes of ``data/tok``, a few MB) reaches
  every trial through ``tune.with_parameters`` (the object store); a trial never opens a
  file of the driver's repo.
- **Out through Tune.** A trial trains in a scratch folder on its node and, each epoch,
  reports its metrics with a ``tune.Checkpoint`` of that folder (best model, resume
  state, history); Tune copies it to ``ray.storage_path`` (infra.yaml). When a trial completes,
  the driver copies its last checkpoint into ``models/<id>/`` (:mod:`pipeline.artifacts`).
- **Caching.** ``models/<id>/result.json`` holds the hash of the variant's full config
  (``precision: auto`` resolved on the trials' hardware) and of the data; a rerun takes
  variants whose hash matches from ``models/`` or from the variant cache
  (:mod:`pipeline.sweep.cache`, shared by all DVC experiments) and trains the rest.
- **Deterministic outputs.** ``models/`` and ``models/sweep.json`` hold what the variants
  are, nothing about the run that made them (timings of this run, attempts, MLflow run
  ids go to the variant cache's ``last_sweep.json`` and to MLflow): a train rerun that
  trains nothing leaves ``models/`` byte-identical and DVC reruns nothing downstream.
- **Resumption.** A retried trial (``ray.max_failures``) resumes from
  ``tune.get_checkpoint()``. After the driver itself was killed, the next run passes each
  unfinished variant its latest checkpoint, recorded in the variant cache.
  (``Tuner.restore`` does not fit: the set of variants to train differs between runs,
  as finished ones drop out and grids grow.)
- **Tracking** is driver-side (:mod:`pipeline.sweep.tracking`): one MLflow writer, which
  never makes Tune wait (:mod:`pipeline.tracking.outbox`).
- **A full disk.** Before Tune starts, the free space of each disk the sweep writes to is
  checked against an estimate (:mod:`pipeline.sweep.space`). The first write that fails
  for lack of space, the driver's or a trial's, stops the sweep
  (:class:`~pipeline.sweep.callbacks.DiskWatch`): running trials stop at their last
  checkpoint and none starts; what finished is kept and recorded; the stage logs its
  summary line and ends with one line naming the path (:mod:`pipeline.sweep.outcomes`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.stopper import CombinedStopper

from pipeline.artifacts import VariantFiles
from pipeline.config.grid import expand_grid, select
from pipeline.config.infra import Infra
from pipeline.config.params import Config
from pipeline.data.dataset import TokenizedData
from pipeline.io import DiskFullError, free_bytes
from pipeline.records.sweep import SWEEP_FILE
from pipeline.runtime.cluster import (
    ClusterError,
    TaskResources,
    init_ray,
    root_cause,
    storage_uri,
)
from pipeline.scorers.plugins import loaded as loaded_plugins
from pipeline.sweep.cache import VariantCache
from pipeline.sweep.callbacks import DiskWatch, OutputsCallback, PendingWatch, StudyProgress
from pipeline.sweep.outcomes import (  # noqa: F401  (SweepFailedError: the stage's)
    SweepFailedError,
    Tracked,
    VariantOutcome,
    conclude,
    tokenizers,
    variant_counts,
)
from pipeline.sweep.space import SpacePlan, plan_space
from pipeline.sweep.tracking import MlflowCallback, close_cached_runs, close_earlier_runs
from pipeline.sweep.trial import (
    FINAL,
    SETUP_ERROR,
    TrialSpec,
    preflight,
    resolve_auto_precision,
    run_trial,
)
from pipeline.tracking.outbox import Outbox
from pipeline.tracking.store import UNFINISHED, Tracker

logger = logging.getLogger(__name__)


class SweepInterruptedError(ClusterError):
    """Tune stopped the sweep (Ctrl-C, SIGUSR1) before every trial ended."""


@dataclass(frozen=True)
class SweepPaths:
    tok_dir: Path
    models_dir: Path
    storage: str  # Tune storage_path: an absolute local path or a URI, as Tune takes it
    cache: VariantCache

    @staticmethod
    def under(infra: Infra, tok_dir: Path, models_dir: Path) -> SweepPaths:
        storage = storage_uri(infra.ray.storage_path, infra.root)
        cache = VariantCache(infra.cache_dir)
        return SweepPaths(tok_dir.resolve(), models_dir.resolve(), storage, cache)


# ----------------------------------------------------------------------- sweep
class _ProjectResumeAdvice(logging.Filter):
    """Drops Tune's "Resume experiment with: Tuner.restore(...)" on an interrupt: this
    project resumes by running the stage again (:class:`SweepInterruptedError` says so)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tuner.restore" not in record.getMessage()


_RESUME_FILTER = _ProjectResumeAdvice()


def _tune(
    todo: dict[str, TrialSpec], data, infra: Infra, paths: SweepPaths, callbacks, stopper=None
):
    ray_cfg = infra.ray
    logging.getLogger("ray.tune.tune").addFilter(_RESUME_FILTER)  # once: a set of filters
    resources = next(iter(todo.values())).resources
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, specs=todo, data=data), resources.tune_resources()
    )
    tuner = tune.Tuner(
        trainable,
        param_space={"variant": tune.grid_search(sorted(todo))},
        # a finished trial's worker process runs the next trial (same resources): no new
        # process importing torch per variant; the weights are bit-identical either way
        tune_config=tune.TuneConfig(
            max_concurrent_trials=ray_cfg.max_concurrent_trials or None, reuse_actors=True
        ),
        run_config=tune.RunConfig(
            name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",  # unique per driver
            storage_path=paths.storage,
            failure_config=tune.FailureConfig(max_failures=ray_cfg.max_failures),
            stop=stopper,
            # every checkpoint kept by Tune; OutputsCallback deletes a trial's previous one
            # once the next is recorded (num_to_keep would force an experiment snapshot
            # at every checkpoint: resume needs only the trial's latest checkpoint)
            checkpoint_config=tune.CheckpointConfig(num_to_keep=None),
            callbacks=callbacks,
            verbose=0,  # the study's bar and lines; Tune's tables go nowhere
        ),
    )
    return tuner.fit()


def run_sweep(
    config: Config, infra: Infra, paths: SweepPaths, only=None, on_training_start=None
) -> dict:
    """Train every selected variant not already finished; write ``models/sweep.json``.
    Returns the run log (``last_sweep.json``: counts, statuses, attempts, MLflow runs).

    Four steps: plan (the variants and their keys), restore (finished ones from
    ``models/`` or the variant cache), train (the rest, through Tune, tracked in MLflow),
    record (``models/sweep.json`` and the run log), then one summary line, also when a
    write failed for lack of space (:class:`~pipeline.io.DiskFullError`, raised after
    it: the first such failure, with what the variants left need). ``on_training_start``:
    called once the checks before training passed, just before the first trial (the
    train stage locks the design there)."""
    started = time.time()
    data = TokenizedData.load(paths.tok_dir)
    specs = plan(config, infra, data, only)
    outcomes = restore(specs, paths)
    todo = {k: v for k, v in specs.items() if k not in outcomes}
    logger.info("%d variants: %d cached, %d to train", len(specs), len(outcomes), len(todo))
    training = Training(infra, paths, data, specs, config.train.grid) if todo else None
    if training is not None:
        outcomes.update(training.run(todo, on_training_start))
    else:
        close_earlier_runs(infra, list(specs.values()), _sweep_key(specs))
    return conclude(paths, data, specs, outcomes, training, config.train.allow_partial, started)


def plan(config: Config, infra: Infra, data: TokenizedData, only=None) -> dict[str, TrialSpec]:
    """The selected variants of the grid, each with its key (:meth:`Variant.key`, computed
    here once and carried by its :class:`TrialSpec`), resources and plugin sources."""
    data_hash = data.fingerprint()
    resources = TaskResources.from_config(infra.ray)
    variants = select(expand_grid(config), only or config.train.only)
    auto = None
    if any(v.train.precision == "auto" for v in variants):
        auto = resolve_auto_precision(infra.ray, resources)
        logger.info("train.precision auto -> %s on the trials' hardware", auto)
    variants = [v.with_precision(auto) for v in variants]
    plugins = tuple(loaded_plugins())
    return {
        v.id: TrialSpec(
            v,
            v.key(data_hash),
            resources,
            trial_timeout_minutes=infra.ray.trial_timeout_minutes,
            plugins=plugins,
        )
        for v in variants
    }


def restore(specs: dict[str, TrialSpec], paths: SweepPaths) -> dict[str, VariantOutcome]:
    """The variants already finished, in ``models/`` (intact) or in the variant cache."""
    outcomes = {}
    for variant_id, spec in specs.items():
        files = VariantFiles(paths.models_dir / variant_id)
        cached = files.finished(spec.config_hash)
        damage = cached is not None and files.damaged()
        if damage:
            logger.warning(
                "%s: %s; taken again from the variant cache or retrained", files.folder, damage
            )
            cached = None
        if cached is None:
            cached = paths.cache.restore(spec.config_hash, files.folder)
        if cached is not None:
            outcomes[variant_id] = VariantOutcome.of(spec, "cached", summary=cached.summary)
            paths.cache.set_resume(spec.config_hash, variant_id, None)  # finished: none left
    return outcomes


class Training:
    """The Tune run of the variants left to train, with its MLflow records: an outbox
    (:mod:`pipeline.tracking.outbox`) opened by :meth:`run` and closed by :meth:`close`
    once ``models/sweep.json`` is written (the parent run logs it)."""

    def __init__(
        self,
        infra: Infra,
        paths: SweepPaths,
        data: TokenizedData,
        specs: dict[str, TrialSpec],
        grid: dict[str, list[Any]],
    ):
        self.infra, self.paths, self.data, self.specs = infra, paths, data, specs
        self.grid = grid  # train.grid: a param of the MLflow parent run
        self.outbox: Outbox | None = None
        self.tracking: MlflowCallback | None = None
        self.disk = DiskWatch()  # the first write that failed for lack of space
        self.space: SpacePlan | None = None

    def run(self, todo: dict[str, TrialSpec], on_start=None) -> dict[str, VariantOutcome]:
        """Preflight (the trials' hardware, then the disks), then Tune; the outcome of
        every variant of ``todo``."""
        infra, paths = self.infra, self.paths
        resources = next(iter(todo.values())).resources
        variants = [s.variant for s in todo.values()]
        forecast = preflight(variants, self.data, infra.ray, resources)
        todo = _scaled_timeouts(todo, forecast)
        self.space = plan_space(
            variants, self.data, infra, paths.models_dir, paths.storage, forecast.concurrent
        )
        self.space.check()
        init_ray(infra.ray)  # before MLflow: a cluster that cannot run it fails here
        self.outbox = Outbox(Tracker(infra), infra.cache_dir)  # an unusable store fails here
        _parent_run(self.outbox, self.grid, infra, self.data.fingerprint(), self.specs)
        if on_start is not None:
            on_start()
        close_cached_runs(self.outbox, [s for k, s in self.specs.items() if k not in todo])
        todo = {k: _resumable(spec, paths.cache) for k, spec in todo.items()}
        outputs = OutputsCallback(
            todo, paths.models_dir, paths.cache, tokenizers(self.data), self.disk
        )
        self.tracking = MlflowCallback(self.outbox, SWEEP_REF, outputs, self.data, paths.tok_dir)
        pending = PendingWatch(resources, infra.ray.pending_timeout_minutes)
        callbacks = [outputs, self.tracking, StudyProgress(len(todo)), pending, self.disk]
        try:
            stopper = CombinedStopper(pending, self.disk)
            grid = _tune(todo, self.data, infra, paths, callbacks, stopper=stopper)
            if pending.reason:
                raise SweepInterruptedError(pending.reason)
            if self.disk.error is None:
                _raise_if_interrupted(grid, outputs)
            return _collect(todo, grid, outputs, self.disk.error)
        except SweepInterruptedError:
            self.outbox.close(infra.tracking.outage_wait_seconds)  # open for the rerun
            raise
        except Exception:
            self.abort()
            raise

    def abort(self) -> None:
        """Ends the parent run as failed and sends what the outbox holds: an error after
        the outbox opened (in Tune, or writing ``models/sweep.json``) leaves no run
        RUNNING and no record behind."""
        if self.outbox is None:
            return
        try:
            self.outbox.finish(SWEEP_REF, "FAILED")
            self.outbox.close(self.infra.tracking.outage_wait_seconds)
        except Exception:  # the error being raised is the one to report
            logger.exception("MLflow: the sweep's parent run could not be ended as FAILED")

    def close(
        self,
        outcomes: dict[str, VariantOutcome],
        failed: bool,
        minutes: float,
        sweep_written: bool = True,
    ) -> Tracked:
        """The parent run's counts, time and ``models/sweep.json``; its end. The outbox is
        closed (what it holds is sent) even when the journal finds no space for these
        records (:attr:`Tracked.error`: a later stage ends the run)."""
        outbox, error = self.outbox, None
        counts = {f"variants_{k}": v for k, v in variant_counts(outcomes).items()}
        try:
            outbox.log_metrics(SWEEP_REF, {**counts, "sweep_minutes": minutes})
            if sweep_written:
                outbox.log_artifacts(SWEEP_REF, [self.paths.models_dir / SWEEP_FILE])
            outbox.finish(SWEEP_REF, "FAILED" if failed else "FINISHED")
        except DiskFullError as err:
            error = err
        kept = outbox.close(self.infra.tracking.outage_wait_seconds)
        return Tracked(outbox.run_ids().get(SWEEP_REF), self.tracking.runs, kept, error)

    def stopped_error(self, outcomes: dict[str, VariantOutcome]) -> DiskFullError:
        """The write that stopped the sweep, with what the variants left need there."""
        err = self.disk.error
        left = sorted(i for i, o in outcomes.items() if not o.record.finished)
        needed = self.space.needed(err.path, left) if self.space and left else None
        free = free_bytes(err.path)
        done = f"{len(outcomes) - len(left)} of {len(outcomes)} variants finished (kept)"
        room = free is not None and needed is not None and free >= needed
        advice = f"the sweep stopped with {done}; " + (
            "there is room for the rest now: run the stage again"
            if room
            else "free space there and run the stage again"
        )
        return DiskFullError(err.path, free, needed or err.needed, advice)


SAFETY_FACTOR = 2.0
"""A trial's safety time limit is at least this many times its variant's longest run on
this machine (its step cap at the preflight's measured speed)."""


def _scaled_timeouts(todo: dict[str, TrialSpec], forecast) -> dict[str, TrialSpec]:
    """``ray.trial_timeout_minutes`` is a safety net against hangs, never a budget: on a
    machine too slow for a variant to reach its step cap within it, the limit grows to
    :data:`SAFETY_FACTOR` times that run, so how far a variant trains does not depend on
    the machine's speed."""
    limit = next(iter(todo.values())).trial_timeout_minutes
    needed = SAFETY_FACTOR * forecast.longest_minutes
    if not limit or needed <= limit:
        return todo
    logger.warning(
        "ray.trial_timeout_minutes %.0f is less than %.0fx the longest variant's run at its "
        "step cap on this machine (%.0f min); the safety limit is %.0f min",
        limit,
        SAFETY_FACTOR,
        forecast.longest_minutes,
        needed,
    )
    return {k: replace(spec, trial_timeout_minutes=needed) for k, spec in todo.items()}


def _resumable(spec: TrialSpec, cache: VariantCache) -> TrialSpec:
    uri = cache.resume_uri(spec.config_hash)
    if uri:
        logger.info("%s: resuming from its last Tune checkpoint %s", spec.variant.id, uri)
    return replace(spec, resume_from=uri)


def _raise_if_interrupted(grid, outputs: OutputsCallback) -> None:
    """Tune ends ``fit()`` normally on Ctrl-C; unfinished trials are not failures: keep the
    sweep resumable (parent run, checkpoints) and say how to continue. Trials that never
    started have no config (and an error that their results are missing)."""
    stopped, never_started = [], 0
    for result in grid:
        variant = (result.config or {}).get("variant")
        if variant is None:
            never_started += 1
        elif (
            result.error is None
            and not (result.metrics or {}).get(FINAL)
            and not (result.metrics or {}).get(SETUP_ERROR)
            and variant not in outputs.finished
        ):
            stopped.append(variant)
    stopped.sort()
    if stopped:
        more = f" and {never_started} not started" if never_started else ""
        raise SweepInterruptedError(
            f"interrupted with {len(stopped)} variants unfinished ({', '.join(stopped[:4])}"
            f"{', ...' if len(stopped) > 4 else ''}){more}; run the train stage again to "
            "resume them from their last Tune checkpoints"
        )


def _collect(
    todo: dict[str, TrialSpec], grid, outputs: OutputsCallback, stopped: DiskFullError | None
) -> dict:
    """Outcomes from the ``ResultGrid``: trained (collected) or failed with the cause.
    After a stop for lack of space (``stopped``), a variant that did not finish failed with
    that cause: its trial was stopped at its last checkpoint, or never started."""
    errors: dict[str, str] = {}
    for result in grid:
        variant_id = (result.config or {}).get("variant")
        if variant_id is None or (stopped and not (result.metrics or {}).get(FINAL)):
            continue  # never started, or stopped before its end
        if result.error is not None:
            errors[variant_id] = root_cause(result.error)
        elif variant_id not in outputs.finished:
            outputs.collect(variant_id, result.checkpoint)
    unfinished = f"not finished: the sweep stopped at a full disk ({stopped})" if stopped else ""
    outcomes = {}
    for variant_id, spec in todo.items():
        attempts = outputs.attempts.get(variant_id, 0)
        if variant_id in outputs.finished:
            summary = outputs.finished[variant_id]
            outcomes[variant_id] = VariantOutcome.of(spec, "trained", summary, attempts=attempts)
        else:
            error = errors.get(variant_id) or outputs.errors.get(variant_id)
            error = error or unfinished or "did not finish"
            outcomes[variant_id] = VariantOutcome.of(spec, None, error=error, attempts=attempts)
    return outcomes


def _sweep_key(specs: dict[str, TrialSpec]) -> dict[str, str]:
    """The tags that find the sweep run of this grid (its variants' config hashes)."""
    key = json.dumps(sorted((k, v.config_hash) for k, v in specs.items()))
    return {"kind": "sweep", "grid_hash": hashlib.sha256(key.encode()).hexdigest()[:16]}


SWEEP_REF = "sweep"
"""The sweep's MLflow parent run, as the outbox names it."""


def _parent_run(outbox: Outbox, grid: dict, infra: Infra, data_hash, specs) -> None:
    """The sweep's MLflow parent: an interrupted sweep of the same grid is continued."""
    params = {"variants": len(specs), "grid": json.dumps(grid)}
    params.update({f"ray.{k}": v for k, v in infra.ray.model_dump().items()})
    key = _sweep_key(specs)
    outbox.start_run(
        SWEEP_REF,
        f"sweep-{time.strftime('%Y%m%d-%H%M%S')}",
        key,
        reuse=UNFINISHED,
        params=params,
        tags={"data_hash": data_hash},
    )
