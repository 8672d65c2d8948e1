"""A console for people: the study's own lines on the terminal, the libraries' in a file.

A stage that runs Ray (train, evaluate) calls :func:`library_logs_to_file` once: from
then on Ray's and Tune's log records (tables, checkpoint lines, internals, their
warnings), MLflow's and the HTTP client's (``urllib3`` retries during a tracking outage)
go to one log file per run, whose path the stage prints once. The terminal keeps the
project's own records (``pipeline.*``, ``stages.*``), the progress bars, and any other
library's errors. Workers are quieted by :func:`quiet_worker_loggers` (their project
warnings still reach the terminal through Ray's log forwarding).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

PROJECT_LOGGERS = ("pipeline", "stages", "__main__", "tools")
"""Loggers whose records the terminal shows at their level (INFO and up)."""
LIBRARY_LOGGERS = ("ray", "mlflow", "urllib3", "alembic", "filelock", "py.warnings")
"""Loggers with handlers or levels of their own to take over: their records go to the file."""
QUIET_ENV = {
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",  # a bar per logged model otherwise
    "RAY_AIR_NEW_OUTPUT": "0",  # Tune's classic output: silent at verbose=0 (the new one
    # prints its experiment box and result paths whatever the verbosity)
}
"""Process environment set for a run (and inherited by Ray's workers on this machine)."""


class _FileHandler(logging.FileHandler):
    """A log file that never breaks the run: a failed write (a full disk) is said once on
    the terminal, and later records are dropped."""

    failed = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        if not self.failed:
            self.failed = True
            error = sys.exc_info()[1]
            print(
                f"warning: cannot write the run log {self.baseFilename}: {error}", file=sys.stderr
            )


class _ConsoleFilter(logging.Filter):
    """The terminal's share: the project's records, and other libraries' errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        project = record.name.split(".")[0] in PROJECT_LOGGERS
        return project or record.levelno >= logging.ERROR


def library_logs_to_file(folder: Path, stage: str) -> Path | None:
    """Send Ray's, Tune's, MLflow's and urllib3's log records to
    ``folder/<stage>-<time>.log`` (with the project's, for context) and keep the terminal
    for the project's; returns the file's path (``None`` when it cannot be created: the
    records then stay on the terminal)."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    path = folder / f"{stage}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handler = _FileHandler(path, encoding="utf-8", delay=False)
    except OSError as err:
        logging.getLogger(__name__).warning("no run log in %s (%s)", folder, err)
        return None
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    )
    root = logging.getLogger()
    for console in root.handlers:
        console.addFilter(_ConsoleFilter())
    root.addHandler(handler)
    for name in LIBRARY_LOGGERS:
        take_over(logging.getLogger(name), handler)
    logging.captureWarnings(True)  # warnings.warn from libraries: into the file
    return path


def take_over(library: logging.Logger, handler: logging.Handler) -> None:
    """``library``'s records go to ``handler`` only (Ray installs a terminal handler of
    its own and stops propagation; its import may do it again: call after importing)."""
    for old in list(library.handlers):
        library.removeHandler(old)
    library.addHandler(handler)
    library.setLevel(logging.INFO)
    library.propagate = False


def file_handler() -> logging.Handler | None:
    """The run log's handler, if :func:`library_logs_to_file` set one up."""
    return next((h for h in logging.getLogger().handlers if isinstance(h, _FileHandler)), None)


def retake_ray_loggers() -> None:
    """Ray (re)configures its loggers when it starts: route them to the run log again."""
    handler = file_handler()
    if handler is None:
        return
    for name in ("ray", "ray.tune", "ray.train", "ray.data", "ray.serve"):
        logger = logging.getLogger(name)
        if name == "ray":
            take_over(logger, handler)
        else:  # children propagate to "ray"
            for old in list(logger.handlers):
                logger.removeHandler(old)
            logger.propagate = True


def quiet_worker_loggers() -> None:
    """In a Ray worker (a trial, a decode task): Ray's and MLflow's INFO lines
    ("Checkpoint successfully created ...") are not forwarded to the terminal."""
    for name in ("ray.train", "ray.tune", "ray.data", "mlflow"):
        logging.getLogger(name).setLevel(logging.WARNING)
