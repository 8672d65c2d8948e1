"""Model checkpoints: weights + ModelConfig + vocabulary identity + variant id.

A checkpoint holds only tensors and plain Python values, so it loads with
``torch.load(..., weights_only=True)``. It records the vocabulary sizes and the sha256 of
both subword models: loading it against different tokenizers raises a ``ValueError``
that names the checkpoint and what differs, instead of translating garbage.
Files are written atomically (temporary file in the same folder, then ``os.replace``).
A saved model config without ``baseline`` predates it and loads as ``init_only``.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeline.config.params import ModelConfig
from pipeline.data.dataset import SubwordTokenizer, TokenizedData
from pipeline.io import atomic_path
from pipeline.models.seq2seq import Seq2Seq

FORMAT_VERSION = 1


@dataclass(frozen=True)
class VocabInfo:
    """Identity of the vocabularies a model was trained with."""

    src_vocab_size: int
    tgt_vocab_size: int
    src_sha256: str
    tgt_sha256: str

    @staticmethod
    def from_tokenizers(src: SubwordTokenizer, tgt: SubwordTokenizer) -> VocabInfo:
        return VocabInfo(src.vocab_size, tgt.vocab_size, src.sha256, tgt.sha256)

    @staticmethod
    def from_data(data: TokenizedData) -> VocabInfo:
        return VocabInfo.from_tokenizers(data.src_tokenizer, data.tgt_tokenizer)

    def differences(self, other: VocabInfo) -> list[str]:
        """Human-readable ``field: ours != theirs`` for every field that differs."""
        ours, theirs = asdict(self), asdict(other)
        return [f"{k}: {ours[k]} != {theirs[k]}" for k in ours if ours[k] != theirs[k]]


@dataclass
class LoadedCheckpoint:
    model: Seq2Seq
    config: ModelConfig
    vocab: VocabInfo
    variant_id: str
    extra: dict[str, Any] = field(default_factory=dict)


def atomic_torch_save(payload: Any, path: str | Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then rename it over ``path``."""
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def checkpoint_payload(
    model: Seq2Seq, vocab: VocabInfo, variant_id: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The dictionary a checkpoint file holds (``extra``: plain values, e.g. metrics)."""
    return {
        "format": FORMAT_VERSION,
        "variant_id": variant_id,
        "model_config": model.config.model_dump(),
        "vocab": asdict(vocab),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "extra": dict(extra or {}),
    }


def save_checkpoint(
    path: str | Path,
    model: Seq2Seq,
    vocab: VocabInfo,
    variant_id: str,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write ``model`` (weights, config, vocab identity, variant id) atomically."""
    atomic_torch_save(checkpoint_payload(model, vocab, variant_id, extra), path)


def load_checkpoint(
    path: str | Path,
    *,
    expected_vocab: VocabInfo | None = None,
    device: torch.device | str = "cpu",
    data: bytes | None = None,
) -> LoadedCheckpoint:
    """Load a checkpoint written by :func:`save_checkpoint`; the model is in eval mode.

    ``data``: the file's bytes, read elsewhere (a Ray task gets them through the object
    store); ``path`` then only names the checkpoint in messages. With ``expected_vocab``
    (e.g. ``VocabInfo.from_data(TokenizedData.load(tok_dir))``) a checkpoint trained with
    other tokenizers is rejected with a ``ValueError``.
    """
    path = Path(path)
    if data is None and not path.is_file():
        raise FileNotFoundError(f"{path}: checkpoint not found")
    source = path if data is None else io.BytesIO(data)
    try:
        payload = torch.load(source, map_location=device, weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, IndexError, KeyError) as err:
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise ValueError(
            f"{path}: not a readable checkpoint ({first}); run `dvc repro train` again: "
            "a variant whose files fail their recorded sha256 is retrained"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path}: not a model checkpoint (format {FORMAT_VERSION})")
    vocab = VocabInfo(**payload["vocab"])
    if expected_vocab is not None and vocab != expected_vocab:
        differences = "; ".join(vocab.differences(expected_vocab))
        raise ValueError(
            f"{path}: checkpoint was trained with other tokenizers than the ones given "
            f"(checkpoint != given: {differences})"
        )
    config = ModelConfig.model_validate(_upgrade_model_config(payload["model_config"]))
    model = Seq2Seq(config, vocab.src_vocab_size, vocab.tgt_vocab_size)
    model.load_state_dict(payload["state_dict"])
    model.to(device).eval()
    return LoadedCheckpoint(model, config, vocab, payload["variant_id"], payload["extra"])


def _upgrade_model_config(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved model config as today's ``ModelConfig`` reads it. Checkpoints written
    before ``baseline`` existed had the init-only (Sutskever) no-attention decoder, not
    today's default RNNencdec: they load as ``init_only``, so their weights fit."""
    return {"baseline": "init_only", **saved}
