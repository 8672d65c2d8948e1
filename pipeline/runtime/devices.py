"""Where a trial or decode task runs: the resources it asks Ray for and the torch device
it claims inside its worker.

Kept apart from :mod:`pipeline.runtime.cluster` so that the worker side (the trainer, the
decoder) imports without Ray: a GPU machine can drive ``train_variant`` and
``decode_variant`` directly (docs/cluster.md, "Measured on a GPU").
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.config.infra import RayConfig
from pipeline.errors import StageError


class ClusterError(StageError):
    """The Ray cluster cannot run the work as configured (one-line message)."""


class GpuUnavailableError(ClusterError):
    """A trial or task was given a GPU by Ray, but torch on its node cannot use CUDA."""


@dataclass(frozen=True)
class TaskResources:
    """What one trial or decode task reserves on the cluster."""

    cpus: float = 1.0
    gpus: float = 0.0
    custom: Mapping[str, float] = field(default_factory=dict)

    @staticmethod
    def from_config(config: RayConfig) -> TaskResources:
        return TaskResources(
            config.cpus_per_trial, config.gpus_per_trial, dict(config.resources_per_trial)
        )

    def ray_options(self) -> dict[str, Any]:
        """Keyword arguments of ``ray.remote``/``.options``."""
        options: dict[str, Any] = {"num_cpus": self.cpus, "num_gpus": self.gpus}
        if self.custom:
            options["resources"] = dict(self.custom)
        return options

    def tune_resources(self) -> dict[str, float]:
        """The resource dict of ``tune.with_resources``."""
        return {"cpu": self.cpus, "gpu": self.gpus, **self.custom}


def device_for(gpus: float) -> str:
    """``cuda`` for work given a GPU, else ``cpu``. Work given a GPU never falls back to
    the CPU: without CUDA it raises :class:`GpuUnavailableError` naming this node."""
    if gpus <= 0:
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise GpuUnavailableError(
            f"ray.gpus_per_trial is {gpus:g} but torch {torch.__version__} on node "
            f"{platform.node()} cannot use CUDA (install a CUDA build of torch on GPU "
            "nodes: README, Installation)"
        )
    return "cuda"


def claim_device(gpus: float, threads: float) -> str:
    """Set torch up for the resources Ray gave this trial or task; returns its device
    (:func:`device_for`). A fractional GPU caps this process's share of its memory, so
    trials packed on one GPU cannot starve each other."""
    import torch

    torch.set_num_threads(max(1, int(threads)))
    device = device_for(gpus)
    if device == "cuda" and gpus < 1:
        torch.cuda.set_per_process_memory_fraction(gpus)
    return device
