"""Disk space: what a sweep will write where, checked against what is free before it
starts, and what the variants left need when a write fails for lack of space.

A variant of ``P`` parameters (fp32 weights, 4 bytes each) writes:

- in its Tune checkpoints (``ray.storage_path``): the best weights (``checkpoint.pt``,
  about 4P bytes), the resume state (``last.pt``: weights and Adam's two moments, about
  12P) and its small files; a trial keeps its previous checkpoint until the next is
  recorded, and its last one (without ``last.pt``) stays;
- in its scratch folder on the trial's node (the temporary folder): the same, while it
  trains;
- in the variant cache (``cache_dir``): its finished folder; and, until the stage ends,
  the tracking journal's copy of what goes to MLflow (its small files and, with
  ``tracking.log_models``, its logged model: checkpoint, subword models, the code);
- in ``models/``: its folder again (hard links to the cache's files where both share a
  filesystem, else copies) and the subword models;
- in a local MLflow store's artifacts (``mlartifacts/`` beside ``mlflow.db``): its small
  files and logged model.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.artifacts import VariantFiles
from pipeline.config.grid import Variant
from pipeline.config.infra import Infra
from pipeline.data.dataset import TokenizedData
from pipeline.errors import StageError
from pipeline.io import free_bytes, human_size
from pipeline.runtime.cluster import ray_address
from pipeline.tracking.store import resolve_uri
from pipeline.train.preflight import build_model
from pipeline.translate.mlflow_model import code_modules

logger = logging.getLogger(__name__)

WEIGHT_BYTES = 4
"""Bytes per parameter in a checkpoint (fp32: weights are kept in full precision)."""
CHECKPOINT_OVERHEAD = 16_000
"""A checkpoint's bytes beyond its weights: the zip container, config and vocabulary."""
RESUME_OVERHEAD = 32_000
"""``last.pt``'s bytes beyond its weights and Adam's moments (progress, RNG states)."""
SMALL_FILES = 40_000
"""A variant folder's files besides its checkpoint: history, config, result and the dev
attention figure (23 KB for the tests' tiny variants)."""
MODEL_FILES = 40_000
"""A logged model's files besides its checkpoint, subword models and code."""


class DiskSpaceError(StageError):
    """Less space is free than one variant needs: nothing could be kept."""


@dataclass(frozen=True)
class Writes:
    """What the sweep writes in ``folder`` (``label``: what it is): ``kept``, the bytes
    each variant leaves there, and ``transient``, the most held at once while trials run."""

    label: str
    folder: Path
    kept: dict[str, int]
    transient: int = 0


@dataclass(frozen=True)
class SpacePlan:
    """The sweep's writes, grouped by the filesystem that holds them."""

    writes: tuple[Writes, ...]

    def disks(self) -> list[list[Writes]]:
        groups: dict[tuple, list[Writes]] = {}
        for writes in self.writes:
            groups.setdefault(_filesystem(writes.folder), []).append(writes)
        return list(groups.values())

    def needed(self, path: str | Path, variant_ids: Iterable[str]) -> int | None:
        """Bytes the variants ``variant_ids`` need on the filesystem of ``path``, or
        ``None`` when the sweep writes nothing there that this plan knows of."""
        key, ids = _filesystem(Path(path)), list(variant_ids)
        group = [w for w in self.writes if _filesystem(w.folder) == key]
        if not group or not ids:
            return None
        return sum(w.transient + sum(w.kept.get(i, 0) for i in ids) for w in group)

    def check(self) -> None:
        """One warning per filesystem with less free space than the sweep will write
        there (how many variants fit); :class:`DiskSpaceError` where not even one does."""
        for group in self.disks():
            folder, free = group[0].folder, free_bytes(group[0].folder)
            ids = sorted({i for w in group for i in w.kept})
            transient = sum(w.transient for w in group)
            each = [sum(w.kept.get(i, 0) for w in group) for i in ids]
            need = transient + sum(each)
            if free is None or free >= need:
                continue
            parts = ", ".join(f"{w.label} {human_size(_total(w))}" for w in group)
            one = transient + max(each, default=0)
            if free < one:
                raise DiskSpaceError(
                    f"{folder}: {human_size(free)} free, but one variant writes about "
                    f"{human_size(one)} on its disk ({parts}); free space there or move "
                    'these folders (docs/infra.md, "A full disk")'
                )
            fit, room = 0, free - transient
            while fit < len(each) and each[fit] <= room:
                room -= each[fit]
                fit += 1
            logger.warning(
                "%s: %s free, but the %d variants to train write about %s on its disk (%s): "
                "about %d fit; the sweep stops at the first write that fails for lack of space",
                folder,
                human_size(free),
                len(ids),
                human_size(need),
                parts,
                fit,
            )


def _total(writes: Writes) -> int:
    return writes.transient + sum(writes.kept.values())


def _filesystem(path: Path) -> tuple:
    """What tells filesystems apart: the device of ``path``'s nearest existing folder and
    its size (a folder mounted over another on the same device differs in the size)."""
    where = path.absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        stats = os.statvfs(where)
        return where.stat().st_dev, stats.f_blocks * stats.f_frsize
    except OSError:
        return (str(where),)


def parameter_counts(variants: Iterable[Variant], data: TokenizedData) -> dict[str, int]:
    """Each variant's parameter count, from its model built without memory (torch's meta
    device), once per distinct model config."""
    counts, by_model = {}, {}
    for variant in variants:
        key = variant.model.model_dump_json()
        if key not in by_model:
            with torch.device("meta"):
                by_model[key] = build_model(variant.model, data, "meta").num_parameters()
        counts[variant.id] = by_model[key]
    return counts


def code_bytes() -> int:
    """The bytes of the code a logged model carries (:mod:`pipeline.translate`)."""
    return sum(path.stat().st_size for path in code_modules().values())


def plan_space(
    variants: list[Variant],
    data: TokenizedData,
    infra: Infra,
    models_dir: Path,
    storage: str,
    lanes: int,
) -> SpacePlan:
    """Where the sweep of ``variants`` (``lanes`` trials at a time) writes, and how much
    (the module's docstring); Tune ``storage`` and the scratch folder count only where
    they are this machine's (a local path; a private local Ray)."""
    params = parameter_counts(variants, data)
    tokenizers = sum(len(data.files[name]) for name in VariantFiles.TOKENIZERS)
    model_code = code_bytes() if infra.tracking.log_models else 0

    def sizes(count: int) -> tuple[int, int, int]:
        checkpoint = WEIGHT_BYTES * count + CHECKPOINT_OVERHEAD
        resume = 3 * WEIGHT_BYTES * count + RESUME_OVERHEAD
        model = checkpoint + tokenizers + model_code + MODEL_FILES if model_code else 0
        return checkpoint, resume, model

    ids = [v.id for v in variants]
    checkpoint, resume, model = {}, {}, {}
    for variant_id in ids:
        checkpoint[variant_id], resume[variant_id], model[variant_id] = sizes(params[variant_id])
    folder = {i: checkpoint[i] + SMALL_FILES for i in ids}
    training = lanes * max(2 * (checkpoint[i] + resume[i]) + SMALL_FILES for i in ids)
    same_disk = _filesystem(models_dir) == _filesystem(infra.cache_dir)
    writes = [
        Writes(
            "the variant cache and tracking journal",
            infra.cache_dir,
            {i: folder[i] + SMALL_FILES + model[i] for i in ids},
            max(folder.values()),
        ),
        Writes(
            "models/", models_dir, {i: tokenizers + (0 if same_disk else folder[i]) for i in ids}
        ),
    ]
    if "://" not in storage:
        writes.append(Writes("Tune checkpoints", Path(storage), folder, training))
    uri = resolve_uri(infra)
    if uri.startswith("sqlite:///"):
        artifacts = Path(uri[len("sqlite:///") :]).parent / "mlartifacts"
        writes.append(
            Writes("MLflow artifacts", artifacts, {i: SMALL_FILES + model[i] for i in ids})
        )
    if ray_address(infra.ray) is None:
        scratch = Path(tempfile.gettempdir())
        writes.append(Writes("scratch", scratch, {}, training + 2 * max(model.values())))
    return SpacePlan(tuple(writes))
