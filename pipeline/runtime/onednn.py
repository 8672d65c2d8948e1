"""Room in oneDNN's primitive cache for every matrix-product shape a CPU run meets.

On the CPU, torch runs bf16 matrix products through oneDNN, which builds (JIT-compiles)
a primitive for each distinct shape and layout and keeps the last 1024 in an LRU cache
(``ONEDNN_PRIMITIVE_CACHE_CAPACITY``). Token-bucketed batches change shape every step:
training additive h256 at 1000-token batches met 2,799 distinct primitives in its first
1,800 steps (``ONEDNN_VERBOSE=profile_create``), so with 1024 slots the cache evicts
primitives before their shapes come round again and rebuilds them, at about 1 ms each
(10,430 builds in those steps at the default size; the 1000 x 256 by 256 x 768
product took 2.9 ms in a step that met its shape first, 0.25 ms once built). With room
for all of them the same 1,800 steps took 260.9 s instead of 313.8 s (1.20x, both at
once on a 2-core AMX Xeon: ``benchmarks/primitive_cache.py`` of commit 968721a, results in
``benchmarks/results/primitive_cache/``).

Float32 products go to MKL and build nothing, so this matters where ``precision``
resolves to bf16. A primitive is rebuilt bit for bit the same, so the setting changes
speed and memory only, never a number: the sized run held about 300 MiB more at its
peak (2605 against 2297 MiB).

oneDNN reads the variable once, when the process builds its first primitive: call
:func:`size_primitive_cache` before any bf16 product (training, decoding and the
``precision: auto`` probe do, first thing). A value the user exported is left as it is.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

ENV = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
CAPACITY = 8192
"""About three times the 2,799 primitives one variant met in 1,800 training steps."""


def size_primitive_cache(capacity: int = CAPACITY) -> str:
    """Set oneDNN's cache capacity for this process unless the environment already
    does; the value in force."""
    value = os.environ.setdefault(ENV, str(capacity))
    logger.debug("%s=%s", ENV, value)
    return value
