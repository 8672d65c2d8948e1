"""The grid sweep: Ray Tune runs one trial per variant; the only module that imports ray.

- Caching: a finished variant leaves ``models/<id>/result.json`` holding the hash of its
  full config and of the tokenized data. A rerun (or a grid that grew) skips variants
  whose hash matches and trains only the rest; a variant whose hash changed starts over.
- Resumption: a trial resumes from ``models/<id>/last.pt`` (written atomically every
  epoch by :func:`pipeline.training.train_variant`), so a sweep killed by Ctrl-C or
  SIGKILL continues where each variant stopped. A finished variant's ``last.pt`` is
  deleted once its ``result.json`` is written.
- Faults: Tune retries a trial that raises (``train.ray.max_failures``), then records it
  as failed; the other trials finish.
- Tracking: :class:`MlflowCallback` runs in this (driver) process and writes every
  trial's metrics to MLflow, so the store has one writer.
- Paths are absolute, because Tune runs trials in other working directories. On a
  cluster, ``models/`` and ``data/`` must be on a filesystem every node sees.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray import tune
from tqdm import tqdm

from pipeline.config import Config, ModelConfig, TrainConfig
from pipeline.data.tokenized import TokenizedData
from pipeline.grid import Variant, expand_grid, select
from pipeline.io import write_json
from pipeline.provenance import git_commit
from pipeline.tracking import Tracker

logger = logging.getLogger(__name__)

RESULT_FILE = "result.json"
RUN_FILE = "run.json"
SWEEP_FILE = "sweep.json"


class SweepFailedError(RuntimeError):
    """Some variants failed and ``train.allow_partial`` is off."""


@dataclass(frozen=True)
class SweepPaths:
    root: Path
    tok_dir: Path
    models_dir: Path
    storage: Path

    @staticmethod
    def under(root: Path, config: Config, tok_dir: Path, models_dir: Path) -> SweepPaths:
        root = root.resolve()
        storage = config.train.ray.storage_path or str(root / ".ray_results")
        return SweepPaths(
            root, (root / tok_dir).resolve(), (root / models_dir).resolve(), Path(storage)
        )


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
def _variant_from(spec: dict[str, Any]) -> Variant:
    return Variant(
        spec["id"],
        ModelConfig.model_validate(spec["model"]),
        TrainConfig.model_validate(spec["train"]),
        spec["axes"],
    )


def run_trial(tune_config: dict[str, Any], specs: dict[str, dict[str, Any]]) -> None:
    """Ray Tune function trainable: train one variant, report each epoch, mark it done."""
    import torch

    from pipeline.report.figures import dev_attention_figure
    from pipeline.training import train_variant

    spec = specs[tune_config["variant"]]
    torch.set_num_threads(max(1, int(spec["cpus"])))
    device = "cuda" if spec["gpus"] > 0 and torch.cuda.is_available() else "cpu"
    variant, out_dir = _variant_from(spec), Path(spec["out_dir"])
    result = train_variant(
        variant, Path(spec["tok_dir"]), out_dir, callback=tune.report, device=device, resume=True
    )
    summary = {k: v for k, v in asdict(result).items() if k != "history"}
    summary["device"] = device
    try:
        dev_attention_figure(out_dir / "checkpoint.pt", Path(spec["tok_dir"]), out_dir)
    except Exception as err:  # a figure must never fail a trained variant
        logger.warning("%s: no dev attention figure (%s)", variant.id, err)
    write_json(out_dir / RESULT_FILE, {"config_hash": spec["config_hash"], "summary": summary})
    # Finished: result.json now caches the variant, so the resume state (weights + Adam,
    # 3x the checkpoint) would only fill DVC's cache of models/.
    (out_dir / "last.pt").unlink(missing_ok=True)
    tune.report({"done": True, **{k: v for k, v in summary.items() if _scalar(v)}})


def _scalar(value: Any) -> bool:
    return isinstance(value, int | float | str | bool)


# -------------------------------------------------------------------- tracking
class MlflowCallback(tune.Callback):
    """Driver-side bridge from Tune events to MLflow child runs (single writer)."""

    def __init__(self, tracker: Tracker, parent_id: str, specs: dict[str, dict], tags: dict):
        self.tracker, self.parent_id, self.specs, self.tags = tracker, parent_id, specs, tags
        self.run_ids: dict[str, str] = {}
        self.attempts: dict[str, int] = {}
        self.errors: dict[str, str] = {}

    def _run_for(self, trial) -> str:
        variant_id = trial.config["variant"]
        if variant_id in self.run_ids:
            return self.run_ids[variant_id]
        spec = self.specs[variant_id]
        run_file = Path(spec["out_dir"]) / RUN_FILE
        previous = json.loads(run_file.read_text()) if run_file.is_file() else {}
        run_id = previous.get("run_id")
        if not (previous.get("config_hash") == spec["config_hash"] and self.tracker.reopen(run_id)):
            tags = {**self.tags, "variant": variant_id, "config_hash": spec["config_hash"]}
            run_id = self.tracker.start_run(
                variant_id, parent_id=self.parent_id, params=spec["params"], tags=tags
            )
            write_json(run_file, {"run_id": run_id, "config_hash": spec["config_hash"]})
        self.run_ids[variant_id] = run_id
        return run_id

    def on_trial_start(self, iteration, trials, trial, **info):
        variant_id = trial.config["variant"]
        self.attempts[variant_id] = self.attempts.get(variant_id, 0) + 1
        self._run_for(trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "epoch" in result and not result.get("done"):
            metrics = {k: result[k] for k in _EPOCH_METRICS if k in result}
            self.tracker.log_metrics(self._run_for(trial), metrics, step=int(result["epoch"]))

    def on_trial_complete(self, iteration, trials, trial, **info):
        out_dir = Path(self.specs[trial.config["variant"]]["out_dir"])
        run_id = self._run_for(trial)
        self.tracker.log_artifacts(
            run_id, [out_dir / n for n in ("history.csv", "config.json", "dev_attention.png")]
        )
        final = trial.last_result or {}  # the trial's last report carries its summary
        resolved = {k: str(final[k]) for k in ("precision", "device") if k in final}
        if resolved:  # what train.precision: auto became on the trial's hardware
            self.tracker.set_tags(run_id, resolved)
        self.tracker.finish(run_id, "FINISHED")

    def on_trial_error(self, iteration, trials, trial, **info):
        variant_id = trial.config["variant"]
        error = _trial_error(trial)
        self.errors[variant_id] = error
        run_id = self._run_for(trial)
        self.tracker.set_tags(run_id, {"error": error})
        self.tracker.finish(run_id, "FAILED")


_EPOCH_METRICS = (
    "train_loss",
    "dev_loss",
    "dev_bleu",
    "tokens_per_s",
    "learning_rate",
    "wall_time",
)


def _trial_error(trial) -> str:
    path = getattr(trial, "error_file", None) or ""
    try:
        text = Path(path).read_text().strip().splitlines()
        return text[-1] if text else "unknown error"
    except OSError:
        return "unknown error"


# ----------------------------------------------------------------------- sweep
def _specs(variants: list[Variant], paths: SweepPaths, config: Config, data_hash: str) -> dict:
    ray_cfg = config.train.ray
    return {
        v.id: {
            "id": v.id,
            "model": v.model.model_dump(),
            "train": v.train.model_dump(),
            "axes": v.axes,
            "params": v.flat_params(),
            "config_hash": v.config_hash(data_hash),
            "tok_dir": str(paths.tok_dir),
            "out_dir": str(paths.models_dir / v.id),
            "cpus": ray_cfg.cpus_per_trial,
            "gpus": ray_cfg.gpus_per_trial,
        }
        for v in variants
    }


def cached_result(out_dir: Path, config_hash: str) -> dict | None:
    path = out_dir / RESULT_FILE
    if not path.is_file():
        return None
    try:
        result = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return result if result.get("config_hash") == config_hash else None


def _prepare_dir(out_dir: Path, config_hash: str) -> None:
    """Keep a variant's folder only if it belongs to this exact config (for resuming)."""
    run_file = out_dir / RUN_FILE
    if out_dir.exists():
        previous = json.loads(run_file.read_text()) if run_file.is_file() else {}
        if previous.get("config_hash") != config_hash:
            logger.info("%s: config or data changed; starting it over", out_dir.name)
            shutil.rmtree(out_dir)


def init_ray(config: Config, root: Path) -> None:
    address = config.train.ray.address or os.environ.get("RAY_ADDRESS")
    runtime_env = {"env_vars": {"PYTHONPATH": str(root)}}
    if ray.is_initialized():
        return
    if address:
        logger.info("joining Ray cluster at %s", address)
        ray.init(address=address, runtime_env=runtime_env, logging_level=logging.WARNING)
    else:
        ray.init(
            num_cpus=os.cpu_count(),
            include_dashboard=False,
            runtime_env=runtime_env,
            logging_level=logging.WARNING,
            log_to_driver=True,
        )


def _tune(todo: dict[str, dict], config: Config, paths: SweepPaths, callback) -> Any:
    ray_cfg = config.train.ray
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, specs=todo),
        {"cpu": ray_cfg.cpus_per_trial, "gpu": ray_cfg.gpus_per_trial},
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
            storage_path=str(paths.storage),
            failure_config=tune.FailureConfig(max_failures=ray_cfg.max_failures),
            callbacks=[callback],
            progress_reporter=reporter,
            verbose=1,
        ),
    )
    return tuner.fit()


def run_sweep(config: Config, paths: SweepPaths, only: list[str] | None = None) -> dict:
    """Train every selected variant not already finished; write ``models/sweep.json``."""
    variants = select(expand_grid(config), only or config.train.only)
    data_hash = TokenizedData(paths.tok_dir).fingerprint()
    specs = _specs(variants, paths, config, data_hash)
    outcomes = {}
    for variant_id, spec in specs.items():
        cached = cached_result(Path(spec["out_dir"]), spec["config_hash"])
        if cached is not None:
            outcomes[variant_id] = VariantOutcome(
                variant_id, "cached", spec["config_hash"], summary=cached["summary"]
            )
    todo = {k: v for k, v in specs.items() if k not in outcomes}
    logger.info("%d variants: %d cached, %d to train", len(specs), len(outcomes), len(todo))

    tracker = Tracker(config.tracking, paths.root)
    parent_id = _parent_run(tracker, config, paths, data_hash, specs)
    if todo:
        for spec in todo.values():
            _prepare_dir(Path(spec["out_dir"]), spec["config_hash"])
        init_ray(config, paths.root)
        tags = {"git_commit": git_commit(paths.root), "data_hash": data_hash}
        callback = MlflowCallback(tracker, parent_id, todo, tags)
        _tune(todo, config, paths, callback)
        outcomes.update(_collect(todo, callback))
    for variant_id, spec in specs.items():
        outcomes[variant_id].run_id = outcomes[variant_id].run_id or _run_id(spec)
    summary = _write_summary(paths.models_dir, specs, outcomes, parent_id, data_hash)
    failed = [o for o in outcomes.values() if o.status == "failed"]
    tracker.log_metrics(parent_id, {"variants_failed": len(failed)}, step=0)
    tracker.finish(parent_id, "FAILED" if failed and not config.train.allow_partial else "FINISHED")
    _write_parent(paths.models_dir, parent_id, specs, finished=True)
    if failed and not config.train.allow_partial:
        names = "; ".join(f"{o.id}: {o.error}" for o in failed)
        raise SweepFailedError(f"{len(failed)} of {len(specs)} variants failed: {names}")
    return summary


def _collect(todo: dict[str, dict], callback: MlflowCallback) -> dict[str, VariantOutcome]:
    outcomes = {}
    for variant_id, spec in todo.items():
        result = cached_result(Path(spec["out_dir"]), spec["config_hash"])
        attempts = callback.attempts.get(variant_id, 0)
        if result is not None:
            outcome = VariantOutcome(
                variant_id, "finished", spec["config_hash"], summary=result["summary"]
            )
        else:
            error = callback.errors.get(variant_id, "did not finish")
            outcome = VariantOutcome(variant_id, "failed", spec["config_hash"], error=error)
        outcome.attempts = attempts
        outcome.run_id = callback.run_ids.get(variant_id)
        outcomes[variant_id] = outcome
    return outcomes


def _run_id(spec: dict) -> str | None:
    run_file = Path(spec["out_dir"]) / RUN_FILE
    return json.loads(run_file.read_text()).get("run_id") if run_file.is_file() else None


def _grid_key(specs: dict[str, dict]) -> str:
    return json.dumps(sorted((k, v["config_hash"]) for k, v in specs.items()))


def _parent_run(tracker: Tracker, config: Config, paths: SweepPaths, data_hash: str, specs) -> str:
    """Reuse the parent run of an interrupted sweep of the same grid, else start one."""
    state_file = paths.models_dir / ".sweep_parent.json"
    state = json.loads(state_file.read_text()) if state_file.is_file() else {}
    if state.get("grid") == _grid_key(specs) and not state.get("finished"):
        if tracker.reopen(state["run_id"]):
            logger.info("resuming MLflow parent run %s", state["run_id"])
            return state["run_id"]
    params = {"variants": len(specs), "grid": json.dumps(config.train.grid)}
    params.update({f"train.ray.{k}": v for k, v in config.train.ray.model_dump().items()})
    tags = {"git_commit": git_commit(paths.root), "data_hash": data_hash, "kind": "sweep"}
    parent_id = tracker.start_run(
        f"sweep-{time.strftime('%Y%m%d-%H%M%S')}", params=params, tags=tags
    )
    _write_parent(paths.models_dir, parent_id, specs, finished=False)
    return parent_id


def _write_parent(models_dir: Path, run_id: str, specs: dict, finished: bool) -> None:
    write_json(
        models_dir / ".sweep_parent.json",
        {"run_id": run_id, "grid": _grid_key(specs), "finished": finished},
    )


def _write_summary(models_dir: Path, specs, outcomes, parent_id: str, data_hash: str) -> dict:
    summary = {
        "parent_run_id": parent_id,
        "data_hash": data_hash,
        "variants": {
            variant_id: {
                **{k: v for k, v in asdict(outcomes[variant_id]).items() if k != "summary"},
                **outcomes[variant_id].summary,
                "axes": spec["axes"],
                "model": spec["model"],
            }
            for variant_id, spec in specs.items()
        },
    }
    write_json(models_dir / SWEEP_FILE, summary)
    return summary


# ------------------------------------------------------------------ ray tasks
def run_tasks(
    function: Callable[[dict[str, Any]], Any],
    specs: dict[str, dict[str, Any]],
    config: Config,
    root: Path,
    description: str,
) -> dict[str, Any]:
    """Run ``function(spec)`` for every spec as Ray tasks with the trials' resources.

    Returns ``{key: result}``; a task that raised is re-raised as a ``RuntimeError``
    naming its key after the others finished.
    """
    init_ray(config, root)
    ray_cfg = config.train.ray
    remote = ray.remote(num_cpus=ray_cfg.cpus_per_trial, num_gpus=ray_cfg.gpus_per_trial)(function)
    pending = {remote.remote(spec): key for key, spec in specs.items()}
    results, errors = {}, {}
    with tqdm(total=len(pending), desc=description, unit="variant") as bar:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            key = pending.pop(done[0])
            try:
                results[key] = ray.get(done[0])
            except ray.exceptions.RayTaskError as err:
                errors[key] = str(err.cause if err.cause is not None else err).splitlines()[-1]
                logger.error("%s failed: %s", key, errors[key])
            bar.update(1)
    if errors:
        raise RuntimeError("; ".join(f"{k}: {v}" for k, v in sorted(errors.items())))
    return results
