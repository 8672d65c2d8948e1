"""Twins: pairs of variants that differ in one axis and agree on every other setting.

A comparison "reversed vs forward" or "additive vs general" is only fair between two
variants whose every other setting is equal: hidden size, seed, and any further grid
axis (learning rate, dropout, ...). Variants are matched on their full model and train
settings (``models/sweep.json``: ``model`` and ``train``), not on a fixed list of axes, so
a new axis or an extra seed can never pair the wrong rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

_SECTIONS = ("model", "train")


def settings(info: Mapping[str, Any]) -> dict[str, Any]:
    """``{"model.hidden_size": 256, "train.seed": 1, ...}`` of one ``sweep.json`` entry."""
    flat: dict[str, Any] = {}
    for section in _SECTIONS:
        flat.update({f"{section}.{k}": v for k, v in (info.get(section) or {}).items()})
    return flat


def setting_key(axis: str) -> str:
    """``scorer`` -> ``model.scorer``; ``seed`` -> ``train.seed``; dotted keys as they are."""
    if "." in axis:
        return axis
    from pipeline.config import ModelConfig

    return f"model.{axis}" if axis in ModelConfig.model_fields else f"train.{axis}"


def twins(
    variants: Mapping[str, Mapping[str, Any]],
    axis: str,
    base: Any,
    value: Any | Callable[[Any], bool] = None,
) -> list[tuple[str, str]]:
    """``(variant, twin)`` pairs: ``variant`` has ``axis`` equal to ``value`` (or, when
    ``value`` is None, anything but ``base``; or where ``value(v)`` is true), ``twin`` has
    ``axis == base``, and both agree on every other setting. Variants without a twin are
    left out; pairs come in ``variants`` order."""
    key = setting_key(axis)

    def rest(flat: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in flat.items() if k != key}, sort_keys=True)

    flats = {variant_id: settings(info) for variant_id, info in variants.items()}
    missing = [i for i, flat in flats.items() if key not in flat]
    if missing:
        raise KeyError(f"{axis}: not a setting of {', '.join(missing[:3])}")
    bases = {rest(f): i for i, f in flats.items() if f[key] == base}
    if value is None:
        wanted = lambda v: v != base  # noqa: E731
    elif callable(value):
        wanted = value
    else:
        wanted = lambda v: v == value  # noqa: E731
    pairs = []
    for variant_id, flat in flats.items():
        if flat[key] != base and wanted(flat[key]) and rest(flat) in bases:
            pairs.append((variant_id, bases[rest(flat)]))
    return pairs


def group_without(variants: Mapping[str, Mapping[str, Any]], axis: str) -> dict[str, list[str]]:
    """Variants grouped by every setting but ``axis`` (e.g. ``seed``: the seeds of each
    configuration), as ``{representative id: [ids]}`` in ``variants`` order."""
    key = setting_key(axis)
    groups: dict[str, list[str]] = {}
    for variant_id, info in variants.items():
        flat = settings(info)
        rest = json.dumps({k: v for k, v in flat.items() if k != key}, sort_keys=True)
        groups.setdefault(rest, []).append(variant_id)
    return {ids[0]: ids for ids in groups.values()}
