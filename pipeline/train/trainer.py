"""Train one variant: token-bucketed teacher forcing, early stopping, atomic checkpoints.

``out_dir`` receives:

- ``checkpoint.pt``: the best model so far, by ``train.early_stopping_metric`` (see
  :mod:`pipeline.models.checkpoint`);
- ``last.pt``: everything needed to continue, written after every evaluation
  (:mod:`pipeline.train.state`); ``train_variant(..., resume=True)`` continues from it;
- ``history.csv``: one :class:`~pipeline.records.train.HistoryRow` per dev evaluation
  (:mod:`pipeline.train.dev`); ``config.json``.

Dev evaluations come at every epoch end and, with ``eval_every_steps``, every N optimizer
steps. Every budget and stopping rule counts steps and evaluations, never seconds
(:mod:`pipeline.train.stopping`). Code outside this package observes a run, or ends it
early, through :mod:`pipeline.train.callbacks`. The caller sets torch's threads and the
process-wide settings (:func:`pipeline.runtime.process.prepare_process`).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from pipeline.artifacts import VariantFiles
from pipeline.config.grid import Variant
from pipeline.config.params import TrainConfig
from pipeline.data.batching import epoch_batches, make_batch, padding_fraction
from pipeline.data.dataset import TokenizedData
from pipeline.io import write_json
from pipeline.kernels import native
from pipeline.models.checkpoint import VocabInfo, save_checkpoint
from pipeline.models.seq2seq import Seq2Seq
from pipeline.records.train import HistoryRow, TrainResult
from pipeline.runtime.precision import autocast, resolve
from pipeline.train.callbacks import TrainCallback
from pipeline.train.dev import DevMetrics, DevSet
from pipeline.train.state import (
    Best,
    Meter,
    Progress,
    Resumable,
    load_last,
    make_ema,
    read_last,
    save_last,
    write_history,
)
from pipeline.train.stopping import (
    DivergenceCheck,
    Plateau,
    SlopeRule,
    make_scheduler,
    progress_signal,
)

logger = logging.getLogger(__name__)


def train_variant(
    variant: Variant,
    data: TokenizedData | Path,
    out_dir: Path,
    *,
    callbacks: Sequence[TrainCallback] = (),
    device: str | torch.device = "cpu",
    resume: bool = True,
    key: str | None = None,
) -> TrainResult:
    """Train ``variant`` on ``data`` (or the ``data/tok`` folder it names) into ``out_dir``,
    calling ``callbacks`` (:class:`TrainCallback`) as it goes. ``key``: the variant's
    :meth:`~pipeline.config.grid.Variant.key` where the caller computed it (the sweep does,
    once per variant); else it is computed here."""
    energy_kernel = "unused"
    if variant.model.scorer == "additive" and torch.device(device).type == "cpu":
        # built before the clock (once a machine; prepare_process(kernels=True) builds it
        # earlier); the Bahdanau GRU loop's per-step energy is torch's either way, its
        # decoding uses this one
        energy_kernel = native.describe()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not isinstance(data, TokenizedData):
        data = TokenizedData.load(data)
    trainer = Trainer(variant, data, out_dir, callbacks, device, key)
    if not (resume and trainer.restore()):
        write_json(
            VariantFiles(out_dir).config,
            {"variant": variant.id, "axes": variant.axes, "params": variant.flat_params()},
        )
    trainer.run()
    return trainer.result(energy_kernel)


def optimizer_step(
    model: Seq2Seq,
    optimizer: torch.optim.Optimizer,
    batch,
    cfg: TrainConfig,
    precision: str,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, int, torch.Tensor]:
    """One training update: label-smoothed teacher-forced loss per target token, backward,
    gradient clipping, the optimizer's step. Returns the loss sum, the target tokens and
    the gradient norm, unsynchronised (the trainer checks them in groups)."""
    model.train()
    with autocast(precision, device):
        loss_sum, tokens = model.loss(batch, cfg.label_smoothing)
    optimizer.zero_grad(set_to_none=True)
    (loss_sum / tokens).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
    optimizer.step()
    return loss_sum, tokens, norm


def make_optimizer(model: torch.nn.Module, learning_rate: float) -> torch.optim.Adam:
    """Adam with the fused (single-kernel) update: 2.7 ms instead of 16.1 ms per step for
    the additive h256 model on one CPU thread; the same update rule."""
    return torch.optim.Adam(model.parameters(), lr=learning_rate, fused=True)


class Trainer:
    """One variant's training loop: epochs of steps, evaluations, checkpoints, resume.
    :func:`train_variant` builds and runs one; callbacks see it through the attributes
    ``variant``, ``device``, ``precision``, ``progress`` and the public methods
    (:class:`~pipeline.train.callbacks.TrainerView`)."""

    def __init__(
        self,
        variant: Variant,
        data: TokenizedData,
        out_dir: Path,
        callbacks: Sequence[TrainCallback] = (),
        device: str | torch.device = "cpu",
        key: str | None = None,
    ):
        self.variant, self.cfg, self.files = variant, variant.train, VariantFiles(out_dir)
        self.callbacks, self.device = tuple(callbacks), device
        self.precision = resolve(self.cfg.precision, device)  # fp32 | bf16
        self.divergence = DivergenceCheck(variant.id)
        self.train_split, self.dev = data.split("train"), DevSet(data, self.cfg)
        self.vocab = VocabInfo.from_data(data)
        self.config_hash = key or variant.key(data.fingerprint())
        torch.manual_seed(self.cfg.seed)
        self.model = Seq2Seq(variant.model, self.vocab.src_vocab_size, self.vocab.tgt_vocab_size)
        if variant.model.output_bias == "unigram":
            counts = self.train_split.target_counts(self.vocab.tgt_vocab_size)
            self.model.init_output_bias(torch.from_numpy(counts))
        self.model.to(device)
        self.optimizer = make_optimizer(self.model, self.cfg.learning_rate)
        self.ema = make_ema(self.model, self.cfg.ema_decay, lambda: self.progress.step)
        self.scheduler = make_scheduler(self.optimizer, self.cfg)
        self.signal = progress_signal(self.cfg)
        self.plateau = Plateau(self.cfg.patience, self.signal.threshold, mode="max")
        self.slope_rule = SlopeRule.of(self.cfg)
        self._resumable = Resumable(
            self.model, self.optimizer, self.scheduler, self.ema, self.plateau, self.signal
        )
        self.progress = Progress()
        self._wall_base, self._session_start = 0.0, time.perf_counter()
        self.resumed_at_step = 0

    # ------------------------------------------------------------------ training
    def run(self) -> None:
        """The training loop: epochs of optimizer steps on token-bucketed batches, a dev
        evaluation every ``eval_every_steps`` steps and at each epoch's end, until a stop
        reason (the plateau, a budget, a callback's :meth:`stop`). A budget ends with one
        last evaluation; an evaluation that stops training is the last."""
        p, every = self.progress, self.cfg.eval_every_steps
        reverse = self.variant.model.reverse_source
        while not p.stop_reason:
            batches = self._epoch_batches()
            stopped_by_evaluation = False
            with self._bar(len(batches)) as bar:
                for position in range(p.batch_position, len(batches)):
                    batch = make_batch(self.train_split, batches[position], reverse_source=reverse)
                    self._train_step(batch.to(self.device))
                    p.batch_position = position + 1
                    bar.update()
                    for callback in self.callbacks:
                        callback.on_step(self, p.step)
                    if self._budget_spent():
                        break
                    if every and p.step % every == 0 and p.batch_position < len(batches):
                        self._evaluate(len(batches))
                        if p.stop_reason:
                            stopped_by_evaluation = True
                            break
            if not stopped_by_evaluation:
                self._evaluate(len(batches))  # the epoch's end, or the budget's last

    def _epoch_batches(self) -> list[np.ndarray]:
        """The current epoch's batches (seeded by the epoch: a resumed run gets the same)."""
        p, cfg = self.progress, self.cfg
        batches = epoch_batches(
            self.train_split,
            cfg.batch_tokens,
            seed=cfg.seed,
            epoch=p.epoch,
            curriculum_steps=cfg.curriculum_steps,
        )
        padding = _format(padding_fraction(self.train_split, batches))
        logger.info(
            "%s epoch %d: %d batches, padding %s", self.variant.id, p.epoch, len(batches), padding
        )
        return batches

    def _bar(self, total: int) -> tqdm:
        quiet = not sys.stderr.isatty()
        return tqdm(total=total, initial=self.progress.batch_position, leave=False, disable=quiet)

    def _train_step(self, batch) -> None:
        start = time.perf_counter()
        loss_sum, tokens, norm = optimizer_step(
            self.model, self.optimizer, batch, self.cfg, self.precision, self.device
        )
        self.progress.step += 1
        if self.ema is not None:
            self.ema.update_parameters(self.model)
        if self.divergence.add(self.progress.step, loss_sum, norm):
            self._check_pending()
        self.progress.count(tokens=tokens, seconds=time.perf_counter() - start)

    def _check_pending(self) -> None:
        """Check the queued steps for NaN/inf (:class:`DivergenceCheck`); count their loss."""
        loss_sum = self.divergence.check(self.progress.epoch)
        if loss_sum is not None:
            self.progress.count(loss_sum=loss_sum)

    def _budget_spent(self) -> bool:
        """A callback's :meth:`stop`, or the step cap (counted, so the same on every
        machine)."""
        p, cap = self.progress, self.cfg.max_steps
        if not p.stop_reason and cap and p.step >= cap:
            p.stop_reason = "max_steps"
        return bool(p.stop_reason)

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self, epoch_batches: int) -> None:
        """Evaluate on dev at ``batch_position`` of an epoch of ``epoch_batches``: best
        checkpoint, history row, learning rate and stopping, resume state, callback."""
        start = time.perf_counter()
        self._check_pending()  # on a GPU: waits for the queued steps, so they are timed
        self.progress.count(seconds=time.perf_counter() - start)
        metrics = self.dev.metrics(self._evaluated_model(), self.device, self.precision)
        if not math.isfinite(metrics.dev_loss):
            p = self.progress
            raise self.divergence.error(f"dev loss is {metrics.dev_loss}", p.epoch, p.step + 1)
        bleu = self.cfg.early_stopping_metric == "bleu"
        value = metrics.dev_bleu if bleu else -metrics.dev_loss  # higher is better
        signal, progressed = self.signal.update(value, metrics.dev_bleu)
        self._keep_if_best(value, metrics, progressed)
        row = self._history_row(metrics, epoch_batches)
        self._after_evaluation(signal, end_of_epoch=bool(row.end_of_epoch))
        self._save_last()
        write_history(self.files.history, self.progress.history)
        for callback in self.callbacks:
            callback.on_evaluation(self, row.to_json())

    def _keep_if_best(self, value: float, metrics: DevMetrics, progressed: bool) -> None:
        """Save the model as ``checkpoint.pt`` if ``value`` beats the best so far (by any
        margin: ``min_delta`` only decides what counts as progress for the plateau); with
        ``bleu_progress_delta``, at every evaluation that made progress (the model where
        the last gain in dev loss or dev BLEU was made)."""
        p = self.progress
        if self.signal.bleu_delta is not None:
            if not progressed:
                return
        elif p.best is not None and value <= p.best.value:
            return
        p.best = Best(value, p.epoch, p.step, metrics.dev_loss, metrics.dev_bleu, self._wall_time())
        save_checkpoint(
            self.files.checkpoint,
            self._evaluated_model(),
            self.vocab,
            self.variant.id,
            extra=asdict(p.best),
        )

    def _history_row(self, metrics: DevMetrics, epoch_batches: int) -> HistoryRow:
        p = self.progress
        row = HistoryRow(
            epoch=p.epoch,
            step=p.step,
            train_loss=p.window.loss,
            dev_loss=metrics.dev_loss,
            dev_bleu=metrics.dev_bleu,
            tokens_per_s=p.window.tokens_per_s,
            learning_rate=self._learning_rate(),
            wall_time=self._wall_time(),
            epochs=round(p.epoch - 1 + p.batch_position / max(epoch_batches, 1), 4),
            end_of_epoch=int(p.batch_position >= epoch_batches),
        )
        p.history.append(row)
        p.window = Meter()
        logger.info(
            "%s epoch %.2f step %d: %s", self.variant.id, row.epochs, p.step, _format(row.metrics())
        )
        return row

    def _after_evaluation(self, value: float, end_of_epoch: bool) -> None:
        """Learning-rate decay, early stopping and the epoch budget after an evaluation
        whose progress signal (:class:`~pipeline.train.stopping.ProgressSignal`, higher is
        better) is ``value``."""
        p = self.progress
        if self.scheduler is not None:
            self.scheduler.step(value)
        self.plateau.update(value)
        floor = self.cfg.min_learning_rate
        below_floor = bool(floor) and self._learning_rate() < floor
        if (
            not p.stop_reason
            and (self.plateau.exhausted or below_floor)
            and self.slope_rule.converged(self.variant.id, p.history)
        ):
            if below_floor and not self.plateau.exhausted:
                logger.info(
                    "%s: learning rate %.3g below min_learning_rate %.3g: plateaued",
                    self.variant.id,
                    self._learning_rate(),
                    floor,
                )
            p.stop_reason = "early_stopping"
        if end_of_epoch and not p.stop_reason:
            if p.epoch >= self.cfg.max_epochs:
                p.stop_reason = "max_epochs"
            else:
                p.epoch, p.batch_position = p.epoch + 1, 0

    # ------------------------------------------------------------------ persistence
    def _save_last(self) -> None:
        self.progress.wall_time = self._wall_time()
        save_last(self.files.last, self._resumable, self.progress, self.config_hash, self.precision)

    def restore(self) -> bool:
        """Continue from ``last.pt`` if it exists and matches this config, data and format."""
        path = self.files.last
        state = read_last(path, self.config_hash, self.device, self.variant.id)
        if state is None:
            return False
        if state.get("precision", self.precision) != self.precision:
            logger.warning(
                "%s: trained so far in %s, continuing in %s (%s here)",
                path,
                state["precision"],
                self.precision,
                self.cfg.precision,
            )
        self.progress = load_last(state, self._resumable)
        self._wall_base, self._session_start = self.progress.wall_time, time.perf_counter()
        self.resumed_at_step = self.progress.step
        logger.info("%s: resumed from %s at step %d", self.variant.id, path, self.progress.step)
        return True

    # ------------------------------------------------------------------ for callbacks
    def stop(self, reason: str) -> None:
        """End training after the current step with stop reason ``reason`` (a callback's
        budget, e.g. a benchmark's time limit): one final evaluation follows, and the
        variant counts as not plateaued."""
        if not self.progress.stop_reason:
            self.progress.stop_reason = reason

    # ------------------------------------------------------------------ helpers
    def _evaluated_model(self) -> Seq2Seq:
        """What dev evaluations and checkpoints see: the average when there is one."""
        return self.model if self.ema is None else self.ema.module

    def _learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def _wall_time(self) -> float:
        return self._wall_base + time.perf_counter() - self._session_start

    def result(self, energy_kernel: str = "unused") -> TrainResult:
        """The run's summary and history; ``energy_kernel``: what the additive scorer's
        energy ran on (:func:`train_variant` finds out)."""
        summary = self.progress.summary(
            variant_id=self.variant.id,
            parameter_count=self.model.num_parameters(),
            precision=self.precision,
            resumed_at_step=self.resumed_at_step,
            energy_kernel=energy_kernel,
        )
        return TrainResult(summary, tuple(self.progress.history))


def _format(values: dict[str, float]) -> str:
    return " ".join(f"{k} {v:.4g}" for k, v in values.items())
