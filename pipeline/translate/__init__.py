"""Translate text with a trained variant, outside the pipeline.

A variant's folder ``models/<variant>/`` holds everything translation needs: the best
checkpoint (weights, model config, the sha256 of both subword models), ``config.json``
(its decoding length cap) and the two sentencepiece models ``src.model`` and
``tgt.model``. :func:`export` copies those files alone into a folder of their own, which
translates anywhere the project is installed. Input text is normalised as the fetch stage
normalised the training corpus (NFKC, one space between words), so a sentence typed by a
user meets the model the way its training data did. A sentence longer than the variant's
training sentences (``fetch.split.max_train_words``, :attr:`Translator.train_cut`) is
translated too, as extrapolation; the command line says how many were.

Used by the command line (``python -m pipeline.translate``, :mod:`pipeline.translate.cli`)
and by the MLflow model of each variant (:mod:`pipeline.translate.mlflow_model`).

May import: scorers, config, data, models, runtime, io, artifacts.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pydantic
import torch
import yaml

from pipeline.artifacts import VariantFiles
from pipeline.config.params import EvaluateConfig, SplitConfig, TrainConfig
from pipeline.data.cleaning import normalize, word_count
from pipeline.data.dataset import (
    BOS_ID,
    PAD_ID,
    SubwordTokenizer,
    TokenizedDataError,
    TokenizedSplit,
)
from pipeline.io import atomic_dir
from pipeline.models.checkpoint import LoadedCheckpoint, VocabInfo, load_checkpoint
from pipeline.models.search import batch_sentences
from pipeline.models.search import translate as search

DEFAULT_BEAM_SIZE: int = EvaluateConfig.model_fields["beam_size"].default
"""The evaluate stage's default beam: what the study's test BLEU measured."""
DEFAULT_MAX_RATIO: float = TrainConfig.model_fields["max_decode_ratio"].default
"""The decoding length cap of a folder without ``config.json``."""
TRAIN_CUT_KEY = "fetch.split.max_train_words"
"""The training cut's key in a variant's ``config.json`` params (and in params files)."""
PARAMS_FILE = "params.yaml"
"""The study's params, beside the models folder of a variant trained in the project."""
_DVC_REMOTE = re.compile(r"^\s*\[\s*'?remote\s+\"", re.MULTILINE)


class TranslateError(ValueError):
    """A model folder or input that cannot translate; the message names the file."""


@dataclass(frozen=True)
class Translation:
    """One input line and its translation; with attention asked for, the subword pieces
    of both sides (each ending in ``</s>``) and the weights (target x source rows)."""

    source: str
    translation: str
    source_pieces: list[str] | None = None
    target_pieces: list[str] | None = None
    attention: list[list[float]] | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def resolve_model(model: str | Path, models_dir: str | Path = "models") -> Path:
    """A variant's folder from what a user gives: a folder, its ``checkpoint.pt``, or a
    variant id under ``models_dir``."""
    path = Path(model)
    if path.is_file() and path.name.endswith(".pt"):
        return path.parent
    if path.is_dir():
        return path
    candidate = Path(models_dir) / str(model)
    if candidate.is_dir():
        return candidate
    known = sorted(p.name for p in Path(models_dir).glob("*/") if (p / "checkpoint.pt").is_file())
    if known:
        hint = f"; variants in {models_dir}/: {', '.join(known)}"
    else:
        fetch = " or `dvc pull` (from the DVC remote)" if _has_dvc_remote(models_dir) else ""
        hint = f"; {models_dir}/ holds no trained variant (run `dvc repro train`{fetch})"
    raise TranslateError(f"{model}: no such model folder, checkpoint or variant id{hint}")


def _has_dvc_remote(where: str | Path) -> bool:
    """Whether the DVC repo holding ``where`` names a remote (in ``.dvc/config`` or
    ``.dvc/config.local``), so that ``dvc pull`` can fetch its outputs."""
    where = Path(where).resolve()
    for folder in (where, *where.parents):
        if (folder / ".dvc").is_dir():
            configs = (folder / ".dvc" / name for name in ("config", "config.local"))
            return any(_DVC_REMOTE.search(p.read_text()) for p in configs if p.is_file())
    return False


def _tokenizers(folder: Path, tok_dir: Path | None) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    for where in (folder, tok_dir):
        if where is None:
            continue
        src, tgt = where / VariantFiles.SRC_MODEL, where / VariantFiles.TGT_MODEL
        if src.is_file() and tgt.is_file():
            try:
                return SubwordTokenizer(src), SubwordTokenizer(tgt)
            except TokenizedDataError as err:
                raise TranslateError(str(err)) from None
    looked = f"{folder}" + (f" or {tok_dir}" if tok_dir else "")
    raise TranslateError(
        f"{looked}: no {VariantFiles.SRC_MODEL}/{VariantFiles.TGT_MODEL} (the subword models "
        "the variant was trained with); give --tok data/tok, or export the variant"
    )


class Translator:
    """A loaded variant that turns sentences into translations (greedy or beam search)."""

    def __init__(
        self,
        loaded: LoadedCheckpoint,
        src: SubwordTokenizer,
        tgt: SubwordTokenizer,
        folder: Path,
        max_ratio: float,
        device: str = "cpu",
        train_cut: int | None = None,
    ):
        self.loaded, self.src, self.tgt = loaded, src, tgt
        self.folder, self.max_ratio, self.device = folder, max_ratio, device
        self.train_cut = train_cut  # most words of a training source; None: unknown, no cut

    @property
    def variant_id(self) -> str:
        return self.loaded.variant_id

    @property
    def has_attention(self) -> bool:
        return self.loaded.model.has_attention

    @classmethod
    def load(
        cls, folder: str | Path, tok_dir: str | Path | None = None, device: str = "cpu"
    ) -> Translator:
        """Load a variant's folder (``checkpoint.pt`` and the two subword models, from the
        folder or else ``tok_dir``); subword models other than the ones the checkpoint
        was trained with are refused, naming what differs."""
        folder = Path(folder)
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            raise TranslateError(f"--device {device}: CUDA is not available on this machine")
        checkpoint = folder / VariantFiles.CHECKPOINT
        if not checkpoint.is_file():
            raise TranslateError(f"{checkpoint}: checkpoint not found")
        src, tgt = _tokenizers(folder, Path(tok_dir) if tok_dir else None)
        try:
            loaded = load_checkpoint(
                checkpoint, expected_vocab=VocabInfo.from_tokenizers(src, tgt), device=device
            )
        except ValueError as err:
            raise TranslateError(str(err)) from None
        params = _params(folder)
        max_ratio = float(params.get("train.max_decode_ratio", DEFAULT_MAX_RATIO))
        return cls(loaded, src, tgt, folder, max_ratio, device, _train_cut(folder, params))

    def beyond_cut(self, lines: Sequence[str]) -> int:
        """How many of ``lines`` have more words than any sentence the variant trained on
        (0 when its cut is unknown)."""
        if self.train_cut is None:
            return 0
        return sum(word_count(normalize(line)) > self.train_cut for line in lines)

    def translate(
        self,
        lines: Sequence[str],
        *,
        beam_size: int = DEFAULT_BEAM_SIZE,
        length_penalty: float = 1.0,
        attention: bool = False,
    ) -> list[Translation]:
        """Translate ``lines`` (one sentence each; an empty line gives an empty line)."""
        if beam_size < 1:
            raise TranslateError(f"beam size {beam_size}: must be at least 1")
        texts = [normalize(line) for line in lines]
        todo = [i for i, text in enumerate(texts) if text]
        found: list[Translation] = [Translation(line, "") for line in lines]
        if not todo:
            return found
        ids = self.src.encode([texts[i] for i in todo])
        split = TokenizedSplit.from_sequences(ids, [[] for _ in ids])
        hypotheses, attentions = search(
            self.loaded.model,
            split,
            beam_size=beam_size,
            length_penalty=length_penalty,
            max_ratio=self.max_ratio,
            batch_size=batch_sentences(beam_size),
            device=self.device,
        )
        outputs = self.tgt.decode(hypotheses)
        for row, index in enumerate(todo):
            extra = {}
            if attention and self.has_attention and attentions[row] is not None:
                target = [int(i) for i in hypotheses[row] if int(i) not in (PAD_ID, BOS_ID)]
                weights = np.round(np.asarray(attentions[row], float), 4)
                ended = len(weights) > len(target)  # a row for "</s>" unless cut at the cap
                extra = {  # one attention row per target piece
                    "source_pieces": self.src.pieces(ids[row]) + ["</s>"],
                    "target_pieces": self.tgt.pieces(target) + (["</s>"] if ended else []),
                    "attention": weights.tolist(),
                }
            found[index] = Translation(lines[index], outputs[row], **extra)
        return found


def _params(folder: Path) -> dict[str, Any]:
    """The flattened params in the variant's ``config.json`` (empty without one)."""
    try:
        config = json.loads((folder / VariantFiles.CONFIG).read_text())
    except (OSError, ValueError):
        return {}
    return config.get("params", config)


def _train_cut(folder: Path, params: dict[str, Any]) -> int | None:
    """The variant's training cut: from its ``config.json`` if recorded there, else from
    the params file beside its models folder (the project that trained it), else None."""
    if TRAIN_CUT_KEY in params:
        return params[TRAIN_CUT_KEY]
    try:
        data = yaml.safe_load((folder.resolve().parent.parent / PARAMS_FILE).read_text())
        split = (data.get("fetch") or {}).get("split") or {}
        return SplitConfig.model_validate(split).max_train_words
    except (OSError, yaml.YAMLError, AttributeError, pydantic.ValidationError):
        return None


def export(model: str | Path, out: str | Path, tok_dir: str | Path | None = None) -> Path:
    """Copy a variant's checkpoint, config and both subword models into ``out`` (written
    atomically): a folder that translates on its own. The variant is loaded first, so a
    folder whose files do not belong together is refused before anything is written."""
    translator = Translator.load(model, tok_dir)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TranslateError(f"{out}: exists and is not empty; export into a new folder")
    with atomic_dir(out) as tmp:
        shutil.copyfile(translator.folder / VariantFiles.CHECKPOINT, tmp / VariantFiles.CHECKPOINT)
        shutil.copyfile(translator.src.path, tmp / VariantFiles.SRC_MODEL)
        shutil.copyfile(translator.tgt.path, tmp / VariantFiles.TGT_MODEL)
        config = translator.folder / VariantFiles.CONFIG
        if config.is_file():
            shutil.copyfile(config, tmp / VariantFiles.CONFIG)
    return out
