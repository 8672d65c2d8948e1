"""Process-wide settings, applied once by whatever starts a process's work.

A training trial, a decoding task and a benchmark worker call :func:`prepare_process`
first thing: library functions (training, decoding) never change process-wide state as
a side effect. Every setting here changes speed or memory only, never a number.
"""

from __future__ import annotations

import logging

from pipeline.runtime.allocator import tune_allocator
from pipeline.runtime.onednn import size_primitive_cache

logger = logging.getLogger(__name__)


def prepare_process() -> dict[str, object]:
    """Tune glibc's allocator for CPU training (:mod:`pipeline.runtime.allocator`), size
    oneDNN's primitive cache (:mod:`pipeline.runtime.onednn`). Safe to call more than
    once. Returns what is in force."""
    settings: dict[str, object] = {
        "allocator_tuned": tune_allocator(),
        "onednn_cache": size_primitive_cache(),
    }
    logger.debug("process settings: %s", settings)
    return settings
