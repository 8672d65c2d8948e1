"""The grid sweep: Ray Tune runs one trial per variant; nodes share only Tune's storage.

- **In through Ray.** The tokenized data (the bytes of ``data/tok``, a few MB) reaches
  every trial through ``tune.with_parameters`` (the object store); a trial never opens a
  file of the driver's repo.
- **Out through Tune.** A trial trains in a scratch folder on its node and, each epoch,
  reports its metrics with a ``tune.Checkpoint`` of that folder (best model, resume
  state, history); Tune copies it to ``train.ray.storage_path``. When a trial completes,
  the driver copies its last checkpoint into ``models/<id>/`` (:mod:`pipeline.artifacts`).
- **Caching.** ``models/<id>/result.json`` holds the hash of the variant's full config
  (``precision: auto`` resolved on the trials' hardware) and of the data; a rerun skips
  variants whose hash matches and trains only the rest.
- **Resumption.** A retried trial (``train.ray.max_failures``) resumes from
  ``tune.get_checkpoint()``. After the driver itself was killed, the next run passes each
  unfinished variant its latest checkpoint, recorded in ``models/.sweep_state.json``.
  (``Tuner.restore`` does not fit: the set of variants to train differs between runs,
  as finished ones drop out and grids grow.)
- **Tracking** is driver-side (:mod:`pipeline.sweep_mlflow`): one MLflow writer.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ray import tune

from pipeline.artifacts import SWEEP_FILE, SWEEP_STATE_FILE, VariantFiles
from pipeline.cluster import (
    ClusterError,
    TaskResources,
    claim_device,
    device_for,
    init_ray,
    node_id,
    ray_address,
    root_cause,
    run_tasks,
    storage_uri,
)
from pipeline.config import Config
from pipeline.data.tokenized import TokenizedData
from pipeline.grid import Variant, expand_grid, select
from pipeline.io import atomic_dir, write_json
from pipeline.provenance import git_commit
from pipeline.sweep_mlflow import MlflowCallback
from pipeline.sweep_state import SweepState, checkpoint_uri
from pipeline.tracking import Tracker

logger = logging.getLogger(__name__)


class SweepFailedError(ClusterError):
    """Some variants failed and ``train.allow_partial`` is off."""


class SweepInterruptedError(ClusterError):
    """Tune stopped the sweep (Ctrl-C, SIGUSR1) before every trial ended."""


FINAL = "variant_finished"
"""Key of a trial's final report (its summary and last checkpoint)."""


@dataclass(frozen=True)
class SweepPaths:
    root: Path
    tok_dir: Path
    models_dir: Path
    storage: str  # Tune storage_path: an absolute local path or a URI, as Tune takes it

    @staticmethod
    def under(root: Path, config: Config, tok_dir: Path, models_dir: Path) -> SweepPaths:
        root = root.resolve()
        storage = storage_uri(config.train.ray.storage_path, root)
        return SweepPaths(root, (root / tok_dir).resolve(), (root / models_dir).resolve(), storage)


@dataclass(frozen=True)
class TrialSpec:
    """Everything a trial needs besides the data (which travels once, separately)."""

    variant: Variant
    config_hash: str
    resources: TaskResources
    resume_from: str | None = None  # URI of a Tune checkpoint left by a killed sweep


@dataclass
class VariantOutcome:
    id: str
    status: str  # finished | cached | failed
    config_hash: str
    run_id: str | None = None
    error: str | None = None
    attempts: int = 0
    summary: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------- trial
def run_trial(tune_config: dict[str, Any], specs: dict[str, TrialSpec], data: TokenizedData):
    """Ray Tune function trainable: train one variant in a scratch folder on this node,
    report every epoch with a checkpoint of that folder, then the final summary."""
    from pipeline.report.figures import dev_attention_figure
    from pipeline.training import train_variant

    spec = specs[tune_config["variant"]]
    device = claim_device(spec.resources.gpus, spec.resources.cpus)
    scratch = Path(tempfile.mkdtemp(prefix=f"{spec.variant.id}-"))
    files = VariantFiles(scratch)

    def report(row: dict[str, Any]) -> None:  # metrics + a checkpoint of the scratch folder
        tune.report(row, checkpoint=tune.Checkpoint.from_directory(str(scratch)))

    try:
        checkpoint = tune.get_checkpoint()
        if checkpoint is None and spec.resume_from:
            checkpoint = tune.Checkpoint(spec.resume_from)
        if checkpoint is not None:
            checkpoint.to_directory(str(scratch))
            done = files.finished(spec.config_hash)
            if done:  # trained before the driver collected its outputs: report it again
                report(_final_report(done["summary"]))
                return
        result = train_variant(
            spec.variant, data, scratch, callback=report, device=device, resume=True
        )
        summary = {k: v for k, v in asdict(result).items() if k != "history"}
        summary.update(device=device, node_id=node_id())
        try:
            dev_attention_figure(files.checkpoint, data, scratch)
        except Exception as err:  # a figure must never fail a trained variant
            logger.warning("%s: no dev attention figure (%s)", spec.variant.id, err)
        write_json(files.result, {"config_hash": spec.config_hash, "summary": summary})
        files.last.unlink(missing_ok=True)  # finished: the resume state is not kept
        report(_final_report(summary))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _final_report(summary: dict[str, Any]) -> dict[str, Any]:
    return {FINAL: True, **{k: v for k, v in summary.items() if _scalar(v)}}


def _scalar(value: Any) -> bool:
    return isinstance(value, int | float | str | bool)


def _resolve_precision(precision: str, resources: TaskResources) -> str:
    """Ray task: what ``precision`` becomes on a trial's hardware."""
    from pipeline.models.precision import resolve

    return resolve(precision, claim_device(resources.gpus, resources.cpus))


def resolve_auto_precision(config: Config, resources: TaskResources) -> str:
    """``train.precision: auto`` resolved once for the whole sweep, where trials run: on
    this machine for a local Ray, else by a probe task with a trial's resources."""
    if ray_address(config.train.ray) is None:
        from pipeline.models.precision import resolve

        return resolve("auto", device_for(resources.gpus))
    init_ray(config.train.ray)
    probe = {"probe": "auto"}
    return run_tasks(_resolve_precision, probe, resources, "precision probe", (resources,))["probe"]


def _with_precision(variant: Variant, auto: str | None) -> Variant:
    if variant.train.precision != "auto" or auto is None:
        return variant
    return replace(variant, train=variant.train.model_copy(update={"precision": auto}))


# -------------------------------------------------------------- driver outputs
class OutputsCallback(tune.Callback):
    """Driver side: records each trial's latest checkpoint (for resuming a killed sweep)
    and turns a completed trial's last checkpoint into ``models/<id>/``."""

    def __init__(self, specs: dict[str, TrialSpec], models_dir: Path, state: SweepState):
        self.specs, self.models_dir, self.state = specs, models_dir, state
        self.attempts: dict[str, int] = {}
        self.finished: dict[str, dict[str, Any]] = {}
        self.errors: dict[str, str] = {}

    def on_trial_start(self, iteration, trials, trial, **info):
        variant_id = trial.config["variant"]
        self.attempts[variant_id] = self.attempts.get(variant_id, 0) + 1

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        spec = self.specs[trial.config["variant"]]
        self.state.set(spec.variant.id, spec.config_hash, "checkpoint", checkpoint_uri(checkpoint))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.collect(trial.config["variant"], trial.checkpoint)

    def collect(self, variant_id: str, checkpoint) -> None:
        """Copy a finished trial's checkpoint into ``models/<id>/`` (atomically)."""
        if variant_id in self.finished:
            return
        spec = self.specs[variant_id]
        folder = self.models_dir / variant_id
        try:
            if checkpoint is None:
                raise ClusterError("the trial completed without a checkpoint")
            with atomic_dir(folder) as tmp:
                checkpoint.to_directory(str(tmp))
                files = VariantFiles(tmp)
                files.last.unlink(missing_ok=True)
                result = files.finished(spec.config_hash)
                if result is None:
                    raise ClusterError(f"its checkpoint holds no {files.RESULT} of this config")
                run_id = self.state.get(variant_id, spec.config_hash, "run_id")
                write_json(files.run, {"run_id": run_id, "config_hash": spec.config_hash})
        except (OSError, ValueError, ClusterError) as err:
            self.errors[variant_id] = f"{type(err).__name__}: {err}"
            logger.error("%s: could not collect its outputs: %s", variant_id, err)
            return
        self.finished[variant_id] = result["summary"]
        self.state.set(variant_id, spec.config_hash, "checkpoint", None)


# ----------------------------------------------------------------------- sweep
def _tune(todo: dict[str, TrialSpec], data, config: Config, paths: SweepPaths, callbacks):
    ray_cfg = config.train.ray
    resources = next(iter(todo.values())).resources
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, specs=todo, data=data), resources.tune_resources()
    )
    reporter = tune.CLIReporter(
        metric_columns=["epoch", "train_loss", "dev_loss", "dev_bleu", "tokens_per_s"],
        parameter_columns=["variant"],
        max_report_frequency=30,
    )
    tuner = tune.Tuner(
        trainable,
        param_space={"variant": tune.grid_search(sorted(todo))},
        tune_config=tune.TuneConfig(max_concurrent_trials=ray_cfg.max_concurrent_trials or None),
        run_config=tune.RunConfig(
            name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=paths.storage,
            failure_config=tune.FailureConfig(max_failures=ray_cfg.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),  # the latest holds all
            callbacks=callbacks,
            progress_reporter=reporter,
            verbose=1,
        ),
    )
    return tuner.fit()


def run_sweep(config: Config, paths: SweepPaths, only: list[str] | None = None) -> dict:
    """Train every selected variant not already finished; write ``models/sweep.json``."""
    data = TokenizedData.load(paths.tok_dir)
    data_hash = data.fingerprint()
    resources = TaskResources.from_config(config.train.ray)
    variants = select(expand_grid(config), only or config.train.only)
    auto = None
    if any(v.train.precision == "auto" for v in variants):
        auto = resolve_auto_precision(config, resources)
        logger.info("train.precision auto -> %s on the trials' hardware", auto)
    variants = [_with_precision(v, auto) for v in variants]
    specs = {v.id: TrialSpec(v, v.config_hash(data_hash), resources) for v in variants}
    outcomes = {}
    for variant_id, spec in specs.items():
        cached = VariantFiles(paths.models_dir / variant_id).finished(spec.config_hash)
        if cached is not None:
            outcomes[variant_id] = VariantOutcome(
                variant_id, "cached", spec.config_hash, summary=cached["summary"]
            )
    todo = {k: v for k, v in specs.items() if k not in outcomes}
    logger.info("%d variants: %d cached, %d to train", len(specs), len(outcomes), len(todo))

    if todo:
        init_ray(config.train.ray)  # before MLflow: a cluster that cannot run it fails here
    state = SweepState(paths.models_dir / SWEEP_STATE_FILE)
    tracker = Tracker(config.tracking, paths.root)
    parent_id = _parent_run(tracker, config, paths, data_hash, specs, state)
    if todo:
        todo = {k: _resumable(spec, state) for k, spec in todo.items()}
        tags = {"git_commit": git_commit(paths.root), "data_hash": data_hash}
        outputs = OutputsCallback(todo, paths.models_dir, state)
        tracking = MlflowCallback(tracker, parent_id, todo, tags, state, paths.models_dir)
        grid = _tune(todo, data, config, paths, [outputs, tracking])
        _raise_if_interrupted(grid, outputs)
        outcomes.update(_collect(todo, grid, outputs))
    for variant_id in specs:
        outcome = outcomes[variant_id]
        outcome.run_id = outcome.run_id or _run_id(paths.models_dir / variant_id)
    summary = _write_summary(paths.models_dir, specs, outcomes, parent_id, data_hash)
    failed = [o for o in outcomes.values() if o.status == "failed"]
    tracker.log_metrics(parent_id, {"variants_failed": len(failed)}, step=0)
    tracker.finish(parent_id, "FAILED" if failed and not config.train.allow_partial else "FINISHED")
    state.finish()
    if failed and not config.train.allow_partial:
        names = "; ".join(f"{o.id}: {o.error}" for o in failed)
        raise SweepFailedError(f"{len(failed)} of {len(specs)} variants failed: {names}")
    return summary


def _resumable(spec: TrialSpec, state: SweepState) -> TrialSpec:
    uri = state.get(spec.variant.id, spec.config_hash, "checkpoint")
    if uri:
        logger.info("%s: resuming from its last Tune checkpoint %s", spec.variant.id, uri)
    return replace(spec, resume_from=uri)


def _raise_if_interrupted(grid, outputs: OutputsCallback) -> None:
    """Tune ends ``fit()`` normally on Ctrl-C; unfinished trials are not failures: keep the
    sweep resumable (parent run, checkpoints) and say how to continue."""
    stopped = sorted(
        result.config["variant"]
        for result in grid
        if result.error is None
        and not (result.metrics or {}).get(FINAL)
        and result.config["variant"] not in outputs.finished
    )
    if stopped:
        raise SweepInterruptedError(
            f"interrupted with {len(stopped)} variants unfinished ({', '.join(stopped[:4])}"
            f"{', ...' if len(stopped) > 4 else ''}); run the train stage again to resume "
            "them from their last Tune checkpoints"
        )


def _collect(todo: dict[str, TrialSpec], grid, outputs: OutputsCallback) -> dict:
    """Outcomes from the ``ResultGrid``: finished (collected) or failed with the cause."""
    errors: dict[str, str] = {}
    for result in grid:
        variant_id = result.config["variant"]
        if result.error is not None:
            errors[variant_id] = root_cause(result.error)
        elif variant_id not in outputs.finished:
            outputs.collect(variant_id, result.checkpoint)
    outcomes = {}
    for variant_id, spec in todo.items():
        run_id = outputs.state.get(variant_id, spec.config_hash, "run_id")
        if variant_id in outputs.finished:
            status, error, summary = "finished", None, outputs.finished[variant_id]
        else:
            error = errors.get(variant_id) or outputs.errors.get(variant_id) or "did not finish"
            status, summary = "failed", {}
        outcomes[variant_id] = VariantOutcome(
            variant_id, status, spec.config_hash, run_id, error,
            outputs.attempts.get(variant_id, 0), summary,
        )  # fmt: skip
    return outcomes


def _run_id(folder: Path) -> str | None:
    path = VariantFiles(folder).run
    return json.loads(path.read_text()).get("run_id") if path.is_file() else None


def _grid_key(specs: dict[str, TrialSpec]) -> str:
    return json.dumps(sorted((k, v.config_hash) for k, v in specs.items()))


def _parent_run(tracker, config: Config, paths: SweepPaths, data_hash, specs, state) -> str:
    """Reuse the parent run of an interrupted sweep of the same grid, else start one."""
    grid = _grid_key(specs)
    previous = state.resumable_parent(grid)
    if previous and tracker.reopen(previous):
        logger.info("resuming MLflow parent run %s", previous)
        state.start(previous, grid)
        return previous
    params = {"variants": len(specs), "grid": json.dumps(config.train.grid)}
    params.update({f"train.ray.{k}": v for k, v in config.train.ray.model_dump().items()})
    tags = {"git_commit": git_commit(paths.root), "data_hash": data_hash, "kind": "sweep"}
    parent_id = tracker.start_run(
        f"sweep-{time.strftime('%Y%m%d-%H%M%S')}", params=params, tags=tags
    )
    state.start(parent_id, grid)
    return parent_id


def _write_summary(models_dir: Path, specs, outcomes, parent_id: str, data_hash: str) -> dict:
    summary = {
        "parent_run_id": parent_id,
        "data_hash": data_hash,
        "variants": {
            variant_id: {
                **{k: v for k, v in asdict(outcomes[variant_id]).items() if k != "summary"},
                **outcomes[variant_id].summary,
                "axes": spec.variant.axes,
                "model": spec.variant.model.model_dump(),
            }
            for variant_id, spec in specs.items()
        },
    }
    write_json(models_dir / SWEEP_FILE, summary)
    return summary
