"""The additive energy, both implementations (the torch blocks and the compiled kernel
of pipeline.kernels.native), equals autograd's tanh(q + k) @ v."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
import torch
from filelock import FileLock

from pipeline.kernels import additive_energy as module
from pipeline.kernels import native
from pipeline.kernels.additive_energy import additive_energy

REPO_ROOT = Path(__file__).resolve().parents[2]


def _reference(query, keys, energy):
    return torch.tanh(query.unsqueeze(2) + keys.unsqueeze(1)) @ energy


@pytest.fixture
def torch_blocks(monkeypatch):
    """The torch implementation (the compiled kernel turned off)."""
    monkeypatch.setenv(native.ENV_SWITCH, "off")


@pytest.fixture
def compiled(monkeypatch):
    """The compiled kernel, which must build on the machines the tests run on (CI's too)."""
    monkeypatch.setenv(native.ENV_SWITCH, "on")
    assert native.additive_energy_kernel() is not None, "the compiled kernel did not build"


@pytest.mark.parametrize(
    ("batch", "steps", "sources", "block"),
    [
        (3, 5, 4, 2**18),  # one block
        (7, 6, 5, 40),  # several batch rows per block, ragged last block
        (2, 9, 3, 20),  # one row's steps split over blocks
    ],
)
def test_matches_autograd_values_and_gradients(
    batch, steps, sources, block, monkeypatch, torch_blocks
):
    monkeypatch.setattr(module, "BLOCK_ELEMENTS", block)
    torch.manual_seed(0)
    size = 8
    inputs = [torch.randn(batch, steps, size), torch.randn(batch, sources, size), torch.randn(size)]
    grad = torch.randn(batch, steps, sources)
    results = []
    for function in (_reference, additive_energy):
        leaves = [t.clone().requires_grad_() for t in inputs]
        scores = function(*leaves)
        scores.backward(grad)
        results.append([scores.detach(), *(leaf.grad for leaf in leaves)])
    for expected, found in zip(*results):
        torch.testing.assert_close(found, expected, rtol=1e-5, atol=1e-5)


def test_gradcheck_float64(monkeypatch):
    monkeypatch.setattr(module, "BLOCK_ELEMENTS", 30)
    torch.manual_seed(0)
    inputs = (
        torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True),
        torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True),
        torch.randn(4, dtype=torch.float64, requires_grad=True),
    )
    assert torch.autograd.gradcheck(additive_energy, inputs)


@pytest.mark.parametrize("size", [256, 37, 1])  # the study's; a vector remainder; scalar
def test_compiled_kernel_matches_float64_autograd(size, compiled):
    """At the study's attention size, with masked keys (zero gradients, which the kernel
    skips) and a softmax's gradient, as training has them."""
    torch.manual_seed(0)
    batch, steps, sources = 4, 6, 7
    inputs = [
        torch.randn(batch, steps, size),
        torch.randn(batch, sources, size) * 2,
        torch.randn(size) * 0.2,
    ]
    mask = torch.ones(batch, sources, dtype=torch.bool)
    mask[0, 3:] = mask[2, 5:] = False
    upstream = torch.randn(batch, steps, sources)
    results = []
    for function, dtype in ((_reference, torch.float64), (additive_energy, torch.float32)):
        leaves = [t.to(dtype).requires_grad_() for t in inputs]
        scores = function(*leaves)
        weights = torch.softmax(scores.masked_fill(~mask.unsqueeze(1), float("-inf")), -1)
        (weights * upstream.to(dtype)).sum().backward()
        results.append([scores.detach(), *(leaf.grad for leaf in leaves)])
    for expected, found in zip(*results):
        assert found.dtype == torch.float32
        torch.testing.assert_close(found.double(), expected, rtol=2e-5, atol=2e-5)
    assert results[1][2][0, 3:].abs().max() == 0  # masked keys get no gradient


def test_compiled_and_torch_paths_agree_on_a_training_shape(monkeypatch, compiled):
    torch.manual_seed(0)
    inputs = [torch.randn(5, 9, 256), torch.randn(5, 11, 256), torch.randn(256) * 0.1]
    grad = torch.randn(5, 9, 11)
    results = {}
    for switch in ("on", "off"):
        monkeypatch.setenv(native.ENV_SWITCH, switch)
        leaves = [t.clone().requires_grad_() for t in inputs]
        scores = additive_energy(*leaves)
        scores.backward(grad)
        results[switch] = [scores.detach(), *(leaf.grad for leaf in leaves)]
    for found, expected in zip(results["on"], results["off"]):  # float32 sums of up to
        torch.testing.assert_close(found, expected, rtol=1e-4, atol=5e-5)  # 495 terms, reordered


def test_a_failed_build_falls_back_to_torch_with_one_warning(monkeypatch, tmp_path, caplog):
    """A real build that fails (a flag no compiler accepts) returns None, warns once,
    and the energy still runs (the torch path); the switch reads as torch."""
    monkeypatch.setenv(native.ENV_SWITCH, "on")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(native, "CFLAGS", [*native.CFLAGS, "-fno-such-flag-attention-study"])
    monkeypatch.setattr(native, "_loaded", {})
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        assert native.additive_energy_kernel() is None
        assert native.additive_energy_kernel() is None  # remembered: one build, one warning
    warnings = [r for r in caplog.records if "kernel unavailable" in r.getMessage()]
    assert len(warnings) == 1 and native.ENV_SWITCH in warnings[0].getMessage()
    assert native.describe() == "torch"
    inputs = torch.randn(2, 3, 8), torch.randn(2, 4, 8), torch.randn(8)
    torch.testing.assert_close(additive_energy(*inputs), _reference(*inputs))


def test_switch_off_uses_torch(monkeypatch):
    monkeypatch.setenv(native.ENV_SWITCH, "off")
    assert native.additive_energy_kernel() is None and native.describe() == "torch"


def test_bf16_inputs_give_fp32_scores_and_input_dtype_gradients():
    torch.manual_seed(0)
    query = torch.randn(2, 3, 8, dtype=torch.bfloat16, requires_grad=True)
    keys = torch.randn(2, 4, 8, dtype=torch.bfloat16, requires_grad=True)
    energy = torch.randn(8, requires_grad=True)
    scores = additive_energy(query, keys, energy)
    assert scores.dtype == torch.float32
    scores.sum().backward()
    assert query.grad.dtype == keys.grad.dtype == torch.bfloat16
    assert energy.grad.dtype == torch.float32
    expected = _reference(query.detach().float(), keys.detach().float(), energy.detach())
    torch.testing.assert_close(scores.detach(), expected)


@pytest.mark.parametrize("block", [2**18, 24, 8])  # one block a step; 2 rows a block, ragged; 1 row
def test_step_energy_matches_autograd_and_sums_the_keys_gradient(block, monkeypatch):
    """StepEnergy (the Bahdanau loop's per-step energy, in blocks of rows) gives autograd's
    scores (up to the constant sum(v), which the loop's offset removes with the mask's
    -inf), and, for gradients from a softmax's backward (rows summing to zero), autograd's
    query and energy gradients at every step and the keys' gradient summed over the steps
    (the last step, walked first in backward, overwrites the sum instead of adding to it).
    The query is a strided view, as the loop's column block of its recurrent product."""
    monkeypatch.setattr(module, "BLOCK_ELEMENTS", block)
    torch.manual_seed(0)
    batch, steps, sources, size = 5, 4, 3, 4
    shapes = (batch, steps, size), (batch, sources, size), (size,)
    query, keys, energy = (torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes)
    mask = torch.ones(batch, sources, dtype=torch.bool)
    mask[1, 2:] = False
    scores = _reference(query, keys, energy).masked_fill(~mask.unsqueeze(1), float("-inf"))
    weights = torch.softmax(scores, -1)
    upstream = torch.randn(batch, steps, sources, dtype=torch.float64)
    grads = torch.autograd.grad(weights, scores, upstream, retain_graph=True)[0]  # rows sum to 0
    scores.backward(grads)

    rows = module.step_block_rows(batch, sources, size, keys.device)
    assert rows == min(batch, max(1, block // (sources * size)))
    step = module.StepEnergy(2 * keys.detach(), energy.detach())
    assert len(step.blocks) == -(-batch // rows)
    offset = torch.zeros(batch, sources, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    offset -= energy.detach().sum()
    wide = torch.randn(batch, 3 * size, dtype=torch.float64)  # the query: a column block
    grad_keys = torch.full_like(keys, float("nan")).detach()  # never read before it is written
    grad_energy = torch.zeros_like(energy).detach()
    grad_query = torch.empty(batch, 2 * size, dtype=torch.float64)[:, size:]  # strided too
    for i in reversed(range(steps)):
        step_query = wide[:, size : 2 * size]
        step_query.copy_(query.detach()[:, i])
        found = step.scores(step_query, torch.empty(batch, sources).double()).add_(offset)
        torch.testing.assert_close(found, scores[:, i].detach(), rtol=1e-12, atol=1e-12)
        found = step.backward(
            grads[:, i].contiguous(),
            step_query,
            grad_query,
            grad_keys,
            grad_energy,
            first=i == steps - 1,
        )
        torch.testing.assert_close(found, query.grad[:, i], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(step.finish_keys(grad_keys), keys.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_energy, energy.grad, rtol=1e-12, atol=1e-12)
    assert keys.grad.abs().sum() > 0


def test_a_build_waits_for_the_os_lock_with_a_bound(tmp_path, caplog):
    """Another live holder of the OS lock: the wait is announced and bounded, and
    running out of time is an error the build turns into the torch fallback."""
    holder = FileLock(tmp_path / native.OS_LOCK)
    holder.acquire()
    result: dict = {}

    def take():
        try:
            with native._build_lock(tmp_path, timeout=0.5):
                result["got"] = True
        except native.BuildLockTimeout as err:
            result["error"] = str(err)

    try:
        with caplog.at_level(logging.INFO, logger=native.__name__):
            worker = threading.Thread(target=take)
            worker.start()
            worker.join(timeout=10)
    finally:
        holder.release()
    assert "got" not in result
    assert result["error"].startswith(f"{tmp_path / native.OS_LOCK}: another process held")
    assert any(
        "waiting for another process's kernel build" in r.getMessage() for r in caplog.records
    )
    with native._build_lock(tmp_path, timeout=0.5):  # free again: taken at once
        pass
