"""Configuration: what the study runs (``params.yaml``) and where (``infra.yaml``).

Owns: the typed, frozen sections of params (:mod:`~pipeline.config.params`), the grid
that turns ``train.grid`` into variants (:mod:`~pipeline.config.grid`) and the
infrastructure settings (:mod:`~pipeline.config.infra`). :func:`load_config` is the one
entry point: params, the plugins they name, then the grid, each error naming its key.

May import: scorers, errors.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config.grid import validate_grid
from pipeline.config.params import Config, ConfigError, read_params


def load_config(path: str | Path = "params.yaml") -> Config:
    """Load and validate ``params.yaml``: sections, plugin scorers, then the grid (every
    axis and value, unique variant ids, ``train.only``)."""
    config = read_params(path)
    validate_grid(config)
    return config


__all__ = ["Config", "ConfigError", "load_config"]
