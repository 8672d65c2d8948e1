"""Mixed precision: which dtype the matrix products run in, per device.

``precision: auto`` picks bfloat16 where bf16 matrix products are faster than float32
ones, float32 elsewhere. bfloat16 keeps float32's exponent range, so unlike float16 it
needs no loss scaling; under ``torch.autocast`` the weights, the optimizer state, the
recurrent state updates, the softmax and the loss stay float32, and only products run in
bfloat16.

On a CPU no instruction flag tells whether bf16 pays: it depends on the CPU and on the
kernels torch ships. Measured with torch 2.13, one thread, 2048^2 products:

- Xeon with AMX (``amx_bf16``): bf16 6.5x fp32.
- Xeon with ``avx512_bf16`` and no AMX: bf16 0.50x fp32 (training 1.6-1.7x slower).
- AMD EPYC with ``avx512_bf16`` and no AMX: bf16 2.2x fp32 (training 1.17-1.26x faster).

So on a CPU that advertises bf16 instructions (:data:`CPU_BF16_FLAGS`), ``auto`` times
the largest product of a training step, the vocabulary projection of one 512-row loss
chunk, ``(512, 256) x (256, 4000)``, in both dtypes (about 0.2 s, once per process) and
picks bf16 when it is at least :data:`BF16_MIN_SPEEDUP` times faster. The margin keeps
the choice stable between runs on one machine (the three CPUs above sit at 0.5x, 2.2x,
6.5x), which matters because the resolved value is part of each variant's cache hash.
The sweep resolves ``auto`` once, on the trials' hardware (``pipeline.sweep.driver``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from pathlib import Path

import torch

from pipeline.runtime.onednn import size_primitive_cache

logger = logging.getLogger(__name__)

PRECISIONS = ("auto", "fp32", "bf16")
"""Values of ``train.precision`` and ``evaluate.precision``."""

CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")
"""/proc/cpuinfo flags (x86 ``flags``, ARM ``Features``) of native bf16 instructions;
without one, bf16 is emulated and ``auto`` is fp32 without timing anything."""

BF16_MIN_SPEEDUP = 1.3
"""bf16 products must beat fp32 ones by this factor for ``auto`` to pick bf16."""

PROBE_SHAPE = (512, 256, 4000)
"""(rows, inner, columns) of the timed product: one loss chunk's vocabulary projection
(``models/loss.py``, 512 rows, hidden 256, vocabulary 4000)."""


def cpuinfo_fields(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first value of each ``key : value`` line of ``cpuinfo`` (the first core's:
    ``model name``, x86 ``flags``, ARM ``Features``, ...); empty where it cannot be read."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


@functools.cache
def cpu_has_bf16_instructions(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True if the CPU advertises native bf16 instructions (:data:`CPU_BF16_FLAGS`)."""
    fields = cpuinfo_fields(cpuinfo)
    flags = (fields.get("flags") or fields.get("Features") or "").split()
    return any(flag in flags for flag in CPU_BF16_FLAGS)


def product_seconds(dtype: torch.dtype, shape=PROBE_SHAPE, repeats: int = 5) -> float:
    """Best-of-``repeats`` seconds of one ``shape`` product in ``dtype`` on the CPU, at
    torch's current thread count, after two untimed warm-ups."""
    rows, inner, columns = shape
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(rows, inner, generator=generator).to(dtype)
    b = torch.randn(inner, columns, generator=generator).to(dtype)
    best = float("inf")
    for attempt in range(repeats + 2):
        start = time.perf_counter()
        torch.mm(a, b)
        if attempt >= 2:
            best = min(best, time.perf_counter() - start)
    return best


@functools.cache
def cpu_bf16_speedup() -> float:
    """fp32 seconds / bf16 seconds of the :data:`PROBE_SHAPE` product on one thread of this
    CPU (0.0 when the CPU has no bf16 instructions: nothing is timed)."""
    if not cpu_has_bf16_instructions():
        return 0.0
    size_primitive_cache()  # the probe's bf16 product may be the process's first
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread, as a trial has: the same answer in every process
    try:
        fp32 = product_seconds(torch.float32)
        bf16 = product_seconds(torch.bfloat16)
    finally:
        torch.set_num_threads(threads)
    speedup = fp32 / bf16
    logger.info(
        "bf16 products %.2fx the speed of fp32 on one thread of this CPU (%.1f vs %.1f ms): "
        "precision auto -> %s",
        speedup,
        bf16 * 1e3,
        fp32 * 1e3,
        choose_cpu_precision(speedup),
    )
    return speedup


def choose_cpu_precision(speedup: float) -> str:
    """``bf16`` if bf16 products are at least :data:`BF16_MIN_SPEEDUP` x faster, else fp32."""
    return "bf16" if speedup >= BF16_MIN_SPEEDUP else "fp32"


def resolve(precision: str, device: str | torch.device) -> str:
    """``auto`` -> ``bf16`` or ``fp32`` for ``device``; other values pass through."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"train.precision / evaluate.precision: expected one of {', '.join(PRECISIONS)}, "
            f"got {precision!r}"
        )
    if precision != "auto":
        return precision
    kind = torch.device(device).type
    if kind == "cuda":
        native = torch.cuda.is_bf16_supported(including_emulation=False)  # Ampere and later
        return "bf16" if native else "fp32"
    if kind != "cpu":
        return "fp32"
    return choose_cpu_precision(cpu_bf16_speedup())


def autocast(precision: str, device: str | torch.device) -> contextlib.AbstractContextManager:
    """The autocast context for a resolved ``precision``. ``fp32`` is IEEE float32 on every
    device: on a GPU, cuDNN's RNNs and torch's products run without TF32 (cuDNN allows
    TF32 by default, which rounds products to a 10-bit mantissa)."""
    kind = torch.device(device).type
    if precision == "fp32":
        if kind != "cuda":
            return contextlib.nullcontext()
        return _strict_fp32()
    return torch.autocast(kind, dtype=torch.bfloat16)


@contextlib.contextmanager
def _strict_fp32():
    matmul = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.backends.cudnn.flags(
            enabled=torch.backends.cudnn.enabled,
            benchmark=torch.backends.cudnn.benchmark,
            deterministic=torch.backends.cudnn.deterministic,
            allow_tf32=False,
        ):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul
