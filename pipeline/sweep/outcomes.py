"""What a sweep came to: each variant's outcome, the records written from them
(``models/sweep.json``, the MLflow parent run's end, the run log ``last_sweep.json``), the
stage's summary line and the error it ends with. The summary line is logged whatever of
the records could be written: a full disk leaves the user the line and the one cause."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.artifacts import VariantFiles
from pipeline.data.dataset import TokenizedData
from pipeline.io import DiskFullError
from pipeline.records.sweep import FAILED, FINISHED, SWEEP_FILE, SweepRecord, VariantRecord
from pipeline.records.train import TrainSummary
from pipeline.runtime.cluster import ClusterError
from pipeline.sweep.trial import TrialSpec

logger = logging.getLogger(__name__)


class SweepFailedError(ClusterError):
    """Some variants failed and ``train.allow_partial`` is off."""


@dataclass
class VariantOutcome:
    """What this run did with one variant: its record (status ``finished`` or
    ``failed``), where a finished one came from (``source``: ``trained`` now or
    ``cached``), and the attempts Tune made."""

    record: VariantRecord
    source: str | None = None  # trained | cached (None: failed)
    attempts: int = 0

    @classmethod
    def of(
        cls,
        spec: TrialSpec,
        source: str | None,
        summary: TrainSummary | None = None,
        error: str | None = None,
        attempts: int = 0,
    ) -> VariantOutcome:
        variant = spec.variant
        record = VariantRecord(
            variant.id,
            FINISHED if source else FAILED,
            spec.config_hash,
            variant.axes,
            variant.model,
            variant.train,
            summary,
            error,
        )
        return cls(record, source, attempts)


@dataclass
class Tracked:
    """What a sweep's MLflow records came to: the parent run, each variant's run, the
    records kept on disk for a later run (the tracking store was out of reach), and the
    journal's failure to record the sweep's end for lack of space."""

    parent_id: str | None = None
    runs: dict[str, str] = field(default_factory=dict)
    kept: int = 0
    error: DiskFullError | None = None


def tokenizers(data: TokenizedData) -> dict[str, bytes]:
    """The subword models a variant folder holds beside its checkpoint (``src.model``,
    ``tgt.model``), from the tokenized data it trained on."""
    return {name: data.files[name] for name in VariantFiles.TOKENIZERS}


def record(
    paths: Any,
    data: TokenizedData,
    specs: dict[str, TrialSpec],
    outcomes: dict[str, VariantOutcome],
) -> SweepRecord:
    """``models/``: the subword models beside each finished variant (a finished folder
    translates alone) and ``sweep.json``, identical on a rerun that trains nothing."""
    for variant_id, outcome in outcomes.items():
        if outcome.record.finished:  # trained now: already there; taken from the cache: now
            VariantFiles(paths.models_dir / variant_id).add_tokenizers(tokenizers(data))
    sweep = SweepRecord(data.fingerprint(), {i: outcomes[i].record for i in specs})
    sweep.write(paths.models_dir)
    return sweep


def conclude(
    paths: Any,
    data: TokenizedData,
    specs: dict[str, TrialSpec],
    outcomes: dict[str, VariantOutcome],
    training: Any,
    allow_partial: bool,
    started: float,
) -> dict:
    """Record the sweep (``models/sweep.json``, the MLflow parent run, the run log), log
    its summary line whatever of that fails for lack of space, then raise what went
    wrong: the write that stopped the sweep, else the first record not written, else
    the failed variants (unless ``allow_partial``). Returns the run log. ``paths``: the
    sweep's (:class:`~pipeline.sweep.driver.SweepPaths`); ``training``: the Tune run
    (:class:`~pipeline.sweep.driver.Training`), ``None`` when nothing was trained."""
    full: list[DiskFullError] = []  # the run's own bookkeeping that found no space
    try:
        record(paths, data, specs, outcomes)
    except DiskFullError as err:
        full.append(err)
    except Exception:
        if training is not None:
            training.abort()
        raise
    stopped = training.disk.error if training else None
    failed = [o.record for o in outcomes.values() if not o.record.finished]
    sweep_failed = bool(stopped or full) or (bool(failed) and not allow_partial)
    minutes = (time.time() - started) / 60
    tracked = Tracked()
    if training is not None:
        tracked = training.close(outcomes, sweep_failed, minutes, sweep_written=not full)
    log = last_sweep(paths, specs, outcomes, tracked, minutes)
    try:
        paths.cache.write_last_sweep(log)
    except DiskFullError as err:
        full.append(err)
    unwritten = {err.path for err in full}
    logger.info("%s", summary_line(paths, log["counts"], bool(stopped or full), unwritten))
    if stopped is not None:
        raise training.stopped_error(outcomes)
    if full or tracked.error:
        raise (full or [tracked.error])[0]
    if failed and not allow_partial:
        raise SweepFailedError(failure_summary(failed, len(specs)))
    return log


def summary_line(paths: Any, counts: dict, stopped: bool, unwritten: set[Path]) -> str:
    """The stage's last line: what the variants came to and where the records are (or
    which could not be written)."""
    files = []
    for what, path in (
        ("summary", paths.models_dir / SWEEP_FILE),
        ("run log", paths.cache.last_sweep),
    ):
        files.append(f"{path} not written" if path in unwritten else f"{what} in {path}")
    return f"sweep {'stopped' if stopped else 'done'}: {counts}; {', '.join(files)}"


def failure_summary(failed: list[VariantRecord], total: int) -> str:
    """One line: each distinct cause once, with the variants it hit."""
    causes: dict[str, list[str]] = {}
    for variant in sorted(failed, key=lambda v: v.id):
        cause = (variant.error or "unknown error").replace(variant.id, "<variant>")
        causes.setdefault(cause, []).append(variant.id)
    parts = []
    for cause, ids in causes.items():
        named = ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")
        parts.append(f"{cause} ({named})")
    return f"{len(failed)} of {total} variants failed: " + "; ".join(parts)


def variant_counts(outcomes: dict[str, VariantOutcome]) -> dict[str, int]:
    """Finished and failed variants (their status), and where the finished came from
    (their source: trained by this run, or cached)."""
    records = [o.record for o in outcomes.values()]
    sources = [o.source for o in outcomes.values()]
    return {
        FINISHED: sum(r.finished for r in records),
        FAILED: sum(not r.finished for r in records),
        "trained": sources.count("trained"),
        "cached": sources.count("cached"),
    }


def last_sweep(paths, specs, outcomes, tracked: Tracked, minutes: float) -> dict:
    """The run log (``last_sweep.json``)."""
    log = {
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "models_dir": str(paths.models_dir),
        "minutes": round(minutes, 3),
        "parent_run_id": tracked.parent_id,
        "tracking_records_kept": tracked.kept,
        "counts": variant_counts(outcomes),
        "variants": {
            variant_id: {
                "status": outcomes[variant_id].record.status,
                "source": outcomes[variant_id].source,
                "attempts": outcomes[variant_id].attempts,
                "config_hash": spec.config_hash,
                "run_id": tracked.runs.get(variant_id),
                "error": outcomes[variant_id].record.error,
            }
            for variant_id, spec in specs.items()
        },
    }
    return log
