"""Configuration: what the study runs (``params.yaml``) and where (``infra.yaml``).

Owns: the typed, frozen sections of params (:mod:`~pipeline.config.params`), whose
defaults are the default study, the grid that turns ``train.grid`` into variants
(:mod:`~pipeline.config.grid`) and the infrastructure settings
(:mod:`~pipeline.config.infra`). :func:`load_config` is a stage's entry point: params,
the plugins they name, then the grid, each error naming its key.

May import: scorers, errors.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config.grid import validate_grid
from pipeline.config.params import Config, ConfigError, read_params
from pipeline.scorers.plugins import load_plugins


def load_config(path: str | Path = "params.yaml") -> Config:
    """Load and validate ``params.yaml`` (sections, plugin scorers, then the grid: every
    axis and value, unique variant ids, ``train.only``), then load its plugin scorers into
    this process, the explicit step of a process that trains, decodes or reports with them
    (a stage; a Ray trial or task loads them from its spec). :func:`read_params` reads
    without that step."""
    config = read_params(path)
    validate_grid(config)
    load_plugins(list(config.plugin_sources))
    return config


__all__ = ["Config", "ConfigError", "load_config"]
