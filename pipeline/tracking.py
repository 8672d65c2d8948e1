"""MLflow tracking: the only module that imports mlflow.

One parent run per sweep, one nested child run per variant (the parent link is set
explicitly with the ``mlflow.parentRunId`` tag, which is what the UI nests by). All
writes go through :class:`Tracker`, which the sweep drives from the Ray driver process
only (trial results reach it through a Tune callback), so a SQLite store never sees two
writers at once and "database is locked" cannot happen.

The store is ``sqlite:///mlflow.db`` in the repo by default; ``MLFLOW_TRACKING_URI`` or
``tracking.uri`` points elsewhere (e.g. ``http://mlflow-host:5000``, a server shared by
a Ray cluster). Relative SQLite paths resolve against the repo root, and artifacts of a
local store go to ``mlartifacts/`` beside it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric, Param, RunStatus
from mlflow.tracking import MlflowClient

from pipeline.config import TrackingConfig

logger = logging.getLogger(__name__)

PARENT_TAG = "mlflow.parentRunId"
_MAX_PARAM = 6000  # MLflow's limit on a param value's length


def resolve_uri(config: TrackingConfig, root: Path) -> str:
    """Tracking URI: ``MLFLOW_TRACKING_URI`` > ``tracking.uri``; relative sqlite -> absolute."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or config.uri
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        uri = prefix + str((root / uri[len(prefix) :]).resolve())
    return uri


class Tracker:
    """Explicit-run-id MLflow client for one experiment (no global active-run state)."""

    def __init__(self, config: TrackingConfig, root: Path):
        self.uri = resolve_uri(config, root)
        self.client = MlflowClient(tracking_uri=self.uri)
        experiment = self.client.get_experiment_by_name(config.experiment)
        if experiment is None:
            location = None
            if self.uri.startswith("sqlite:///"):  # artifacts beside the database file
                database = Path(self.uri[len("sqlite:///") :])
                location = (database.parent / "mlartifacts").resolve().as_uri()
            self.experiment_id = self.client.create_experiment(
                config.experiment, artifact_location=location
            )
        else:
            self.experiment_id = experiment.experiment_id
        logger.info("MLflow: %s (experiment %r)", self.uri, config.experiment)

    # ------------------------------------------------------------------- runs
    def start_run(
        self,
        name: str,
        *,
        parent_id: str | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        run_tags = dict(tags or {})
        if parent_id:
            run_tags[PARENT_TAG] = parent_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags=run_tags)
        if params:
            self.log_params(run.info.run_id, params)
        return run.info.run_id

    def reopen(self, run_id: str) -> bool:
        """Mark an existing run RUNNING again (resumed sweep); False if it is gone."""
        try:
            self.client.update_run(run_id, status="RUNNING")
        except mlflow.exceptions.MlflowException:
            return False
        return True

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(
            run_id, status=RunStatus.to_string(RunStatus.from_string(status))
        )

    def children(self, parent_id: str) -> list[Any]:
        return self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}'"
        )

    # ---------------------------------------------------------------- logging
    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        items = [Param(k, str(v)[:_MAX_PARAM]) for k, v in params.items()]
        for start in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[start : start + 100])

    def log_metrics(self, run_id: str, metrics: Mapping[str, Any], step: int) -> None:
        now = int(time.time() * 1000)
        items = [
            Metric(k, float(v), now, step)
            for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        ]
        if items:
            self.client.log_batch(run_id, metrics=items)

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        for key, value in tags.items():
            self.client.set_tag(run_id, key, str(value)[:5000])

    def log_artifacts(self, run_id: str, paths: Iterable[Path], subdir: str | None = None) -> None:
        for path in paths:
            if Path(path).is_file():
                self.client.log_artifact(run_id, str(path), artifact_path=subdir)
