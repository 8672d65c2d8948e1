"""The cheap-mask dropout keeps the right share, scales, reproduces, and is off in eval."""

from __future__ import annotations

import torch

from pipeline.models.dropout import Dropout, keep_mask


def test_mask_keeps_one_minus_p_of_the_elements():
    torch.manual_seed(0)
    for p in (0.1, 0.2, 0.5):
        mask = keep_mask(torch.Size((400, 1000)), p, torch.device("cpu"))
        assert abs(mask.float().mean().item() - (1 - p)) < 3e-3


def test_dropout_scales_survivors_and_gradients_follow_the_mask():
    torch.manual_seed(0)
    layer = Dropout(0.2)
    x = torch.rand(50, 60) + 1.0
    x.requires_grad_()
    y = layer(x)
    kept = y != 0
    assert 0.75 < kept.float().mean() < 0.85
    torch.testing.assert_close(y[kept], x[kept] / (1 - 13107 / 65536))
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / (1 - 13107 / 65536))
    # mean preserved in expectation
    assert abs(layer(torch.ones(1000, 1000)).mean().item() - 1.0) < 1e-2


def test_seeded_masks_repeat_and_eval_is_identity():
    layer, x = Dropout(0.3), torch.randn(7, 9)
    torch.manual_seed(5)
    first = layer(x)
    torch.manual_seed(5)
    assert torch.equal(layer(x), first)
    assert not torch.equal(layer(x), first)  # the generator advanced
    layer.eval()
    assert layer(x) is x
    assert torch.equal(Dropout(1.0)(x), torch.zeros_like(x))


def test_p_next_to_one_keeps_a_finite_scale():
    torch.manual_seed(0)
    out = Dropout(1 - 1e-7)(torch.ones(1000))
    assert torch.isfinite(out).all()
