"""The Ray runtime: joining or starting Ray, shipping the code, fanning tasks out.

Nothing here assumes a filesystem shared between nodes:

- **Code** reaches workers through Ray's ``runtime_env`` (``py_modules``: this package,
  uploaded by the driver), so a node needs only the pinned dependencies installed.
- **Inputs** reach tasks as arguments (the object store); **results** come back as
  return values. Only the driver touches the repo.
- **Failures** are reported by their underlying exception (:func:`root_cause`), not by
  Ray's wrapper text.

This module imports ``ray`` but not Ray Tune (the sweep lives in :mod:`pipeline.sweep.driver`).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ray
from tqdm import tqdm

from pipeline.config.infra import RayConfig
from pipeline.runtime.console import retake_ray_loggers
from pipeline.runtime.devices import (  # noqa: F401  (re-exported: the cluster's vocabulary)
    ClusterError,
    GpuUnavailableError,
    TaskResources,
    claim_device,
    device_for,
)

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # pipeline/
CODE_EXCLUDES = ["__pycache__/", "*.pyc"]
DEFAULT_STORAGE = ".ray_results"
"""Tune's storage when ``ray.storage_path`` is unset: a folder in the repo (the
local run); a cluster sets a path every node sees, or an ``s3://``/``gs://`` URI."""


WAIT_POLL_S = 5.0
"""Seconds between looks at the cluster's resources while tasks are pending."""


class TasksFailedError(ClusterError):
    """Some Ray tasks raised; the message names each key and its underlying exception."""


# -------------------------------------------------------------------- settings
def storage_uri(storage_path: str | None, root: Path) -> str:
    """Tune's ``storage_path``: a URI (``s3://``, ``gs://``, ``file://``, ...) passes
    through unchanged; a local path is made absolute against the repo root."""
    if not storage_path:
        return str((root / DEFAULT_STORAGE).resolve())
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", storage_path):
        return storage_path
    return str((root / Path(storage_path).expanduser()).resolve())


def ray_address(config: RayConfig) -> str | None:
    """``ray.address`` (``RAY_ADDRESS`` already applied by :mod:`pipeline.config.infra`), or
    ``None`` for a local Ray."""
    address = config.address or None
    if address and address.startswith("ray://"):
        raise ClusterError(
            f"ray.address (infra.yaml or RAY_ADDRESS): {address!r} is a Ray Client "
            "address, which this pipeline does not support (its driver writes models/, "
            "eval/ and MLflow locally); run "
            "`dvc repro` on a cluster node with RAY_ADDRESS=auto, or submit it with "
            "`ray job submit --working-dir . -- dvc repro`"
        )
    return address


def runtime_env() -> dict[str, Any]:
    """The project's code for every worker: this package, uploaded by the driver."""
    return {"py_modules": [str(PACKAGE_DIR)], "excludes": list(CODE_EXCLUDES)}


def init_ray(config: RayConfig) -> None:
    """Join the configured cluster, or start a private local Ray with this machine's
    cores; never attach to a cluster that ``/tmp/ray/ray_current_cluster`` names."""
    if ray.is_initialized():
        return
    address = ray_address(config)
    common = {"runtime_env": runtime_env(), "logging_level": logging.WARNING}
    try:
        if address:
            logger.info("joining the Ray cluster at %s", address)
            ray.init(address=address, **common)
        else:
            private_token_file()
            ray.init(
                address="local",
                num_cpus=os.cpu_count(),
                include_dashboard=False,
                _node_ip_address=LOOPBACK,  # what the private Ray advertises (docs/cluster.md)
                **common,
            )
            private_token_file()
    except (ray.exceptions.RayError, ConnectionError, RuntimeError, ValueError) as err:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise ClusterError(
            f"ray.address: could not start or join {where}: {root_cause(err)}"
        ) from None
    retake_ray_loggers()  # Ray set its loggers up again: into the run log
    _check_resources(config, local=not address)


LOOPBACK = "127.0.0.1"


def private_token_file(path: Path | None = None) -> Path:
    """Ray's token file (``~/.ray/auth_token``, which a local ``ray.init`` creates
    world-readable) readable by its owner only: created here with mode 0600 when absent,
    its mode narrowed when present. A token readable by other users of the machine lets
    them run code in the study's Ray. The token is Ray's kind: 256 random bits, hex."""
    path = path or Path.home() / ".ray" / "auth_token"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(secrets.token_hex(32))
        elif path.stat().st_mode & 0o077:
            path.chmod(0o600)
    except FileExistsError:
        pass  # another study created it at the same moment (with mode 0600)
    except OSError as err:
        logger.warning("%s: cannot make it private (%s)", path, err)
    return path


def _check_resources(config: RayConfig, local: bool) -> None:
    """Refuse work that can never be scheduled (a local Ray gains no nodes)."""
    for name, amount, have in shortages(TaskResources.from_config(config)):
        if name == "CPU":
            continue  # a trial waits for CPUs: ray.pending_timeout_minutes bounds that wait
        key = "ray.gpus_per_trial" if name == "GPU" else f"ray.resources_per_trial.{name}"
        hint = " (is torch's CUDA build installed, and do the nodes have GPUs?)"
        message = f"{key}: {amount:g} {name} per trial, but the Ray cluster has {have:g}"
        message += hint if name == "GPU" else ""
        if local:
            raise ClusterError(message)
        logger.warning("%s; waiting for the cluster to add it (autoscaling)", message)


# ------------------------------------------------------------ inside workers
def node_id() -> str:
    """The Ray node this process runs on (recorded with each trained variant)."""
    return ray.get_runtime_context().get_node_id()


# ------------------------------------------------------------------ failures
_EXCEPTION_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b.*)$")


def root_cause(error: BaseException | str | None) -> str:
    """``Type: message`` of the exception underneath Ray's and Tune's wrappers."""
    if error is None:
        return "unknown error"
    seen = 0
    while isinstance(error, BaseException) and seen < 20:
        seen += 1
        inner = getattr(error, "cause", None) or error.__cause__
        if inner is None or inner is error:
            break
        error = inner
    if isinstance(error, BaseException) and not isinstance(error, ray.exceptions.RayError):
        message = str(error).strip().splitlines()
        return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    found = [m.group(1).strip() for m in map(_EXCEPTION_LINE.match, lines) if m]
    wrappers = ("ray.exceptions.", "RayTaskError", "TuneError", "RayActorError")
    causes = [line for line in found if not line.startswith(wrappers)]
    if causes:
        return causes[-1]
    return lines[-1].strip() if lines else "unknown error"


# ------------------------------------------------------------------ waiting
def shortages(resources: TaskResources) -> list[tuple[str, float, float]]:
    """``(resource, per task, the cluster's live nodes in total)`` for each resource the
    cluster has less of than one task of ``resources`` asks for."""
    total = ray.cluster_resources()
    wanted = {"CPU": resources.cpus, "GPU": resources.gpus, **resources.custom}
    return [
        (name, amount, total.get(name, 0))
        for name, amount in wanted.items()
        if amount and total.get(name, 0) < amount
    ]


def missing_resources(resources: TaskResources) -> str | None:
    """What the cluster's live nodes lack, in total, to run one task of ``resources``
    ("CPU: 1 per trial, the cluster has 0"), or None if one fits."""
    short = [
        f"{name}: {amount:g} per trial, the cluster has {have:g}"
        for name, amount, have in shortages(resources)
    ]
    return "; ".join(short) or None


class ResourceWatch:
    """Bounds the wait for a cluster too small for one trial or task: :meth:`poll` says
    why once the shortage has lasted ``minutes`` in a row (``ray.pending_timeout_minutes``
    in infra.yaml), None until then. ``clock`` and ``probe`` are for tests."""

    def __init__(
        self,
        resources: TaskResources,
        minutes: float,
        what: str,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[TaskResources], str | None] = missing_resources,
    ):
        self.resources, self.seconds, self.what = resources, 60 * minutes, what
        self.clock, self.probe = clock, probe
        self.since: float | None = None
        self.warned = False

    def poll(self) -> str | None:
        missing = self.probe(self.resources)
        if missing is None:
            self.since, self.warned = None, False
            return None
        now = self.clock()
        if self.since is None:
            self.since = now
        if not self.warned:
            logger.warning(
                "the cluster cannot run one %s now (%s); waiting at most %.0f min",
                self.what,
                missing,
                self.seconds / 60,
            )
            self.warned = True
        if now - self.since < self.seconds:
            return None
        return (
            f"ray.pending_timeout_minutes: no {self.what} could run for "
            f"{(now - self.since) / 60:.1f} min: {missing}; finished work is kept: add nodes "
            "(or change ray.resources_per_trial in infra.yaml), then run the stage again"
        )


# --------------------------------------------------------------------- tasks
def run_tasks(
    function: Callable[..., Any],
    items: Mapping[str, Any],
    resources: TaskResources,
    description: str,
    shared: tuple[Any, ...] = (),
    pending_timeout_minutes: float = 10.0,
) -> dict[str, Any]:
    """``function(item, *shared)`` for every item, as Ray tasks with ``resources``.

    ``shared`` objects are put in the object store once. Returns ``{key: result}``; if
    any task raised, :class:`TasksFailedError` names every failed key and its cause
    after the others finished. A cluster with fewer resources than one task for
    ``pending_timeout_minutes`` in a row raises :class:`ClusterError` saying what is
    missing (:class:`ResourceWatch`).
    """
    refs = [ray.put(value) for value in shared]
    # A GPU task's worker exits after it (as Ray's own default for num_gpus > 0 does), so
    # no later task inherits its CUDA context on another GPU or its memory.
    remote = ray.remote(max_calls=1 if resources.gpus else 0, **resources.ray_options())(function)
    pending = {remote.remote(item, *refs): key for key, item in items.items()}
    results, errors = {}, {}
    watch = ResourceWatch(resources, pending_timeout_minutes, f"{description} task")
    with tqdm(total=len(pending), desc=description, unit="task") as bar:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_POLL_S)
            if not done:
                stuck = watch.poll()
                if stuck:
                    for ref in pending:
                        ray.cancel(ref)
                    raise ClusterError(stuck)
                continue
            key = pending.pop(done[0])
            try:
                results[key] = ray.get(done[0])
            except ray.exceptions.RayError as err:
                errors[key] = root_cause(err)
                logger.error("%s failed: %s", key, errors[key])
            bar.update(1)
    if errors:
        details = "; ".join(f"{k}: {v}" for k, v in sorted(errors.items()))
        raise TasksFailedError(
            f"{len(errors)} of {len(items)} {description} tasks failed: {details}"
        )
    return results
