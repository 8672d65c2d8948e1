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
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType

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

    def target_counts(self, vocab_size: int) -> np.ndarray:
        """(vocab_size,) int64: how often each id is a decoder output in this split, the
        end-of-sentence id counted once per sentence (it ends every target)."""
        counts = np.bincount(self.tgt_ids, minlength=vocab_size).astype(np.int64)
        if len(counts) > vocab_size:
            raise TokenizedDataError(f"target id {len(counts) - 1} >= vocabulary size {vocab_size}")
        counts[EOS_ID] += len(self)
        return counts

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
            data = path.read_bytes()
        except FileNotFoundError:
            raise TokenizedDataError(f"{path}: not found (run `dvc repro tokenize`)") from None
        return TokenizedSplit.from_bytes(data, path)

    @staticmethod
    def from_bytes(data: bytes, path: str | Path) -> TokenizedSplit:
        """Parse the bytes of a ``.npz`` split; ``path`` names it in error messages."""
        try:
            with np.load(io.BytesIO(data)) as arrays:
                split = TokenizedSplit(*(arrays[k] for k in _KEYS))
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
        path = Path(model_path)
        if not path.is_file():
            raise TokenizedDataError(f"{path}: subword model not found")
        self._load(path.read_bytes(), path)

    @classmethod
    def from_bytes(cls, model: bytes, path: str | Path) -> SubwordTokenizer:
        """A tokenizer from a sentencepiece model's bytes; ``path`` names it in messages."""
        tokenizer = cls.__new__(cls)
        tokenizer._load(model, Path(path))
        return tokenizer

    def _load(self, model: bytes, path: Path) -> None:
        self.path = path
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=model)
        except (RuntimeError, OSError) as err:
            raise TokenizedDataError(f"{path}: not a sentencepiece model ({err})") from None
        self.sha256 = hashlib.sha256(model).hexdigest()

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
    """Everything in ``data/tok/``, held as the files' bytes (a few MB for the default
    corpus): the tokenizers and splits are parsed on first use.

    Pickles as the bytes alone, so it travels to Ray trials and decode tasks through
    the object store and a worker never reads the driver's ``data/tok``.
    """

    directory: Path  # where the files came from (named in error messages only)
    files: Mapping[str, bytes] = field(repr=False)

    @staticmethod
    def load(directory: str | Path) -> TokenizedData:
        """Read the tokenize stage's files under ``directory`` (missing ones are reported
        when first used, naming the file)."""
        directory = Path(directory)
        files = {}
        for name in FILES:
            path = directory / name
            if path.is_file():
                files[name] = path.read_bytes()
        return TokenizedData(directory, MappingProxyType(files))

    def __reduce__(self):  # the bytes only, not the parsed tokenizers
        return (TokenizedData, (self.directory, dict(self.files)))

    @cached_property
    def src_tokenizer(self) -> SubwordTokenizer:
        return self._tokenizer("src.model")

    @cached_property
    def tgt_tokenizer(self) -> SubwordTokenizer:
        return self._tokenizer("tgt.model")

    def _tokenizer(self, name: str) -> SubwordTokenizer:
        if name not in self.files:
            raise TokenizedDataError(f"{self.directory / name}: subword model not found")
        return SubwordTokenizer.from_bytes(self.files[name], self.directory / name)

    def split(self, name: str) -> TokenizedSplit:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; known: {', '.join(SPLITS)}")
        path = self.directory / f"{name}.npz"
        if path.name not in self.files:
            raise TokenizedDataError(f"{path}: not found (run `dvc repro tokenize`)")
        return TokenizedSplit.from_bytes(self.files[path.name], path)

    def fingerprint(self) -> str:
        """sha256 over the subword models and the encoded splits (the data hash)."""
        digest = hashlib.sha256()
        for name in FILES:
            if name in self.files:
                digest.update(name.encode())
                digest.update(hashlib.sha256(self.files[name]).digest())
        return digest.hexdigest()


FILES = ("src.model", "tgt.model", *(f"{s}.npz" for s in SPLITS))
"""The files of ``data/tok/`` that models depend on (``stats.json`` is a report)."""
