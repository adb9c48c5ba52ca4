"""The training forward pass computes the logprobs the server sampled with; one step moves the policy."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import torch
from agl_trainer import TrainingTensors, to_tensors
from conftest import RunningServer
from grpo import grpo_step, response_log_probs


def rows_from_server(server: RunningServer, prompts: list[str], n: int) -> list[dict[str, Any]]:
    """Rows of a batch as agl would build them from the server's answers (transition mode)."""
    rows = []
    for group, text in enumerate(prompts):
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": text}],
            "n": n,
            "max_tokens": 10,
            "seed": group,
            "logprobs": True,
            "return_token_ids": True,
        }
        status, answer = server.post("/v1/chat/completions", body)
        assert status == 200
        for choice in answer["choices"]:
            rows.append(
                {
                    "group_id": f"g{group}",
                    "prompt_ids": answer["prompt_token_ids"],
                    "response_ids": choice["token_ids"],
                    "response_mask": [1] * len(choice["token_ids"]),
                    "response_logprobs": [entry["logprob"] for entry in choice["logprobs"]["content"]],
                    "reward": 0.0,
                    "advantage": 0.0,
                }
            )
    return rows


def tensors_of(rows: list[dict[str, Any]], server: RunningServer) -> TrainingTensors:
    return to_tensors(pa.Table.from_pylist(rows), server.service.tokenizer.pad_token_id)


def test_the_padded_training_pass_gives_the_logprobs_the_server_sampled_with(server: RunningServer) -> None:
    # Prompts of different lengths: left padding and position ids must not change a logprob.
    rows = rows_from_server(server, ["Hi.", "Say the three letters, a b c, please."], n=3)
    tensors = tensors_of(rows, server)
    with torch.no_grad():
        computed = response_log_probs(server.service.model, tensors)
    mask = tensors["response_mask"].bool()
    assert torch.allclose(computed[mask], tensors["old_log_probs"][mask], atol=1e-4)


def test_one_step_raises_the_logprob_of_the_answer_with_the_higher_reward(server: RunningServer) -> None:
    rows = rows_from_server(server, ["Say a b c."], n=2)
    rows[0]["advantage"], rows[1]["advantage"] = 1.0, -1.0
    rows[0]["reward"], rows[1]["reward"] = 1.0, 0.0
    tensors = tensors_of(rows, server)
    model = server.service.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    metrics = grpo_step(model, optimizer, tensors)
    assert abs(metrics.ratio_mean - 1.0) < 1e-4 and metrics.clip_fraction == 0.0
    assert metrics.reward_mean == 0.5 and metrics.trained_tokens == tensors["response_mask"].sum().item()
    with torch.no_grad():
        after = response_log_probs(model, tensors)
    mask = tensors["response_mask"].float()
    sums_after = (after * mask).sum(dim=1)
    sums_before = (tensors["old_log_probs"] * mask).sum(dim=1)
    assert sums_after[0] > sums_before[0] and sums_after[1] < sums_before[1]
