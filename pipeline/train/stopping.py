"""When training stops and the learning rate decays: counted in evaluations, never seconds.

Every budget and stopping rule counts optimizer steps and evaluations, so a variant trains
the same steps to the same weights on a fast or a slow machine:

- learning-rate decay (torch's ``ReduceLROnPlateau``, :func:`make_scheduler`) and the
  plateau (:class:`Plateau`) count evaluations without an improvement of more than
  ``min_delta`` in the progress signal (:class:`ProgressSignal`);
- the dev metric has plateaued (stop reason ``early_stopping``) after ``patience`` such
  evaluations, or once the decays take the learning rate below ``min_learning_rate``,
  and only once dev BLEU has stopped rising (:class:`SlopeRule`: the straight-line slope
  of dev BLEU over the last ``converged_window`` updates is at most ``converged_slope``
  BLEU per 1,000 updates); until then training goes on at the decayed rate;
- ``max_steps`` is a cap: a variant stopped by it has not plateaued and is flagged;
- a NaN/inf loss or gradient fails the variant (:class:`DivergenceCheck`).

The trainer (:mod:`pipeline.train.trainer`) applies them after each evaluation;
``tools/plateau_calibration.py`` replays them on recorded learning curves.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.optim.lr_scheduler import ReduceLROnPlateau

from pipeline.config.params import TrainConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlopeRule:
    """Convergence, measured: dev BLEU has stopped rising when the least-squares slope of
    the evaluations of the last ``window`` updates is at most ``max_slope`` BLEU per
    1,000 updates. A history shorter than the window has not shown it. ``max_slope``
    None: off (the plateau rule alone decides)."""

    max_slope: float | None
    window: int

    def slope(self, steps: list[int], bleu: list[float]) -> float | None:
        """BLEU per 1,000 updates over the last ``window`` updates; None when the
        evaluations do not yet span the window (or are fewer than three)."""
        if not steps or steps[-1] - steps[0] < self.window:
            return None
        start = steps[-1] - self.window
        points = [(s, b) for s, b in zip(steps, bleu, strict=True) if s >= start]
        if len(points) < 3:
            return None
        mean_s = sum(s for s, _ in points) / len(points)
        mean_b = sum(b for _, b in points) / len(points)
        spread = sum((s - mean_s) ** 2 for s, _ in points)
        if spread == 0:
            return None
        return 1000 * sum((s - mean_s) * (b - mean_b) for s, b in points) / spread

    def rising(self, steps: list[int], bleu: list[float]) -> bool:
        """Dev BLEU has not been shown to stop rising (the variant must train on)."""
        if self.max_slope is None:
            return False
        slope = self.slope(steps, bleu)
        return slope is None or slope > self.max_slope

    def converged(self, variant_id: str, rows) -> bool:
        """The plateau rule has fired on the history ``rows``: may the variant stop? Only
        once its dev BLEU has stopped rising; else one INFO line says why it trains on."""
        steps, bleu = [r.step for r in rows], [r.dev_bleu for r in rows]
        if not self.rising(steps, bleu):
            return True
        slope = self.slope(steps, bleu)
        logger.info(
            "%s: plateau rule met at step %d, but dev BLEU still rises (%s BLEU per 1k "
            "updates over the last %d): training on",
            variant_id,
            steps[-1] if steps else 0,
            "not yet measurable" if slope is None else f"{slope:+.2f}",
            self.window,
        )
        return False

    @classmethod
    def of(cls, cfg: TrainConfig) -> SlopeRule:
        return cls(cfg.converged_slope, cfg.converged_window)


@dataclass
class Plateau:
    """Early stopping: counts evaluations without an improvement of more than
    ``min_delta`` over the best value seen (as ``ReduceLROnPlateau`` with
    ``threshold_mode="abs"``); ``exhausted`` after ``patience`` of them in a row."""

    patience: int
    min_delta: float = 0.0
    mode: Literal["min", "max"] = "max"
    best: float | None = None  # last value that counted as an improvement
    bad: int = 0  # evaluations since

    def update(self, value: float) -> bool:
        """Record one evaluation; True if it improved on ``best`` by more than min_delta."""
        if self.best is None or self._better(value):
            self.best, self.bad = value, 0
            return True
        self.bad += 1
        return False

    def _better(self, value: float) -> bool:
        if self.mode == "max":
            return value > self.best + self.min_delta
        return value < self.best - self.min_delta

    @property
    def exhausted(self) -> bool:
        return self.bad >= self.patience

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "bad": self.bad}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.bad = state["best"], state["bad"]


@dataclass
class ProgressSignal:
    """What the learning-rate decay and the plateau rule see at each evaluation.

    Without ``bleu_delta``: the early-stopping metric itself (``min_delta`` is their
    threshold). With it, an evaluation makes progress when the early-stopping metric beats
    its best by more than ``min_delta`` *or* dev BLEU beats its best by more than
    ``bleu_delta``; they then see the count of such evaluations (threshold 0.5, so each
    one is an improvement), and a variant stops only once neither has moved for
    ``patience`` evaluations: a model whose dev loss has flattened while its BLEU still
    rises keeps training."""

    min_delta: float
    bleu_delta: float | None = None
    best_value: float | None = None
    best_bleu: float | None = None
    count: int = 0

    @property
    def threshold(self) -> float:
        return self.min_delta if self.bleu_delta is None else 0.5

    def update(self, value: float, bleu: float) -> tuple[float, bool]:
        """``(signal, progressed)`` for an evaluation whose early-stopping metric (higher
        is better) is ``value`` and dev BLEU ``bleu``."""
        gained = self.best_value is None or value > self.best_value + self.min_delta
        if gained:
            self.best_value = value
        if self.bleu_delta is None:
            return value, gained
        rose = self.best_bleu is None or bleu > self.best_bleu + self.bleu_delta
        if rose:
            self.best_bleu = bleu
        self.count += int(gained or rose)
        return float(self.count), gained or rose

    def state_dict(self) -> dict[str, Any]:
        return {"best_value": self.best_value, "best_bleu": self.best_bleu, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_value, self.best_bleu = state["best_value"], state["best_bleu"]
        self.count = state["count"]


def progress_signal(cfg: TrainConfig) -> ProgressSignal:
    """The evaluations' progress signal of ``cfg`` (:class:`ProgressSignal`)."""
    return ProgressSignal(cfg.min_delta, cfg.bleu_progress_delta)


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> ReduceLROnPlateau | None:
    """Multiply the learning rate by ``lr_decay`` once more than ``lr_patience`` evaluations
    in a row brought no improvement of more than ``min_delta`` (``lr_patience`` 0: at each
    such evaluation); stepped with the early-stopping metric, higher is better. None for
    ``lr_decay`` 1 (torch's scheduler needs a factor below 1)."""
    if cfg.lr_decay >= 1:
        return None
    return ReduceLROnPlateau(
        optimizer,
        mode="max",
        factor=cfg.lr_decay,
        patience=cfg.lr_patience,
        threshold=progress_signal(cfg).threshold,
        threshold_mode="abs",
    )


CHECK_EVERY_STEPS = 16
"""Steps between reads of the loss for the divergence check: one host-device transfer per
16 steps instead of a synchronisation every step (no checkpoint is written in between)."""


class TrainingDivergedError(RuntimeError):
    """The loss or the gradient became NaN/inf; no checkpoint was written for it."""


class DivergenceCheck:
    """The training losses and gradient norms of the steps not yet checked for NaN/inf,
    read in one host-device transfer every :data:`CHECK_EVERY_STEPS` steps and before
    each evaluation (a GPU runs ahead between checks)."""

    def __init__(self, variant_id: str):
        self.variant_id = variant_id
        self._pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # unchecked steps

    def add(self, step: int, loss_sum: torch.Tensor, norm: torch.Tensor) -> bool:
        """Queue step ``step``'s loss sum and gradient norm; True once a check is due."""
        self._pending.append((step, loss_sum.detach(), norm.detach()))
        return len(self._pending) >= CHECK_EVERY_STEPS

    def check(self, epoch: int) -> float | None:
        """The queued steps' loss sum (None if none is queued); fails on the first
        non-finite loss or gradient norm, a step of epoch ``epoch``."""
        if not self._pending:
            return None
        steps, losses, norms = zip(*self._pending)
        self._pending = []
        values = torch.stack([torch.stack(losses).float(), torch.stack(norms).float()]).tolist()
        for step, loss, norm in zip(steps, *values):
            if not math.isfinite(loss):
                raise self.error(f"loss is {loss}", epoch, step)
            if not math.isfinite(norm):
                raise self.error(f"gradient norm is {norm}", epoch, step)
        return math.fsum(values[0])

    def error(self, what: str, epoch: int, step: int) -> TrainingDivergedError:
        name = self.variant_id
        return TrainingDivergedError(f"variant {name}: {what} at epoch {epoch} step {step}")
