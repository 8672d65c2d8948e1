"""How code outside this package observes a training run, and ends one early.

A :class:`TrainCallback` is called after each optimizer step and after each dev
evaluation; it sees the trainer through :class:`TrainerView` and may end the run with
:meth:`TrainerView.stop`. Anything measured in seconds is a callback's business, not the
trainer's: the sweep's safety net against a hanging trial and a benchmark's time budget
are callbacks that raise, or call ``stop``. Nothing subclasses or patches the trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from pipeline.config.grid import Variant
from pipeline.train.state import Progress


class TrainerView(Protocol):
    """What a callback may use of :class:`pipeline.train.trainer.Trainer`."""

    variant: Variant
    device: str | torch.device
    precision: str  # resolved train.precision: fp32 | bf16
    progress: Progress  # read only

    def stop(self, reason: str) -> None:
        """End training after the current step with stop reason ``reason``: one final
        evaluation follows, and the variant counts as not plateaued."""


class TrainCallback:
    """Hooks into a training run (override what you need). They run in the training
    process, in order, and must not change the model, the optimizer or the random state."""

    def on_step(self, trainer: TrainerView, step: int) -> None:
        """After optimizer step ``step`` (1-based)."""

    def on_evaluation(self, trainer: TrainerView, row: dict[str, Any]) -> None:
        """After a dev evaluation, once its files (checkpoints, history) are written;
        ``row`` is its history row (:meth:`pipeline.records.train.HistoryRow.to_json`)."""


class OnEvaluation(TrainCallback):
    """A :class:`TrainCallback` from a function of each evaluation's row."""

    def __init__(self, function: Callable[[dict[str, Any]], None]):
        self.function = function

    def on_evaluation(self, trainer: TrainerView, row: dict[str, Any]) -> None:
        self.function(row)


class OnStep(TrainCallback):
    """A :class:`TrainCallback` from a function of each step number."""

    def __init__(self, function: Callable[[int], None]):
        self.function = function

    def on_step(self, trainer: TrainerView, step: int) -> None:
        self.function(step)
