"""Mixed precision: resolving ``precision: auto`` and bf16 autocast of the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.data.batching import make_batch
from pipeline.data.dataset import TokenizedSplit
from pipeline.models.seq2seq import Seq2Seq
from pipeline.runtime import precision

VOCAB = 40


def test_cpu_flags_say_whether_bf16_is_worth_timing(tmp_path):
    cpus = {
        "amx": "processor : 0\nflags\t\t: fpu sse2 avx512f avx512_bf16 amx_bf16 amx_tile\n",
        "avx512_bf16": "processor : 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n",
        "arm": "processor : 0\nFeatures\t: fp asimd sve bf16 i8mm\n",
        "plain": "processor : 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n",
    }
    for name, text in cpus.items():
        (tmp_path / name).write_text(text)
    assert precision.cpu_has_bf16_instructions(tmp_path / "amx")
    assert precision.cpu_has_bf16_instructions(tmp_path / "avx512_bf16")
    assert precision.cpu_has_bf16_instructions(tmp_path / "arm")
    assert not precision.cpu_has_bf16_instructions(tmp_path / "plain")
    assert not precision.cpu_has_bf16_instructions(tmp_path / "missing")


def test_measured_speedup_decides_cpu_precision():
    # the three CPUs measured (docs/benchmarks.md): Xeon without AMX, AMD EPYC, Xeon with AMX
    assert precision.choose_cpu_precision(0.5) == "fp32"
    assert precision.choose_cpu_precision(2.3) == "bf16"
    assert precision.choose_cpu_precision(6.5) == "bf16"
    assert precision.choose_cpu_precision(precision.BF16_MIN_SPEEDUP) == "bf16"
    assert precision.choose_cpu_precision(1.1) == "fp32"  # not worth bf16's rounding
    assert precision.choose_cpu_precision(0.0) == "fp32"  # no bf16 instructions


def test_product_probe_times_both_dtypes():
    fp32 = precision.product_seconds(torch.float32, shape=(64, 32, 128), repeats=2)
    bf16 = precision.product_seconds(torch.bfloat16, shape=(64, 32, 128), repeats=2)
    assert 0 < fp32 < 1 and 0 < bf16 < 1
    speedup = precision.cpu_bf16_speedup()
    assert speedup == precision.cpu_bf16_speedup()  # measured once per process
    assert (speedup > 0) == precision.cpu_has_bf16_instructions()


def test_resolve_passes_explicit_values_and_rejects_unknown():
    assert precision.resolve("fp32", "cpu") == "fp32"
    assert precision.resolve("bf16", "cpu") == "bf16"
    expected = precision.choose_cpu_precision(precision.cpu_bf16_speedup())
    assert precision.resolve("auto", "cpu") == expected
    with pytest.raises(ValueError, match="precision: expected one of auto, fp32, bf16, got 'fp16'"):
        precision.resolve("fp16", "cpu")


def _batch():
    rng = np.random.default_rng(0)
    sources = [rng.integers(4, VOCAB, n) for n in (3, 9, 5, 12, 7, 1)]
    targets = [rng.integers(4, VOCAB, n) for n in (4, 8, 6, 10, 2, 3)]
    split = TokenizedSplit.from_sequences(sources, targets)
    return make_batch(split, np.arange(len(sources)))


@pytest.mark.parametrize(
    ("scorer", "wiring"), [("none", "luong"), ("additive", "luong"), ("general", "bahdanau")]
)
def test_bf16_autocast_matches_fp32_loss_and_gradients(scorer, wiring, tiny_model_config):
    torch.manual_seed(0)
    model = Seq2Seq(tiny_model_config(scorer=scorer, wiring=wiring), VOCAB, VOCAB)
    batch = _batch()
    results = {}
    for name in ("fp32", "bf16"):
        model.zero_grad(set_to_none=True)
        with precision.autocast(name, "cpu"):
            loss, _ = model.loss(batch, label_smoothing=0.1)
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results[name] = (loss.detach(), grads)
    (loss32, grad32), (loss16, grad16) = results["fp32"], results["bf16"]
    assert loss16.dtype == torch.float32  # the loss itself stays fp32
    assert abs(loss16.item() - loss32.item()) / loss32.item() < 1e-2
    assert torch.isfinite(grad16).all()
    cosine = torch.nn.functional.cosine_similarity(grad16, grad32, dim=0)
    assert cosine > 0.99
    assert not torch.equal(grad16, grad32)  # bf16 products really ran


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_padded_encoder_equals_packed(tiny_model_config, cell):
    """A one-layer unidirectional encoder skips packing; its outputs and final states equal
    packing's, for both cells."""
    torch.manual_seed(0)
    model = Seq2Seq(tiny_model_config(cell=cell), VOCAB, VOCAB).eval()
    encoder, batch = model.encoder, _batch()
    assert encoder.padded
    with torch.no_grad():
        fast = encoder(batch.src, batch.src_lengths)
        encoder.padded = False
        packed = encoder(batch.src, batch.src_lengths)
    torch.testing.assert_close(fast.outputs, packed.outputs, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fast.hidden, packed.hidden, rtol=1e-6, atol=1e-6)
