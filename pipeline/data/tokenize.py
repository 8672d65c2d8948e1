"""The tokenize stage's core: subword models trained on train only, ids for every split.

sentencepiece runs with the ``identity`` normalisation rule because the fetch stage
already NFKC-normalised the text and collapsed whitespace; so ``decode(encode(x)) == x``
for every sentence, which :func:`tokenize` checks on dev and test (detokenized output is
what BLEU scores). The output format is described in :mod:`pipeline.data.dataset`.
"""

from __future__ import annotations

import io
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm

from pipeline.config.params import TokenizeConfig
from pipeline.data.dataset import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPLITS,
    UNK_ID,
    SubwordTokenizer,
    TokenizedSplit,
)
from pipeline.data.pairs import read_tsv_pairs
from pipeline.io import atomic_dir, write_json

logger = logging.getLogger(__name__)


class TokenizeError(ValueError):
    """Raw data that cannot be tokenized; the message names the file."""


def train_subword_model(
    sentences: list[str], model_path: Path, config: TokenizeConfig, seed: int = 1
) -> Path:
    """Train one sentencepiece model on ``sentences`` and write it to ``model_path``.

    The model goes through an in-memory writer, so no output path is recorded inside it
    and the same data and params give byte-identical model files.
    """
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type=config.model_type,
        vocab_size=config.vocab_size,
        character_coverage=config.character_coverage,
        input_sentence_size=config.max_sentences,
        shuffle_input_sentence=True,
        normalization_rule_name="identity",
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    model_path.write_bytes(model.getvalue())
    return model_path


def _read_splits(raw_dir: Path) -> dict[str, list[tuple[str, str]]]:
    splits = {}
    for name in SPLITS:
        path = raw_dir / f"{name}.tsv"
        if not path.is_file():
            raise TokenizeError(f"{path}: not found (run `dvc repro fetch`)")
        pairs = read_tsv_pairs(path)
        if not pairs:
            raise TokenizeError(f"{path}: empty split")
        bad = next((i for i, p in enumerate(pairs, 1) if len(p) != 2), None)
        if bad is not None:
            raise TokenizeError(f"{path}:{bad}: expected source<TAB>target")
        splits[name] = pairs
    return splits


def _percentiles(lengths: np.ndarray) -> dict[str, float]:
    return {f"p{p}": float(np.percentile(lengths, p)) for p in (50, 90, 95, 99, 100)}


def _split_stats(pairs, split: TokenizedSplit) -> dict[str, Any]:
    words = {
        "source": np.array([len(s.split()) for s, _ in pairs]),
        "target": np.array([len(t.split()) for _, t in pairs]),
    }
    subwords = {"source": split.src_lengths, "target": split.tgt_lengths}
    ids = {"source": split.src_ids, "target": split.tgt_ids}
    return {
        "sentences": len(split),
        **{
            side: {
                "tokens": int(subwords[side].sum()),
                "words": int(words[side].sum()),
                "subwords_per_word": float(subwords[side].sum() / max(words[side].sum(), 1)),
                "unknown_rate": float(np.mean(ids[side] == UNK_ID)) if len(ids[side]) else 0.0,
                "word_length_percentiles": _percentiles(words[side]),
                "subword_length_percentiles": _percentiles(subwords[side]),
            }
            for side in ("source", "target")
        },
    }


def _check_round_trip(pairs, split: TokenizedSplit, src_tok, tgt_tok, name: str) -> int:
    """Number of sentences whose detokenized ids differ from the text (expected 0)."""
    failures = 0
    for side, tok, ids_of in (("source", src_tok, split.source), ("target", tgt_tok, split.target)):
        texts = [p[0 if side == "source" else 1] for p in pairs]
        decoded = tok.decode([ids_of(i).tolist() for i in range(len(split))])
        failures += sum(a != b for a, b in zip(texts, decoded))
    if failures:
        logger.warning("%s: %d sentences do not round-trip through the tokenizer", name, failures)
    return failures


def _warn_if_capped(requested: int, source: int, target: int) -> None:
    """sentencepiece (``hard_vocab_limit=False``) stops where the training text runs out
    of merges; say so rather than silently training with another vocabulary size."""
    if min(source, target) < requested:
        logger.warning(
            "tokenize.vocab_size: %d requested, but the training text supports only %d "
            "source / %d target pieces; using those (set vocab_size at most %d to silence this)",
            requested,
            source,
            target,
            min(source, target),
        )


def tokenize(config: TokenizeConfig, raw_dir: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Run the whole tokenize stage; returns ``stats.json``'s content."""
    raw_dir = Path(raw_dir)
    splits = _read_splits(raw_dir)
    train = splits["train"]
    with atomic_dir(out_dir) as tmp:
        if config.joint:
            joint = train_subword_model([s for p in train for s in p], tmp / "src.model", config)
            shutil.copyfile(joint, tmp / "tgt.model")
        else:
            for index, side in enumerate(("src", "tgt")):
                train_subword_model([p[index] for p in train], tmp / f"{side}.model", config)
        src_tok, tgt_tok = SubwordTokenizer(tmp / "src.model"), SubwordTokenizer(tmp / "tgt.model")
        _warn_if_capped(config.vocab_size, src_tok.vocab_size, tgt_tok.vocab_size)
        stats: dict[str, Any] = {
            "params": config.model_dump(),
            "vocab_size": {"source": src_tok.vocab_size, "target": tgt_tok.vocab_size},
            "special_ids": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
            "splits": {},
            "round_trip_failures": {},
        }
        for name, pairs in splits.items():
            split = TokenizedSplit.from_sequences(
                src_tok.encode([s for s, _ in pairs]), tgt_tok.encode([t for _, t in pairs])
            )
            split.save(tmp / f"{name}.npz")
            stats["splits"][name] = _split_stats(pairs, split)
            if name != "train":
                stats["round_trip_failures"][name] = _check_round_trip(
                    pairs, split, src_tok, tgt_tok, name
                )
            logger.info(
                "%s: %d sentences, %d target subwords", name, len(split), split.tgt_lengths.sum()
            )
        write_json(tmp / "stats.json", stats)
    return stats
