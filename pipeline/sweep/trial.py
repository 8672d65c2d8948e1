"""One trial: what it is given (:class:`TrialSpec`) and what runs on the worker
(:func:`run_trial`, Ray Tune's function trainable).

The trial entry point is where a worker process is set up (process-wide settings, plugin
scorers) before training: library code never does it as a side effect.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune

from pipeline.artifacts import VariantFiles
from pipeline.config.grid import Variant
from pipeline.data.dataset import TokenizedData
from pipeline.io import DiskFullError, disk_full, free_bytes, space_for, tree_bytes
from pipeline.records.train import Trained, TrainSummary
from pipeline.runtime.cluster import (
    TaskResources,
    TasksFailedError,
    claim_device,
    device_for,
    init_ray,
    node_id,
    ray_address,
    root_cause,
    run_tasks,
)
from pipeline.runtime.console import quiet_worker_loggers
from pipeline.runtime.precision import resolve
from pipeline.runtime.process import prepare_process
from pipeline.scorers.plugins import PluginSource, load_plugins
from pipeline.scorers.plugins import loaded as loaded_plugins
from pipeline.train.callbacks import TrainCallback
from pipeline.train.preflight import Estimate, PreflightError, check_training, estimate
from pipeline.train.probes import dev_attention_figure
from pipeline.train.trainer import train_variant

logger = logging.getLogger(__name__)

FINAL = "variant_finished"
"""Key of a trial's final report (its summary and last checkpoint)."""
SETUP_ERROR = "setup_error"
"""Key of the final report of a trial that failed before its first step: an error every
attempt would repeat (deterministic), so the trial ends without Tune's retries."""


@dataclass(frozen=True)
class TrialSpec:
    """Everything a trial needs besides the data (which travels once, separately)."""

    variant: Variant
    config_hash: str
    resources: TaskResources
    resume_from: str | None = None  # URI of a Tune checkpoint left by a killed sweep
    trial_timeout_minutes: float = 0.0  # infra.yaml ray.trial_timeout_minutes (safety net)
    plugins: tuple[PluginSource, ...] = ()  # plugin scorers' sources (workers lack the files)


class _TuneReport(TrainCallback):
    """Each dev evaluation -> ``tune.report`` with a checkpoint of the scratch folder."""

    def __init__(self, scratch: Path):
        self.scratch = scratch

    def on_evaluation(self, trainer, row: dict[str, Any]) -> None:
        report(row, self.scratch)


class _StepCount(TrainCallback):
    """Counts the optimizer steps this attempt trained."""

    def __init__(self):
        self.count = 0

    def on_step(self, trainer, step: int) -> None:
        self.count += 1


class TrainingTimeoutError(RuntimeError):
    """A variant ran past its safety time limit: it failed (its steps are not a budget)."""


class SafetyTimeout(TrainCallback):
    """The study's safety net against a hanging trial (``ray.trial_timeout_minutes``):
    raises :class:`TrainingTimeoutError` once the variant's training time, across
    resumes, passes ``minutes``, so the variant is marked failed and never compared."""

    def __init__(self, variant_id: str, minutes: float):
        self.variant_id, self.minutes = variant_id, minutes
        self.start: float | None = None
        self.before = 0.0  # seconds trained by the attempts this one resumed

    def on_step(self, trainer, step: int) -> None:
        if self.start is None:
            self.start, self.before = time.perf_counter(), trainer.progress.wall_time
        if self.before + time.perf_counter() - self.start >= 60 * self.minutes:
            raise TrainingTimeoutError(
                f"variant {self.variant_id}: still training after {self.minutes:.1f} minutes "
                f"(step {step}), past the safety limit (infra.yaml "
                "ray.trial_timeout_minutes); marked failed"
            )


def report(row: dict[str, Any], scratch: Path) -> None:
    """``row`` with a Tune checkpoint of ``scratch``, which Tune copies to its storage
    (``ray.storage_path``); a full disk there is a :class:`DiskFullError` naming the
    trial's folder."""
    checkpoint = tune.Checkpoint.from_directory(str(scratch))
    with space_for(_trial_storage(), tree_bytes(scratch)):
        tune.report(row, checkpoint=checkpoint)


def _trial_storage() -> str:
    """Where Tune keeps this trial's checkpoints (under ``ray.storage_path``)."""
    context = tune.get_context()
    try:
        return context.get_storage().trial_fs_path
    except (AttributeError, RuntimeError):  # Ray's API for it is a developer one
        return context.get_trial_dir()


SCRATCH_MARGIN = 1 << 20
"""Below this much free (or less than the scratch folder holds), a training error is
taken for a full scratch disk: torch's checkpoint writer does not say so itself."""


def _full_scratch(err: Exception, scratch: Path) -> DiskFullError | None:
    """``err`` as a full disk under ``scratch`` (its errno or text, or too little free
    there to write the checkpoints again), else ``None``."""
    found = disk_full(err, scratch)
    if found is not None:
        return found
    needed = max(tree_bytes(scratch), SCRATCH_MARGIN)
    free = free_bytes(scratch)
    return DiskFullError(scratch, free, needed) if free is not None and free < needed else None


def run_trial(tune_config: dict[str, Any], specs: dict[str, TrialSpec], data: TokenizedData):
    """Ray Tune function trainable: train one variant in a scratch folder on this node,
    report every evaluation with a checkpoint of that folder, then the final summary."""

    spec = specs[tune_config["variant"]]
    device = claim_device(spec.resources.gpus, spec.resources.cpus)
    prepare_process()
    quiet_worker_loggers()
    load_plugins(list(spec.plugins))
    scratch = Path(tempfile.mkdtemp(prefix=f"{spec.variant.id}-"))
    files = VariantFiles(scratch)
    try:
        checkpoint = tune.get_checkpoint()
        if checkpoint is None and spec.resume_from:
            checkpoint = tune.Checkpoint(spec.resume_from)
        if checkpoint is not None:
            with space_for(scratch):
                checkpoint.to_directory(str(scratch))
            done = files.finished(spec.config_hash)
            if done:  # trained before the driver collected its outputs: report it again
                report(final_report(done.summary), scratch)
                return
        timeout = spec.trial_timeout_minutes
        steps = _StepCount()
        callbacks = [_TuneReport(scratch), steps]
        if timeout:
            callbacks.append(SafetyTimeout(spec.variant.id, timeout))
        try:
            result = train_variant(
                spec.variant,
                data,
                scratch,
                callbacks=callbacks,
                device=device,
                resume=True,
                key=spec.config_hash,
            )
        except Exception as err:
            full = _full_scratch(err, scratch)
            if full is err:
                raise
            if full is not None:  # the driver's disk watch stops the sweep on it
                raise full from err
            if steps.count or checkpoint is not None:
                raise  # failed mid-training: Tune retries it from its checkpoint
            # before its first step: every retry would fail the same way
            tune.report({FINAL: False, SETUP_ERROR: root_cause(err)})
            return
        summary = replace(result.summary, device=str(device), node_id=node_id())
        try:
            dev_attention_figure(files.checkpoint, data, scratch)
        except Exception as err:  # a figure must never fail a trained variant
            logger.warning("%s: no dev attention figure (%s)", spec.variant.id, err)
        files.write_result(Trained(spec.config_hash, summary))
        files.last.unlink(missing_ok=True)  # finished: the resume state is not kept
        report(final_report(summary), scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def final_report(summary: TrainSummary) -> dict[str, Any]:
    """A trial's last report: :data:`FINAL` and its summary's fields (Tune's results are
    flat; the driver reads the summary itself from the checkpoint's ``result.json``)."""
    return {FINAL: True, **summary.to_json()}


def _resolve_precision(precision: str, resources: TaskResources) -> str:
    """Ray task: what ``precision`` becomes on a trial's hardware."""
    return resolve(precision, claim_device(resources.gpus, resources.cpus))


def resolve_auto_precision(ray_config, resources: TaskResources) -> str:
    """``train.precision: auto`` resolved once for the whole sweep, where trials run: on
    this machine for a local Ray, else by a probe task with a trial's resources."""
    if ray_address(ray_config) is None:
        return resolve("auto", device_for(resources.gpus))
    init_ray(ray_config)
    probe = {"probe": "auto"}
    done = run_tasks(
        _resolve_precision,
        probe,
        resources,
        "precision probe",
        (resources,),
        ray_config.pending_timeout_minutes,
    )
    return done["probe"]


def _preflight_task(variants, resources: TaskResources, plugins, data: TokenizedData):
    """Ray task: :func:`pipeline.train.preflight.check_training` on a trial's hardware
    (with the plugin scorers' sources, which the worker lacks as files)."""
    device = claim_device(resources.gpus, resources.cpus)
    prepare_process()
    load_plugins(list(plugins))
    return check_training(variants, data, device, int(resources.cpus))


def preflight(variants: list[Variant], data: TokenizedData, ray_config, resources) -> Estimate:
    """Before the sweep: every model family of ``variants`` trains a few steps in its
    resolved precision where trials run (this machine for a local Ray, else a Ray task
    with a trial's resources); logs the grid's expected steps and time. Raises
    :class:`pipeline.train.preflight.PreflightError` (one line naming the params key)."""
    start = time.perf_counter()
    if ray_address(ray_config) is None:
        prepare_process()
        checks = check_training(variants, data, device_for(resources.gpus), int(resources.cpus))
        gpus = torch.cuda.device_count() if resources.gpus else 0
        lanes = _lanes({"CPU": os.cpu_count() or 1, "GPU": gpus}, resources)
    else:
        init_ray(ray_config)
        try:
            shared = (resources, tuple(loaded_plugins()), data)
            checks = run_tasks(
                _preflight_task,
                {"preflight": list(variants)},
                resources,
                "preflight",
                shared,
                ray_config.pending_timeout_minutes,
            )["preflight"]
        except TasksFailedError as err:
            raise PreflightError(str(err).split("preflight: ", 1)[-1]) from None
        lanes = _lanes(ray.cluster_resources(), resources)
    if ray_config.max_concurrent_trials:
        lanes = min(lanes, ray_config.max_concurrent_trials)
    sized = len({v.model.hidden_size for v in variants}) > 1  # name the size when it varies
    rates = ", ".join(
        f"{_family_label(c.name, sized)} {c.seconds_per_step * 1e3:.0f} ms" for c in checks
    )
    precisions = sorted({c.precision for c in checks})
    logger.info(
        "preflight: %d model families train in %s here (%.1f s); a step takes %s",
        len(checks),
        "/".join(precisions),
        time.perf_counter() - start,
        rates,
    )
    forecast = estimate(variants, checks, lanes)
    logger.info("%s", forecast.line())
    return forecast


def _family_label(name: str, sized: bool) -> str:
    """``additive`` of a family named by its first variant (``additive-fwd-h128-s1``), with
    its size (``additive h128``) when the grid has several."""
    parts = name.split("-")
    size = next((p for p in parts[1:] if p.startswith("h") and p[1:].isdigit()), "")
    return f"{parts[0]} {size}" if sized and size else parts[0]


def _lanes(available: dict[str, float], resources: TaskResources) -> int:
    """How many trials of ``resources`` fit at once in ``available`` (CPUs, GPUs)."""
    lanes = available.get("CPU", 1) // max(resources.cpus, 1e-9)
    if resources.gpus:
        lanes = min(lanes, available.get("GPU", 0) // resources.gpus)
    return max(1, int(lanes))
