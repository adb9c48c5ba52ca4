"""One GRPO update of a causal LM from a batch agl handed out.

The model-specific half of the step (the forward pass that gives the response tokens'
logprobs); the loss itself is agl_trainer's ``clipped_policy_loss``, shared with any trainer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from agl_trainer import TrainingTensors, clipped_policy_loss, group_advantages
from sampling import tempered_log_probs
from transformers import PreTrainedModel


@dataclass(frozen=True)
class StepMetrics:
    """What one update did, as the ``metrics`` of the batch's acknowledgement."""

    loss: float
    reward_mean: float
    clip_fraction: float
    approx_kl: float
    ratio_mean: float
    grad_norm: float
    trained_tokens: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def response_log_probs(model: PreTrainedModel, tensors: TrainingTensors, temperature: float = 1.0) -> torch.Tensor:
    """[B, R] logprobs of each response token given everything before it, under ``model``.

    Prompts are left-padded, so positions count from each row's first real token (as when
    the row was generated alone); logits are divided by the sampling temperature.
    """
    prompts, responses = tensors["prompts"], tensors["responses"]
    attention_mask = tensors["attention_mask"]
    position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)
    input_ids = torch.cat([prompts, responses], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    width = prompts.shape[1]
    # The logits at position i predict token i + 1: the response's come from one position earlier.
    predicting = logits[:, width - 1 : width - 1 + responses.shape[1]]
    log_probs = tempered_log_probs(predicting, temperature)
    return log_probs.gather(-1, responses.unsqueeze(-1)).squeeze(-1)


def grpo_step(
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    tensors: TrainingTensors,
    *,
    clip_ratio: float = 0.2,
    temperature: float = 1.0,
    max_grad_norm: float = 1.0,
) -> StepMetrics:
    """One optimizer step on the batch: clipped policy loss, token-mean over response_mask.

    Uses the batch's advantages; a batch without them (estimator ``none``) gets GRPO's group
    advantages from its rewards and uids.
    """
    response_mask = tensors["response_mask"]
    advantages = tensors["advantages"]
    if advantages is None:
        per_row = group_advantages(tensors["rewards"], tensors["uid"])
        advantages = per_row[:, None] * response_mask.to(per_row.dtype)
    model.train()
    log_probs = response_log_probs(model, tensors, temperature)
    result = clipped_policy_loss(log_probs, tensors["old_log_probs"], advantages, response_mask, clip_ratio)
    optimizer.zero_grad()
    result.loss.backward()  # type: ignore[no-untyped-call]
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    model.eval()  # type: ignore[no-untyped-call]
    return StepMetrics(
        loss=result.loss.item(),
        reward_mean=tensors["rewards"].mean().item(),
        clip_fraction=result.clip_fraction,
        approx_kl=result.approx_kl,
        ratio_mean=result.ratio_mean,
        grad_norm=float(grad_norm),
        trained_tokens=float(response_mask.sum()),
    )
