"""TRL's GRPOTrainer fed by agl's batches instead of its own generation.

The one override is ``_generate_and_score_completions``, the step TRL documents for swapping
generation: it takes the next agl batch and returns it in TRL's layout. Everything else is
TRL's: loss type, clipping, beta/KL (a PEFT model's reference is the adapter-disabled model),
optimizer, scheduler, logging, checkpoints, resuming. What is agl's stays agl's: the groups,
advantages (or, with ``estimator: none``, advantages from agl's rewards per TRL's
``scale_rewards``, by agl's groups), credit, aggregation and masks.

TRL's layout of a row (grpo_trainer.py, 1.13): ``completion_mask`` is also the attention mask,
so it is 1 on every real response token; ``tool_mask`` 0 keeps tokens the policy did not
generate (tool output, template tokens between merged turns) out of the loss. Old logprobs are
those the policy server recorded: the importance ratio is to the model that sampled the batch,
also when the batch is stale (``maxStaleness`` > 0), and TRL's clipping bounds it.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import torch
from datasets import Dataset
from transformers import TrainerCallback, TrainerControl, TrainerState
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import use_adapter

from ..batch import DECODE_SECONDS, UPDATE_SECONDS, WAIT_SECONDS, Batch, ModelRef
from ..errors import BatchAlreadyDoneError, BatchRequestError
from ..tensors import to_tensors
from .policy_server import PolicyServer
from .positions import positions_follow_mask

# What the override returns: the keys TRL 1.13's _compute_loss reads (tests/test_trl_grpo.py
# checks them against TRL's source, so an upgrade that changes them fails loudly).
TRL_KEYS = (
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "tool_mask",
    "advantages",
    "old_per_token_logps",
    "num_items_in_batch",
)
# In each checkpoint: the batch whose update it holds, acknowledged by the trainer that resumes.
CHECKPOINT_BATCH = "agl_batch.json"
# Also returned when GRPOConfig.beta is not 0: the reference model's logprobs, for the KL term.
REFERENCE_KEY = "ref_per_token_logps"


@dataclass(frozen=True)
class TrainedBatch:
    """A batch whose update is done and whose acknowledgement is not sent yet."""

    batch_id: str
    step: int


class BatchSource(Protocol):
    """BatchClient (HTTP) and BatchDirectory (files) both fit."""

    def next(self, wait: int = 30) -> Batch | None: ...

    def done(self, batch_id: str, metrics: Any = None, model: ModelRef | None = None) -> Any: ...


def check_config(args: GRPOConfig, num_processes: int) -> None:
    """Refuses settings under which agl's batches would give wrong gradients, naming each."""
    wrong = []
    if num_processes != 1:
        wrong.append(f"one process (each would pull its own batch), not {num_processes}")
    if args.gradient_accumulation_steps != 1 or args.steps_per_generation != 1:
        wrong.append(
            "gradient_accumulation_steps and steps_per_generation 1: one agl batch is one optimizer step"
            " (TRL would split it into N // chunks rows and drop the rest)"
        )
    if args.max_steps <= 0:
        wrong.append("max_steps: agl's --steps (batches come from agl, not from a dataset's epochs)")
    if args.num_iterations != 1:
        wrong.append(
            f"num_iterations 1, not {args.num_iterations}: agl's --steps counts batches, one optimizer step each"
        )
    if args.logging_steps != 1:
        wrong.append("logging_steps 1: each batch is acknowledged with its step's metrics")
    if not args.disable_dropout:
        wrong.append("disable_dropout True: the policy server samples with the trained model, dropout off")
    if args.use_vllm:
        wrong.append("use_vllm False: rollouts are agl's, through the policy server (or your server)")
    if wrong:
        raise ValueError("GRPOConfig does not fit agl's batches: " + "; ".join(wrong))


def agl_settings_mismatches(metadata: dict[str, str], args: GRPOConfig) -> list[str]:
    """Where GRPOConfig disagrees with the run's settings a batch carries, each naming both values.

    A key the batch lacks (an older agl; ``agl.temperature`` when agl's llm sets none) is not checked.
    ``per_device_train_batch_size`` is not among them: each agl batch is one step whatever its rows.
    """
    wrong = []
    steps = _whole(metadata, "agl.steps")
    if steps is not None and steps != args.max_steps:
        wrong.append(f"agl runs --steps {steps}, GRPOConfig.max_steps is {args.max_steps}: set max_steps to {steps}")
    group_size = _whole(metadata, "agl.group_size")
    if group_size is not None and group_size != args.num_generations:
        wrong.append(
            f"agl runs --group-size {group_size}, GRPOConfig.num_generations is {args.num_generations}:"
            f" set num_generations to {group_size}"
        )
    temperature = metadata.get("agl.temperature")
    if temperature is not None:
        try:
            sampled = float(temperature)
        except ValueError:
            raise ValueError(f"agl.temperature is not a number: {temperature!r}") from None
        if sampled != args.temperature:
            wrong.append(
                f"agl's llm samples at temperature {sampled} (its sampling_parameters), GRPOConfig.temperature is"
                f" {args.temperature}: set temperature to {sampled} (and the policy server's with it)"
            )
    return wrong


def _whole(metadata: dict[str, str], key: str) -> int | None:
    text = metadata.get(key)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{key} is not a whole number: {text!r}") from None


def content_order(table: pa.Table) -> pa.Table:
    """The rows ordered by what they hold (model version, token ids, mask, reward, advantage).

    agl lays rows out as their rollouts finished, which hangs on timing. A float sum in another
    order differs in its last bits, and Adam's normalized steps grow such differences: two closed
    loops fed the same rows in different orders differed by 1e-6 in logprob after one step and
    sampled other answers from step 5 on. In this order (and TRL's seeded shuffle of it) the same
    rows make the same update.
    """
    names = ("model_version", "prompt_ids", "response_ids", "response_mask", "reward", "advantage")
    columns = [table.column(name).to_pylist() for name in names]
    # A null (refused later, naming the row) sorts first instead of failing the comparison.
    keys = [tuple((0,) if value is None else (1, value) for value in row) for row in zip(*columns, strict=True)]
    order = sorted(range(table.num_rows), key=keys.__getitem__)
    return table.take(pa.array(order, type=pa.int64()))


def trl_inputs(table: pa.Table, pad_token_id: int, scale_rewards: str, device: torch.device) -> dict[str, Any]:
    """A batch's rows as TRL's ``_generate_and_score_completions`` returns them (see TRL_KEYS)."""
    tensors = to_tensors(table, pad_token_id)
    width = tensors["prompts"].shape[1]
    completion_mask = tensors["attention_mask"][:, width:]
    tool_mask = tensors["response_mask"]
    if tensors["advantages"] is None:
        advantages = group_advantages(tensors["rewards"], tensors["uid"], scale_rewards)
    else:
        advantages = torch.tensor(table.column("advantage").to_pylist(), dtype=torch.float32)
    inputs = {
        "prompt_ids": tensors["prompts"],
        "prompt_mask": tensors["attention_mask"][:, :width],
        "completion_ids": tensors["responses"],
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": advantages,
        "old_per_token_logps": tensors["old_log_probs"],
        "num_items_in_batch": (completion_mask * tool_mask).sum(),
    }
    return {key: value.to(device) for key, value in inputs.items()}


def group_advantages(rewards: torch.Tensor, uid: list[str], scale_rewards: str) -> torch.Tensor:
    """TRL's advantages (reward - group mean, over the group's or the batch's std + 1e-4), by agl's groups.

    TRL groups rows in blocks of ``num_generations``; agl's groups are by ``group_id`` and may
    differ in size (failed rollouts left out, turns left as separate rows).
    """
    rows_of: dict[str, list[int]] = defaultdict(list)
    for row, group in enumerate(uid):
        rows_of[group].append(row)
    mean = torch.zeros_like(rewards)
    std = torch.zeros_like(rewards)
    for rows in rows_of.values():
        mean[rows] = rewards[rows].mean()
        std[rows] = rewards[rows].std() if len(rows) > 1 else 0.0
    if scale_rewards == "none":
        return rewards - mean
    scale = rewards.std() if scale_rewards == "batch" else std
    return (rewards - mean) / (scale + 1e-4)


def agl_reward(prompts: list[Any], completions: list[Any], reward: list[float], **kwargs: Any) -> list[float]:
    """The reward agl recorded for each row: TRL requires a reward source; agl's batches carry it."""
    return reward


class AglGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose completions, rewards and advantages are agl's batches.

    ``source`` hands out batches; ``policy`` is the started server the rollouts use (it is given
    this trainer's model; its temperature must be ``args.temperature``). Each batch is checked
    before its update against the run's settings it carries (``agl.steps``, ``agl.group_size``,
    ``agl.temperature``): ``max_steps``, ``num_generations`` and ``temperature`` must be agl's,
    or a ValueError names both values. Each batch is acknowledged once TRL logged and saved its
    step, with TRL's logged metrics and the model the next rollouts must use, version ``<the
    batch's step>``. Among those metrics, and in TRL's logs, the step's timing: ``agl/wait_seconds``,
    ``agl/decode_seconds``, ``agl/update_seconds`` (agl_trainer's WAIT_SECONDS ...).

    ``stop_after_step()`` (a signal handler may call it) ends training after the current step's
    log and checkpoint, leaving its batch unacknowledged; the trainer that resumes from that
    checkpoint acknowledges it, so agl waits instead of running rollouts on a stopped server.
    """

    def __init__(
        self,
        *args: Any,
        source: BatchSource,
        policy: PolicyServer,
        wait: int = 30,
        idle_timeout: float = 600,
        **kwargs: Any,
    ) -> None:
        config: GRPOConfig = kwargs["args"]
        check_config(config, config.world_size)
        rows = config.per_device_train_batch_size
        # TRL's loop needs a dataset; its rows are never read (batches come from agl).
        kwargs.setdefault("train_dataset", Dataset.from_dict({"prompt": [""] * rows}))
        kwargs.setdefault("reward_funcs", [agl_reward])
        super().__init__(*args, **kwargs)
        if policy.temperature != self.temperature:
            raise ValueError(
                f"the policy server samples at {policy.temperature}, GRPOConfig.temperature is {self.temperature}"
            )
        self.source = source
        self.policy = policy
        policy.model = self.model  # wrapped by PEFT now: the rollouts sample with the adapter
        self.wait = wait
        self.idle_timeout = idle_timeout
        self._positions = positions_follow_mask(self.model)
        self._pending: TrainedBatch | None = None
        self._stopping = False
        self._last_logs: dict[str, float] = {}
        self._handoff_seconds = 0.0  # of the current step: the acknowledgement, wait and decode
        self.add_callback(_AglSteps(self))

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        started = time.perf_counter()
        self.acknowledge()
        asked = time.perf_counter()
        batch = self._next_batch()
        received = time.perf_counter()
        self._check_batch(batch)
        self._pending = TrainedBatch(batch.batch_id, batch.step)
        table = content_order(batch.table)
        output = trl_inputs(table, self._pad_id(), self.scale_rewards, self.accelerator.device)
        decoded = time.perf_counter()
        self._handoff_seconds = decoded - started
        self._metrics["train"][WAIT_SECONDS].append(received - asked)
        self._metrics["train"][DECODE_SECONDS].append(decoded - received)
        if self.beta != 0.0:
            output[REFERENCE_KEY] = self._reference_logps(output)
        rewards = torch.tensor(table.column("reward").to_pylist())
        self._metrics["train"]["reward"].append(rewards.mean().item())
        self._metrics["train"]["reward_std"].append(rewards.std().item() if len(rewards) > 1 else 0.0)
        return output

    @torch.no_grad()
    def _reference_logps(self, inputs: dict[str, Any]) -> torch.Tensor:
        """The reference model's logprobs for KL, as TRL takes them: ``ref_model``, else the adapter disabled."""
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        width = inputs["completion_ids"].shape[1]
        if self.ref_model is not None:
            logps, _, _ = self._get_per_token_logps_and_entropies(self.ref_model, input_ids, attention_mask, width)
            return logps
        model = self.accelerator.unwrap_model(self.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            logps, _, _ = self._get_per_token_logps_and_entropies(self.model, input_ids, attention_mask, width)
        return logps

    def acknowledge(self) -> None:
        """Ends the step of the batch trained last: agl gets TRL's metrics and the model that serves next."""
        if self._pending is None:
            return
        batch, self._pending = self._pending, None
        version = str(batch.step)
        self.policy.version = version
        model: ModelRef = {"endpoint": self.policy.endpoint(), "model": self.policy.name, "version": version}
        try:
            self.source.done(batch.batch_id, self._last_logs, model)
        except BatchAlreadyDoneError:
            pass  # acknowledged by the run that saved the checkpoint, before it stopped

    def stop_after_step(self) -> None:
        """Ends training once the current step is logged and saved, its batch left to the resuming run."""
        self._stopping = True

    def _next_batch(self) -> Batch:
        deadline = time.monotonic() + self.idle_timeout
        while True:
            left = deadline - time.monotonic()
            try:
                batch = self.source.next(wait=max(0, min(self.wait, int(left))))
            except BatchRequestError as error:
                if error.status is not None:
                    raise
                batch = None  # agl not listening yet (the trainer may start first): ask again
                time.sleep(min(1.0, max(0.0, left)))
            if batch is not None:
                return batch
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"no agl batch for {self.idle_timeout:.0f} s at step {self.state.global_step + 1}"
                    f" of max_steps {self.args.max_steps}: is agl's --steps smaller, or is agl stopped?"
                )

    def _check_batch(self, batch: Batch) -> None:
        """Refuses, before its update, a batch of a run whose settings GRPOConfig does not match."""
        where = f"batch {batch.batch_id} (step {batch.step})"
        try:
            wrong = agl_settings_mismatches(batch.metadata, self.args)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        if wrong:
            raise ValueError(f"{where}: GRPOConfig does not match agl's run: " + "; ".join(wrong))
        if "agl.group_size" in batch.metadata:
            return
        # An older agl's batch: the group size is seen only as its largest group.
        groups: dict[str, set[str]] = defaultdict(set)
        for group, rollout in zip(
            batch.table.column("group_id").to_pylist(), batch.table.column("rollout_id").to_pylist(), strict=True
        ):
            groups[group].add(rollout)
        largest = max(len(rollouts) for rollouts in groups.values())
        if largest != self.num_generations:
            raise ValueError(
                f"{where} has groups of up to {largest} rollouts;"
                f" num_generations is {self.num_generations}: set it to agl's --group-size"
            )

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        checkpoint = (
            get_last_checkpoint(self.args.output_dir) if resume_from_checkpoint is True else resume_from_checkpoint
        )
        if checkpoint:
            saved = Path(checkpoint) / CHECKPOINT_BATCH
            if saved.is_file():
                self._pending = TrainedBatch(**json.loads(saved.read_text()))
                self.policy.version = str(self._pending.step)  # the checkpoint's weights serve from now on
        try:
            return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        finally:
            self._positions.remove()

    def _pad_id(self) -> int:
        tokenizer = self.processing_class
        pad = getattr(tokenizer, "pad_token_id", None)
        return int(pad if pad is not None else tokenizer.eos_token_id)


class _AglSteps(TrainerCallback):
    """Holds the policy server's lock while weights change, keeps TRL's logs, marks checkpoints, stops."""

    def __init__(self, trainer: AglGRPOTrainer) -> None:
        self.trainer = trainer
        self._step_started = 0.0

    def on_step_begin(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self._step_started = time.perf_counter()

    def on_pre_optimizer_step(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.trainer.policy.lock.acquire()

    def on_optimizer_step(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.trainer.policy.lock.release()
        # TRL's training_step and optimizer step less the hand-off in them (TRL's step_time counts the wait in)
        update = time.perf_counter() - self._step_started - self.trainer._handoff_seconds
        self.trainer._metrics["train"][UPDATE_SECONDS].append(update)

    def on_log(self, args: Any, state: TrainerState, control: TrainerControl, logs: Any = None, **kwargs: Any) -> None:
        if "train_runtime" in (logs or {}):
            return  # the run's summary, logged after the last step's: that step's metrics are the acknowledgement's
        numbers = {key: float(value) for key, value in (logs or {}).items() if isinstance(value, (int, float))}
        self.trainer._last_logs = {
            key: value for key, value in numbers.items() if value == value and abs(value) != float("inf")
        }

    def on_step_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.trainer._stopping:
            control.should_training_stop = True
            control.should_save = True

    def on_save(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        pending = self.trainer._pending
        if pending is not None:
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            (checkpoint / CHECKPOINT_BATCH).write_text(json.dumps({"batch_id": pending.batch_id, "step": pending.step}))

    def on_train_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if not self.trainer._stopping:
            self.trainer.acknowledge()
