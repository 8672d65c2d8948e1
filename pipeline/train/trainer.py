"""Train one variant: token-bucketed teacher forcing, early stopping, atomic checkpoints.

``out_dir`` receives:

- ``checkpoint.pt``: the best model so far (see ``pipeline.models.checkpoint``);
- ``last.pt``: everything needed to continue (weights, Adam, learning-rate scheduler,
  early-stopping state, progress, RNG state), written after every evaluation;
  ``train_variant(..., resume=True)`` continues from it and, on CPU, ends with the same
  weights and history as an uninterrupted run;
- ``history.csv``: one row per evaluation (:data:`HISTORY_FIELDS`); ``config.json``.

Training is evaluated on dev at every epoch end and, with ``eval_every_steps``, every N
optimizer steps. The best checkpoint is chosen by ``train.early_stopping_metric`` (dev
loss, or sacreBLEU of greedy decoding of the first ``dev_bleu_sentences`` dev sentences).

Every budget and stopping rule counts optimizer steps and evaluations, never seconds, so a
variant trains the same steps to the same weights on a fast or a slow machine:

- learning-rate decay (torch's ``ReduceLROnPlateau``) and the plateau (:class:`Plateau`)
  count evaluations without an improvement of more than ``min_delta``;
- the dev metric has plateaued (stop reason ``early_stopping``) after ``patience`` such
  evaluations, or once the decays take the learning rate below ``min_learning_rate``;
- ``max_steps`` is a cap: a variant stopped by it has not plateaued and is flagged.

Anything measured in seconds is a callback's business, not the trainer's: the sweep's
safety net against a hanging trial and a benchmark's time budget are
:class:`TrainCallback` objects that raise, or call :meth:`Trainer.stop`. The caller sets
torch's threads and the process-wide settings
(:func:`pipeline.runtime.process.prepare_process`).

Code outside this package observes a run through :class:`TrainCallback` (after each
optimizer step, after each dev evaluation) and ends one early with :meth:`Trainer.stop`;
it never subclasses or patches the trainer.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from sacrebleu.metrics import BLEU
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.optim.swa_utils import AveragedModel
from tqdm import tqdm

from pipeline.artifacts import VariantFiles
from pipeline.config.grid import Variant
from pipeline.config.params import TrainConfig
from pipeline.data.batching import epoch_batches, make_batch, padding_fraction, token_batches
from pipeline.data.dataset import SubwordTokenizer, TokenizedData, TokenizedSplit
from pipeline.io import write_json, write_text
from pipeline.kernels import native
from pipeline.models.checkpoint import VocabInfo, atomic_torch_save, save_checkpoint
from pipeline.models.search import translate
from pipeline.models.seq2seq import Seq2Seq
from pipeline.runtime.precision import autocast, resolve

logger = logging.getLogger(__name__)


class TrainCallback:
    """Hooks into a training run (override what you need). They run in the training
    process, in order, and must not change the model, the optimizer or the random state."""

    def on_step(self, trainer: Trainer, step: int) -> None:
        """After optimizer step ``step`` (1-based)."""

    def on_evaluation(self, trainer: Trainer, row: dict[str, Any]) -> None:
        """After a dev evaluation, once its files (checkpoints, history) are written;
        ``row`` is its history row."""


class OnEvaluation(TrainCallback):
    """A :class:`TrainCallback` from a function of each evaluation's row."""

    def __init__(self, function: Callable[[dict[str, Any]], None]):
        self.function = function

    def on_evaluation(self, trainer: Trainer, row: dict[str, Any]) -> None:
        self.function(row)


class OnStep(TrainCallback):
    """A :class:`TrainCallback` from a function of each step number."""

    def __init__(self, function: Callable[[int], None]):
        self.function = function

    def on_step(self, trainer: Trainer, step: int) -> None:
        self.function(step)


HISTORY_FIELDS = (
    "epoch",
    "step",
    "train_loss",
    "dev_loss",
    "dev_bleu",
    "tokens_per_s",
    "learning_rate",
    "wall_time",
    "epochs",
    "end_of_epoch",
)
"""``history.csv`` columns, one row per evaluation: ``epoch`` is the epoch in progress,
``epochs`` the fraction of epochs done (1.33: a third into epoch 2), ``end_of_epoch`` 1 at
an epoch end; ``train_loss`` and ``tokens_per_s`` cover the steps since the previous row,
``learning_rate`` is the rate those steps used."""
LAST_FORMAT = 3  # 2: per-evaluation history, scheduler and early-stopping state; 3: signal
CHECK_EVERY_STEPS = 16
"""Steps between reads of the loss for the divergence check: one host-device transfer per
16 steps instead of a synchronisation every step (no checkpoint is written in between)."""


class TrainingDivergedError(RuntimeError):
    """The loss or the gradient became NaN/inf; no checkpoint was written for it."""


@dataclass
class TrainResult:
    variant_id: str
    best_epoch: int
    best_step: int
    best_dev_loss: float
    best_dev_bleu: float
    epochs_run: int  # epochs started
    steps: int
    wall_time_s: float
    tokens_per_s: float  # real target tokens per second of training steps
    parameter_count: int
    precision: str  # resolved train.precision: fp32 | bf16
    stop_reason: str  # early_stopping (plateau) | max_steps (the cap) | max_epochs | a callback's
    history: list[dict[str, float]]
    resumed_at_step: int = 0  # step of the resume state this run continued from (0: none)
    evaluations: int = 0  # dev evaluations (rows of the history)
    plateaued: bool = False  # stopped by the plateau rule (stop reason early_stopping)
    energy_kernel: str = "unused"  # additive scorer: what additive_energy() runs, native | torch


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


@dataclass
class Progress:
    """Where training stands; saved in ``last.pt`` (plain values only)."""

    epoch: int = 1
    batch_position: int = 0  # batches of ``epoch`` already trained
    step: int = 0
    wall_time: float = 0.0
    total: Meter = field(default_factory=Meter)  # the whole run
    window: Meter = field(default_factory=Meter)  # since the last history row
    best: Best | None = None
    stop_reason: str = ""
    history: list[dict[str, float]] = field(default_factory=list)

    def count(self, loss_sum: float = 0.0, tokens: int = 0, seconds: float = 0.0) -> None:
        self.total.add(loss_sum, tokens, seconds)
        self.window.add(loss_sum, tokens, seconds)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Progress:
        """The inverse of ``dataclasses.asdict``."""
        best = state["best"] and Best(**state["best"])
        meters = {"total": Meter(**state["total"]), "window": Meter(**state["window"])}
        return cls(**{**state, **meters, "best": best})


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
    return replace(trainer.result(), energy_kernel=energy_kernel)


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


def progress_signal(cfg: TrainConfig) -> ProgressSignal:
    """The evaluations' progress signal of ``cfg`` (:class:`ProgressSignal`)."""
    return ProgressSignal(cfg.min_delta, cfg.bleu_progress_delta)


def dev_loss(
    model: Seq2Seq,
    split: TokenizedSplit,
    batches: list[np.ndarray],
    device,
    precision: str = "fp32",
) -> float:
    """Per-token cross-entropy (no label smoothing) over all of ``split``."""
    model.eval()
    total, tokens = torch.zeros((), device=device), 0
    with torch.no_grad(), autocast(precision, device):
        for indices in batches:
            batch = make_batch(split, indices, reverse_source=model.config.reverse_source)
            loss, count = model.loss(batch.to(device))
            total, tokens = total + loss, tokens + count
    return total.item() / max(tokens, 1)


def dev_bleu(
    model: Seq2Seq,
    split: TokenizedSplit,
    tokenizer: SubwordTokenizer,
    *,
    max_ratio: float,
    device,
    precision: str = "fp32",
) -> float:
    """sacreBLEU of greedy translations of ``split``, both sides detokenized."""
    hypotheses, _ = translate(model, split, max_ratio=max_ratio, device=device, precision=precision)
    references = tokenizer.decode([split.target(i).tolist() for i in range(len(split))])
    return BLEU().corpus_score(tokenizer.decode(hypotheses), [references]).score


def write_history(path: Path, rows: list[dict[str, float]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=HISTORY_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, buffer.getvalue())


class _DevSet:
    """The dev split as training evaluates it: loss over all of it, BLEU of greedy
    decoding of its first ``dev_bleu_sentences`` sentences."""

    def __init__(self, data: TokenizedData, cfg: TrainConfig):
        self.cfg, self.split, self.tokenizer = cfg, data.split("dev"), data.tgt_tokenizer
        self.batches = token_batches(
            self.split.src_lengths, self.split.tgt_lengths, cfg.batch_tokens
        )
        size = min(len(self.split), cfg.dev_bleu_sentences)
        self.bleu_split = self.split.subset(np.arange(size))

    def metrics(self, model: Seq2Seq, device, precision: str) -> dict[str, float]:
        loss = dev_loss(model, self.split, self.batches, device, precision)
        return {"dev_loss": loss, "dev_bleu": self.bleu(model, device, precision)}

    def bleu(self, model: Seq2Seq, device, precision: str) -> float:
        """The dev BLEU of an evaluation."""
        return dev_bleu(
            model,
            self.bleu_split,
            self.tokenizer,
            max_ratio=self.cfg.max_decode_ratio,
            device=device,
            precision=precision,
        )


class Trainer:
    """One variant's training loop: epochs of steps, evaluations, checkpoints, resume.
    :func:`train_variant` builds and runs one; callbacks see it through the attributes
    ``variant``, ``device``, ``precision``, ``progress`` and the public methods."""

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
        self._pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # unchecked steps
        self.train_split, self.dev = data.split("train"), _DevSet(data, self.cfg)
        self.vocab = VocabInfo.from_data(data)
        self.config_hash = key or variant.key(data.fingerprint())
        torch.manual_seed(self.cfg.seed)
        self.model = Seq2Seq(variant.model, self.vocab.src_vocab_size, self.vocab.tgt_vocab_size)
        if variant.model.output_bias == "unigram":
            counts = self.train_split.target_counts(self.vocab.tgt_vocab_size)
            self.model.init_output_bias(torch.from_numpy(counts))
        self.model.to(device)
        self.optimizer = make_optimizer(self.model, self.cfg.learning_rate)
        self.ema = self._make_ema()
        self.scheduler = make_scheduler(self.optimizer, self.cfg)
        self.signal = progress_signal(self.cfg)
        self.plateau = Plateau(self.cfg.patience, self.signal.threshold, mode="max")
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
        logger.info(
            "%s epoch %d: %d batches, padding %s",
            self.variant.id,
            p.epoch,
            len(batches),
            _format(padding_fraction(self.train_split, batches)),
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
        self._pending.append((self.progress.step, loss_sum.detach(), norm.detach()))
        if len(self._pending) >= CHECK_EVERY_STEPS:
            self._check_pending()
        self.progress.count(tokens=tokens, seconds=time.perf_counter() - start)

    def _check_pending(self) -> None:
        """Read the losses and gradient norms of the unchecked steps in one host-device
        transfer (a GPU runs ahead between checks) and fail on the first non-finite."""
        if not self._pending:
            return
        steps, losses, norms = zip(*self._pending)
        self._pending = []
        values = torch.stack([torch.stack(losses).float(), torch.stack(norms).float()]).tolist()
        for step, loss, norm in zip(steps, *values):
            if not math.isfinite(loss):
                raise self._diverged(f"loss is {loss}", step)
            if not math.isfinite(norm):
                raise self._diverged(f"gradient norm is {norm}", step)
        self.progress.count(loss_sum=math.fsum(values[0]))

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
        if not math.isfinite(metrics["dev_loss"]):
            raise self._diverged(f"dev loss is {metrics['dev_loss']}")
        bleu = self.cfg.early_stopping_metric == "bleu"
        value = metrics["dev_bleu"] if bleu else -metrics["dev_loss"]  # higher is better
        signal, progressed = self.signal.update(value, metrics["dev_bleu"])
        self._keep_if_best(value, metrics, progressed)
        row = self._history_row(metrics, epoch_batches)
        self._after_evaluation(signal, end_of_epoch=bool(row["end_of_epoch"]))
        self._save_last()
        write_history(self.files.history, self.progress.history)
        for callback in self.callbacks:
            callback.on_evaluation(self, dict(row))

    def _keep_if_best(self, value: float, metrics: dict[str, float], progressed: bool) -> None:
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
        p.best = Best(
            value, p.epoch, p.step, metrics["dev_loss"], metrics["dev_bleu"], self._wall_time()
        )
        save_checkpoint(
            self.files.checkpoint,
            self._evaluated_model(),
            self.vocab,
            self.variant.id,
            extra=asdict(p.best),
        )

    def _history_row(self, metrics: dict[str, float], epoch_batches: int) -> dict[str, float]:
        p = self.progress
        row = {
            "epoch": p.epoch,
            "step": p.step,
            "train_loss": p.window.loss,
            **metrics,
            "tokens_per_s": p.window.tokens_per_s,
            "learning_rate": self._learning_rate(),
            "wall_time": self._wall_time(),
            "epochs": round(p.epoch - 1 + p.batch_position / max(epoch_batches, 1), 4),
            "end_of_epoch": int(p.batch_position >= epoch_batches),
        }
        p.history.append(row)
        p.window = Meter()
        logger.info(
            "%s epoch %.2f step %d: %s", self.variant.id, row["epochs"], p.step, _format(row)
        )
        return row

    def _after_evaluation(self, value: float, end_of_epoch: bool) -> None:
        """Learning-rate decay, early stopping and the epoch budget after an evaluation
        whose progress signal (:class:`ProgressSignal`, higher is better) is ``value``."""
        p = self.progress
        if self.scheduler is not None:
            self.scheduler.step(value)
        self.plateau.update(value)
        floor = self.cfg.min_learning_rate
        if not p.stop_reason and self.plateau.exhausted:
            p.stop_reason = "early_stopping"
        elif not p.stop_reason and floor and self._learning_rate() < floor:
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
        payload = {
            "format": LAST_FORMAT,
            "config_hash": self.config_hash,
            "precision": self.precision,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler else None,
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "plateau": self.plateau.state_dict(),
            "signal": self.signal.state_dict(),
            "progress": asdict(self.progress),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }
        atomic_torch_save(payload, self.files.last)

    def restore(self) -> bool:
        """Continue from ``last.pt`` if it exists and matches this config, data and format."""
        path = self.files.last
        if not path.is_file():
            return False
        state = torch.load(path, map_location=self.device, weights_only=True)
        if state.get("format") != LAST_FORMAT or state.get("config_hash") != self.config_hash:
            logger.warning("%s: other config or data; starting %s afresh", path, self.variant.id)
            return False
        if state.get("precision", self.precision) != self.precision:
            logger.warning(
                "%s: trained so far in %s, continuing in %s (%s here)",
                path,
                state["precision"],
                self.precision,
                self.cfg.precision,
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.ema is not None:
            self.ema.load_state_dict(state["ema"])
        self.plateau.load_state_dict(state["plateau"])
        self.signal.load_state_dict(state["signal"])
        self.progress = Progress.from_state(state["progress"])
        torch.set_rng_state(state["torch_rng"].cpu())
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
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
    def _make_ema(self) -> AveragedModel | None:
        """The weights' exponential moving average (``train.ema_decay``), torch's
        ``AveragedModel`` with a decay that ramps up over the first steps."""
        decay = self.cfg.ema_decay
        if not decay:
            return None

        @torch.no_grad()
        def update(averaged: list[torch.Tensor], current: list[torch.Tensor], _) -> None:
            step = self.progress.step
            torch._foreach_lerp_(averaged, current, 1 - min(decay, (1 + step) / (10 + step)))

        return AveragedModel(self.model, multi_avg_fn=update)

    def _evaluated_model(self) -> Seq2Seq:
        """What dev evaluations and checkpoints see: the average when there is one."""
        return self.model if self.ema is None else self.ema.module

    def _learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def _wall_time(self) -> float:
        return self._wall_base + time.perf_counter() - self._session_start

    def _diverged(self, what: str, step: int | None = None) -> TrainingDivergedError:
        p, name = self.progress, self.variant.id
        step = p.step + 1 if step is None else step
        return TrainingDivergedError(f"variant {name}: {what} at epoch {p.epoch} step {step}")

    def result(self) -> TrainResult:
        p, best = self.progress, self.progress.best
        return TrainResult(
            variant_id=self.variant.id,
            best_epoch=best.epoch if best else 0,
            best_step=best.step if best else 0,
            best_dev_loss=best.dev_loss if best else math.nan,
            best_dev_bleu=best.dev_bleu if best else math.nan,
            epochs_run=int(p.history[-1]["epoch"]) if p.history else 0,
            steps=p.step,
            wall_time_s=p.wall_time,
            tokens_per_s=p.total.tokens_per_s,
            parameter_count=self.model.num_parameters(),
            precision=self.precision,
            stop_reason=p.stop_reason,
            history=list(p.history),
            resumed_at_step=self.resumed_at_step,
            evaluations=len(p.history),
            plateaued=p.stop_reason == "early_stopping",
        )


def _format(values: dict[str, float]) -> str:
    skip = ("epoch", "step", "epochs", "end_of_epoch")
    return " ".join(f"{k} {v:.4g}" for k, v in values.items() if k not in skip)
