"""Keep freed large blocks in the process: glibc malloc settings for CPU training.

glibc serves every allocation above its mmap threshold (128 KiB at first, raised
dynamically up to 32 MiB) with a fresh ``mmap`` and returns it to the kernel on free,
and it trims the heap top above 128 KiB. A training step on CPU allocates and frees the
same large tensors every step (at the study's 1000-token batches: the vocabulary
logits, the (4000, 256) embedding and projection gradients, activations), so every step
page-faults them in again and zero-fills them in the kernel. With the mmap threshold
pinned at its 32 MiB maximum and no trimming below 2 GiB, those blocks come back from
the heap instead: additive h256 trained 1.07x faster (Luong wiring) and 1.08-1.10x
(Bahdanau wiring) at 1000-token batches, with half the system time
(``benchmarks/allocator.py`` of commit 968721a, results in ``benchmarks/results/allocator/``). This
is what Intel's PyTorch CPU guide gets by preloading jemalloc or tcmalloc, without a
native dependency.

The settings are process-wide and change where memory comes from, never a result. The
resident set may stay up to the process's peak instead of shrinking between steps.
``ATTENTION_STUDY_MALLOC=default`` leaves glibc as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers
MMAP_THRESHOLD = 32 * 1024 * 1024
"""glibc's largest allowed mmap threshold on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``)."""
TRIM_THRESHOLD = 2**31 - 1
"""The largest value mallopt's int takes: the heap top is returned only above 2 GiB."""
ENV = "ATTENTION_STUDY_MALLOC"

_tuned: bool | None = None


def tune_allocator() -> bool:
    """Apply the settings above once per process; True if glibc took them (False on
    other C libraries and platforms, or when ``ATTENTION_STUDY_MALLOC=default``)."""
    global _tuned
    if _tuned is None:
        _tuned = _apply()
    return _tuned


def _apply() -> bool:
    if os.environ.get(ENV, "").lower() == "default" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        logger.debug("no glibc mallopt; allocator left as it is")
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = (
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    )
    logger.debug(
        "glibc malloc: mmap threshold %d, trim threshold %d: %s",
        MMAP_THRESHOLD,
        TRIM_THRESHOLD,
        "set" if done else "refused",
    )
    return done
