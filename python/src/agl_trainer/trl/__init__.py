"""agl_trainer.trl: Hugging Face TRL trains on agl's rollouts.

- ``AglGRPOTrainer``: TRL's GRPOTrainer fed by agl's batches (``BatchClient`` or ``BatchDirectory``).
- ``PolicyServer``: an OpenAI-compatible server in the trainer's process that samples from the
  model being trained, with token ids and logprobs, for agl's gateway.
- ``python -m agl_trainer.trl.sft``: TRL's SFTTrainer as ``agl train sft --train-cmd``.

Tested with trl 1.13.0, transformers 5.18.0, peft 0.21.0, accelerate 1.15.0 (pyproject's ``trl`` extra).
"""

from .grpo import TRL_KEYS, AglGRPOTrainer, check_config, group_advantages, trl_inputs
from .policy_server import PolicyServer
from .positions import positions_follow_mask, positions_from_mask

__all__ = [
    "TRL_KEYS",
    "AglGRPOTrainer",
    "PolicyServer",
    "check_config",
    "group_advantages",
    "positions_follow_mask",
    "positions_from_mask",
    "trl_inputs",
]
