"""The clipped policy loss and group advantages against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch
from agl_trainer import clipped_policy_loss, group_advantages


def test_on_policy_the_loss_is_minus_the_mean_advantage_and_its_gradient_the_policy_gradient() -> None:
    old = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    new = old.clone().requires_grad_(True)
    advantages = torch.tensor([[1.0, 1.0, 0.0], [-2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    result = clipped_policy_loss(new, old, advantages, mask)
    assert result.loss.item() == pytest.approx(-(1 + 1 - 2) / 3)
    result.loss.backward()  # type: ignore[no-untyped-call]
    assert new.grad is not None
    assert torch.allclose(new.grad, torch.tensor([[-1 / 3, -1 / 3, 0.0], [2 / 3, 0.0, 0.0]]))
    assert (result.clip_fraction, result.approx_kl, result.ratio_mean) == (0.0, 0.0, 1.0)


def test_ratios_beyond_the_clip_stop_the_gradient_where_they_would_push_further() -> None:
    old = torch.zeros(1, 3)
    # ratios 1.5 (A>0: clipped to 1.2, no gradient), 0.5 (A>0: unclipped), 1.5 (A<0: unclipped)
    new = torch.log(torch.tensor([[1.5, 0.5, 1.5]])).requires_grad_(True)
    advantages = torch.tensor([[1.0, 1.0, -1.0]])
    result = clipped_policy_loss(new, old, advantages, torch.ones(1, 3), clip_ratio=0.2)
    assert result.loss.item() == pytest.approx((-1.2 - 0.5 + 1.5) / 3)
    result.loss.backward()  # type: ignore[no-untyped-call]
    assert new.grad is not None
    assert torch.allclose(new.grad, torch.tensor([[0.0, -0.5 / 3, 1.5 / 3]]))
    assert result.clip_fraction == pytest.approx(1 / 3)


def test_masked_tokens_count_for_nothing_even_with_extreme_logprobs() -> None:
    old = torch.tensor([[-1.0, 0.0]])
    new = torch.tensor([[-1.0, -1e4]])
    result = clipped_policy_loss(new, old, torch.tensor([[2.0, 2.0]]), torch.tensor([[1, 0]]))
    assert result.loss.item() == pytest.approx(-2.0)
    assert math.isfinite(result.ratio_mean)


def test_shapes_must_agree() -> None:
    with pytest.raises(ValueError, match="differ in shape"):
        clipped_policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 2), torch.zeros(2, 3))


def test_group_advantages_normalise_within_each_group() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 3.0])
    advantages = group_advantages(rewards, ["a", "a", "b", "b", "c"])
    std_a = math.sqrt(0.5)  # sample std of [1, 0]
    expected = torch.tensor([0.5 / (std_a + 1e-6), -0.5 / (std_a + 1e-6), 0.0, 0.0, 0.0])
    assert torch.allclose(advantages, expected)
