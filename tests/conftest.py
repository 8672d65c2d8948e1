"""Shared pytest fixtures."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
import sentencepiece as spm

from pipeline.artifacts import VariantFiles
from pipeline.config.grid import Variant
from pipeline.config.params import ModelConfig, TrainConfig
from pipeline.data.dataset import TokenizedData, TokenizedSplit
from pipeline.scorers.plugins import unload_plugins
from tests.support import PLAIN_TRAINING


@pytest.fixture(autouse=True)
def _plugin_scorers_stay_in_their_test():
    """A plugin scorer a test loads into the process (``load_plugins``, a stage's
    ``load_config``, a ``register_scorer`` in the test) is unloaded after it, so that no
    other test sees its name. Reading params loads nothing."""
    yield
    unload_plugins()


# =============================================================================
# Model / search / training fixtures (tests/unit/test_attention, test_models, test_search,
# test_batching, test_training). Names start with ``tiny_`` to stay clear of others.
# =============================================================================

TINY_SOURCE_WORDS = "ka lo mi nu pe ri so tu va xe".split()
TINY_TARGET_WORDS = "red blue green gold grey pink black white teal plum".split()


def tiny_sentence_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """Toy parallel text: each source word maps to one target word, same order."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        positions = [rng.randrange(len(TINY_SOURCE_WORDS)) for _ in range(rng.randint(2, 6))]
        source = " ".join(TINY_SOURCE_WORDS[i] for i in positions)
        pairs.append((source, " ".join(TINY_TARGET_WORDS[i] for i in positions)))
    return pairs


def _train_sentencepiece(lines: list[str], prefix: Path) -> Path:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(prefix),
        vocab_size=64,
        model_type="bpe",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        normalization_rule_name="identity",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


@pytest.fixture(scope="session")
def tiny_tok_dir(tmp_path_factory) -> Path:
    """A ``data/tok``-like folder: src/tgt sentencepiece models (BPE, ~64 pieces, ids
    pad 0 unk 1 bos 2 eos 3) and train (48 pairs), dev (12) and test (12) npz splits."""
    directory = tmp_path_factory.mktemp("tiny_tok")
    splits = {"train": tiny_sentence_pairs(48, 1), "dev": tiny_sentence_pairs(12, 2)}
    splits["test"] = tiny_sentence_pairs(12, 3)
    processors = {}
    for side, column in (("src", 0), ("tgt", 1)):
        lines = [pair[column] for pair in splits["train"]]
        model = _train_sentencepiece(lines, directory / side)
        processors[side] = spm.SentencePieceProcessor(model_file=str(model))
    for name, pairs in splits.items():
        src = processors["src"].encode([s for s, _ in pairs])
        tgt = processors["tgt"].encode([t for _, t in pairs])
        TokenizedSplit.from_sequences(src, tgt).save(directory / f"{name}.npz")
    return directory


@pytest.fixture(scope="session")
def tiny_other_tokenizer(tmp_path_factory) -> Path:
    """A sentencepiece model trained on different text (for mismatch tests)."""
    directory = tmp_path_factory.mktemp("tiny_other_tok")
    lines = [t.upper() for _, t in tiny_sentence_pairs(40, 9)]
    return _train_sentencepiece(lines, directory / "other")


@pytest.fixture
def tiny_model_config() -> Callable[..., ModelConfig]:
    """Factory of small, fast ModelConfigs (GRU cells, embedding 16, hidden 32, no
    dropout)."""

    def make(**overrides) -> ModelConfig:
        values = {"cell": "gru", "embedding_size": 16, "hidden_size": 32, "dropout": 0.0}
        return ModelConfig(**(values | overrides))

    return make


@pytest.fixture
def make_variant(tiny_model_config) -> Callable[..., Variant]:
    """Factory of tiny trainable Variants (``<scorer>-rev-h32-s<seed>``) for
    ``tiny_tok_dir``; keyword arguments override the train settings."""

    def make(scorer: str = "additive", **train) -> Variant:
        model = tiny_model_config(scorer=scorer, dropout=0.1, reverse_source=True)
        values = {
            **PLAIN_TRAINING,
            "batch_tokens": 60,
            "learning_rate": 0.01,
            "max_epochs": 3,
            "patience": 5,
            "early_stopping_metric": "loss",
            "dev_bleu_sentences": 8,
            **train,
        }
        config = TrainConfig(**values)
        return Variant(f"{scorer}-rev-h32-s{config.seed}", model, config, {"scorer": scorer})

    return make


@pytest.fixture(scope="session")
def tiny_variant_folder(tiny_tok_dir, tmp_path_factory):
    """A trained tiny additive variant (reversed source) whose folder holds its subword
    models, as the train stage writes ``models/<variant>/``."""
    model = ModelConfig(
        cell="gru", embedding_size=16, hidden_size=32, dropout=0.0, reverse_source=True
    )
    settings = {"batch_tokens": 60, "learning_rate": 0.01, "max_epochs": 12, "patience": 50}
    train = TrainConfig(
        **PLAIN_TRAINING | settings | {"early_stopping_metric": "loss", "dev_bleu_sentences": 8}
    )
    variant = Variant("additive-rev-h32-s1", model, train, {"scorer": "additive"})
    from pipeline.train.trainer import train_variant  # heavy: only where it is used

    folder = tmp_path_factory.mktemp("models") / variant.id
    train_variant(variant, tiny_tok_dir, folder)
    data = TokenizedData.load(tiny_tok_dir)
    VariantFiles(folder).add_tokenizers({n: data.files[n] for n in VariantFiles.TOKENIZERS})
    return folder


# =============================================================================
# (other fixtures below)
# =============================================================================
