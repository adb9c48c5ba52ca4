"""Batches built the way agl builds them: the contract's columns, Arrow types and metadata."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

SCHEMA = pa.schema(
    [
        ("batch_id", pa.utf8()),
        ("step", pa.int32()),
        ("group_id", pa.utf8()),
        ("rollout_id", pa.utf8()),
        ("attempt_id", pa.utf8()),
        ("model_version", pa.utf8()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("response_ids", pa.list_(pa.int32())),
        ("response_mask", pa.list_(pa.int8())),
        ("response_logprobs", pa.list_(pa.float32())),
        ("reward", pa.float32()),
        ("advantage", pa.float32()),
    ]
)


def row(
    prompt: list[int],
    response: list[int],
    *,
    mask: list[int] | None = None,
    logprobs: list[float] | None = None,
    reward: float = 0.0,
    advantage: float | None = 0.0,
    group: str = "g1",
    rollout: str = "ro-1",
) -> dict[str, Any]:
    """One trajectory row; mask and logprobs default to all generated, logprob -0.5."""
    return {
        "group_id": group,
        "rollout_id": rollout,
        "attempt_id": f"at-{rollout}",
        "prompt_ids": prompt,
        "response_ids": response,
        "response_mask": mask if mask is not None else [1] * len(response),
        "response_logprobs": logprobs if logprobs is not None else [-0.5] * len(response),
        "reward": reward,
        "advantage": advantage,
    }


def batch_table(
    rows: list[dict[str, Any]],
    batch_id: str = "b-1",
    step: int = 1,
    version: str = "0",
    settings: dict[str, str] | None = None,
) -> pa.Table:
    """The rows as a batch table with agl's schema metadata; ``settings``: the run's (``agl.steps`` ...)."""
    full = [{"batch_id": batch_id, "step": step, "model_version": version, **r} for r in rows]
    table = pa.Table.from_pylist(full, schema=SCHEMA)
    return table.replace_schema_metadata(
        {
            "agl.batch_id": batch_id,
            "agl.step": str(step),
            "agl.model_version": version,
            "agl.estimator": "grpo",
            "agl.aggregation": "trajectory",
            **(settings or {}),
        }
    )
