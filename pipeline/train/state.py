"""Where a training run stands, and the files that keep it: ``last.pt`` and ``history.csv``.

- :class:`Progress`: the epoch and step, the work done (:class:`Meter`), the best
  evaluation (:class:`Best`, the one ``checkpoint.pt`` holds), the stop reason and one
  :class:`~pipeline.records.train.HistoryRow` per dev evaluation; plain values only.
- ``last.pt``: everything needed to continue, written after every evaluation
  (:func:`save_last`): the progress, what else training changes (:class:`Resumable`:
  weights, Adam, the learning-rate scheduler, the weight average, the stopping rules) and
  torch's random state. :func:`read_last` and :func:`load_last` continue from it; on CPU
  a resumed run ends with the same weights and history as an uninterrupted one.
- ``history.csv``: the history rows, columns :data:`~pipeline.records.train.HISTORY_FIELDS`
  (:func:`write_history`).
"""

from __future__ import annotations

import csv
import io
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.optim.swa_utils import AveragedModel

from pipeline.io import write_text
from pipeline.models.checkpoint import atomic_torch_save
from pipeline.records.train import HISTORY_FIELDS, HistoryRow, TrainSummary
from pipeline.train.stopping import Plateau, ProgressSignal

logger = logging.getLogger(__name__)

LAST_FORMAT = 3  # 2: per-evaluation history, scheduler and early-stopping state; 3: signal


@dataclass
class Meter:
    """Training work summed over steps."""

    loss_sum: float = 0.0  # training loss summed over target tokens
    tokens: int = 0  # real target tokens
    seconds: float = 0.0  # time in training steps (not in evaluations)

    def add(self, loss_sum: float = 0.0, tokens: int = 0, seconds: float = 0.0) -> None:
        self.loss_sum += loss_sum
        self.tokens += tokens
        self.seconds += seconds

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.tokens, 1)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


@dataclass
class Best:
    """The best evaluation so far: the one ``checkpoint.pt`` holds."""

    value: float  # the early-stopping metric, higher is better (dev BLEU, or -dev loss)
    epoch: int
    step: int
    dev_loss: float
    dev_bleu: float
    wall_time: float


@dataclass
class Progress:
    """Where training stands; saved in ``last.pt`` (as plain values: ``asdict``)."""

    epoch: int = 1
    batch_position: int = 0  # batches of ``epoch`` already trained
    step: int = 0
    wall_time: float = 0.0
    total: Meter = field(default_factory=Meter)  # the whole run
    window: Meter = field(default_factory=Meter)  # since the last history row
    best: Best | None = None
    stop_reason: str = ""
    history: list[HistoryRow] = field(default_factory=list)

    def count(self, loss_sum: float = 0.0, tokens: int = 0, seconds: float = 0.0) -> None:
        self.total.add(loss_sum, tokens, seconds)
        self.window.add(loss_sum, tokens, seconds)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Progress:
        """The inverse of ``dataclasses.asdict``."""
        best = state["best"] and Best(**state["best"])
        meters = {"total": Meter(**state["total"]), "window": Meter(**state["window"])}
        history = [HistoryRow(**row) for row in state["history"]]
        return cls(**{**state, **meters, "best": best, "history": history})

    def summary(
        self,
        *,
        variant_id: str,
        parameter_count: int,
        precision: str,
        resumed_at_step: int,
        energy_kernel: str,
    ) -> TrainSummary:
        """The run so far as a :class:`~pipeline.records.train.TrainSummary`."""
        best = self.best
        return TrainSummary(
            variant_id=variant_id,
            best_epoch=best.epoch if best else 0,
            best_step=best.step if best else 0,
            best_dev_loss=best.dev_loss if best else math.nan,
            best_dev_bleu=best.dev_bleu if best else math.nan,
            epochs_run=self.history[-1].epoch if self.history else 0,
            steps=self.step,
            wall_time_s=self.wall_time,
            tokens_per_s=self.total.tokens_per_s,
            parameter_count=parameter_count,
            precision=precision,
            stop_reason=self.stop_reason,
            resumed_at_step=resumed_at_step,
            evaluations=len(self.history),
            plateaued=self.stop_reason == "early_stopping",
            energy_kernel=energy_kernel,
            peak_dev_bleu=max((row.dev_bleu for row in self.history), default=None),
        )


def make_ema(model: torch.nn.Module, decay: float, step: Callable[[], int]) -> AveragedModel | None:
    """The weights' exponential moving average (``train.ema_decay``; None for 0), torch's
    ``AveragedModel`` with a decay that ramps up over the first steps (``step()``: the
    optimizer steps so far, read at each update)."""
    if not decay:
        return None

    @torch.no_grad()
    def update(averaged: list[torch.Tensor], current: list[torch.Tensor], _) -> None:
        done = step()
        torch._foreach_lerp_(averaged, current, 1 - min(decay, (1 + done) / (10 + done)))

    return AveragedModel(model, multi_avg_fn=update)


@dataclass(frozen=True, eq=False)
class Resumable:
    """What training changes besides its :class:`Progress`: saved in ``last.pt``."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: ReduceLROnPlateau | None
    ema: AveragedModel | None  # the weights' moving average (``train.ema_decay``)
    plateau: Plateau
    signal: ProgressSignal

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler else None,
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "plateau": self.plateau.state_dict(),
            "signal": self.signal.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.ema is not None:
            self.ema.load_state_dict(state["ema"])
        self.plateau.load_state_dict(state["plateau"])
        self.signal.load_state_dict(state["signal"])


def save_last(
    path: Path, parts: Resumable, progress: Progress, config_hash: str, precision: str
) -> None:
    """Write ``last.pt`` (atomically) for a run of ``config_hash`` trained in ``precision``."""
    payload = {
        "format": LAST_FORMAT,
        "config_hash": config_hash,
        "precision": precision,
        **parts.state_dict(),
        "progress": asdict(progress),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    atomic_torch_save(payload, path)


def read_last(path: Path, config_hash: str, device, variant_id: str) -> dict[str, Any] | None:
    """What ``last.pt`` holds, if it exists and was written in this format for
    ``config_hash`` (this config and data); else None (logged where the file exists)."""
    if not path.is_file():
        return None
    state = torch.load(path, map_location=device, weights_only=True)
    if state.get("format") != LAST_FORMAT or state.get("config_hash") != config_hash:
        logger.warning("%s: other config or data; starting %s afresh", path, variant_id)
        return None
    return state


def load_last(state: dict[str, Any], parts: Resumable) -> Progress:
    """Put ``parts`` and torch's random state back as ``state`` (:func:`read_last`) holds
    them; returns its progress."""
    parts.load_state_dict(state)
    progress = Progress.from_state(state["progress"])
    torch.set_rng_state(state["torch_rng"].cpu())
    if state["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    return progress


def write_history(path: Path, rows: Sequence[HistoryRow]) -> None:
    """``history.csv``: a header of :data:`HISTORY_FIELDS`, then one line per row."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=HISTORY_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(row.to_json() for row in rows)
    write_text(path, buffer.getvalue())
