"""Train one variant: token-bucketed teacher forcing, early stopping, atomic checkpoints.

``out_dir`` receives:

- ``checkpoint.pt``: the best model so far (see ``pipeline.models.checkpoint``);
- ``last.pt``: everything needed to continue (weights, Adam, progress, RNG state), written
  after every evaluation; ``train_variant(..., resume=True)`` continues from it and, on
  CPU, ends with the same weights and history as an uninterrupted run;
- ``history.csv``: one row per epoch (:data:`HISTORY_FIELDS`); ``config.json``.

The best epoch is chosen by ``train.early_stopping_metric`` (dev loss, or sacreBLEU of
greedy decoding of the first ``dev_bleu_sentences`` dev sentences). Patience and learning
rate decay count epochs without improvement; ``eval_every_steps`` adds mid-epoch
evaluations, which can only improve the best checkpoint. The caller sets torch's threads.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sacrebleu.metrics import BLEU
from tqdm import tqdm

from pipeline.artifacts import VariantFiles
from pipeline.data.batching import epoch_batches, make_batch, padding_fraction, token_batches
from pipeline.data.tokenized import SubwordTokenizer, TokenizedData, TokenizedSplit
from pipeline.grid import Variant
from pipeline.io import write_json, write_text
from pipeline.models.checkpoint import VocabInfo, atomic_torch_save, save_checkpoint
from pipeline.models.precision import autocast, resolve
from pipeline.models.search import translate
from pipeline.models.seq2seq import Seq2Seq

logger = logging.getLogger(__name__)

HISTORY_FIELDS = (
    "epoch", "step", "train_loss", "dev_loss", "dev_bleu", "tokens_per_s", "learning_rate",
    "wall_time",
)  # fmt: skip
LAST_FORMAT = 1
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
    epochs_run: int
    steps: int
    wall_time_s: float
    tokens_per_s: float  # real target tokens per second of training steps
    parameter_count: int
    precision: str  # resolved train.precision: fp32 | bf16
    stop_reason: str  # max_epochs | early_stopping | max_steps | time_budget
    history: list[dict[str, float]]
    resumed_at_step: int = 0  # step of the resume state this run continued from (0: none)


@dataclass
class Progress:
    """Where training stands; saved in ``last.pt`` (plain values only)."""

    learning_rate: float
    epoch: int = 1
    batch_position: int = 0  # batches of ``epoch`` already trained
    step: int = 0
    wall_time: float = 0.0
    totals: list[float] = field(default_factory=lambda: [0.0, 0, 0.0])  # loss, tokens, s
    row_start: list[float] = field(default_factory=lambda: [0.0, 0, 0.0])  # totals at last row
    best: dict[str, float] = field(default_factory=dict)  # value, epoch, step, dev_*
    improved_this_epoch: bool = False
    bad_epochs: int = 0
    epochs_since_decay: int = 0
    stop_reason: str = ""
    history: list[dict[str, float]] = field(default_factory=list)


def train_variant(
    variant: Variant,
    data: TokenizedData | Path,
    out_dir: Path,
    *,
    callback: Callable[[dict[str, Any]], None] | None = None,
    device: str | torch.device = "cpu",
    resume: bool = True,
) -> TrainResult:
    """Train ``variant`` on ``data`` (or the ``data/tok`` folder it names) into ``out_dir``;
    ``callback(row)`` after each epoch, once its files in ``out_dir`` are written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not isinstance(data, TokenizedData):
        data = TokenizedData.load(data)
    trainer = _Trainer(variant, data, out_dir, callback, device)
    if not (resume and trainer.restore()):
        write_json(
            VariantFiles(out_dir).config,
            {"variant": variant.id, "axes": variant.axes, "params": variant.flat_params()},
        )
    trainer.run()
    return trainer.result()


def make_optimizer(model: torch.nn.Module, learning_rate: float) -> torch.optim.Adam:
    """Adam with the fused (single-kernel) update: 2.7 ms instead of 16.1 ms per step for
    the additive h256 model on one CPU thread (docs/benchmarks.md); the same update rule."""
    return torch.optim.Adam(model.parameters(), lr=learning_rate, fused=True)


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


class _Trainer:
    def __init__(self, variant: Variant, data: TokenizedData, out_dir: Path, callback, device):
        self.variant, self.cfg, self.out_dir = variant, variant.train, out_dir
        self.callback, self.device = callback, device
        self.precision = resolve(self.cfg.precision, device)  # fp32 | bf16
        self._pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # unchecked steps
        self.train_split, self.dev_split = data.split("train"), data.split("dev")
        self.tokenizer, self.vocab = data.tgt_tokenizer, VocabInfo.from_data(data)
        self.config_hash = variant.config_hash(data.fingerprint())
        size = min(len(self.dev_split), self.cfg.dev_bleu_sentences)
        self.bleu_split = self.dev_split.subset(np.arange(size))
        dev = self.dev_split
        self.dev_batches = token_batches(dev.src_lengths, dev.tgt_lengths, self.cfg.batch_tokens)
        torch.manual_seed(self.cfg.seed)
        self.model = Seq2Seq(variant.model, self.vocab.src_vocab_size, self.vocab.tgt_vocab_size)
        self.model.to(device)
        self.optimizer = make_optimizer(self.model, self.cfg.learning_rate)
        self.progress = Progress(learning_rate=self.cfg.learning_rate)
        self._wall_base, self._session_start = 0.0, time.perf_counter()
        self.resumed_at_step = 0

    # ------------------------------------------------------------------ epoch loop
    def run(self) -> None:
        while not self.progress.stop_reason:
            self._train_epoch()

    def _train_epoch(self) -> None:
        p, cfg = self.progress, self.cfg
        batches = epoch_batches(self.train_split, cfg.batch_tokens, seed=cfg.seed, epoch=p.epoch)
        padding = padding_fraction(self.train_split, batches)
        logger.info("%s epoch %d: %d batches, padding %s", self.variant.id, p.epoch, len(batches),
                    _format(padding))  # fmt: skip
        quiet, reverse = not sys.stderr.isatty(), self.variant.model.reverse_source
        bar = tqdm(total=len(batches), initial=p.batch_position, leave=False, disable=quiet)
        for position in range(p.batch_position, len(batches)):
            batch = make_batch(self.train_split, batches[position], reverse_source=reverse)
            self._train_step(batch.to(self.device))
            p.batch_position = position + 1
            bar.update()
            if self._budget_spent():
                break
            every = cfg.eval_every_steps
            if every and p.step % every == 0 and p.batch_position < len(batches):
                self._evaluate(end_of_epoch=False)
        bar.close()
        self._evaluate(end_of_epoch=True)

    def _train_step(self, batch) -> None:
        p = self.progress
        start = time.perf_counter()
        self.model.train()
        with autocast(self.precision, self.device):
            loss_sum, tokens = self.model.loss(batch, self.cfg.label_smoothing)
        self.optimizer.zero_grad(set_to_none=True)
        (loss_sum / tokens).backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.optimizer.step()
        p.step += 1
        self._pending.append((p.step, loss_sum.detach(), norm.detach()))
        if len(self._pending) >= CHECK_EVERY_STEPS:
            self._check_pending()
        p.totals[1] += tokens
        p.totals[2] += time.perf_counter() - start

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
        self.progress.totals[0] += math.fsum(values[0])

    def _budget_spent(self) -> bool:
        p, cfg = self.progress, self.cfg
        if cfg.max_steps and p.step >= cfg.max_steps:
            p.stop_reason = "max_steps"
        elif cfg.time_budget_minutes and self._wall_time() >= 60 * cfg.time_budget_minutes:
            p.stop_reason = "time_budget"
        return bool(p.stop_reason)

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self, end_of_epoch: bool) -> None:
        start = time.perf_counter()
        self._check_pending()  # on a GPU: waits for the queued steps, so they are timed
        self.progress.totals[2] += time.perf_counter() - start
        p, model, device, dtype = self.progress, self.model, self.device, self.precision
        metrics = {
            "dev_loss": dev_loss(model, self.dev_split, self.dev_batches, device, dtype),
            "dev_bleu": dev_bleu(model, self.bleu_split, self.tokenizer,
                                 max_ratio=self.cfg.max_decode_ratio, device=device,
                                 precision=dtype),
        }  # fmt: skip
        if not math.isfinite(metrics["dev_loss"]):
            raise self._diverged(f"dev loss is {metrics['dev_loss']}")
        bleu = self.cfg.early_stopping_metric == "bleu"
        value = metrics["dev_bleu"] if bleu else -metrics["dev_loss"]  # higher is better
        if not p.best or value > p.best["value"]:
            p.best, p.improved_this_epoch = {"value": value, "epoch": p.epoch, "step": p.step}, True
            p.best.update(metrics)
            path = VariantFiles(self.out_dir).checkpoint
            save_checkpoint(path, model, self.vocab, self.variant.id, extra=p.best)
        if not end_of_epoch:
            logger.info("%s step %d: %s", self.variant.id, p.step, _format(metrics))
            self._save_last()
            return
        row = self._epoch_row(metrics)
        self._end_epoch()
        self._save_last()
        self._write_history()
        if self.callback is not None:
            self.callback(dict(row))

    def _epoch_row(self, metrics: dict[str, float]) -> dict[str, float]:
        p = self.progress
        loss, tokens, seconds = (now - then for now, then in zip(p.totals, p.row_start))
        row = {"epoch": p.epoch, "step": p.step, "train_loss": loss / max(tokens, 1), **metrics,
               "tokens_per_s": tokens / max(seconds, 1e-9), "learning_rate": p.learning_rate,
               "wall_time": self._wall_time()}  # fmt: skip
        p.history.append(row)
        p.row_start = list(p.totals)
        logger.info("%s epoch %d: %s", self.variant.id, p.epoch, _format(row))
        return row

    def _end_epoch(self) -> None:
        """Plateau bookkeeping: learning-rate decay, early stopping, epoch budget."""
        p, cfg = self.progress, self.cfg
        improved, p.improved_this_epoch = p.improved_this_epoch, False
        p.bad_epochs = 0 if improved else p.bad_epochs + 1
        p.epochs_since_decay = 0 if improved else p.epochs_since_decay + 1
        if p.epochs_since_decay > cfg.lr_patience:
            p.learning_rate *= cfg.lr_decay
            p.epochs_since_decay = 0
            for group in self.optimizer.param_groups:
                group["lr"] = p.learning_rate
        if not p.stop_reason and p.bad_epochs >= cfg.patience:
            p.stop_reason = "early_stopping"
        if not p.stop_reason and p.epoch >= cfg.max_epochs:
            p.stop_reason = "max_epochs"
        if not p.stop_reason:
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
            "progress": asdict(self.progress),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }
        atomic_torch_save(payload, VariantFiles(self.out_dir).last)

    def restore(self) -> bool:
        """Continue from ``last.pt`` if it exists and matches this config and data."""
        path = VariantFiles(self.out_dir).last
        if not path.is_file():
            return False
        state = torch.load(path, map_location=self.device, weights_only=True)
        if state.get("format") != LAST_FORMAT or state.get("config_hash") != self.config_hash:
            logger.warning("%s: other config or data; starting %s afresh", path, self.variant.id)
            return False
        if state.get("precision", self.precision) != self.precision:
            logger.warning("%s: trained so far in %s, continuing in %s (%s here)", path,
                           state["precision"], self.precision, self.cfg.precision)  # fmt: skip
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.progress = Progress(**state["progress"])
        torch.set_rng_state(state["torch_rng"].cpu())
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
        self._wall_base, self._session_start = self.progress.wall_time, time.perf_counter()
        self.resumed_at_step = self.progress.step
        logger.info("%s: resumed from %s at step %d", self.variant.id, path, self.progress.step)
        return True

    def _write_history(self) -> None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=HISTORY_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.progress.history)
        write_text(VariantFiles(self.out_dir).history, buffer.getvalue())

    # ------------------------------------------------------------------ helpers
    def _wall_time(self) -> float:
        return self._wall_base + time.perf_counter() - self._session_start

    def _diverged(self, what: str, step: int | None = None) -> TrainingDivergedError:
        p, name = self.progress, self.variant.id
        step = p.step + 1 if step is None else step
        return TrainingDivergedError(f"variant {name}: {what} at epoch {p.epoch} step {step}")

    def result(self) -> TrainResult:
        p = self.progress
        return TrainResult(
            variant_id=self.variant.id,
            best_epoch=int(p.best.get("epoch", 0)),
            best_step=int(p.best.get("step", 0)),
            best_dev_loss=float(p.best.get("dev_loss", math.nan)),
            best_dev_bleu=float(p.best.get("dev_bleu", math.nan)),
            epochs_run=int(p.history[-1]["epoch"]) if p.history else 0,
            steps=p.step,
            wall_time_s=p.wall_time,
            tokens_per_s=p.totals[1] / max(p.totals[2], 1e-9),
            parameter_count=self.model.num_parameters(),
            precision=self.precision,
            stop_reason=p.stop_reason,
            history=list(p.history),
            resumed_at_step=self.resumed_at_step,
        )


def _format(values: dict[str, float]) -> str:
    return " ".join(f"{k} {v:.4g}" for k, v in values.items() if k not in ("epoch", "step"))
