"""Infrastructure settings: where the work runs and where it is tracked.

They change nothing a stage computes, so they are not DVC params: pointing the study at
another Ray cluster or MLflow server must not invalidate trained models. They live in
``infra.yaml`` (two sections, ``ray`` and ``tracking``; docs/infra.md), and the
environment overrides the file:

- ``RAY_ADDRESS`` -> ``ray.address``; ``MLFLOW_TRACKING_URI`` -> ``tracking.uri``;
  ``MLFLOW_EXPERIMENT_NAME`` -> ``tracking.experiment`` (the tools' own variables);
- the file itself: ``--infra PATH``, else ``$STUDY_INFRA``, else ``infra.yaml`` beside
  the params file; none of them present means the defaults below.

The defaults below are the repo's ``infra.yaml``, key for key (a test checks it): a key a
file leaves out takes that value, so another file, such as
``presets/gpu-cluster-infra.yaml``, holds only the keys it changes.

**Project root.** Relative paths (the SQLite store, Tune's storage, the variant cache)
resolve against ``DVC_ROOT`` when DVC sets it, else against the params file's folder.
DVC sets ``DVC_ROOT`` to the user's repository even inside ``dvc exp run --temp`` and
queued experiments, which run in a temporary copy: so every experiment writes to the
same MLflow store and shares the same finished variants.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import Field

from pipeline.config.params import ConfigError, Section, build

INFRA_FILE = "infra.yaml"
INFRA_ENV = "STUDY_INFRA"


class RayConfig(Section):
    address: str | None = None
    """Ray cluster to join (``auto``, or ``host:6379`` of its head; ``RAY_ADDRESS``
    overrides it); ``null`` starts a private local Ray with this machine's cores. Ray Client
    addresses (``ray://``) are refused: the driver must run on the cluster."""
    cpus_per_trial: float = Field(1.0, gt=0)
    """CPUs reserved per trial and decode task; it sets torch's thread count."""
    gpus_per_trial: float = Field(0.0, ge=0)
    """GPUs per trial and decode task; fractions share one GPU (and cap each process's
    share of its memory). Without CUDA on the node the trial fails, never falls back."""
    resources_per_trial: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources per trial and decode task, e.g. ``{accelerator_type:A100: 0.01}``
    or a node label given to ``ray start --resources``, to pin work to some nodes."""
    max_concurrent_trials: int = Field(0, ge=0)
    """Upper bound on trials at once (0 = as many as resources allow)."""
    trial_timeout_minutes: float = Field(60, ge=0)
    """Safety net, 0 = off: a trial still training after this many minutes of wall clock
    fails (it is reported as failed, never compared). Not a budget: how far a variant trains
    is set by the study's step cap and plateau rule, so results do not depend on the
    machine's speed; on a machine too slow for a variant to reach its step cap within it,
    the train stage raises it to twice that run (with a warning)."""
    pending_timeout_minutes: float = Field(10.0, gt=0)
    """Longest wait for a cluster that has fewer resources than one trial or decode task
    asks for (workers lost, a label no node has, an autoscaler that adds nothing): after
    this many minutes in a row the stage stops with one line saying what is missing.
    Finished variants are kept; rerunning the stage resumes the rest."""
    max_failures: int = Field(1, ge=0)
    """Retries of a trial that raises before it is recorded as failed; a retry resumes
    from the trial's latest Tune checkpoint."""
    storage_path: str | None = None
    """Ray Tune storage: the only place nodes share. A local path (default
    ``.ray_results`` in the project root; on a cluster, a folder every node mounts, e.g. NFS) or a
    URI passed to Tune unchanged (``s3://bucket/prefix``, ``gs://bucket/prefix``)."""


class TrackingConfig(Section):
    uri: str = "sqlite:///mlflow.db"
    """MLflow tracking URI (``MLFLOW_TRACKING_URI`` overrides it): a SQLite file (relative
    paths resolve against the project root, artifacts go to ``mlartifacts/`` beside it) or
    an MLflow server, ``http(s)://host:5000``."""
    experiment: str = "attention-study"
    """MLflow experiment name (``MLFLOW_EXPERIMENT_NAME`` overrides it)."""
    log_models: bool = True
    """Log each variant as an MLflow logged model that translates (its best checkpoint,
    config and subword models as a ``pyfunc``; the run's Models column) and register the
    one chosen on dev. 11-17 MB per variant of the default grid (about 320 MB for all 24)."""
    outage_wait_seconds: float = Field(60.0, ge=0)
    """At the end of the train stage (and when evaluate sends what earlier runs left), how
    long to wait for an unreachable MLflow server to take the records still queued; what
    is left is sent by the next run
    (:mod:`pipeline.tracking.outbox`). Training itself never waits for MLflow."""


class InfraFile(Section):
    ray: RayConfig = RayConfig()
    tracking: TrackingConfig = TrackingConfig()
    cache_dir: str = ".study_cache"
    """Finished variants by config hash, and the resume records of unfinished ones
    (relative: under the project root). A variant trained once, in the workspace or in
    any DVC experiment, is copied from here instead of retrained."""


@dataclass(frozen=True)
class Infra:
    """The resolved settings: file values with the environment's overrides applied."""

    ray: RayConfig
    tracking: TrackingConfig
    root: Path
    """Project root: relative paths resolve against it (``DVC_ROOT``, else the params
    file's folder)."""
    cache_dir: Path
    source: str
    """Where the settings came from, for messages: the file's path or ``defaults``."""

    @staticmethod
    def default(root: Path) -> Infra:
        return resolve(InfraFile(), root.resolve(), "defaults")


def project_root(params_path: str | Path) -> Path:
    root = os.environ.get("DVC_ROOT")
    return Path(root).resolve() if root else Path(params_path).resolve().parent


def load_infra(params_path: str | Path, path: str | Path | None = None) -> Infra:
    """Read the infra file (see the module docstring for which) and apply the environment."""
    root = project_root(params_path)
    explicit = path or os.environ.get(INFRA_ENV)
    candidate = Path(explicit) if explicit else Path(params_path).resolve().parent / INFRA_FILE
    if not candidate.is_file():
        if explicit:
            raise ConfigError(f"{candidate}: infra file not found")
        return resolve(InfraFile(), root, "defaults")
    try:
        data = yaml.safe_load(candidate.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{candidate}: not valid YAML: {err}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{candidate}: top level must be a mapping (ray:, tracking:)")
    try:
        settings = build(InfraFile, data)
    except ConfigError as err:
        raise ConfigError(f"{candidate}: {err}") from None
    return resolve(settings, root, str(candidate))


def resolve(settings: InfraFile, root: Path, source: str) -> Infra:
    ray = settings.ray
    if os.environ.get("RAY_ADDRESS"):
        ray = ray.model_copy(update={"address": os.environ["RAY_ADDRESS"]})
    tracking = settings.tracking
    overrides = {"uri": "MLFLOW_TRACKING_URI", "experiment": "MLFLOW_EXPERIMENT_NAME"}
    updates = {key: os.environ[env] for key, env in overrides.items() if os.environ.get(env)}
    if updates:
        tracking = tracking.model_copy(update=updates)
    cache_dir = (root / Path(settings.cache_dir).expanduser()).resolve()
    return Infra(ray, tracking, root, cache_dir, source)
