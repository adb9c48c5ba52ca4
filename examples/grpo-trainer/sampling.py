"""Sampling from the tiny model, with the logprob of every token it samples.

The logprobs are those of the distribution the token was drawn from (logits / temperature),
the same quantity ``grpo.response_log_probs`` computes for training, so a batch generated at
temperature T and trained at temperature T starts with a probability ratio of 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel


@dataclass(frozen=True)
class Completion:
    """One sampled answer: its tokens (the stop token included, as vLLM returns them), their
    logprobs, and why it ended (``stop``: the stop token; ``length``: max_tokens)."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


def tempered_log_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-softmax of ``logits / temperature``; temperature 0 (greedy) uses the logits as they are."""
    return torch.log_softmax(logits.float() / temperature if temperature > 0 else logits.float(), dim=-1)


@torch.no_grad()
def sample(
    model: PreTrainedModel,
    prompt_ids: list[int],
    *,
    n: int = 1,
    max_tokens: int = 16,
    temperature: float = 1.0,
    stop_id: int,
    generator: torch.Generator | None,
) -> list[Completion]:
    """``n`` answers to one prompt, sampled together; each stops at ``stop_id`` or ``max_tokens``.

    ``generator`` None draws from torch's global generator.

    Raises ValueError when the prompt leaves no room in the model's context.
    """
    room = model.config.n_positions - len(prompt_ids)
    if room <= 0:
        raise ValueError(f"the prompt has {len(prompt_ids)} tokens; the model's context is {model.config.n_positions}")
    steps = min(max_tokens, room)
    sequences = torch.tensor([prompt_ids] * n, dtype=torch.long)
    finished = torch.zeros(n, dtype=torch.bool)
    tokens: list[list[int]] = [[] for _ in range(n)]
    logprobs: list[list[float]] = [[] for _ in range(n)]
    for _ in range(steps):
        # The whole sequence each step (no KV cache): the model is tiny, and the logprobs are
        # computed exactly as the training forward pass computes them.
        logits = model(sequences, attention_mask=torch.ones_like(sequences)).logits
        log_probs = tempered_log_probs(logits[:, -1, :], temperature)
        if temperature > 0:
            chosen = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(1)
        else:
            chosen = log_probs.argmax(dim=-1)
        for row in torch.nonzero(~finished).flatten().tolist():
            token = int(chosen[row])
            tokens[row].append(token)
            logprobs[row].append(float(log_probs[row, token]))
        finished |= chosen == stop_id
        if bool(finished.all()):
            break
        sequences = torch.cat([sequences, chosen[:, None]], dim=1)
    return [
        Completion(ids, lps, "stop" if ids and ids[-1] == stop_id else "length")
        for ids, lps in zip(tokens, logprobs, strict=True)
    ]
