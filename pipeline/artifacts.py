"""What the stages exchange, in one place: the files' names and the records they hold.

``models/<variant>/`` (written by the train stage's driver from the trial's last Tune
checkpoint), ``eval/<variant>/`` (written by the evaluate stage's driver from what its
decode tasks return), and the sweep's own files under ``models/``.

The records between stages are typed here and written and read only through here:
:class:`SweepRecord` (``models/sweep.json``: one :class:`VariantRecord` per variant of
the grid) and :class:`EvaluationSummary` (``eval/summary.json``). A variant's status has
one vocabulary, :data:`FINISHED` or :data:`FAILED`; how a finished variant got there
(trained now, or taken from the variant cache) is the run log's ``source``, not a status.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from pipeline.errors import StageError
from pipeline.io import sha256_file, write_bytes, write_json

SWEEP_FILE = "sweep.json"
"""``models/sweep.json``: status, config hash and training summary of every variant
(nothing about the run that made them: a rerun that trains nothing rewrites it as is)."""
EVAL_SUMMARY = "summary.json"
"""``eval/summary.json``: headline numbers of every variant, failed ones, signature."""
FINDINGS = "findings.json"
"""``eval/findings.json``: each finding's parts, estimates and verdict, per decoding; the
reference ("best") scorer chosen on dev."""
COMPARISONS = "comparisons.csv"
"""``eval/comparisons.csv``: every contrast (primary, equivalence, exploratory) with its
seed-aware interval, p-values and MDE, per decoding."""
RANKING = "ranking.csv"
"""``eval/ranking.csv``: the scorers at the findings' configuration, mean test BLEU over
seeds with intervals, per decoding."""
SENTENCE_STATS = "sentence_stats.npz"
"""``eval/<variant>/sentence_stats.npz``: sacreBLEU's per-sentence statistics, one array
per decoding (``beam``, ``greedy``)."""
GREEDY_HYPOTHESES = "hypotheses_greedy.txt"
"""``eval/<variant>/hypotheses_greedy.txt``: greedy translations (``hypotheses.txt``: beam)."""
LEARNING_CURVES = "learning_curves.csv"  # eval/: every variant's history.csv, stacked
STUDY_TABLE = "study.csv"
"""``eval/study.csv``: one row per variant, axes, test scores and training summary."""
METRICS_FILE = "test.json"
"""``metrics/test.json``: the headline numbers (``dvc metrics show``, ``dvc exp show``)."""
VARIANT_PLOTS_FILE = "test_bleu.csv"
"""``metrics/test_bleu.csv``: test BLEU per variant (``dvc plots show``)."""
PLOTS_FILE = "bleu_by_length.csv"
"""``metrics/bleu_by_length.csv``: BLEU per length bucket, the seed mean of each
configuration (``dvc plots show``)."""
CURVES_PLOTS_FILE = "learning_curves.csv"
"""``metrics/learning_curves.csv``: dev BLEU and dev loss per step of every variant, with
its scorer (``dvc plots show``: the learning curves)."""


@dataclass(frozen=True)
class VariantFiles:
    """The files of one trained variant's folder."""

    folder: Path

    CHECKPOINT = "checkpoint.pt"  # best epoch: weights + model config + vocab identity
    LAST = "last.pt"  # resume state (weights, Adam, progress, RNG); absent once finished
    HISTORY = "history.csv"  # one row per dev evaluation (epoch ends and eval_every_steps)
    CONFIG = "config.json"  # variant id, axes, flattened params
    RESULT = "result.json"  # config hash + training summary: marks the variant finished
    DEV_ATTENTION = "dev_attention.png"  # attention of one dev sentence (attention models)
    SRC_MODEL = "src.model"  # the subword models it was trained with (copies of data/tok's):
    TGT_MODEL = "tgt.model"  # with them the folder translates alone (pipeline/translate)
    TOKENIZERS = (SRC_MODEL, TGT_MODEL)
    KEPT = (CHECKPOINT, HISTORY, CONFIG, RESULT, DEV_ATTENTION)
    """The files of a finished variant (``last.pt`` is dropped once it finished)."""
    MANIFEST = "sha256.json"
    """sha256 of each kept file, written when the variant enters the variant cache; a
    restore verifies it (:meth:`damaged`)."""

    @property
    def checkpoint(self) -> Path:
        return self.folder / self.CHECKPOINT

    @property
    def last(self) -> Path:
        return self.folder / self.LAST

    @property
    def history(self) -> Path:
        return self.folder / self.HISTORY

    @property
    def config(self) -> Path:
        return self.folder / self.CONFIG

    @property
    def result(self) -> Path:
        return self.folder / self.RESULT

    @property
    def dev_attention(self) -> Path:
        return self.folder / self.DEV_ATTENTION

    def translator_files(self, tokenizers: Path | None = None) -> list[Path]:
        """What translates: the best checkpoint, its config and the two subword models
        (from ``tokenizers``, e.g. ``data/tok``, before they are copied into the folder)."""
        where = self.folder if tokenizers is None else tokenizers
        return [self.checkpoint, self.config, *(where / name for name in self.TOKENIZERS)]

    def add_tokenizers(self, models: Mapping[str, bytes]) -> None:
        """Write the subword models (``src.model``/``tgt.model`` -> bytes, from
        ``data/tok``) into the folder, so that it translates alone; unchanged files are
        left as they are."""
        for name in self.TOKENIZERS:
            path = self.folder / name
            if not (path.is_file() and path.read_bytes() == models[name]):
                write_bytes(path, models[name])

    def finished(self, config_hash: str) -> dict[str, Any] | None:
        """``result.json`` (config hash + summary) if the folder holds a finished variant of
        exactly this config, else ``None`` (absent, unreadable, or another config)."""
        try:
            result = json.loads(self.result.read_text())
        except (OSError, ValueError):
            return None
        return result if result.get("config_hash") == config_hash else None

    def digests(self) -> dict[str, str]:
        """sha256 of each kept file present in the folder."""
        return {
            name: sha256_file(self.folder / name)
            for name in self.KEPT
            if (self.folder / name).is_file()
        }

    def damaged(self) -> str | None:
        """Why the folder's files do not match its manifest (a file changed, truncated or
        gone, or no manifest), or None when every recorded file is intact."""
        try:
            recorded = json.loads((self.folder / self.MANIFEST).read_text())
        except (OSError, ValueError):
            return f"no readable {self.MANIFEST}"
        for name, digest in sorted(recorded.items()):
            path = self.folder / name
            if not path.is_file():
                return f"{name} is missing"
            if sha256_file(path) != digest:
                return f"{name} does not match its recorded sha256"
        return None

    def logged(self) -> list[Path]:
        """The files logged as MLflow artifacts of the variant's child run."""
        return [self.history, self.config, self.dev_attention]


@dataclass(frozen=True)
class EvalFiles:
    """The files of one variant's ``eval/<variant>/`` folder."""

    folder: Path

    HYPOTHESES = "hypotheses.txt"  # one detokenized translation per test sentence
    METRICS = "metrics.json"  # BLEU + interval, chrF, signature, by length, attention stats
    BY_LENGTH = "by_length.csv"  # BLEU per source-length bucket
    ATTENTION = "attention.npz"  # example attention matrices (original source order)
    ATTENTION_PIECES = "attention.json"  # their source/target subword pieces
    DECODE = "decode.json"  # decoding time and attention statistics

    @property
    def hypotheses(self) -> Path:
        return self.folder / self.HYPOTHESES

    @property
    def metrics(self) -> Path:
        return self.folder / self.METRICS

    @property
    def by_length(self) -> Path:
        return self.folder / self.BY_LENGTH

    @property
    def attention(self) -> Path:
        return self.folder / self.ATTENTION

    @property
    def attention_pieces(self) -> Path:
        return self.folder / self.ATTENTION_PIECES

    @property
    def decode(self) -> Path:
        return self.folder / self.DECODE


# ----------------------------------------------------------------------- records
Status = Literal["finished", "failed"]
FINISHED: Status = "finished"
FAILED: Status = "failed"


class RecordError(StageError):
    """A stage's input record is missing or malformed (the message names the file)."""


def read_record(path: Path, made_by: str) -> dict[str, Any]:
    """The JSON object in ``path``; a missing or unreadable file is a :class:`RecordError`
    naming the file and the command that makes it (``made_by``)."""
    if not path.is_file():
        raise RecordError(f"{path}: not found (run `{made_by}`)")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise RecordError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a JSON object")
    return data


@dataclass(frozen=True)
class VariantRecord:
    """One variant of the grid as the train stage left it: what it is (its config and
    the hash that identifies it), its status and, once finished, its training summary
    (the trainer's ``TrainResult`` without the history, plus the device and node)."""

    id: str
    status: Status
    config_hash: str
    axes: dict[str, Any]
    model: dict[str, Any]  # ModelConfig's fields
    train: dict[str, Any]  # TrainConfig's fields, the grid's own settings left out
    summary: dict[str, Any] = field(default_factory=dict)  # empty when failed
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.status == FINISHED

    @property
    def scorer(self) -> str:
        return self.model["scorer"]

    @property
    def seed(self) -> int:
        return int(self.train["seed"])

    @property
    def steps(self) -> int | None:
        return self.summary.get("steps")

    @property
    def stop_reason(self) -> str:
        return self.summary.get("stop_reason", "")

    @property
    def plateaued(self) -> bool:
        """Stopped by the plateau rule, as the trainer recorded it (a variant stopped by
        a budget, the step cap or a callback, has not shown that its dev metric stopped
        improving)."""
        return bool(self.summary.get("plateaued", False))

    @property
    def best_dev_bleu(self) -> float:
        value = self.summary.get("best_dev_bleu")
        return float("nan") if value is None else float(value)

    def value(self, key: str) -> Any:
        """The variant's value of a grid axis or config key (its axes first)."""
        if key in self.axes:
            return self.axes[key]
        return self.model[key] if key in self.model else self.train.get(key)

    def settings(self) -> dict[str, Any]:
        """Every setting, flattened as MLflow's params name them (``model.scorer``)."""
        flat = {f"model.{k}": v for k, v in self.model.items()}
        flat.update({f"train.{k}": v for k, v in self.train.items()})
        return flat

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "config_hash": self.config_hash,
            "error": self.error,
            **self.summary,
            "axes": self.axes,
            "model": self.model,
            "train": self.train,
        }

    @classmethod
    def from_json(cls, variant_id: str, data: Mapping[str, Any]) -> VariantRecord:
        known = {"status", "config_hash", "error", "axes", "model", "train"}
        status = data["status"]
        if status not in (FINISHED, FAILED):
            raise KeyError(f"status {status!r}")
        return cls(
            variant_id,
            status,
            data["config_hash"],
            dict(data["axes"]),
            dict(data["model"]),
            dict(data["train"]),
            {k: v for k, v in data.items() if k not in known},
            data.get("error"),
        )


@dataclass(frozen=True)
class SweepRecord:
    """``models/sweep.json``: every variant of the grid (:class:`VariantRecord`) and the
    hash of the data they trained on; nothing about the run that made them, so a rerun
    that trains nothing rewrites it byte for byte."""

    data_hash: str
    variants: dict[str, VariantRecord]

    @property
    def finished(self) -> dict[str, VariantRecord]:
        return {i: v for i, v in self.variants.items() if v.finished}

    @property
    def failed(self) -> dict[str, VariantRecord]:
        return {i: v for i, v in self.variants.items() if not v.finished}

    def table(self, ids=None) -> pd.DataFrame:
        """:func:`variant_table` of the variants ``ids`` (default: all of them)."""
        return variant_table(self.variants[i] for i in (self.variants if ids is None else ids))

    def write(self, models_dir: Path) -> None:
        variants = {i: v.to_json() for i, v in self.variants.items()}
        write_json(models_dir / SWEEP_FILE, {"data_hash": self.data_hash, "variants": variants})

    @classmethod
    def load(cls, models_dir: Path) -> SweepRecord:
        path = models_dir / SWEEP_FILE
        data = read_record(path, "dvc repro train")
        try:
            variants = {i: VariantRecord.from_json(i, v) for i, v in data["variants"].items()}
            return cls(data["data_hash"], variants)
        except (KeyError, TypeError, AttributeError) as err:
            raise RecordError(f"{path}: not a sweep record (missing or bad {err})") from None


COMPARED = ("scorer", "reverse_source", "hidden_size")
"""The grid axes the findings compare (with the seed): twins share every other setting."""


def variant_table(records) -> pd.DataFrame:
    """One row per variant record: the compared axes and seed, ``config`` (every setting
    but the seed, as JSON: one configuration's seeds share it) and ``rest`` (every setting
    but the compared axes and the seed: twins share it), the status and the training
    summary (NaN where a failed variant has none)."""
    rows = []
    for record in records:
        summary = record.summary
        config = {k: v for k, v in {**record.model, **record.train}.items() if k != "seed"}
        rest = {k: v for k, v in config.items() if k not in COMPARED}
        none = record.scorer == "none"
        rows.append(
            {
                "variant": record.id,
                "scorer": record.scorer,
                "reverse_source": bool(record.model.get("reverse_source")),
                "hidden_size": int(record.model["hidden_size"]),
                "seed": record.seed,
                "config": json.dumps(config, sort_keys=True),
                "rest": json.dumps(rest, sort_keys=True, default=str),
                "baseline": record.model.get("baseline", "init_only") if none else "",
                "stop_reason": record.stop_reason,
                "plateaued": record.plateaued,
                "still_improving": record.finished and not record.plateaued,
                "best_dev_bleu": record.best_dev_bleu,
                "epochs_run": summary.get("epochs_run", np.nan),
                "steps": summary.get("steps", np.nan),
                "status": record.status,
                "error": record.error or "",
                "parameters": summary.get("parameter_count", np.nan),
                "best_epoch": summary.get("best_epoch", np.nan),
                "train_minutes": summary.get("wall_time_s", np.nan) / 60,
                "tokens_per_s": summary.get("tokens_per_s", np.nan),
            }
        )
    return pd.DataFrame(rows)


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
        return {
            "eval_key": self.eval_key,
            "variants": self.variants,
            "failed_variants": self.failed_variants,
            "signature": self.signature,
            "attention_examples": self.attention_examples,
            "decode_precision": self.decode_precision,
            "headline": self.headline,
        }

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
