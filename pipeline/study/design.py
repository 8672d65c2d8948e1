"""The study's design, locked before training: what each finding declares (its contrast,
claim, effect of interest with its source, margin, gates), the grid's seeds per
configuration and the stopping rule, as canonical JSON with a hash; and
``models/design.json`` (:class:`DesignLock`), written by the train stage when its first
trial starts (:func:`lock_design`) and read by the evaluate stage (:func:`check`), which
marks a finding whose declaration is not the locked one as exploratory.

**Canonical JSON**: ``json.dumps`` with sorted keys, no spaces and ASCII only. The
**hash** is the SHA-256 hex digest (64 characters) of the whole design's canonical JSON,
``{"findings": {title: declaration}, "grid": {"seeds": ..., "stopping": ...}}``. Each
finding's declaration holds the seeds of the configurations it compares and the stopping
rule too, so a change to either shows in the findings it touches.

**When it was declared** (``declared_at``): the commit time of the last commit that
changed a file holding the declared design (:data:`DECLARED_IN`: the declarations, the
findings' contrasts and ``params.yaml``, whose grid, stopping rule and comparisons are
part of it; an edit elsewhere in ``params.yaml`` counts too, which can only make the
time later). Where those files have uncommitted changes, the declaration is the one that
stood when training started, and ``declared_at`` is that time. Outside a git checkout it
is unknown.

**Keeping a lock**: :func:`lock_design` keeps an existing lock (in ``models/`` or, since
DVC may delete ``models/`` before the train stage runs, the copy kept under
``cache_dir``) as long as the grid's part of the design (seeds and stopping rule) is
unchanged, whatever happened to the findings' declarations: a declaration changed after
training started is then seen by :func:`check`. A changed grid is a new design, locked
anew when its training starts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.config.grid import COMPARED, expand_grid
from pipeline.config.params import Config
from pipeline.io import write_json
from pipeline.records.base import RecordError, read_record, validated
from pipeline.study.declarations import GATES, baseline_gates
from pipeline.study.findings import (
    Grid,
    check_exploratory,
    declare,
    declare_comparisons,
    effect_of,
)
from pipeline.study.record import DeclarationChange, LockRecord

logger = logging.getLogger(__name__)

DESIGN_FILE = "design.json"
"""The lock's file name in the train stage's ``models/`` folder."""
MADE_BY = "dvc repro train"
STOPPING = ("patience", "min_learning_rate", "converged_slope", "converged_window", "max_steps")
"""The stopping rule's ``train`` keys that belong to the design."""
DECLARED_IN = ("pipeline/study/declarations.py", "pipeline/study/findings.py", "params.yaml")
"""The files that hold the declared design (their last commit dates the declaration)."""
NOT_LOCKED = "design not locked before training"


def canonical(data: Any) -> str:
    """``data`` as canonical JSON text (sorted keys, no spaces, ASCII)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def design_hash(design: Mapping[str, Any]) -> str:
    """The SHA-256 hex digest of ``design``'s canonical JSON."""
    return hashlib.sha256(canonical(design).encode("ascii")).hexdigest()


# ------------------------------------------------------------------ the declared design
def planned_grid(config: Config) -> Grid:
    """The findings' :class:`~pipeline.study.findings.Grid` of every grid point, as if
    every variant had trained to its plateau (the design is known before training)."""
    rows = []
    for variant in expand_grid(config):
        other = {k: v for k, v in variant.axes.items() if k not in (*COMPARED, "seed")}
        rows.append(
            {
                "variant": variant.id,
                "scorer": variant.model.scorer,
                "reverse_source": bool(variant.model.reverse_source),
                "hidden_size": int(variant.model.hidden_size),
                "seed": int(variant.train.seed),
                "rest": canonical(other),
                "plateaued": True,
                "best_dev_bleu": math.nan,
            }
        )
    return Grid(pd.DataFrame(rows))


def declared_design(config: Config) -> dict[str, Any]:
    """The design ``config`` and the declarations give, before any variant trains:
    ``{"findings": {title: declaration}, "grid": {"seeds", "stopping"}}``."""
    grid = planned_grid(config)
    cut = config.fetch.split.max_train_words
    stopping = {key: getattr(config.train, key) for key in STOPPING}
    gates = baseline_gates(cut)
    declared = [(f, specs, effect_of(f, specs, cut), True) for f, specs in declare(grid)]
    declared += [(f, s, e, False) for f, s, e in declare_comparisons(config.evaluate.comparisons)]
    findings = {}
    for finding, specs, effect, ours in declared:
        configurations = {c for spec in specs for _, c, _ in spec.terms}
        use = GATES.get(finding.title) if ours else None
        findings[finding.title] = {
            "parts": [
                {
                    "label": spec.label,
                    "claim": spec.claim,
                    "scale": spec.scale,
                    "primary": spec.primary,
                    "terms": [[w, c.label(grid), subset] for w, c, subset in spec.terms],
                }
                for spec in specs
            ],
            "effect": None if effect is None else effect.declaration(),
            "gates": None
            if use is None
            else {"applies": use.applies, "gates": [gates[n].declaration() for n in use.gates]},
            "seeds": {
                c.label(grid): len(grid.systems(c.scorer, c.reverse, c.hidden, False))
                for c in sorted(configurations, key=lambda c: c.label(grid))
            },
            "stopping": stopping,
            "exploratory": config.evaluate.exploratory.get(finding.title),
        }
    check_exploratory(config.evaluate.exploratory, list(findings))
    seeds = {}
    for systems in grid.configurations():
        first = grid.table.set_index("variant").loc[next(iter(systems.values()))]
        order = "rev" if first.reverse_source else "fwd"
        name = f"{first.scorer}-{order}-h{first.hidden_size}"
        seeds[name if first.rest == "{}" else f"{name} {first.rest}"] = len(systems)
    return {"findings": findings, "grid": {"seeds": seeds, "stopping": stopping}}


# ----------------------------------------------------------------------------- the lock
@dataclass(frozen=True)
class DesignLock:
    """``models/design.json``: the design as it stood when training started."""

    hash: str  # design_hash of the whole design
    declarations: dict[str, str]  # finding title -> its declaration, canonical JSON
    grid: str  # the grid's part (seeds per configuration, stopping rule), canonical JSON
    commit: str  # the code's git commit ("unknown" outside git)
    dirty: bool | None  # tracked files differed from it (None: unknown)
    declared_at: str | None  # ISO 8601, UTC; None: unknown
    declared_from: str  # how declared_at was found
    training_started: str  # ISO 8601, UTC

    @property
    def preceded(self) -> bool | None:
        """Whether the declaration preceded the training start (None: unknown)."""
        if self.declared_at is None:
            return None
        return _time(self.declared_at) <= _time(self.training_started)

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def write(self, path: Path) -> None:
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: Path) -> DesignLock:
        """The lock in ``path``; a missing or malformed file is a
        :class:`~pipeline.records.base.RecordError` naming it."""
        return validated(cls, read_record(path, MADE_BY), str(path))


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def iso_time(when: float | datetime | str) -> str:
    """``when`` (seconds since the epoch, a datetime or ISO text) as ISO 8601 in UTC."""
    if isinstance(when, str):
        when = datetime.fromisoformat(when)
    if isinstance(when, datetime):
        moment = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    else:
        moment = datetime.fromtimestamp(float(when), timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds")


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_commit(root: Path) -> tuple[str, bool | None]:
    """The checkout's commit and whether a tracked file differs from it (the pipeline's
    own outputs aside: dvc.lock, metrics/, reports/)."""
    head = _git(root, "rev-parse", "HEAD")
    if head is None:
        return "unknown", None
    excluded = [f":(exclude){p}" for p in ("dvc.lock", "metrics", "reports")]
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", *excluded)
    return head, None if status is None else bool(status)


def declared_time(root: Path, started: str) -> tuple[str | None, str]:
    """When the design was declared, and how that was found (the module's docstring)."""
    changed = _git(root, "diff", "--name-only", "HEAD", "--", *DECLARED_IN)
    if changed is None:
        return None, "unknown: not a git checkout"
    if changed:
        files = sorted(changed.splitlines())
        return started, (
            f"uncommitted changes to {', '.join(files)}: the declaration as it stood when "
            "training started"
        )
    last = _git(root, "log", "-1", "--format=%H %cI", "--", *DECLARED_IN)
    if not last:
        return None, f"unknown: no commit holds {', '.join(DECLARED_IN)}"
    commit, when = last.split(" ", 1)
    return iso_time(when), (
        f"the commit time of {commit[:12]}, the last commit that changed {', '.join(DECLARED_IN)}"
    )


def build_lock(config: Config, started: float | datetime | str, root: Path) -> DesignLock:
    """The lock of ``config``'s design, training having started at ``started``."""
    design = declared_design(config)
    start = iso_time(started)
    commit, dirty = code_commit(root)
    declared_at, declared_from = declared_time(root, start)
    return DesignLock(
        hash=design_hash(design),
        declarations={t: canonical(d) for t, d in design["findings"].items()},
        grid=canonical(design["grid"]),
        commit=commit,
        dirty=dirty,
        declared_at=declared_at,
        declared_from=declared_from,
        training_started=start,
    )


def lock_design(
    config: Config,
    models_dir: Path,
    started: float | datetime | str,
    cache_dir: Path | None = None,
    root: Path | None = None,
) -> DesignLock:
    """Write ``models_dir/design.json`` when training starts (at ``started``), or keep
    the lock already there (or kept under ``cache_dir``) whose grid part is ``config``'s;
    returns the lock in force. ``root``: the git checkout (default: the current folder)."""
    path = Path(models_dir) / DESIGN_FILE
    grid = canonical(declared_design(config)["grid"])
    kept = _kept(cache_dir, grid)
    for candidate in (path, kept):
        if candidate is None or not candidate.is_file():
            continue
        try:
            existing = DesignLock.load(candidate)
        except RecordError as err:
            logger.warning("design lock not kept: %s", err)
            continue
        if existing.grid == grid:
            _store(existing, path, kept)
            return existing
    lock = build_lock(config, started, Path(root) if root is not None else Path.cwd())
    _store(lock, path, kept)
    logger.info("design locked: %s (training started %s)", lock.hash[:12], lock.training_started)
    return lock


def keep_lock(config: Config, models_dir: Path, cache_dir: Path | None) -> DesignLock | None:
    """The lock kept under ``cache_dir`` for ``config``'s grid, copied to
    ``models_dir/design.json`` (a run that trained nothing); None when there is none:
    no lock is made up after training."""
    path = Path(models_dir) / DESIGN_FILE
    grid = canonical(declared_design(config)["grid"])
    kept = _kept(cache_dir, grid)
    for candidate in (path, kept):
        if candidate is not None and candidate.is_file():
            try:
                lock = DesignLock.load(candidate)
            except RecordError:
                continue
            if lock.grid == grid:
                _store(lock, path, kept)
                return lock
    return None


def _kept(cache_dir: Path | None, grid: str) -> Path | None:
    if cache_dir is None:
        return None
    key = hashlib.sha256(grid.encode("ascii")).hexdigest()[:16]
    return Path(cache_dir) / "design_locks" / f"{key}.json"


def _store(lock: DesignLock, path: Path, kept: Path | None) -> None:
    for target in (path, kept):
        if target is not None and (not target.is_file() or DesignLock.load(target) != lock):
            lock.write(target)


def load_lock(models_dir: Path) -> DesignLock | None:
    """``models_dir/design.json``, or ``None`` where training wrote none."""
    path = Path(models_dir) / DESIGN_FILE
    return DesignLock.load(path) if path.is_file() else None


# ---------------------------------------------------------------------------- the check
@dataclass(frozen=True)
class DesignCheck:
    """The lock against the design as declared now: which findings are exploratory, why,
    and how their declaration changed."""

    lock: DesignLock | None
    current_hash: str
    current: dict[str, str]  # finding title -> its declaration now, canonical JSON
    exploratory: dict[str, tuple[str, DeclarationChange | None]]

    def status(self, title: str) -> tuple[str, DeclarationChange | None] | None:
        """``(why, change)`` when ``title`` is exploratory, ``None`` when confirmatory (a
        finding the current design does not know is exploratory without a lock too)."""
        if self.lock is None:
            return NOT_LOCKED, None
        return self.exploratory.get(title)

    def record(self) -> LockRecord:
        """What ``eval/findings.json`` holds of it."""
        lock, changed = self.lock, tuple(sorted(self.exploratory))
        if lock is None:
            return LockRecord(
                False, None, self.current_hash, None, None, None, "", None, None, changed,
                f"{NOT_LOCKED} (no models/{DESIGN_FILE}): every finding is exploratory",
            )  # fmt: skip
        if changed:
            status = f"locked; declared differently after training started: {', '.join(changed)}"
        else:
            status = "locked before training; every declaration unchanged since"
        if lock.preceded is False:
            status += "; the declaration is dated after the training start"
        return LockRecord(
            True,
            lock.hash,
            self.current_hash,
            lock.commit,
            lock.dirty,
            lock.declared_at,
            lock.declared_from,
            lock.training_started,
            lock.preceded,
            changed,
            status,
        )


def check(lock: DesignLock | None, config: Config) -> DesignCheck:
    """Compare ``lock`` with ``config``'s design as declared now: each finding whose
    declaration differs (or that the lock lacks) is exploratory, with the change."""
    design = declared_design(config)
    current = {t: canonical(d) for t, d in design["findings"].items()}
    exploratory: dict[str, tuple[str, DeclarationChange | None]] = {}
    if lock is None:
        exploratory = {t: (NOT_LOCKED, None) for t in current}
    else:
        for title, text in current.items():
            locked = lock.declarations.get(title)
            if locked == text:
                continue
            why = (
                "declared after training started (not in the design lock)"
                if locked is None
                else "its declaration changed after training started"
            )
            exploratory[title] = (why, DeclarationChange(locked, text, _changes(locked, text)))
    return DesignCheck(lock, design_hash(design), current, exploratory)


def _changes(locked: str | None, current: str) -> tuple[str, ...]:
    """Each changed value, dotted: "effect.value: 7.57 -> 5.0"."""
    old = _flat(json.loads(locked)) if locked is not None else {}
    new = _flat(json.loads(current))
    return tuple(
        f"{key}: {old.get(key, '-')} -> {new.get(key, '-')}"
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    )


def _flat(data: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(data, dict):
        out: dict[str, str] = {}
        for key, value in data.items():
            out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: canonical(data)}
