"""Mixed precision: which dtype the matrix products run in, per device.

``precision: auto`` picks bfloat16 where bf16 matrix products are faster than float32
ones, float32 elsewhere. bfloat16 keeps float32's exponent range, so unlike float16 it
needs no loss scaling; under ``torch.autocast`` the weights, the optimizer state, the
recurrent state updates, the softmax and the loss stay float32, and only products run in
bfloat16.

On a CPU, "faster" means AMX tile units (``amx_bf16``), not every CPU that can compute
in bf16. Measured with torch 2.13's oneDNN/MKL kernels, one thread (docs/benchmarks.md):

- Xeon with AMX: bf16 2048^2 products 1262 GFLOP/s against 195 in fp32 (6.5x).
- Xeon with AVX512-BF16 but no AMX: bf16 83.1 GFLOP/s against 165.6 in fp32 (0.50x),
  and the study's training step 1.71x *slower* in bf16 (3603 vs 6148 target tokens/s,
  additive Luong h256, 1000-token batches, ``benchmarks.train_throughput``).
  ``avx512_bf16`` alone therefore resolves to fp32; ``precision: bf16`` still forces it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

PRECISIONS = ("auto", "fp32", "bf16")
"""Values of ``train.precision`` and ``evaluate.precision``."""

_CPU_FAST_BF16_FLAGS = ("amx_bf16",)  # bf16 tile products (x86 AMX); not avx512_bf16


@functools.cache
def cpu_has_fast_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True if the CPU advertises AMX-BF16, whose bf16 products beat fp32 ones (module
    docstring); False for AVX512-BF16 alone, other CPUs, and where /proc/cpuinfo is absent."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return any(flag in flags.split() for flag in _CPU_FAST_BF16_FLAGS)


def resolve(precision: str, device: str | torch.device) -> str:
    """``auto`` -> ``bf16`` or ``fp32`` for ``device``; other values pass through."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision != "auto":
        return precision
    kind = torch.device(device).type
    if kind == "cuda":
        native = torch.cuda.is_bf16_supported(including_emulation=False)  # Ampere and later
        return "bf16" if native else "fp32"
    return "bf16" if kind == "cpu" and cpu_has_fast_bf16() else "fp32"


def autocast(precision: str, device: str | torch.device) -> contextlib.AbstractContextManager:
    """The autocast context for a resolved ``precision`` (a no-op for ``fp32``)."""
    kind = torch.device(device).type
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(kind, dtype=torch.bfloat16)
