"""``models/sweep.json``: every variant of the grid as the train stage left it
(:class:`VariantRecord`: its typed model and training configs, its status and, once
finished, its :class:`~pipeline.records.train.TrainSummary`), in a :class:`SweepRecord`.

A variant's status has one vocabulary, :data:`FINISHED` or :data:`FAILED`; how a finished
variant got there (trained now, or taken from the variant cache) is the run log's
``source``, not a status. Whether it is still improving is its summary's to say
(:attr:`~pipeline.records.train.TrainSummary.still_improving`)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from pipeline.config.grid import COMPARED, GRID_SETTINGS
from pipeline.config.params import SCORERS, ModelConfig, TrainConfig
from pipeline.io import write_json
from pipeline.records.base import RecordError, read_record
from pipeline.records.train import TrainSummary

SWEEP_FILE = "sweep.json"
"""``models/sweep.json``: status, config hash and training summary of every variant
(nothing about the run that made them: a rerun that trains nothing rewrites it as is)."""

Status = Literal["finished", "failed"]
FINISHED: Status = "finished"
FAILED: Status = "failed"


@dataclass(frozen=True)
class VariantRecord:
    """One variant of the grid as the train stage left it: what it is (its configs and
    the hash that identifies it), its status and, once finished, its training summary
    (``None`` when it failed, with the ``error``)."""

    id: str
    status: Status
    config_hash: str
    axes: dict[str, Any]
    model: ModelConfig
    train: TrainConfig  # the grid's own settings (GRID_SETTINGS) are not the variant's
    summary: TrainSummary | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.status == FINISHED

    @property
    def still_improving(self) -> bool:
        """Finished, but not shown to have stopped improving (see TrainSummary)."""
        return self.summary is not None and self.summary.still_improving

    @property
    def scorer(self) -> str:
        return self.model.scorer

    @property
    def seed(self) -> int:
        return self.train.seed

    @property
    def best_dev_bleu(self) -> float:
        return math.nan if self.summary is None else self.summary.best_dev_bleu

    def _train_settings(self) -> dict[str, Any]:
        return self.train.model_dump(exclude=GRID_SETTINGS)

    def value(self, key: str) -> Any:
        """The variant's value of a grid axis or config key (its axes first)."""
        if key in self.axes:
            return self.axes[key]
        model = self.model.model_dump()
        return model[key] if key in model else self._train_settings().get(key)

    def settings(self) -> dict[str, Any]:
        """Every setting, flattened as MLflow's params name them (``model.scorer``)."""
        flat = {f"model.{k}": v for k, v in self.model.model_dump().items()}
        flat.update({f"train.{k}": v for k, v in self._train_settings().items()})
        return flat

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "config_hash": self.config_hash,
            "error": self.error,
            **({} if self.summary is None else self.summary.to_json()),
            "axes": self.axes,
            "model": self.model.model_dump(),
            "train": self._train_settings(),
        }

    @classmethod
    def from_json(cls, variant_id: str, data: Mapping[str, Any], where: str) -> VariantRecord:
        known = {"status", "config_hash", "error", "axes", "model", "train"}
        status = data["status"]
        if status not in (FINISHED, FAILED):
            raise RecordError(f"{where}: variant {variant_id}: status {status!r}")
        model = dict(data["model"])
        context = {SCORERS: [model.get("scorer")]}  # a record names the scorer it used
        try:
            model_config = ModelConfig.model_validate(model, context=context)
            train_config = TrainConfig.model_validate(dict(data["train"]), context=context)
        except ValueError as err:
            raise RecordError(f"{where}: variant {variant_id}: {err}".splitlines()[0]) from None
        rest = {k: v for k, v in data.items() if k not in known}
        summary = TrainSummary.from_json(rest, f"{where}: {variant_id}") if rest else None
        return cls(
            variant_id,
            status,
            data["config_hash"],
            dict(data["axes"]),
            model_config,
            train_config,
            summary,
            data.get("error"),
        )


@dataclass(frozen=True)
class SweepRecord:
    """``models/sweep.json``: every variant of the grid (:class:`VariantRecord`) and the
    hash of the data they trained on; nothing about the run that made them, so a rerun
    that trains nothing rewrites it byte for byte."""

    data_hash: str
    variants: dict[str, VariantRecord]

    @property
    def finished(self) -> dict[str, VariantRecord]:
        return {i: v for i, v in self.variants.items() if v.finished}

    @property
    def failed(self) -> dict[str, VariantRecord]:
        return {i: v for i, v in self.variants.items() if not v.finished}

    def table(self, ids=None) -> pd.DataFrame:
        """:func:`variant_table` of the variants ``ids`` (default: all of them)."""
        return variant_table(self.variants[i] for i in (self.variants if ids is None else ids))

    def write(self, models_dir: Path) -> None:
        variants = {i: v.to_json() for i, v in self.variants.items()}
        write_json(models_dir / SWEEP_FILE, {"data_hash": self.data_hash, "variants": variants})

    @classmethod
    def load(cls, models_dir: Path) -> SweepRecord:
        path = models_dir / SWEEP_FILE
        data = read_record(path, "dvc repro train")
        try:
            variants = {
                i: VariantRecord.from_json(i, v, str(path)) for i, v in data["variants"].items()
            }
            return cls(data["data_hash"], variants)
        except (KeyError, TypeError, AttributeError) as err:
            raise RecordError(f"{path}: not a sweep record (missing or bad {err})") from None


def variant_table(records: Iterable[VariantRecord]) -> pd.DataFrame:
    """One row per variant record: the compared axes and seed, ``config`` (every setting
    but the seed, as JSON: one configuration's seeds share it) and ``rest`` (every setting
    but the compared axes and the seed: twins share it), the status and the training
    summary (NaN where a failed variant has none)."""
    return pd.DataFrame([_table_row(record) for record in records])


def _table_row(record: VariantRecord) -> dict[str, Any]:
    summary = record.summary
    config = {k: v for k, v in {**record.model.model_dump(), **record._train_settings()}.items()}
    config.pop("seed", None)
    rest = {k: v for k, v in config.items() if k not in COMPARED}

    def of_summary(name: str) -> Any:
        return math.nan if summary is None else getattr(summary, name)

    return {
        "variant": record.id,
        "scorer": record.scorer,
        "reverse_source": bool(record.model.reverse_source),
        "hidden_size": int(record.model.hidden_size),
        "seed": record.seed,
        "config": json.dumps(config, sort_keys=True),
        "rest": json.dumps(rest, sort_keys=True, default=str),
        "baseline": record.model.baseline if record.scorer == "none" else "",
        "stop_reason": "" if summary is None else summary.stop_reason,
        "plateaued": summary is not None and summary.plateaued,
        "still_improving": record.finished and record.still_improving,
        "best_dev_bleu": record.best_dev_bleu,
        "epochs_run": of_summary("epochs_run"),
        "steps": of_summary("steps"),
        "status": record.status,
        "error": record.error or "",
        "parameters": of_summary("parameter_count"),
        "best_epoch": of_summary("best_epoch"),
        "train_minutes": of_summary("wall_time_s") / 60,
        "tokens_per_s": of_summary("tokens_per_s"),
    }
