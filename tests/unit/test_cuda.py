"""The CUDA paths: models, the cuDNN recurrences under bf16 autocast, the fractional-GPU
memory cap, training with resume, and decoding on a GPU.

These run only where torch sees a CUDA GPU: on CI and on CPU machines they are reported
as skipped, never as passed. The runs on a GPU machine, with their numbers, are recorded
in docs/cluster.md ("Measured on a GPU").
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from pipeline.config.params import EvaluateConfig
from pipeline.data.batching import make_batch
from pipeline.data.dataset import TokenizedData, TokenizedSplit
from pipeline.evaluate.decode import DecodeSpec, decode_variant
from pipeline.models.checkpoint import VocabInfo, load_checkpoint
from pipeline.models.rnn import GRU, LSTM
from pipeline.models.seq2seq import Seq2Seq
from pipeline.runtime.devices import TaskResources, claim_device
from pipeline.runtime.precision import autocast, resolve
from pipeline.train.trainer import train_variant
from tests.support import REPO_ROOT, InterruptAtEpoch, Interrupted

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

VOCAB = 24
SOURCES = [[4, 5, 6], [7, 8, 9, 10, 11], [12, 4], [5, 13, 14, 6], [15, 16, 8, 9, 10, 4], [9]]
TARGETS = [[s + 7 for s in src] for src in SOURCES]

# every scorer, both wirings (the Bahdanau GRU runs its fused loop), LSTM, input
# feeding, bidirectional and two-layer encoders, source reversal
CASES = [
    ("none", "luong", {}),
    ("none", "luong", {"baseline": "init_only", "reverse_source": True, "cell": "lstm"}),
    ("dot", "luong", {"bidirectional": True}),
    ("scaled_dot", "luong", {}),
    ("general", "luong", {"input_feeding": True}),
    ("additive", "luong", {"layers": 2}),
    ("location", "luong", {}),
    ("additive", "bahdanau", {"reverse_source": True}),
    ("dot", "bahdanau", {"cell": "lstm"}),
]


@pytest.fixture(autouse=True)
def exact_fp32():
    """float32 products in float32 (no TF32), so CPU and GPU agree to float32 rounding."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _batch(reverse_source: bool = False):
    split = TokenizedSplit.from_sequences(SOURCES, TARGETS)
    return make_batch(split, np.arange(len(SOURCES)), reverse_source=reverse_source)


def _loss_and_grads(model: Seq2Seq, batch, precision: str = "fp32"):
    device = next(model.parameters()).device
    model.zero_grad(set_to_none=True)
    with autocast(precision, device):
        loss, tokens = model.loss(batch.to(device), label_smoothing=0.1)
    (loss / tokens).backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters()}
    return loss.detach().float().cpu(), grads


@pytest.mark.parametrize(("scorer", "wiring", "extra"), CASES)
def test_cuda_gives_the_cpu_loss_and_gradients(scorer, wiring, extra, tiny_model_config):
    """Every model's loss and every gradient on the GPU equal the CPU's to float32
    rounding: the hand-written autograd functions (fused loss, additive energy, the
    Bahdanau loop) and the cuDNN recurrences compute the same function on both."""
    torch.manual_seed(0)
    config = tiny_model_config(scorer=scorer, wiring=wiring, **extra)
    cpu = Seq2Seq(config, VOCAB, VOCAB).train()
    gpu = copy.deepcopy(cpu).cuda()
    batch = _batch(config.reverse_source)
    cpu_loss, cpu_grads = _loss_and_grads(cpu, batch)
    gpu_loss, gpu_grads = _loss_and_grads(gpu, batch)
    torch.testing.assert_close(gpu_loss, cpu_loss, rtol=1e-5, atol=1e-5)
    assert gpu_grads.keys() == cpu_grads.keys()
    for name, grad in cpu_grads.items():
        torch.testing.assert_close(gpu_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize(("scorer", "wiring", "extra"), CASES)
def test_bf16_on_cuda_tracks_fp32(scorer, wiring, extra, tiny_model_config):
    """Under bf16 autocast every model trains with finite gradients and a loss within bf16
    rounding of the fp32 loss (1%): no path silently falls to float16 or overflows."""
    torch.manual_seed(0)
    model = Seq2Seq(tiny_model_config(scorer=scorer, wiring=wiring, **extra), VOCAB, VOCAB)
    model = model.cuda().train()
    batch = _batch(extra.get("reverse_source", False))
    fp32_loss, _ = _loss_and_grads(model, batch, "fp32")
    bf16_loss, bf16_grads = _loss_and_grads(model, batch, "bf16")
    torch.testing.assert_close(bf16_loss, fp32_loss, rtol=1e-2, atol=0.0)
    for name, grad in bf16_grads.items():
        assert torch.isfinite(grad).all(), name
    assert sum(g.abs().sum() for g in bf16_grads.values()) > 0


@pytest.mark.parametrize("cell", [GRU, LSTM])
def test_recurrences_stay_float32_under_cuda_bf16_autocast(cell):
    """torch's autocast runs a cuDNN RNN in float16 whatever dtype the region asks for;
    the pipeline's GRU/LSTM run in float32 there instead (pipeline/models/rnn.py)."""
    torch.manual_seed(0)
    layer = cell(8, 16, batch_first=True).cuda()
    inputs = torch.randn(3, 5, 8, device="cuda")
    reference, _ = layer(inputs)
    with autocast("bf16", "cuda"):
        output, _ = layer(inputs)
        stock, _ = getattr(torch.nn, cell.__name__).forward(layer, inputs)
    assert output.dtype == torch.float32
    torch.testing.assert_close(output, reference, rtol=1e-5, atol=1e-6)
    # the premise the wrapper rests on; if torch changes it, the wrapper can go
    assert stock.dtype == torch.float16


def test_precision_auto_resolves_to_bf16_on_a_bf16_gpu():
    major, _ = torch.cuda.get_device_capability()
    assert resolve("auto", "cuda") == ("bf16" if major >= 8 else "fp32")
    assert resolve("fp32", "cuda") == "fp32"


def test_a_fractional_gpu_caps_the_process_memory():
    """``claim_device(0.25, ...)`` (four trials packed on one GPU): an allocation beyond a
    quarter of the GPU fails in that process, one well within it succeeds. Run in a
    fresh process: the cap is process-wide."""
    free, total = torch.cuda.mem_get_info()
    if free < 0.4 * total:  # else the 35% allocation could fail without any cap
        pytest.skip(f"needs 40% of the GPU free, {free / total:.0%} is")
    script = textwrap.dedent(
        """
        import torch
        from pipeline.runtime.devices import claim_device
        assert claim_device(0.25, 2) == "cuda" and torch.get_num_threads() == 2
        total = torch.cuda.get_device_properties(0).total_memory
        small = torch.empty(int(total * 0.10), dtype=torch.uint8, device="cuda")
        del small
        try:
            torch.empty(int(total * 0.35), dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            print("capped")
        else:
            print("not capped")
        """
    )
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "capped", out.stderr


@pytest.mark.usefixtures("restore_threads")
def test_claim_device_gives_cuda_for_a_whole_gpu():
    assert claim_device(1, torch.get_num_threads()) == "cuda"


def test_training_on_cuda_resumes_and_its_checkpoint_loads_on_the_cpu(
    make_variant, tiny_tok_dir, tmp_path
):
    """A run interrupted in epoch 2 resumes on the GPU where it stopped (the CUDA RNG state
    restored with the rest) and ends where the uninterrupted run ends, to the GPU's
    non-deterministic summation order; its checkpoint loads on a CPU-only reader and
    gives the GPU's loss."""
    variant = make_variant("additive", precision="fp32")
    reference = train_variant(variant, tiny_tok_dir, tmp_path / "reference", device="cuda")
    crash = InterruptAtEpoch(2)
    with pytest.raises(Interrupted):
        train_variant(variant, tiny_tok_dir, tmp_path / "run", callbacks=[crash], device="cuda")
    seen = crash.seen
    resumed = train_variant(variant, tiny_tok_dir, tmp_path / "run", device="cuda")
    assert resumed.summary.resumed_at_step == seen[-1]["step"] > 0
    assert resumed.summary.steps == reference.summary.steps
    assert [r.step for r in resumed.history] == [r.step for r in reference.history]
    for mine, theirs in zip(resumed.history, reference.history, strict=True):
        assert mine.dev_loss == pytest.approx(theirs.dev_loss, rel=2e-3)

    data = TokenizedData.load(tiny_tok_dir)
    path = tmp_path / "run" / "checkpoint.pt"
    on_cpu = load_checkpoint(path, expected_vocab=VocabInfo.from_data(data), device="cpu")
    on_gpu = load_checkpoint(path, expected_vocab=VocabInfo.from_data(data), device="cuda")
    assert next(on_cpu.model.parameters()).device.type == "cpu"
    batch = make_batch(data.split("dev"), np.arange(8), reverse_source=True)
    with torch.no_grad():
        cpu_loss, _ = on_cpu.model.loss(batch)
        gpu_loss, _ = on_gpu.model.loss(batch.to("cuda"))
    torch.testing.assert_close(gpu_loss.cpu(), cpu_loss, rtol=1e-5, atol=1e-5)


@pytest.fixture
def restore_threads():
    """claim_device sets torch's thread count for the whole process: put it back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("restore_threads")
def test_decoding_on_a_gpu_gives_the_cpu_translations(make_variant, tiny_tok_dir, tmp_path):
    """decode_variant given a GPU (as a Ray decode task would be) decodes on CUDA and
    returns the CPU's beam-search translations and attention examples."""
    variant = make_variant("additive", precision="fp32", max_epochs=2)
    train_variant(variant, tiny_tok_dir, tmp_path, device="cuda")
    data = TokenizedData.load(tiny_tok_dir)
    checkpoint = (tmp_path / "checkpoint.pt").read_bytes()
    results = {}
    for name, gpus in (("cpu", 0.0), ("gpu", 1.0)):
        spec = DecodeSpec(
            variant.id,
            checkpoint,
            "test",
            EvaluateConfig(beam_size=3),
            2.0,
            (0, 1),
            TaskResources(cpus=1, gpus=gpus),
        )
        results[name] = decode_variant(spec, data)
    cpu, gpu = results["cpu"], results["gpu"]
    assert len(gpu.hypotheses) == len(data.split("test"))
    same = sum(a == b for a, b in zip(cpu.hypotheses, gpu.hypotheses, strict=True))
    assert same >= 0.9 * len(cpu.hypotheses), (cpu.hypotheses, gpu.hypotheses)
    assert gpu.attention.keys() == cpu.attention.keys() and gpu.attention
