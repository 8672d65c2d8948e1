"""The fused (cuDNN on GPUs) recurrent layers, safe under bf16 autocast.

PyTorch's autocast casts a cuDNN RNN to float16 whatever dtype the autocast region asks
for (``aten/src/ATen/cudnn/AutocastRNN.cpp`` hard-codes ``kHalf``), so a bf16 run would
train its recurrences in fp16 without loss scaling. On CUDA under autocast these layers
therefore run in float32 (TF32 tensor cores where cuDNN allows them); everything else in
the model keeps bf16 products. On the CPU autocast keeps RNNs as they are and nothing
changes. Parameter names equal ``nn.GRU``/``nn.LSTM``'s, so checkpoints are unaffected.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence


def runs_outside_autocast(inputs: torch.Tensor | PackedSequence) -> bool:
    """True where the layer leaves autocast: CUDA tensors inside a CUDA autocast region."""
    data = inputs.data if isinstance(inputs, PackedSequence) else inputs
    return data.is_cuda and torch.is_autocast_enabled("cuda")


def _fp32(value):
    """``value`` in float32: a tensor, an LSTM's ``(h, c)``, or a PackedSequence (its data
    only: its batch sizes and sort indices stay integers, and it stays a PackedSequence,
    which is itself a tuple)."""
    if value is None:
        return None
    if isinstance(value, PackedSequence):
        return value._replace(data=value.data.float())
    if isinstance(value, tuple):
        return tuple(v.float() for v in value)
    return value.float()


class _Fp32UnderCudaAutocast:
    def forward(self, inputs, hx=None):
        if runs_outside_autocast(inputs):
            with torch.autocast("cuda", enabled=False):
                return super().forward(_fp32(inputs), _fp32(hx))
        return super().forward(inputs, hx)


class GRU(_Fp32UnderCudaAutocast, nn.GRU):
    """``nn.GRU`` that never runs in fp16 under CUDA autocast (module docstring)."""


class LSTM(_Fp32UnderCudaAutocast, nn.LSTM):
    """``nn.LSTM`` that never runs in fp16 under CUDA autocast (module docstring)."""


RNNS: dict[str, type[nn.RNNBase]] = {"gru": GRU, "lstm": LSTM}
"""``model.cell`` -> fused recurrent layer."""
