"""Scorers: the catalogue of attention scorers and the loading of the user's own.

Owns: the one list of scorers (:mod:`~pipeline.scorers.catalogue`: name, display order,
paper, formula, FLOPs) and plugin files (:mod:`~pipeline.scorers.plugins`). The scorer
classes themselves are models (:mod:`pipeline.models.attention`).

May import: nothing of the package at import time (torch and the classes are imported
when first used), so that config validation stays light.
"""

from pipeline.scorers.catalogue import ScorerEntry
from pipeline.scorers.plugins import PluginError, PluginSource, register_scorer

__all__ = ["PluginError", "PluginSource", "ScorerEntry", "register_scorer"]
