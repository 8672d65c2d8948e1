"""What training hands on: one row per dev evaluation (:class:`HistoryRow`, the rows of
``history.csv``) and the summary of a finished run (:class:`TrainSummary`), which Ray
carries from the trial to the driver, ``result.json`` and ``models/sweep.json`` hold, and
MLflow, evaluate and the report read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from pipeline.io import write_json
from pipeline.records.base import RecordError, read_record, validated


@dataclass(frozen=True)
class HistoryRow:
    """One dev evaluation: ``epoch`` is the epoch in progress, ``epochs`` the fraction of
    epochs done (1.33: a third into epoch 2), ``end_of_epoch`` 1 at an epoch end;
    ``train_loss`` and ``tokens_per_s`` cover the steps since the previous row,
    ``learning_rate`` is the rate those steps used."""

    epoch: int
    step: int
    train_loss: float
    dev_loss: float
    dev_bleu: float
    tokens_per_s: float
    learning_rate: float
    wall_time: float
    epochs: float
    end_of_epoch: int

    COUNTERS = ("epoch", "step", "epochs", "end_of_epoch")
    """Where the row stands; the other fields are its measurements (:meth:`metrics`)."""

    def to_json(self) -> dict[str, float]:
        return asdict(self)

    def metrics(self) -> dict[str, float]:
        """The row's measurements (train and dev loss, dev BLEU, speed, learning rate,
        wall time): what MLflow logs at the row's step."""
        return {k: v for k, v in asdict(self).items() if k not in self.COUNTERS}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "history row") -> HistoryRow:
        return validated(cls, data, where)


HISTORY_FIELDS = tuple(f.name for f in fields(HistoryRow))
"""``history.csv``'s columns, in order: :class:`HistoryRow`'s fields."""
EPOCH_METRICS = tuple(k for k in HISTORY_FIELDS if k not in HistoryRow.COUNTERS)
"""The measurements of a history row (MLflow's per-evaluation metrics)."""


@dataclass(frozen=True)
class TrainSummary:
    """A finished training run, without its history: the best evaluation (the one
    ``checkpoint.pt`` holds), how far it went, why it stopped, and where it ran."""

    variant_id: str
    best_epoch: int
    best_step: int
    best_dev_loss: float
    best_dev_bleu: float  # dev BLEU of the kept checkpoint (chosen by the stopping metric)
    epochs_run: int  # epochs started
    steps: int
    wall_time_s: float
    tokens_per_s: float  # real target tokens per second of training steps
    parameter_count: int
    precision: str  # resolved train.precision: fp32 | bf16
    stop_reason: str  # early_stopping (plateau) | max_steps (the cap) | max_epochs | a callback's
    resumed_at_step: int = 0  # step of the resume state this run continued from (0: none)
    evaluations: int = 0  # dev evaluations (rows of the history)
    plateaued: bool = False  # stopped by the plateau rule (stop reason early_stopping)
    energy_kernel: str = "unused"  # additive scorer: what additive_energy() runs, native | torch
    device: str = ""  # where the trial ran (set by the sweep)
    node_id: str = ""
    peak_dev_bleu: float | None = None  # the highest dev BLEU of any evaluation (None: none)

    @property
    def still_improving(self) -> bool:
        """Not plateaued. Only the plateau rule shows that the dev metric stopped
        improving (``train.patience`` evaluations without progress); a variant stopped by
        a budget (epochs, steps, a callback's) had not shown that, even if its best
        evaluation was not its last one, so it is flagged: more training might still
        have helped, and comparing it is less safe."""
        return not self.plateaued

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "training summary") -> TrainSummary:
        return validated(cls, data, where)

    def mlflow_metrics(self) -> dict[str, float]:
        """What the MLflow compare view needs to say which variant is best and whether it
        converged. Named for what they measure: ``checkpoint_*`` is the kept checkpoint
        (the best by the stopping metric, dev loss by default), ``peak_dev_bleu`` the
        highest dev BLEU of any evaluation, which may be another one."""
        metrics = {
            "checkpoint_dev_bleu": self.best_dev_bleu,
            "checkpoint_dev_loss": self.best_dev_loss,
            "checkpoint_epoch": self.best_epoch,
            "peak_dev_bleu": self.peak_dev_bleu,
            "epochs": self.epochs_run,
            "steps": self.steps,
            "train_minutes": self.wall_time_s / 60,
            "train_tokens_per_s": self.tokens_per_s,
            "parameter_count": self.parameter_count,
            "still_improving": float(self.still_improving),
        }
        return {k: v for k, v in metrics.items() if v is not None}

    def mlflow_tags(self) -> dict[str, str]:
        return {"stop_reason": self.stop_reason or "unknown"}


@dataclass(frozen=True)
class TrainResult:
    """What :func:`pipeline.train.trainer.train_variant` returns: the summary and the
    history rows."""

    summary: TrainSummary
    history: tuple[HistoryRow, ...]


@dataclass(frozen=True)
class Trained:
    """``result.json`` of a variant folder: the config hash it was trained for and its
    summary; its presence marks the variant finished."""

    config_hash: str
    summary: TrainSummary

    def to_json(self) -> dict[str, Any]:
        return {"config_hash": self.config_hash, "summary": self.summary.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "result.json") -> Trained:
        if not isinstance(data, Mapping) or "summary" not in data:
            raise RecordError(f"{where}: not a training result (no summary)")
        summary = TrainSummary.from_json(data["summary"], where)
        return cls(str(data.get("config_hash", "")), summary)

    @classmethod
    def read(cls, path: Path) -> Trained:
        """``path`` (a ``result.json``); :class:`RecordError` where it is absent or bad."""
        return cls.from_json(read_record(path, "dvc repro train"), str(path))

    def write(self, path: Path) -> None:
        write_json(path, self.to_json())
