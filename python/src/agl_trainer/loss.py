"""The GRPO policy loss (PPO's clipped surrogate, token-mean) and group-relative advantages.

Model-agnostic: the caller computes the response tokens' logprobs under the current policy;
these functions only combine tensors laid out as ``to_tensors`` gives them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PolicyLoss:
    """The loss to backpropagate, and what to log about it.

    ``clip_fraction``: share of trained tokens whose ratio was clipped; ``approx_kl``: mean of
    old - new logprob over trained tokens (k1 estimate of KL(old || new)); ``ratio_mean``:
    mean probability ratio (about 1 when the batch is on-policy).
    """

    loss: torch.Tensor
    clip_fraction: float
    approx_kl: float
    ratio_mean: float


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1, over the whole batch (verl's token-mean)."""
    weights = mask.to(values.dtype)
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


def clipped_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio: float = 0.2,
) -> PolicyLoss:
    """PPO's clipped surrogate, averaged over the trained tokens of the batch.

    All four are [B, R]: logprobs of the response tokens under the current policy (with
    gradient) and under the policy that generated them, per-token advantages, and the mask
    of tokens to train on. Per token: ``max(-A * r, -A * clip(r, 1 - c, 1 + c))`` with
    ``r = exp(log_probs - old_log_probs)``; the loss is its mean over ``response_mask``.
    """
    shapes = {tuple(t.shape) for t in (log_probs, old_log_probs, advantages, response_mask)}
    if len(shapes) != 1:
        raise ValueError(f"log_probs, old_log_probs, advantages and response_mask differ in shape: {shapes}")
    mask = response_mask.to(log_probs.dtype)
    # Masked positions (padding, inserted tokens) may hold anything: keep exp() finite there.
    log_ratio = (log_probs - old_log_probs) * mask
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        clip_fraction = masked_mean((clipped > unclipped).to(log_probs.dtype), mask).item()
        approx_kl = masked_mean(-log_ratio, mask).item()
        ratio_mean = masked_mean(ratio, mask).item()
    return PolicyLoss(loss, clip_fraction, approx_kl, ratio_mean)


def group_advantages(rewards: torch.Tensor, uid: Sequence[str], eps: float = 1e-6) -> torch.Tensor:
    """GRPO's outcome advantage per row: ``(reward - group mean) / (group std + eps)``.

    Groups are rows with the same uid; std is the sample standard deviation (as verl). A
    group of one row has no one to compare with: its advantage is 0. For batches whose
    estimator is ``none``; agl computes the advantage column itself otherwise.
    """
    if len(uid) != rewards.shape[0]:
        raise ValueError(f"{len(uid)} uids for {rewards.shape[0]} rewards")
    advantages = torch.zeros_like(rewards, dtype=torch.float32)
    rows_of: dict[str, list[int]] = {}
    for row, group in enumerate(uid):
        rows_of.setdefault(group, []).append(row)
    for rows in rows_of.values():
        if len(rows) < 2:
            continue
        scores = rewards[rows].to(torch.float32)
        advantages[rows] = (scores - scores.mean()) / (scores.std() + eps)
    return advantages
