"""Mixed precision: which dtype the matrix products run in, per device.

``precision: auto`` picks bfloat16 where the hardware multiplies it natively, float32
elsewhere. bfloat16 keeps float32's exponent range, so unlike float16 it needs no loss
scaling; under ``torch.autocast`` the weights, the optimizer state, the recurrent state
updates, the softmax and the loss stay float32, and only products run in bfloat16.
Measured in ``docs/benchmarks.md``: on this machine's AMX CPU, bf16 matrix products run
about 7x faster than fp32 ones.
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

_CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # native bf16 dot products (x86)


@functools.cache
def cpu_has_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True if the CPU advertises AMX-BF16 or AVX512-BF16 (Linux; False elsewhere)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return any(flag in flags.split() for flag in _CPU_BF16_FLAGS)


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
    return "bf16" if kind == "cpu" and cpu_has_native_bf16() else "fp32"


def autocast(precision: str, device: str | torch.device) -> contextlib.AbstractContextManager:
    """The autocast context for a resolved ``precision`` (a no-op for ``fp32``)."""
    kind = torch.device(device).type
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(kind, dtype=torch.bfloat16)
