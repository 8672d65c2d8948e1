"""The one list of attention scorers: name, display order, paper, formula and FLOPs.

The model builder, the report (orders, colours, labels) and the benchmarks' FLOP counts
read this process's catalogue: the built-ins, then the plugins the process loaded
(:func:`pipeline.scorers.plugins.load_plugins`); nothing else lists scorers. Config
validation reads no process state: a params file's valid names are the built-ins and the
scorers of the plugins it names (:func:`pipeline.scorers.plugins.scan_plugins`). The
built-in entries name their classes by import path (no torch import here); a plugin's
entry holds its class.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
"""Matplotlib's tab10, in catalogue order: a scorer keeps its colour in every figure."""

Flops = Callable[[int, int], tuple[int, int]]
"""``(hidden_size, source_positions) -> (per key, per query)``: forward matmul FLOPs of the
once-per-batch key transform per source position, and of scoring one query against all
positions."""


@dataclass(frozen=True)
class ScorerEntry:
    name: str
    """The name params use (``model.scorer``, ``train.grid.scorer``)."""
    paper: str
    """Where it comes from (shown in the report)."""
    formula: str
    """score(q, k) in words or symbols (shown in the report)."""
    flops: Flops | None = None
    """Matmul FLOPs (see :data:`Flops`); None: not counted by the benchmarks."""
    target: str | type | None = None
    """The class: ``"module:Class"`` for a built-in, the class itself for a plugin, None
    for ``none`` (no attention)."""
    order: int = 0
    """Position in tables and figures (catalogue order)."""
    plugin: str | None = None
    """The plugin file that registered it (None: built in)."""
    source_digest: str = ""
    """sha256 of the plugin file: part of its variants' cache keys, so an edit retrains."""

    def load(self) -> type | None:
        """The scorer class (imported on first use), None for ``none``."""
        if self.target is None or isinstance(self.target, type):
            return self.target
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)


def _dot(h: int, s: int) -> tuple[int, int]:
    return 0, 2 * s * h


def _general(h: int, s: int) -> tuple[int, int]:
    return 2 * h * h, 2 * s * h


def _additive(h: int, s: int) -> tuple[int, int]:
    return 2 * h * h, 2 * h * h + 2 * s * h


LOCATION_MAX_POSITIONS = 256
"""Source positions the ``location`` scorer has weights for. 256 subwords covers the
longest sentences of the corpus (86 words); a longer source's later positions score
-inf, i.e. they can never be attended, rather than failing."""


def _location(h: int, s: int) -> tuple[int, int]:
    return 0, 2 * h * LOCATION_MAX_POSITIONS


_ATTENTION = "pipeline.models.attention"
_BUILTIN = (
    ScorerEntry(
        "none",
        "Cho et al. 2014 (RNN Encoder-Decoder, no attention)",
        "no attention: one fixed summary of the source",
    ),
    ScorerEntry("dot", "Luong et al. 2015, eq. 8", "q . k", _dot, f"{_ATTENTION}:DotScorer"),
    ScorerEntry(
        "scaled_dot",
        "Vaswani et al. 2017, eq. 1",
        "q . k / sqrt(H)",
        _dot,
        f"{_ATTENTION}:ScaledDotScorer",
    ),
    ScorerEntry(
        "general", "Luong et al. 2015, eq. 8", "q W_a k", _general, f"{_ATTENTION}:GeneralScorer"
    ),
    ScorerEntry(
        "additive",
        "Bahdanau et al. 2014, app. A.1.2",
        "v_a . tanh(W_a q + U_a k)",
        _additive,
        f"{_ATTENTION}:AdditiveScorer",
    ),
    ScorerEntry(
        "location",
        "Luong et al. 2015, eq. 8",
        "(W_a q)_j for source position j",
        _location,
        f"{_ATTENTION}:LocationScorer",
    ),
)
BUILTIN = tuple(e.name for e in _BUILTIN)
"""The built-in scorers, in display order."""

_ENTRIES: dict[str, ScorerEntry] = {e.name: replace(e, order=i) for i, e in enumerate(_BUILTIN)}


def check_name(entry: ScorerEntry, others) -> None:
    """Raise ValueError if ``entry``'s name is a built-in's or that of another file's
    entry among ``others`` (the same file may register it again)."""
    if entry.name in BUILTIN:
        raise ValueError(f"scorer name {entry.name!r} is taken (a built-in scorer)")
    for other in others:
        if other.name == entry.name and other.plugin != entry.plugin:
            raise ValueError(f"scorer name {entry.name!r} is taken (registered by {other.plugin})")


def add(entry: ScorerEntry) -> ScorerEntry:
    """Register ``entry`` in this process's catalogue, after the scorers already known (a
    plugin's registration, :func:`pipeline.scorers.plugins.load_plugins`; the same plugin
    loaded twice replaces its own entry). A name taken by a built-in or by another file
    raises ValueError."""
    check_name(entry, _ENTRIES.values())
    old = _ENTRIES.get(entry.name)
    order = old.order if old is not None else len(_ENTRIES)
    entry = replace(entry, order=order)
    _ENTRIES[entry.name] = entry
    return entry


def remove_plugins() -> None:
    """Drop every plugin's entry: the catalogue holds the built-ins alone again."""
    for name in [name for name, entry in _ENTRIES.items() if entry.plugin is not None]:
        del _ENTRIES[name]


def get(name: str) -> ScorerEntry | None:
    return _ENTRIES.get(name)


def names() -> tuple[str, ...]:
    """Every known scorer (built-ins, then plugins loaded so far), in display order."""
    return tuple(_ENTRIES)


def entries() -> tuple[ScorerEntry, ...]:
    return tuple(_ENTRIES.values())


def order_of(name: str) -> int:
    """Display position of ``name``; unknown names sort last."""
    entry = _ENTRIES.get(name)
    return entry.order if entry is not None else len(_ENTRIES) + 1


def colours(scorers) -> dict[str, str]:
    """A fixed colour per scorer (by catalogue position), unknown names after."""
    unknown = sorted(set(scorers) - set(_ENTRIES))
    positions = {s: _ENTRIES[s].order for s in set(scorers) & set(_ENTRIES)}
    positions.update({s: len(_ENTRIES) + i for i, s in enumerate(unknown)})
    return {s: PALETTE[p % len(PALETTE)] for s, p in sorted(positions.items(), key=lambda x: x[1])}
