"""agl_trainer: the Python side of agl's GRPO hand-off.

agl (``agl train grpo``) runs the agent, records its LLM calls, and turns each step's
rollouts into a batch of token-level rows with GRPO advantages. A trainer pulls the batch
(``BatchClient`` over HTTP, ``BatchDirectory`` from files), turns it into tensors
(``to_tensors``), updates the policy (``clipped_policy_loss``), serves the new weights, and
acknowledges the batch with the model that the next rollouts should use. ``send_feedback``
gives a stored call, trace or rollout a reward after the fact.
"""

from .batch import DECODE_SECONDS, UPDATE_SECONDS, WAIT_SECONDS, Batch, ModelRef
from .client import BatchClient
from .directory import BatchDirectory, read_batch_file
from .errors import BatchAlreadyDoneError, BatchNotFoundError, BatchRequestError, FeedbackError
from .feedback import send_feedback
from .loss import PolicyLoss, clipped_policy_loss, group_advantages, masked_mean
from .tensors import TrainingTensors, to_tensors

__all__ = [
    "DECODE_SECONDS",
    "UPDATE_SECONDS",
    "WAIT_SECONDS",
    "Batch",
    "BatchAlreadyDoneError",
    "BatchClient",
    "BatchDirectory",
    "BatchNotFoundError",
    "BatchRequestError",
    "FeedbackError",
    "ModelRef",
    "PolicyLoss",
    "TrainingTensors",
    "clipped_policy_loss",
    "group_advantages",
    "masked_mean",
    "read_batch_file",
    "send_feedback",
    "to_tensors",
]
