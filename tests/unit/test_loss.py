"""projected_cross_entropy: the fused, chunked projection + cross-entropy equals the unfused
``F.cross_entropy(F.linear(...), reduction="sum")`` in loss and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pipeline.models.loss as loss_module
from pipeline.models.loss import projected_cross_entropy

PAD = 0
H, V = 16, 37


def _inputs(n: int, *, bias: bool = True, ignored: str = "some", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, H, generator=g).requires_grad_()
    w = (0.5 * torch.randn(V, H, generator=g)).requires_grad_()
    b = torch.randn(V, generator=g).requires_grad_() if bias else None
    t = torch.randint(1, V, (n,), generator=g)
    if ignored == "some":
        t[::3] = PAD
    elif ignored == "all":
        t[:] = PAD
    return x, w, b, t


def _reference(x, w, b, t, eps):
    logits = F.linear(x, w, b)
    return F.cross_entropy(logits, t, ignore_index=PAD, reduction="sum", label_smoothing=eps)


def _grads(loss, x, w, b):
    params = [p for p in (x, w, b) if p is not None]
    return torch.autograd.grad(loss, params, allow_unused=True)


def _assert_close(actual, expected, rtol=1e-5):
    scale = max(expected.detach().abs().max().item(), 1.0)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize(
    ("n", "chunk", "eps", "bias", "ignored"),
    [
        (50, 8, 0.0, True, "some"),  # 50 = 6 * 8 + 2
        (50, 8, 0.1, True, "some"),
        (50, 7, 0.1, False, "none"),
        (50, 64, 0.2, True, "none"),  # one chunk larger than N
        (1, 4, 0.1, True, "none"),
        (30, 4, 0.1, True, "all"),
        (2000, 512, 0.1, True, "some"),
    ],
)
@pytest.mark.parametrize("block_rows", [None, 3])  # 3: several float32 blocks per chunk
def test_matches_unfused_float32(n, chunk, eps, bias, ignored, block_rows, monkeypatch):
    if block_rows is not None:
        monkeypatch.setattr(loss_module, "BLOCK_ELEMENTS", block_rows * V)
    x, w, b, t = _inputs(n, bias=bias, ignored=ignored)
    expected = _reference(x, w, b, t, eps)
    actual = projected_cross_entropy(
        x, w, b, t, ignore_index=PAD, label_smoothing=eps, chunk_rows=chunk
    )
    assert actual.dtype == torch.float32 and actual.shape == ()
    _assert_close(actual, expected)
    for got, want in zip(_grads(actual, x, w, b), _grads(expected, x, w, b)):
        assert got.dtype == want.dtype and got.shape == want.shape
        _assert_close(got, want)


def test_all_ignored_is_zero_with_zero_grads():
    x, w, b, t = _inputs(12, ignored="all")
    loss = projected_cross_entropy(x, w, b, t, ignore_index=PAD, label_smoothing=0.1)
    assert loss.item() == 0.0
    assert all(g.abs().max().item() == 0.0 for g in _grads(loss, x, w, b))


def test_batched_features_are_flattened():
    x, w, b, t = _inputs(24)
    x3 = x.detach().reshape(4, 6, H).requires_grad_()
    loss = projected_cross_entropy(x3, w, b, t.reshape(4, 6), ignore_index=PAD, chunk_rows=5)
    (grad,) = torch.autograd.grad(loss, x3)
    (want,) = torch.autograd.grad(_reference(x, w, b, t, 0.0), x)
    assert grad.shape == (4, 6, H)
    _assert_close(grad.reshape(-1, H), want)


def test_bf16_autocast_close_to_float32():
    x, w, b, t = _inputs(200, seed=1)
    expected = _reference(x, w, b, t, 0.1)
    want = _grads(expected, x, w, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        actual = projected_cross_entropy(
            x, w, b, t, ignore_index=PAD, label_smoothing=0.1, chunk_rows=64
        )
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual, expected, rtol=1e-2, atol=0.0)
    for got, ref in zip(_grads(actual, x, w, b), want):
        assert got.dtype == torch.float32 and torch.isfinite(got).all()
        cosine = F.cosine_similarity(got.flatten(), ref.flatten(), dim=0)
        assert cosine > 0.999
        assert (got - ref).abs().max() < 3e-2 * ref.abs().max()


def test_compute_dtype_follows_autocast_and_explicit_overrides():
    x, w, b, t = _inputs(40)
    exact = projected_cross_entropy(x, w, b, t, ignore_index=PAD)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        narrow = projected_cross_entropy(x, w, b, t, ignore_index=PAD)
        forced = projected_cross_entropy(x, w, b, t, ignore_index=PAD, compute_dtype=torch.float32)
    assert forced.item() == pytest.approx(exact.item(), rel=1e-6)
    assert narrow.item() != forced.item()


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([1, 0, 4, 2, 0, 3, 1])

    def fn(x, w, b):
        return projected_cross_entropy(
            x, w, b, t, ignore_index=PAD, label_smoothing=0.2, chunk_rows=3
        )

    assert fn(x, w, b).dtype == torch.float64
    assert torch.autograd.gradcheck(fn, (x, w, b))


def test_tied_weight_gets_summed_gradient():
    x, w, b, t = _inputs(20, bias=False)
    tokens = torch.randint(0, V, (20,))

    def total(loss_fn):
        embedded = F.embedding(tokens, w)  # same Parameter used as an embedding
        return loss_fn(x + embedded, w, None, t) + embedded.square().sum()

    fused = total(lambda *a: projected_cross_entropy(*a, ignore_index=PAD, chunk_rows=6))
    unfused = total(lambda x_, w_, b_, t_: _reference(x_, w_, b_, t_, 0.0))
    (got,) = torch.autograd.grad(fused, w)
    (want,) = torch.autograd.grad(unfused, w)
    _assert_close(got, want)


def test_grad_output_scales_gradients():
    x, w, b, t = _inputs(30)
    loss = projected_cross_entropy(x, w, b, t, ignore_index=PAD, label_smoothing=0.1)
    ref = _reference(x, w, b, t, 0.1)
    for got, want in zip(_grads(loss / 7.0, x, w, b), _grads(ref / 7.0, x, w, b)):
        _assert_close(got, want)


def test_only_requested_grads_are_computed():
    x, w, b, t = _inputs(30)
    frozen_w = w.detach()
    loss = projected_cross_entropy(x, frozen_w, b, t, ignore_index=PAD)
    gx, gb = torch.autograd.grad(loss, (x, b))
    want_x, want_b = torch.autograd.grad(_reference(x, frozen_w, b, t, 0.0), (x, b))
    _assert_close(gx, want_x)
    _assert_close(gb, want_b)


def test_no_grad_returns_loss_without_graph(monkeypatch):
    x, w, b, t = _inputs(40)
    expected = _reference(x, w, b, t, 0.1).detach()
    kwargs = {"ignore_index": PAD, "label_smoothing": 0.1, "chunk_rows": 16}
    with torch.no_grad():
        loss = projected_cross_entropy(x, w, b, t, **kwargs)
    assert not loss.requires_grad and loss.grad_fn is None
    _assert_close(loss, expected)

    calls = []
    original = loss_module._fused_pass
    monkeypatch.setattr(
        loss_module, "_fused_pass", lambda *a, **k: calls.append(k["needs"]) or original(*a, **k)
    )
    plain = [a.detach() for a in (x, w, b)]
    loss = projected_cross_entropy(*plain, t, **kwargs)
    assert calls == [(False, False, False)] and loss.grad_fn is None
    _assert_close(loss, expected)
