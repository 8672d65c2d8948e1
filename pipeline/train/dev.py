"""The dev evaluations of training: per-token dev loss over the whole dev split, and
sacreBLEU of greedy decoding of its first ``train.dev_bleu_sentences`` sentences.

The trainer evaluates at every epoch end and, with ``eval_every_steps``, every N optimizer
steps; ``train.early_stopping_metric`` picks which of the two chooses the best checkpoint
(:mod:`pipeline.train.stopping`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sacrebleu.metrics import BLEU

from pipeline.config.params import TrainConfig
from pipeline.data.batching import make_batch, token_batches
from pipeline.data.dataset import SubwordTokenizer, TokenizedData, TokenizedSplit
from pipeline.models.search import translate
from pipeline.models.seq2seq import Seq2Seq
from pipeline.runtime.precision import autocast


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


@dataclass(frozen=True)
class DevMetrics:
    """One dev evaluation's measurements (named as in the history row)."""

    dev_loss: float
    dev_bleu: float


class DevSet:
    """The dev split as training evaluates it: loss over all of it, BLEU of greedy
    decoding of its first ``dev_bleu_sentences`` sentences."""

    def __init__(self, data: TokenizedData, cfg: TrainConfig):
        self.cfg, self.split, self.tokenizer = cfg, data.split("dev"), data.tgt_tokenizer
        self.batches = token_batches(
            self.split.src_lengths, self.split.tgt_lengths, cfg.batch_tokens
        )
        size = min(len(self.split), cfg.dev_bleu_sentences)
        self.bleu_split = self.split.subset(np.arange(size))

    def metrics(self, model: Seq2Seq, device, precision: str) -> DevMetrics:
        loss = dev_loss(model, self.split, self.batches, device, precision)
        return DevMetrics(dev_loss=loss, dev_bleu=self.bleu(model, device, precision))

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
