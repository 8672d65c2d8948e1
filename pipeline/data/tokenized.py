"""The tokenize stage's output format, and the subword tokenizer wrapper that reads it.

``data/tok/`` holds:

- ``src.model`` / ``tgt.model``: sentencepiece models (the same bytes twice when
  ``tokenize.joint``); special ids are fixed: pad 0, unk 1, bos 2, eos 3.
- ``{train,dev,test}.npz``: ``src_ids``/``tgt_ids`` (int32, all sentences concatenated,
  no bos/eos) and ``src_offsets``/``tgt_offsets`` (int64, ``n + 1`` entries), so that
  sentence ``i`` is ``ids[offsets[i]:offsets[i + 1]]``. Compact (about 2 bytes/token
  compressed) and loaded in milliseconds, with no per-sentence Python objects.
- ``stats.json``: vocab sizes, tokens per split, length percentiles, unknown rate.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import sentencepiece as spm

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPLITS = ("train", "dev", "test")


class TokenizedDataError(ValueError):
    """Tokenized data that is missing or malformed; the message names the file."""


@dataclass(frozen=True)
class TokenizedSplit:
    """One split as flat id arrays plus offsets (see module docstring)."""

    src_ids: np.ndarray  # (N_src_tokens,) int32
    src_offsets: np.ndarray  # (n + 1,) int64
    tgt_ids: np.ndarray  # (N_tgt_tokens,) int32
    tgt_offsets: np.ndarray  # (n + 1,) int64

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @cached_property
    def src_lengths(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    @cached_property
    def tgt_lengths(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)

    def source(self, index: int) -> np.ndarray:
        return self.src_ids[self.src_offsets[index] : self.src_offsets[index + 1]]

    def target(self, index: int) -> np.ndarray:
        return self.tgt_ids[self.tgt_offsets[index] : self.tgt_offsets[index + 1]]

    def subset(self, indices: np.ndarray) -> TokenizedSplit:
        """A new split with the sentences at ``indices`` (in that order)."""
        src = [self.source(i) for i in indices]
        tgt = [self.target(i) for i in indices]
        return TokenizedSplit.from_sequences(src, tgt)

    @staticmethod
    def from_sequences(src: list[list[int]], tgt: list[list[int]]) -> TokenizedSplit:
        if len(src) != len(tgt):
            raise ValueError(f"{len(src)} sources but {len(tgt)} targets")

        def pack(seqs):
            lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
            offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            flat = np.concatenate([np.asarray(s, dtype=np.int32) for s in seqs]) if seqs else []
            return np.asarray(flat, dtype=np.int32), offsets

        src_ids, src_offsets = pack(src)
        tgt_ids, tgt_offsets = pack(tgt)
        return TokenizedSplit(src_ids, src_offsets, tgt_ids, tgt_offsets)

    def save(self, path: Path) -> None:
        np.savez_compressed(
            path,
            src_ids=self.src_ids,
            src_offsets=self.src_offsets,
            tgt_ids=self.tgt_ids,
            tgt_offsets=self.tgt_offsets,
        )

    @staticmethod
    def load(path: str | Path) -> TokenizedSplit:
        path = Path(path)
        try:
            with np.load(path) as arrays:
                split = TokenizedSplit(*(arrays[k] for k in _KEYS))
        except FileNotFoundError:
            raise TokenizedDataError(f"{path}: not found (run `dvc repro tokenize`)") from None
        except (KeyError, ValueError, OSError) as err:
            raise TokenizedDataError(f"{path}: not a tokenized split ({err})") from None
        for ids, offsets, side in (
            (split.src_ids, split.src_offsets, "src"),
            (split.tgt_ids, split.tgt_offsets, "tgt"),
        ):
            if offsets[0] != 0 or offsets[-1] != len(ids) or np.any(np.diff(offsets) < 0):
                raise TokenizedDataError(f"{path}: {side}_offsets do not index {side}_ids")
        if len(split.src_offsets) != len(split.tgt_offsets):
            raise TokenizedDataError(f"{path}: source and target sentence counts differ")
        return split


_KEYS = ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets")


class SubwordTokenizer:
    """A sentencepiece model: text <-> ids, and the pieces for heatmap axes."""

    def __init__(self, model_path: str | Path):
        self.path = Path(model_path)
        if not self.path.is_file():
            raise TokenizedDataError(f"{self.path}: subword model not found")
        self._sp = spm.SentencePieceProcessor(model_file=str(self.path))
        self.sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self._sp.encode(texts, out_type=int)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Ids -> detokenized text; stops at the first eos and drops pad/bos."""
        cleaned = []
        for seq in ids:
            seq = list(seq)
            if EOS_ID in seq:
                seq = seq[: seq.index(EOS_ID)]
            cleaned.append([i for i in seq if i not in (PAD_ID, BOS_ID)])
        return self._sp.decode(cleaned)

    def pieces(self, ids: list[int]) -> list[str]:
        return [self._sp.id_to_piece(int(i)) for i in ids]


@dataclass(frozen=True)
class TokenizedData:
    """Everything in ``data/tok/``: both tokenizers and the splits (loaded lazily)."""

    directory: Path

    @cached_property
    def src_tokenizer(self) -> SubwordTokenizer:
        return SubwordTokenizer(self.directory / "src.model")

    @cached_property
    def tgt_tokenizer(self) -> SubwordTokenizer:
        return SubwordTokenizer(self.directory / "tgt.model")

    def split(self, name: str) -> TokenizedSplit:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; known: {', '.join(SPLITS)}")
        return TokenizedSplit.load(self.directory / f"{name}.npz")

    def fingerprint(self) -> str:
        """sha256 over the subword models and the encoded splits (the data hash)."""
        digest = hashlib.sha256()
        for name in ("src.model", "tgt.model", *(f"{s}.npz" for s in SPLITS)):
            path = self.directory / name
            if path.exists():
                digest.update(name.encode())
                digest.update(hashlib.sha256(path.read_bytes()).digest())
        return digest.hexdigest()
