"""The driver's record of a sweep in progress (``models/.sweep_state.json``).

A sweep killed at any point (Ctrl-C, SIGKILL of the driver) leaves this file behind;
the next run of the same grid reads it to reuse the MLflow parent and child runs and to
resume each unfinished variant from its latest Tune checkpoint in the Tune storage.
Only the driver reads or writes it, atomically, after every change.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pipeline.io import write_json

logger = logging.getLogger(__name__)

_SCHEMES = {"s3": "s3://", "gcs": "gs://", "local": ""}
"""pyarrow filesystem type -> URI prefix of a checkpoint path (others are not recorded:
their trials resume only within one run, through Tune's own retry)."""


def checkpoint_uri(checkpoint: Any) -> str | None:
    """A URI from which ``tune.Checkpoint(uri)`` finds ``checkpoint`` again."""
    filesystem = getattr(checkpoint, "filesystem", None)
    prefix = _SCHEMES.get(getattr(filesystem, "type_name", "local"))
    return None if prefix is None else prefix + str(checkpoint.path)


class SweepState:
    """``{parent_run_id, grid, finished, variants: {id: {config_hash, run_id, checkpoint}}}``"""

    def __init__(self, path: Path):
        self.path = path
        self.data: dict[str, Any] = {}
        if path.is_file():
            try:
                self.data = json.loads(path.read_text())
            except (json.JSONDecodeError, OSError) as err:
                logger.warning("%s: unreadable (%s); starting a new sweep record", path, err)
        self.data.setdefault("variants", {})

    def save(self) -> None:
        write_json(self.path, self.data)

    # ----------------------------------------------------------------- the sweep
    def resumable_parent(self, grid: str) -> str | None:
        """The MLflow parent run of an unfinished sweep of the same grid, if any."""
        if self.data.get("grid") == grid and not self.data.get("finished"):
            return self.data.get("parent_run_id")
        return None

    def start(self, parent_run_id: str, grid: str) -> None:
        """A new or resumed sweep; variant entries stay (each is valid only for its own
        config hash), so a killed sweep rerun with a grown grid still resumes them."""
        self.data.update(parent_run_id=parent_run_id, grid=grid, finished=False)
        self.save()

    def finish(self) -> None:
        self.data["finished"] = True
        self.save()

    # ------------------------------------------------------------------ variants
    def _entry(self, variant_id: str, config_hash: str) -> dict[str, Any]:
        entry = self.data["variants"].get(variant_id)
        if entry is None or entry.get("config_hash") != config_hash:
            entry = self.data["variants"][variant_id] = {"config_hash": config_hash}
        return entry

    def get(self, variant_id: str, config_hash: str, key: str) -> str | None:
        entry = self.data["variants"].get(variant_id) or {}
        return entry.get(key) if entry.get("config_hash") == config_hash else None

    def set(self, variant_id: str, config_hash: str, key: str, value: str | None) -> None:
        self._entry(variant_id, config_hash)[key] = value
        self.save()
