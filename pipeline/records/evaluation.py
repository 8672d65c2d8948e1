"""What the evaluate stage writes for the report, typed: each variant's test scores
(:class:`VariantMetrics`, ``eval/<variant>/metrics.json``) and the evaluation's headline
numbers (:class:`EvaluationSummary`, ``eval/summary.json``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.io import write_json
from pipeline.records.base import RecordError, read_record, validated

EVAL_SUMMARY = "summary.json"
"""``eval/summary.json``: headline numbers of every variant, failed ones, signature."""


@dataclass(frozen=True)
class LengthBucket:
    """Test BLEU (with its 95% bootstrap interval) of the sentences whose source length
    falls in one bucket; ``training_range``: ``inside`` the training lengths or
    ``beyond`` them (extrapolation). NaN where the bucket is empty."""

    bucket: str
    sentences: int
    training_range: str
    bleu: float = math.nan
    bleu_low: float = math.nan
    bleu_high: float = math.nan


@dataclass(frozen=True)
class VariantMetrics:
    """``eval/<variant>/metrics.json``: sacreBLEU and chrF on test (95% bootstrap
    intervals), BLEU by source length, the decoding's time and numerics, and attention
    statistics (attention models only)."""

    bleu: float
    bleu_low: float
    bleu_high: float
    chrf: float
    sentences: int
    signature: str
    by_length: tuple[LengthBucket, ...]
    decode_started: float  # epoch seconds
    decode_seconds: float
    sentences_per_s: float
    device: str
    precision: str
    beam_size: int
    attention_entropy: float | None = None
    attention_monotonicity_gap: float | None = None

    ORDER = (
        "bleu bleu_low bleu_high chrf sentences signature by_length decode_started "
        "decode_seconds sentences_per_s device precision attention_entropy "
        "attention_monotonicity_gap beam_size"
    ).split()
    """The file's key order (scores, then the decoding's, then the beam)."""

    def to_json(self) -> dict[str, Any]:
        values = asdict(self)
        return {k: values[k] for k in self.ORDER if values[k] is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "metrics.json") -> VariantMetrics:
        return validated(cls, data, where)

    def write(self, path: Path) -> None:
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: Path) -> VariantMetrics:
        return cls.from_json(read_record(path, "dvc repro evaluate"), str(path))


@dataclass(frozen=True)
class EvaluationSummary:
    """``eval/summary.json``: each evaluated variant's headline test numbers, the variants
    not evaluated (failed in training), the sacreBLEU signature, the attention examples'
    sentence ids, each variant's decoding precision, the evaluation's key and the
    headline in words."""

    eval_key: str
    variants: dict[str, dict[str, float]]
    failed_variants: list[str]
    signature: str
    attention_examples: list[int]
    decode_precision: dict[str, str | None]
    headline: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, eval_dir: Path) -> None:
        write_json(eval_dir / EVAL_SUMMARY, self.to_json())

    @classmethod
    def load(cls, eval_dir: Path) -> EvaluationSummary:
        path = eval_dir / EVAL_SUMMARY
        data = read_record(path, "dvc repro evaluate")
        try:
            return cls(
                **{k: data[k] for k in cls.__dataclass_fields__ if k != "headline"},
                headline=data.get("headline", {}),
            )
        except (KeyError, TypeError) as err:
            raise RecordError(f"{path}: not an evaluation summary (missing {err})") from None

    @classmethod
    def key_of(cls, eval_dir: Path) -> str | None:
        """The evaluation's key, or None where ``eval_dir`` holds no summary."""
        return cls.load(eval_dir).eval_key if (eval_dir / EVAL_SUMMARY).is_file() else None
