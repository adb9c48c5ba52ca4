"""to_tensors against tensors worked out by hand."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch
from agl_trainer import to_tensors
from batch_rows import batch_table, row

PAD = 0


def test_pads_prompts_left_and_responses_right_and_broadcasts_advantages() -> None:
    table = batch_table(
        [
            row([5, 6, 7], [8, 9], logprobs=[-0.1, -0.2], reward=1.0, advantage=0.7, group="g1"),
            row(
                [5],
                [8, 20, 21, 9],
                mask=[1, 0, 0, 1],
                logprobs=[-0.3, 0.0, 0.0, -0.4],
                reward=0.0,
                advantage=-0.7,
                group="g1",
            ),
            row([4, 5], [9], logprobs=[-1.5], reward=0.5, advantage=0.0, group="g2"),
        ]
    )
    t = to_tensors(table, pad_token_id=PAD)
    assert torch.equal(t["prompts"], torch.tensor([[5, 6, 7], [0, 0, 5], [0, 4, 5]]))
    assert torch.equal(t["responses"], torch.tensor([[8, 9, 0, 0], [8, 20, 21, 9], [9, 0, 0, 0]]))
    assert torch.equal(
        t["attention_mask"],
        torch.tensor([[1, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 1], [0, 1, 1, 1, 0, 0, 0]]),
    )
    assert torch.equal(t["response_mask"], torch.tensor([[1, 1, 0, 0], [1, 0, 0, 1], [1, 0, 0, 0]]))
    assert torch.equal(
        t["old_log_probs"],
        torch.tensor([[-0.1, -0.2, 0, 0], [-0.3, 0, 0, -0.4], [-1.5, 0, 0, 0]], dtype=torch.float32),
    )
    assert t["advantages"] is not None
    assert torch.equal(
        t["advantages"],
        torch.tensor([[0.7, 0.7, 0, 0], [-0.7, 0, 0, -0.7], [0, 0, 0, 0]], dtype=torch.float32),
    )
    assert torch.equal(t["rewards"], torch.tensor([1.0, 0.0, 0.5]))
    assert t["uid"] == ["g1", "g1", "g2"]
    assert t["prompts"].dtype == torch.long and t["responses"].dtype == torch.long
    assert t["attention_mask"].dtype == torch.long and t["response_mask"].dtype == torch.long
    assert t["old_log_probs"].dtype == torch.float32


def test_pad_token_id_fills_the_padding() -> None:
    t = to_tensors(batch_table([row([1, 2], [3]), row([1], [3, 4])]), pad_token_id=99)
    assert torch.equal(t["prompts"], torch.tensor([[1, 2], [99, 1]]))
    assert torch.equal(t["responses"], torch.tensor([[3, 99], [3, 4]]))


def test_reads_tables_of_several_chunks_and_slices() -> None:
    first = batch_table([row([1], [2]), row([3, 4], [5])])
    second = batch_table([row([6], [7, 8], advantage=1.0)])
    table = pa.concat_tables([first, second]).slice(1)
    t = to_tensors(table, pad_token_id=0)
    assert torch.equal(t["prompts"], torch.tensor([[3, 4], [0, 6]]))
    assert torch.equal(t["responses"], torch.tensor([[5, 0], [7, 8]]))
    assert t["advantages"] is not None
    assert torch.equal(t["advantages"], torch.tensor([[0.0, 0.0], [1.0, 1.0]]))


def test_no_advantages_when_the_estimator_gave_none() -> None:
    t = to_tensors(batch_table([row([1], [2], advantage=None), row([1], [3], advantage=None)]), pad_token_id=0)
    assert t["advantages"] is None


def test_an_empty_batch_is_an_error() -> None:
    with pytest.raises(ValueError, match="no rows"):
        to_tensors(batch_table([]), pad_token_id=0)


def test_a_missing_column_is_named() -> None:
    table = batch_table([row([1], [2])]).drop_columns(["response_logprobs", "advantage"])
    with pytest.raises(ValueError, match="no column response_logprobs, advantage"):
        to_tensors(table, pad_token_id=0)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            row([1], [2, 3], mask=[1], rollout="ro-bad"),
            r"row 1 \(rollout ro-bad, attempt at-ro-bad\): response_mask has 1 values, response_ids 2",
        ),
        (
            row([1], [2, 3], logprobs=[-1.0, -1.0, -1.0], rollout="ro-bad"),
            r"row 1 \(rollout ro-bad.*response_logprobs has 3 values, response_ids 2",
        ),
        (row([1], [2], mask=[2], rollout="ro-bad"), r"row 1 \(rollout ro-bad.*response_mask holds 2, not 0 or 1"),
        (row([], [2], rollout="ro-bad"), r"row 1 \(rollout ro-bad.*prompt_ids is empty"),
        (row([1], [], rollout="ro-bad"), r"row 1 \(rollout ro-bad.*response_ids is empty"),
        (row([1], [2], advantage=None, rollout="ro-bad"), r"row 1 \(rollout ro-bad.*advantage is null"),
    ],
)
def test_a_row_that_cannot_be_trained_on_is_named(bad: dict[str, object], message: str) -> None:
    table = batch_table([row([1], [2], rollout="ro-good"), bad])
    with pytest.raises(ValueError, match=message):
        to_tensors(table, pad_token_id=0)


def test_a_null_list_is_named() -> None:
    good = row([1], [2])
    table = batch_table([good, {**good, "rollout_id": "ro-null", "prompt_ids": None}])
    with pytest.raises(ValueError, match=r"row 1 \(rollout ro-null.*prompt_ids is null"):
        to_tensors(table, pad_token_id=0)


def test_a_null_element_is_named() -> None:
    good = row([1], [2])
    table = batch_table([good, good, {**good, "rollout_id": "ro-hole", "response_ids": [2, None]}])
    with pytest.raises(ValueError, match=r"row 2 \(rollout ro-hole.*response_ids holds a null element"):
        to_tensors(table, pad_token_id=0)


def test_wider_arrow_types_are_read_too() -> None:
    # agl's Parquet export writes logprobs as DOUBLE[]; Arrow readers may give large lists.
    table = batch_table([row([1, 2], [3, 4], logprobs=[-0.25, -0.5])])
    index = table.schema.get_field_index("response_logprobs")
    table = table.set_column(index, "response_logprobs", table.column(index).cast(pa.large_list(pa.float64())))
    t = to_tensors(table, pad_token_id=0)
    assert t["old_log_probs"].dtype == torch.float32
    assert torch.equal(t["old_log_probs"], torch.tensor([[-0.25, -0.5]]))
