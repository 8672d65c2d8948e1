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


def load_config(path: str | Path = "params.yaml") -> Config:
    """Load and validate ``params.yaml`` (sections, plugin scorers, then the grid: every
    axis and value, unique variant ids, ``train.only``). Nothing of the process changes:
    a process that trains, decodes or reports with the plugin scorers loads them itself
    (``load_plugins(config.plugin_sources)``: a stage's entry point, a Ray trial or task
    from its spec)."""
    config = read_params(path)
    validate_grid(config)
    return config


__all__ = ["Config", "ConfigError", "load_config"]
