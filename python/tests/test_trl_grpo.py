"""agl_trainer.trl's GRPO side against TRL 1.13 itself: the keys, the layout, the logprobs.

The tiny model of examples/grpo-trainer (random weights from a seed, its character tokenizer)
with LoRA; nothing is downloaded.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
from agl_trainer import BatchDirectory
from agl_trainer.trl import TRL_KEYS, AglGRPOTrainer, PolicyServer, check_config, group_advantages, trl_inputs
from agl_trainer.trl.grpo import REFERENCE_KEY, content_order
from batch_rows import batch_table, row
from peft import LoraConfig
from trl import GRPOConfig, GRPOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "grpo-trainer"))
from tiny_model import build_model, build_tokenizer

# What TRL 1.13's _compute_loss reads of the inputs; the pixel/image keys are for vision models.
TRL_LOSS_KEYS = {
    "prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "tool_mask", "advantages",
    "old_per_token_logps", "sampling_per_token_logps", "ref_per_token_logps", "importance_sampling_ratio",
    "num_items_in_batch",
}  # fmt: skip


def read_keys(source: str) -> set[str]:
    return set(re.findall(r'inputs\["(\w+)"\]', source)) | set(re.findall(r'inputs\.get\("(\w+)"', source))


def test_the_keys_returned_are_those_trl_reads_a_trl_upgrade_that_changes_them_fails_here() -> None:
    read = {key for key in read_keys(inspect.getsource(GRPOTrainer._compute_loss)) if not _vision(key)}
    assert read == TRL_LOSS_KEYS
    # TRL's own _generate_and_score_completions returns each key we return, under the same name.
    own = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for key in (*TRL_KEYS, REFERENCE_KEY):
        assert f'"{key}"' in own, key
    # Not returned: the vLLM correction (use_vllm is refused) and OPSM's sampling logprobs, which
    # default to old_per_token_logps, agl's recorded ones.
    assert read - {*TRL_KEYS, REFERENCE_KEY} == {"sampling_per_token_logps", "importance_sampling_ratio"}


def _vision(key: str) -> bool:
    return key.startswith(("pixel", "image", "num_images", "num_tiles", "spatial")) or "token_type_ids" in key


def test_inserted_tokens_are_attended_to_and_not_trained_on() -> None:
    table = batch_table(
        [
            row([5, 6, 7], [8, 9, 10, 11], mask=[1, 0, 0, 1], logprobs=[-0.1, 0.0, 0.0, -0.2], advantage=1.5),
            row([5], [8, 9], advantage=-1.5, rollout="ro-2"),
        ]
    )
    inputs = trl_inputs(table, pad_token_id=0, scale_rewards="group", device=torch.device("cpu"))
    assert set(inputs) == set(TRL_KEYS)
    assert inputs["prompt_ids"].tolist() == [[5, 6, 7], [0, 0, 5]]
    assert inputs["prompt_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert inputs["completion_ids"].tolist() == [[8, 9, 10, 11], [8, 9, 0, 0]]
    assert inputs["completion_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]  # also the attention mask
    assert inputs["tool_mask"].tolist() == [[1, 0, 0, 1], [1, 1, 0, 0]]
    assert inputs["advantages"].tolist() == [1.5, -1.5]
    assert inputs["old_per_token_logps"][0].tolist() == pytest.approx([-0.1, 0.0, 0.0, -0.2])
    assert int(inputs["num_items_in_batch"]) == 4


def test_without_agl_advantages_trl_normalizes_rewards_by_agl_groups_of_any_size() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.5])
    advantages = group_advantages(rewards, ["a", "a", "b", "b", "b"], "group")
    assert advantages.tolist() == pytest.approx([0.7070, -0.7070, 0.0, 0.0, 0.0], abs=1e-3)
    assert group_advantages(rewards, ["a", "a", "b", "b", "b"], "none").tolist() == pytest.approx(
        [0.5, -0.5, 0.0, 0.0, 0.0]
    )


def test_settings_that_would_give_wrong_gradients_are_refused_by_name(tmp_path: Path) -> None:
    config = GRPOConfig(
        output_dir=str(tmp_path), gradient_accumulation_steps=2, logging_steps=5, num_iterations=2, use_cpu=True
    )
    with pytest.raises(ValueError) as raised:
        check_config(config, 1)
    message = str(raised.value)
    for name in ("gradient_accumulation_steps", "max_steps", "logging_steps 1", "disable_dropout", "num_iterations 1"):
        assert name in message
    with pytest.raises(ValueError, match="one process"):
        check_config(grpo_config(tmp_path), 2)


def grpo_config(tmp_path: Path, **fields: Any) -> GRPOConfig:
    settings: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"),
        "max_steps": 1,
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "logging_steps": 1,
        "disable_dropout": True,
        "gradient_checkpointing": False,
        "report_to": [],
        "use_cpu": True,
        **fields,
    }
    return GRPOConfig(**settings)


@pytest.fixture
def trainer(tmp_path: Path) -> AglGRPOTrainer:
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=0)
    lora = LoraConfig(r=4, target_modules=["c_attn"], lora_dropout=0.0, task_type="CAUSAL_LM", init_lora_weights=False)
    policy = PolicyServer(model, tokenizer, "tiny", 1.0, max_tokens=8)
    source = BatchDirectory(tmp_path)
    return AglGRPOTrainer(
        model=model,
        args=grpo_config(tmp_path),
        processing_class=tokenizer,
        peft_config=lora,
        source=source,
        policy=policy,
    )


def test_trl_recomputes_the_logprobs_the_policy_server_sampled_left_padding_and_lora_included(
    trainer: AglGRPOTrainer,
) -> None:
    policy = trainer.policy
    prompts = [[{"role": "user", "content": "Say a b c."}], [{"role": "user", "content": "Go."}]]
    rows = []
    torch.manual_seed(1)
    for index, messages in enumerate(prompts):
        prompt = policy.prompt_ids(messages)
        for sample, (ids, logprobs) in enumerate(policy.sample(prompt, n=4, max_tokens=8, seed=None)):
            rows.append(row(prompt, ids, logprobs=logprobs, group=f"g{index}", rollout=f"ro-{index}-{sample}"))
    table = batch_table(rows)
    inputs = trl_inputs(table, trainer._pad_id(), "group", torch.device("cpu"))
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    width = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        recomputed, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, mask, width)
    trained = inputs["completion_mask"] * inputs["tool_mask"]
    difference = ((recomputed - inputs["old_per_token_logps"]).abs() * trained).max().item()
    print(f"\nlargest recorded - recomputed logprob difference: {difference:.2e}")
    assert difference < 1e-5
    # Without positions from the mask, TRL's forward would score the shorter, left-padded prompts wrong.
    trainer._positions.remove()
    with torch.no_grad():
        shifted, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, mask, width)
    assert ((shifted - inputs["old_per_token_logps"]).abs() * trained).max().item() > 1e-2


def test_a_batch_whose_groups_do_not_match_num_generations_is_refused(trainer: AglGRPOTrainer, tmp_path: Path) -> None:
    rows = [row([5], [8, 1], group="g", rollout=f"ro-{index}") for index in range(3)]
    pq.write_table(batch_table(rows), tmp_path / "batch-000001-b-1.parquet")
    with pytest.raises(ValueError, match="num_generations is 4: set it to agl's --group-size"):
        trainer._generate_and_score_completions([])


def test_a_batch_of_a_run_whose_settings_differ_from_grpo_config_is_refused_before_its_update(
    trainer: AglGRPOTrainer, tmp_path: Path
) -> None:
    rows = [row([5], [8, 1], group="g", rollout=f"ro-{index}") for index in range(4)]
    settings = {"agl.steps": "12", "agl.batch_size": "2", "agl.group_size": "8", "agl.temperature": "0.7"}
    pq.write_table(batch_table(rows, settings=settings), tmp_path / "batch-000001-b-1.parquet")
    before = [parameter.detach().clone() for parameter in trainer.model.parameters()]
    with pytest.raises(ValueError) as raised:
        trainer._generate_and_score_completions([])
    message = str(raised.value)
    assert message.startswith("batch b-1 (step 1): GRPOConfig does not match agl's run: ")
    assert "agl runs --steps 12, GRPOConfig.max_steps is 1: set max_steps to 12" in message
    assert "agl runs --group-size 8, GRPOConfig.num_generations is 4: set num_generations to 8" in message
    assert "agl's llm samples at temperature 0.7 (its sampling_parameters), GRPOConfig.temperature is 1.0" in message
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))
    assert trainer._pending is None  # not taken: no update, no acknowledgement


def test_a_batch_whose_settings_match_is_taken_even_when_its_groups_lost_rollouts(
    trainer: AglGRPOTrainer, tmp_path: Path
) -> None:
    # A failed rollout leaves a group of 3: with agl.group_size the batch's own count is not guessed.
    rows = [row([5], [8, 1], reward=float(index), group="g", rollout=f"ro-{index}") for index in range(3)]
    settings = {"agl.steps": "1", "agl.batch_size": "1", "agl.group_size": "4", "agl.temperature": "1"}
    pq.write_table(batch_table(rows, settings=settings), tmp_path / "batch-000001-b-1.parquet")
    inputs = trainer._generate_and_score_completions([])
    assert inputs["completion_ids"].shape[0] == 3
    assert trainer._pending is not None and trainer._pending.batch_id == "b-1"


def test_a_batch_with_a_setting_that_is_not_a_number_is_refused_by_name(
    trainer: AglGRPOTrainer, tmp_path: Path
) -> None:
    rows = [row([5], [8, 1], group="g", rollout=f"ro-{index}") for index in range(4)]
    pq.write_table(batch_table(rows, settings={"agl.steps": "twelve"}), tmp_path / "batch-000001-b-1.parquet")
    with pytest.raises(ValueError, match=r"batch b-1 \(step 1\): agl.steps is not a whole number: 'twelve'"):
        trainer._generate_and_score_completions([])


def test_with_a_base_seed_the_policy_servers_answers_per_prompt_do_not_depend_on_arrival_order() -> None:
    tokenizer = build_tokenizer()
    prompts = {name: [{"role": "user", "content": text}] for name, text in (("a", "Say a b c."), ("b", "Go."))}

    def answers(order: str, version: str = "0") -> dict[str, list[list[int]]]:
        policy = PolicyServer(build_model(tokenizer, seed=0), tokenizer, "tiny", 1.0, max_tokens=8, seed=3)
        policy.version = version
        got: dict[str, list[list[int]]] = {name: [] for name in prompts}
        for name in order:
            body = {"model": "tiny", "messages": prompts[name], "max_tokens": 8, "return_token_ids": True}
            got[name].append(policy.chat(body)["choices"][0]["token_ids"])
        return got

    first = answers("aabab")
    assert first == answers("bbaaa")
    assert len({tuple(ids) for ids in first["a"]}) == 3  # each repeat of a prompt is a new draw
    assert answers("aabab", version="1") != first  # another model version draws anew
    # A request's own seed still decides its draws.
    policy = PolicyServer(build_model(tokenizer, seed=0), tokenizer, "tiny", 1.0, max_tokens=8, seed=3)
    seeded = {"model": "tiny", "messages": prompts["a"], "max_tokens": 8, "seed": 11, "return_token_ids": True}
    ids = policy.chat(seeded)["choices"][0]["token_ids"]
    assert ids == policy.sample(policy.prompt_ids(prompts["a"]), 1, 8, seed=11)[0][0]


def test_the_same_rows_in_any_order_are_laid_out_alike() -> None:
    rows = [
        row([5, 6], [8, 9], reward=1.0, advantage=1.0, rollout="ro-1"),
        row([5], [9], reward=0.0, advantage=-1.0, rollout="ro-2"),
        row([5], [8, 1], reward=0.5, advantage=0.0, rollout="ro-3"),
    ]
    layouts = []
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        table = content_order(batch_table([rows[index] for index in order]))
        inputs = trl_inputs(table, pad_token_id=0, scale_rewards="group", device=torch.device("cpu"))
        layouts.append({key: value.tolist() for key, value in inputs.items()})
    assert layouts[0] == layouts[1] == layouts[2]
    assert layouts[0]["completion_ids"] == [[8, 1], [9, 0], [8, 9]]
