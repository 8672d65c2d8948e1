"""What the stages exchange, in one place: the files' names and the records they hold.

``models/<variant>/`` (written by the train stage's driver from the trial's last Tune
checkpoint), ``eval/<variant>/`` (written by the evaluate stage's driver from what its
decode tasks return), and the sweep's own files under ``models/``.

The records these files hold are typed in :mod:`pipeline.records` and written and read
only through those types.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.io import sha256_file, write_bytes
from pipeline.records.base import RecordError
from pipeline.records.train import Trained

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

    def trained(self) -> Trained | None:
        """``result.json``, or ``None`` where it is absent or unreadable."""
        try:
            return Trained.read(self.result)
        except RecordError:
            return None

    def finished(self, config_hash: str) -> Trained | None:
        """``result.json`` if the folder holds a finished variant of exactly this config,
        else ``None`` (absent, unreadable, or another config): the one place that decides
        whether a variant is done."""
        trained = self.trained()
        return trained if trained is not None and trained.config_hash == config_hash else None

    def write_result(self, trained: Trained) -> None:
        """Mark the variant finished: ``result.json`` (written last, atomically)."""
        trained.write(self.result)

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
