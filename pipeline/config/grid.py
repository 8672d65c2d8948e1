"""The study grid: params.yaml ``train.grid`` -> one :class:`Variant` per grid point.

An axis is any field name of the ``model`` or ``train`` section (``scorer``,
``reverse_source``, ``hidden_size``, ``seed``, ``learning_rate``, ...). Each value is
validated as that field would be, so ``train.grid.scorer[2]: unknown scorer 'dott'``
fails at config load, before anything runs.

A variant's id is stable and readable: ``<scorer>-<fwd|rev>-h<hidden>-s<seed>``, plus
``-<axis><value>`` for each further axis, e.g. ``additive-rev-h256-s1-lr0.001``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pipeline.config.params import ConfigError, ModelConfig, TrainConfig, build
from pipeline.scorers import catalogue

if TYPE_CHECKING:
    from pipeline.config.params import Config

TRAINING_REVISION = 4
"""Part of every variant's key (:meth:`Variant.key`, the key of the variant cache and of
the resume state): raised when a change of the training code (``pipeline/train``,
``pipeline/models``, ``pipeline/kernels``) alters what training computes for the same
config (not for a refactor), so that neither hands back a variant trained by the code
before it. 1: up to the LSTM default; 2: the compiled additive-energy kernel, whose
rounding differs from the torch blocks'; 3: the plateau rule's learning-rate floor;
4: fp32 without TF32 on GPUs."""

COMPARED = ("scorer", "reverse_source", "hidden_size")
"""The grid axes the findings compare (with the seed): twins share every other setting.
The one place they are spelled."""
_ID_AXES = (*COMPARED, "seed")
GRID_SETTINGS = {"grid", "only", "allow_partial"}
"""``train`` keys that shape the sweep rather than a variant (not part of its config)."""
_GRID_EXCLUDED = GRID_SETTINGS
_SHORT = {"learning_rate": "lr", "embedding_size": "e", "batch_tokens": "bt"}


@dataclass(frozen=True)
class Variant:
    """One grid point: the model and training config of a single trained model."""

    id: str
    model: ModelConfig
    train: TrainConfig
    axes: dict[str, Any]

    def flat_params(self) -> dict[str, Any]:
        """Flattened config (``model.hidden_size`` ...), for MLflow params and hashing."""
        params = {f"model.{k}": v for k, v in self.model.model_dump().items()}
        train = self.train.model_dump(exclude=_GRID_EXCLUDED)
        params.update({f"train.{k}": v for k, v in train.items()})
        return params

    def config_hash(self, data_hash: str = "", revision: int = 0, code: str = "") -> str:
        """Hash of the full config, the data it trains on, the training code's
        ``revision`` and, for a plugin scorer, its source digest ``code``."""
        payload = {"params": self.flat_params(), "data": data_hash, "revision": revision}
        if code:
            payload["code"] = code
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def with_precision(self, auto: str | None) -> Variant:
        """The variant with ``train.precision: auto`` resolved to ``auto`` (the trials'
        hardware decides it; ``None``: left as it is)."""
        if self.train.precision != "auto" or auto is None:
            return self
        return replace(self, train=self.train.model_copy(update={"precision": auto}))

    def key(self, data_hash: str) -> str:
        """The variant's identity, its cache and resume key: its config, the data,
        :data:`TRAINING_REVISION` and, for a plugin scorer, the digest of the plugin's
        source (an edit retrains it). The train stage computes it once per variant and
        carries it (trial, trainer, variant cache, MLflow)."""
        entry = catalogue.get(self.model.scorer)
        code = entry.source_digest if entry is not None and entry.plugin else ""
        return self.config_hash(data_hash, revision=TRAINING_REVISION, code=code)


def _validate_axes(config: Config, where: str, grid: dict[str, list[Any]]) -> None:
    base = {"model": config.model.model_dump(), "train": config.train.model_dump()}
    if not grid and where != "train.grid":
        raise ConfigError(f"{where}: must name at least one axis")
    for axis, values in grid.items():
        if not values:
            raise ConfigError(f"{where}.{axis}: must be a non-empty list")
        section = _section_of(axis, where)
        cls = ModelConfig if section == "model" else TrainConfig
        for index, value in enumerate(values):
            data = dict(base[section], **{axis: value})
            try:
                build(cls, data, context=config.validation_context)
            except ConfigError as err:
                message = str(err).split(": ", 1)[-1]
                raise ConfigError(f"{where}.{axis}[{index}]: {message}") from None


def _section_of(axis: str, where: str = "train.grid") -> str:
    if axis in ModelConfig.model_fields:
        return "model"
    if axis in TrainConfig.model_fields and axis not in _GRID_EXCLUDED:
        return "train"
    known = sorted(set(ModelConfig.model_fields) | (set(TrainConfig.model_fields) - _GRID_EXCLUDED))
    raise ConfigError(f"{where}.{axis}: unknown axis; known: {', '.join(known)}")


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def variant_id(model: ModelConfig, train: TrainConfig, axes: dict[str, Any]) -> str:
    parts = [
        model.scorer,
        "rev" if model.reverse_source else "fwd",
        f"h{model.hidden_size}",
        f"s{train.seed}",
    ]
    for axis in sorted(a for a in axes if a not in _ID_AXES):
        parts.append(f"{_SHORT.get(axis, axis)}{_format_value(axes[axis])}")
    return "-".join(parts)


def validate_grid(config: Config) -> None:
    """Check every axis name and value; raise ConfigError naming ``train.grid.<axis>[i]``."""
    grids = [("train.grid", axes_of(config.train.grid))]
    grids += [(f"train.grid.include[{i}]", g) for i, g in enumerate(includes_of(config.train.grid))]
    for where, grid in grids:
        _validate_axes(config, where, grid)
    ids = [v.id for v in expand_grid(config)]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ConfigError(f"train.grid: repeated variant ids {duplicates}")
    unknown = sorted(set(config.train.only) - set(ids))
    if unknown:
        raise ConfigError(f"train.only: not in the grid: {', '.join(unknown)}")


INCLUDE = "include"
"""The key of ``train.grid`` that lists extra grid points (not an axis)."""


def axes_of(grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """``train.grid``'s axes (without its ``include``)."""
    return {axis: values for axis, values in grid.items() if axis != INCLUDE}


def includes_of(grid: dict[str, list[Any]]) -> list[dict[str, list[Any]]]:
    """``train.grid.include``: the small grids whose points are added."""
    return list(grid.get(INCLUDE, []))


def expand_grid(config: Config) -> list[Variant]:
    """All grid points in a stable order (axes in params order, values in list order),
    then the points of each ``train.grid.include`` entry not already in the grid."""
    variants = _points(config, axes_of(config.train.grid))
    seen = {v.id for v in variants}
    for grid in includes_of(config.train.grid):
        for variant in _points(config, grid):
            if variant.id not in seen:
                variants.append(variant)
                seen.add(variant.id)
    return variants


def apply_point(
    config: Config, point: dict[str, Any], where: str = "train.grid"
) -> tuple[ModelConfig, TrainConfig]:
    """``config``'s model and train sections with ``point`` (axis -> value) applied and
    validated as those fields are; an unknown axis raises ConfigError naming ``where``."""
    sections = {axis: _section_of(axis, where) for axis in point}
    model_over = {a: v for a, v in point.items() if sections[a] == "model"}
    train_over = {a: v for a, v in point.items() if sections[a] == "train"}
    context = config.validation_context
    model = ModelConfig.model_validate(
        dict(config.model.model_dump(), **model_over), context=context
    )
    train = TrainConfig.model_validate(
        dict(config.train.model_dump(), **train_over), context=context
    )
    return model, train


def _points(config: Config, grid: dict[str, list[Any]]) -> list[Variant]:
    axes = list(grid)
    variants = []
    for values in itertools.product(*(grid[a] for a in axes)):
        point = dict(zip(axes, values))
        model, train = apply_point(config, point)
        variants.append(Variant(variant_id(model, train, point), model, train, point))
    return variants


def select(variants: list[Variant], only: list[str]) -> list[Variant]:
    """The variants named in ``only`` (all when empty); unknown ids raise ConfigError."""
    if not only:
        return variants
    by_id = {v.id: v for v in variants}
    missing = [i for i in only if i not in by_id]
    if missing:
        raise ConfigError(
            f"--only: not in the grid: {', '.join(missing)}; known: {', '.join(by_id)}"
        )
    return [by_id[i] for i in only]
