"""MLflow tracking: the only module that imports mlflow.

Runs are found by their tags, never by ids stored in DVC outputs, so a temporary or
queued DVC experiment, a deleted ``mlflow.db`` or a fresh clone all find or recreate
the right run:

========== ===================================== =====================================
``kind``   key tags                              what it holds
========== ===================================== =====================================
sweep      ``grid_hash``                         one train stage run: the grid, counts,
                                                 ``sweep.json`` (parent of ``train``)
train      ``config_hash``                       one variant's training: per-evaluation and
                                                 summary metrics, dataset, model
evaluation ``eval_key``                          one evaluate stage run: the study table,
                                                 significance, the report (parent of
                                                 ``test``)
test       ``eval_key``, ``config_hash``         one variant's test scores beside its
                                                 training summary (the compare view)
========== ===================================== =====================================

Runs are created through MLflow's own tag resolution (user, source, git commit) with an
explicit parent, and carry the DVC experiment's name and baseline revision
(``dvc.exp_name``, ``dvc.baseline_rev``) when DVC runs the stage inside one.

All writes happen in driver processes (trial results reach the driver through a Tune
callback), so a SQLite store never sees concurrent writers from one stage. The store is
``sqlite:///mlflow.db`` under the project root by default (:mod:`pipeline.config.infra`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import socket
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.entities import (
    DatasetInput,
    InputTag,
    LoggedModelOutput,
    LoggedModelStatus,
    Metric,
    Param,
    Run,
    RunStatus,
)
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.tracking.context.registry import resolve_tags

from pipeline.config.infra import Infra
from pipeline.errors import StageError

logger = logging.getLogger(__name__)

PARENT_TAG = "mlflow.parentRunId"
MODEL_TYPE = "translation"  # the Models tab's type column: an MLflow pyfunc that translates
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
"""MLflow 3's UI opens a model-training experiment on its runs table (not GenAI traces)."""
DVC_TAGS = {"DVC_EXP_NAME": "dvc.exp_name", "DVC_EXP_BASELINE_REV": "dvc.baseline_rev"}
UNFINISHED = ("RUNNING", "FAILED", "KILLED", "SCHEDULED")
WRITER_TAG = "tracking.writer"
"""The process that writes a run (:mod:`pipeline.tracking.outbox`): another process
never reopens a RUNNING run whose writer is alive."""
CLOSED_TAG = "tracking.closed_by"
"""On a run its own writer left RUNNING (killed, or its end record lost to a full disk):
why a later stage ended it (:meth:`Tracker.close_stale`)."""
HOST = socket.gethostname()
_MAX_PARAM = 6000  # MLflow's limit on a param value's length


def _store_lock(uri: str):
    """An OS lock beside a SQLite store while it is opened (MLflow creates and migrates
    its schema on first use: two processes doing it at once fail); a no-op for servers,
    which own their schema."""
    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    database = Path(uri[len("sqlite:///") :])
    database.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(f"{database}.lock", timeout=LOCK_TIMEOUT_S)


LOCK_TIMEOUT_S = 300
"""Bound on waiting for another process to open the same SQLite store."""


def writer_alive(root: Path, writer: str | None) -> bool:
    """Whether the process that tagged a run with ``writer`` still runs: its journal's
    lock under ``root`` is held. A writer of another host whose journal is not here
    counts as alive."""
    if not writer:
        return False
    folder = root / writer
    if not folder.is_dir():
        return not writer.endswith(f"@{HOST}")
    lock = FileLock(folder / "lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release(force=True)
    return False


class TrackingError(StageError):
    """The MLflow store cannot be used as configured (one line naming the setting)."""


def resolve_uri(infra: Infra) -> str:
    """The tracking URI, a relative ``sqlite:///`` path made absolute under the project
    root (``DVC_ROOT`` inside DVC experiments: the user's repo, not the temporary copy)."""
    uri = infra.tracking.uri
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        uri = prefix + str((infra.root / uri[len(prefix) :]).resolve())
    return uri


def dvc_tags() -> dict[str, str]:
    """The DVC experiment this process runs in (DVC sets these variables), if any."""
    return {tag: os.environ[env] for env, tag in DVC_TAGS.items() if os.environ.get(env)}


def experiment_key(key: Mapping[str, str]) -> dict[str, str]:
    """``key`` scoped to the DVC experiment this process runs in: each experiment gets
    its own evaluation runs (``dvc exp show`` rows and runs match one to one); outside
    one, the key asks for runs of no experiment (:meth:`Tracker.find_run`)."""
    return {**key, **dvc_tags()} if dvc_tags() else {**key, DVC_TAGS["DVC_EXP_NAME"]: ""}


def model_name(name: str) -> str:
    """``name`` as MLflow accepts it for a logged or registered model (no ``/ : . % " '``)."""
    return re.sub(r"[/:.%\"']", "_", name)


def dataset_digest(sha256: str) -> str:
    """The digest a dataset is logged with (MLflow keeps at most 36 characters)."""
    return sha256[:36]


def _quoted(value: str) -> str:
    return "'" + str(value).replace("'", "\\'") + "'"


class Tracker:
    """Explicit-run-id MLflow client for one experiment (no global active-run state)."""

    def __init__(self, infra: Infra):
        self.uri = resolve_uri(infra)
        self.log_models = infra.tracking.log_models
        self.writers = infra.cache_dir / "tracking"  # the writers' journals (outbox)
        name = self.experiment_name = infra.tracking.experiment
        try:
            with _store_lock(self.uri):  # two queued experiments may create the schema
                self.client = MlflowClient(tracking_uri=self.uri)
                self.experiment_id = self._experiment(name)
        except MlflowException as err:
            message = str(err.message).strip().splitlines()[0].split(". See ")[0]
            raise TrackingError(
                f"tracking.uri {self.uri!r} ({infra.source}, or MLFLOW_TRACKING_URI): {message}"
            ) from None
        logger.info("MLflow: %s (experiment %r)", self.uri, name)

    def _experiment(self, name: str) -> str:
        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            try:
                return self.client.create_experiment(
                    name, artifact_location=self._artifact_location(), tags=EXPERIMENT_KIND
                )
            except MlflowException as err:  # another process created it meanwhile
                experiment = self.client.get_experiment_by_name(name)
                if experiment is None:
                    raise err from None
        for key, value in EXPERIMENT_KIND.items():
            if experiment.tags.get(key) != value:  # made by an older version
                self.client.set_experiment_tag(experiment.experiment_id, key, value)
        return experiment.experiment_id

    def _artifact_location(self) -> str | None:
        """Where a new experiment keeps its artifacts. A server: its own default root,
        ``mlflow-artifacts:/`` (the server proxies them: no path of this machine is
        recorded) unless it was started with ``--no-serve-artifacts`` or
        ``--default-artifact-root``. A SQLite store: ``mlartifacts/`` beside the file,
        as an absolute ``file:`` URI; MLflow resolves a relative one against the
        working directory and records every run's and model's location absolute, so a
        copied store still points at the original's artifacts (docs/infra.md)."""
        if self.uri.startswith("sqlite:///"):  # a local store: artifacts beside the file
            database = Path(self.uri[len("sqlite:///") :])
            return (database.parent / "mlartifacts").resolve().as_uri()
        return None

    # ------------------------------------------------------------------- runs
    def _search(self, tags: Mapping[str, str], max_results: int) -> list[Run]:
        """Live runs carrying ``tags``, newest first; a tag given as ``""`` must be absent."""
        clauses = [f"tags.`{k}` = {_quoted(v)}" for k, v in tags.items() if v != ""]
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=" AND ".join(clauses),
            order_by=["attributes.start_time DESC"],
            max_results=max_results,
        )
        absent = [k for k, v in tags.items() if v == ""]
        return [r for r in runs if not any(k in r.data.tags for k in absent)]

    def find_run(
        self,
        tags: Mapping[str, str],
        statuses: Iterable[str] = (),
        owned: Callable[[str | None], bool] = lambda writer: False,
    ) -> Run | None:
        """The newest live run carrying all ``tags`` (and one of ``statuses``, if given);
        a tag given as ``""`` must be absent. A RUNNING run whose writer (its
        :data:`WRITER_TAG`) is ``owned`` by a live process is passed over."""
        wanted = set(statuses)
        return next(
            (
                run
                for run in self._search(tags, max_results=50)
                if (not wanted or run.info.status in wanted)
                and not (run.info.status == "RUNNING" and owned(run.data.tags.get(WRITER_TAG)))
            ),
            None,
        )

    def newest_by(self, key: str, tags: Mapping[str, str]) -> dict[str, Run]:
        """The newest live run carrying ``tags`` for each value of tag ``key`` (one query)."""
        newest: dict[str, Run] = {}
        for run in self._search(tags, max_results=50_000):
            newest.setdefault(run.data.tags.get(key), run)
        return newest

    def start_run(
        self,
        name: str,
        *,
        parent_id: str | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        start_time_ms: int | None = None,
    ) -> str:
        """A new run with MLflow's standard tags (user, source, git commit), the DVC
        experiment's tags and ``tags``; nested under ``parent_id`` when given; started at
        ``start_time_ms`` (when its work began) or now."""
        run_tags = {**dvc_tags(), **(tags or {})}
        if parent_id:
            run_tags[PARENT_TAG] = parent_id
        run = self.client.create_run(
            self.experiment_id, start_time=start_time_ms, run_name=name, tags=resolve_tags(run_tags)
        )
        if params:
            self.log_params(run.info.run_id, params)
        return run.info.run_id

    def find_or_start(
        self,
        name: str,
        key: Mapping[str, str],
        *,
        reuse: Iterable[str] = (),
        parent_id: str | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        owned: Callable[[str | None], bool] = lambda writer: False,
        start_time_ms: int | None = None,
    ) -> str:
        """Reopen the newest run with the ``key`` tags (in one of the ``reuse``
        statuses; any status if empty) that no live process still writes (``owned``:
        a run's :data:`WRITER_TAG` value -> whether that writer is alive), else start one.
        A reopened run is re-tagged with the current parent and DVC experiment."""
        found = self.find_run(key, reuse, owned)
        if found is not None:
            run_id = found.info.run_id
            self.client.update_run(run_id, status="RUNNING")
            retag = {**dvc_tags(), **(tags or {})}
            if parent_id:
                retag[PARENT_TAG] = parent_id
            self.set_tags(run_id, retag)
            return run_id
        present = {k: v for k, v in key.items() if v != ""}
        return self.start_run(
            name,
            parent_id=parent_id,
            params=params,
            tags={**present, **(tags or {})},
            start_time_ms=start_time_ms,
        )

    def close_stale(
        self,
        tags: Mapping[str, str],
        status: str,
        reason: str,
        alive: Callable[[str | None], bool] | None = None,
    ) -> list[str]:
        """End as ``status`` every RUNNING run carrying ``tags`` whose writer is gone (a
        killed stage, an end record lost to a full disk): ``alive`` (default: its journal's
        lock is held) says which writers still run. Each is tagged :data:`CLOSED_TAG`
        with ``reason``; returns their ids."""
        alive = alive or (lambda writer: writer_alive(self.writers, writer))
        closed = []
        for run in self._search(tags, max_results=1000):
            if run.info.status != "RUNNING" or alive(run.data.tags.get(WRITER_TAG)):
                continue
            self.set_tags(run.info.run_id, {CLOSED_TAG: reason})
            self.finish(run.info.run_id, status)
            closed.append(run.info.run_id)
        if closed:
            logger.info("MLflow: %d runs left open by ended stages closed %s", len(closed), status)
        return closed

    def finish(self, run_id: str, status: str = "FINISHED", end_time_ms: int | None = None) -> None:
        self.client.set_terminated(
            run_id, status=RunStatus.to_string(RunStatus.from_string(status)), end_time=end_time_ms
        )

    # ---------------------------------------------------------------- logging
    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        items = [Param(k, str(v)[:_MAX_PARAM]) for k, v in params.items()]
        for start in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[start : start + 100])

    def log_metrics(
        self,
        run_id: str,
        metrics: Mapping[str, Any],
        step: int = 0,
        timestamp_ms: int | None = None,
        *,
        model_id: str | None = None,
        dataset: tuple[str, str] | None = None,
    ) -> None:
        """Log ``metrics`` at ``step``. With ``timestamp_ms`` fixed, logging the same batch
        again adds nothing (MLflow drops exact duplicates). ``model_id`` and ``dataset``
        (name, digest) link them to a logged model and the data they were measured on
        (the Models tab's metric columns)."""
        now = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        name, digest = dataset or (None, None)
        items = [
            Metric(
                k, float(v), now, step, model_id=model_id, dataset_name=name, dataset_digest=digest
            )
            for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        ]
        for start in range(0, len(items), 1000):
            self.client.log_batch(run_id, metrics=items[start : start + 1000])

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        for key, value in tags.items():
            self.client.set_tag(run_id, key, str(value)[:5000])

    def log_artifacts(self, run_id: str, paths: Iterable[Path], subdir: str | None = None) -> None:
        for path in paths:
            path = Path(path)
            if path.is_file():
                self.client.log_artifact(run_id, str(path), artifact_path=subdir)
            elif path.is_dir():
                self.client.log_artifacts(run_id, str(path), artifact_path=subdir)

    def log_dataset(self, run_id: str, name: str, path: Path, digest: str, context: str) -> None:
        """Record a dataset input (MLflow's Datasets column): where it is and its hash."""
        with warnings.catch_warnings():  # a local path matches two equivalent source kinds
            warnings.simplefilter("ignore", UserWarning)
            source = resolve_dataset_source(str(path))
        dataset = MetaDataset(source, name=name, digest=dataset_digest(digest))
        entity = DatasetInput(
            dataset._to_mlflow_entity(), tags=[InputTag("mlflow.data.context", context)]
        )
        self.client.log_inputs(run_id, datasets=[entity])

    def find_logged_model(
        self, tags: Mapping[str, str], source_run_id: str | None = None
    ) -> str | None:
        """The id of a READY logged model carrying ``tags`` (and logged by run
        ``source_run_id``, if given), if one exists."""
        clauses = " AND ".join(f"tags.`{k}` = {_quoted(v)}" for k, v in tags.items())
        if source_run_id:
            clauses += f" AND source_run_id = {_quoted(source_run_id)}"
        models = self.client.search_logged_models([self.experiment_id], filter_string=clauses)
        ready = [
            m for m in models if str(m.status).endswith("READY") and m.model_type == MODEL_TYPE
        ]  # older versions logged bare checkpoints (another type): those do not load
        return ready[0].model_id if ready else None

    def log_model(
        self,
        run_id: str,
        name: str,
        model_dir: Path,
        *,
        step: int,
        params: Mapping[str, Any],
        tags: Mapping[str, str],
    ) -> str | None:
        """Upload ``model_dir`` (an MLflow model folder: ``MLmodel`` and its artifacts) as
        a logged model produced by ``run_id`` at ``step`` (the run's Models column, the
        Models tab); ``None`` when turned off."""
        if not self.log_models:
            return None
        model = self.client.create_logged_model(
            self.experiment_id,
            name=model_name(name),
            source_run_id=run_id,
            params={k: str(v)[:_MAX_PARAM] for k, v in params.items()},
            tags=dict(tags),
            model_type=MODEL_TYPE,
        )
        try:
            self.client.log_model_artifacts(model.model_id, str(model_dir))
        except Exception:
            self.client.finalize_logged_model(model.model_id, LoggedModelStatus.FAILED)
            raise
        self.client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
        self.client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step=step)])
        return model.model_id

    def register(self, name: str, model_id: str, alias: str, tags: Mapping[str, str]) -> str:
        """Point registered model ``name``'s ``alias`` at logged model ``model_id`` (a new
        version unless the alias already points at it); the version number. The version's
        source is the model's artifact location, so it resolves under this store's URI
        whatever the process's default."""
        name = model_name(name)
        model = self.client.get_logged_model(model_id)
        source = model.artifact_location
        try:
            current = self.client.get_model_version_by_alias(name, alias)
            if current.source == source:
                return current.version
        except MlflowException:  # no such model or alias yet
            pass
        if not self.client.search_registered_models(f"name = {_quoted(name)}"):
            try:
                self.client.create_registered_model(name)
            except MlflowException:  # created meanwhile by another process
                pass
        version = self.client.create_model_version(
            name, source=source, run_id=model.source_run_id, model_id=model_id, tags=dict(tags)
        )  # the run too: MLflow would look it up through the default URI
        self.client.set_registered_model_alias(name, alias, version.version)
        return version.version
