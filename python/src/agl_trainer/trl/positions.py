"""Position ids from the attention mask, for every forward pass of the model being trained.

TRL's GRPOTrainer pads prompts on the left and passes no ``position_ids``; transformers then
counts positions from the first column, padding included, so a model with absolute positions
(GPT-2) would score a left-padded row with other positions than it was sampled with. The hook
makes positions count real tokens only, as when the row was generated alone.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.hooks import RemovableHandle


def positions_from_mask(attention_mask: torch.Tensor, width: int) -> torch.Tensor:
    """[B, width] positions of the last ``width`` columns: each row counts its real tokens from 0."""
    positions = (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)
    return positions[:, -width:]


def _add_positions(
    _module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    mask, input_ids = kwargs.get("attention_mask"), kwargs.get("input_ids")
    if kwargs.get("position_ids") is None and mask is not None and input_ids is not None:
        # With a KV cache the mask covers past and new tokens, input_ids the new ones only.
        kwargs["position_ids"] = positions_from_mask(mask, input_ids.shape[1])
    return args, kwargs


def positions_follow_mask(model: torch.nn.Module) -> RemovableHandle:
    """Makes every call of ``model`` (a PEFT model: its base model) take positions from its mask."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.register_forward_pre_hook(_add_positions, with_kwargs=True)
