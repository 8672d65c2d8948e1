"""Decode a split with one trained variant: hypotheses, attention examples and statistics.

Runs inside a Ray task (one per variant, see :func:`pipeline.runtime.cluster.run_tasks`) that
returns a :class:`DecodeResult`; the evaluate stage's driver writes it to
``eval/<variant>/`` (:class:`pipeline.artifacts.EvalFiles`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.artifacts import EvalFiles, VariantFiles
from pipeline.config.params import EvaluateConfig
from pipeline.data.dataset import TokenizedData
from pipeline.evaluate.metrics import attention_entropy, monotonicity_gap
from pipeline.io import atomic_path, write_json, write_text
from pipeline.models.checkpoint import VocabInfo, load_checkpoint
from pipeline.models.search import batch_sentences, translate
from pipeline.runtime.console import quiet_worker_loggers
from pipeline.runtime.devices import TaskResources, claim_device
from pipeline.runtime.precision import resolve
from pipeline.runtime.process import prepare_process
from pipeline.scorers.plugins import PluginSource, load_plugins

logger = logging.getLogger(__name__)


def decode_split(model, split, config: EvaluateConfig, max_ratio: float, device):
    """Hypotheses and attention for every sentence of ``split``, in original order, with
    the batch size measured best for greedy or beam search."""
    return translate(
        model,
        split,
        beam_size=config.beam_size,
        length_penalty=config.length_penalty,
        max_ratio=max_ratio,
        batch_size=batch_sentences(config.beam_size),
        device=device,
        precision=resolve(config.precision, device),
    )


@dataclass(frozen=True)
class DecodeSpec:
    """One decode task: a variant's best checkpoint (its bytes travel with the task)."""

    variant_id: str
    checkpoint: bytes
    split: str
    evaluate: EvaluateConfig
    max_ratio: float
    examples: tuple[int, ...]  # sentences whose attention is kept
    resources: TaskResources
    plugins: tuple[PluginSource, ...] = ()  # plugin scorers' sources (workers lack the files)


@dataclass
class DecodeResult:
    """What a decode task returns to the driver, which writes ``eval/<variant>/``."""

    hypotheses: list[str]  # detokenized, one per sentence of the split, in order
    stats: dict[str, Any]  # decoding time, numerics (precision, device); attention statistics
    attention: dict[str, np.ndarray] = field(default_factory=dict)  # sentence_<i> -> (T, S)
    pieces: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # their axes

    def write(self, folder: Path) -> None:
        files = EvalFiles(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_hypotheses(files.hypotheses, self.hypotheses)
        if self.attention:
            with atomic_path(files.attention) as tmp:
                with open(tmp, "wb") as handle:
                    np.savez_compressed(handle, **self.attention)
            pieces = json.dumps(self.pieces, ensure_ascii=False, indent=1)
            write_text(files.attention_pieces, pieces)
        write_json(files.decode, self.stats)


def write_hypotheses(path: Path, hypotheses: list[str]) -> None:
    """One translation per line (a newline inside one becomes a space)."""
    write_text(path, "".join(t.replace("\n", " ") + "\n" for t in hypotheses))


def decode_variant(spec: DecodeSpec, data: TokenizedData) -> DecodeResult:
    """Ray task: decode ``spec.split`` with the variant's best checkpoint. Reads no file:
    the checkpoint and the data arrive as arguments, the results go back to the driver."""
    device = claim_device(spec.resources.gpus, spec.resources.cpus)
    quiet_worker_loggers()
    prepare_process()  # bf16 decoding (evaluate.precision): one oneDNN primitive per shape
    load_plugins(list(spec.plugins))
    loaded = load_checkpoint(
        f"{spec.variant_id}/{VariantFiles.CHECKPOINT}",
        data=spec.checkpoint,
        expected_vocab=VocabInfo.from_data(data),
        device=device,
    )
    split = data.split(spec.split)
    started_at = time.time()
    start = time.perf_counter()
    hypotheses, attentions = decode_split(
        loaded.model, split, spec.evaluate, spec.max_ratio, device
    )
    seconds = time.perf_counter() - start
    stats = {"decode_started": started_at, "decode_seconds": seconds}
    stats.update(
        sentences_per_s=len(split) / seconds,
        device=device,
        precision=resolve(spec.evaluate.precision, device),
    )
    result = DecodeResult(data.tgt_tokenizer.decode(hypotheses), stats)
    if loaded.model.has_attention:
        _attention_outputs(result, data, split, hypotheses, attentions, spec.examples)
    return result


def _attention_outputs(result: DecodeResult, data, split, hypotheses, attentions, examples):
    for i in examples:
        key = f"sentence_{i}"
        result.attention[key] = attentions[i]
        result.pieces[key] = {
            "source": data.src_tokenizer.pieces(split.source(i).tolist()) + ["</s>"],
            "target": data.tgt_tokenizer.pieces(hypotheses[i]) + ["</s>"],
        }
    present = [a for a in attentions if a is not None and a.size]
    result.stats["attention_entropy"] = float(np.mean([attention_entropy(a) for a in present]))
    gaps = [monotonicity_gap(a) for a in present]
    result.stats["attention_monotonicity_gap"] = float(np.nanmean(gaps))
