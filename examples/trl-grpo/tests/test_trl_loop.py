"""The closed loop through TRL with LoRA: `agl train grpo` + examples/trl-grpo/train.py.

One trainer process holds the policy server and TRL's GRPOTrainer; agl hands batches over as
files (``--batches-dir``, left in the folder for the checks). The first trainer is stopped
(SIGTERM) once it logged a step and a second one resumes from its last checkpoint
(``resume_from_checkpoint``) while agl keeps running. The policy servers log every generation;
the test checks the batches against the log token by token, the model versions against the
steps, TRL's own trainer_state.json, and that the mean reward rises.

Needs agl built (`npx tsc -p tsconfig.json`: dist/) and the project's Node (node_modules).
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parent.parent
ROOT = EXAMPLE.parent.parent
sys.path.insert(0, str(ROOT / "examples" / "grpo-trainer" / "tests"))

from test_closed_loop import (  # noqa: E402  (the helpers of examples/grpo-trainer's closed loop)
    CLI,
    Generation,
    Running,
    free_port,
    node_major,
    project_node,
    read_batches,
    read_generations,
    rows_by_rollout,
    segments,
)

STEPS = 12
BATCH_SIZE = 2
GROUP_SIZE = 8
# Mean reward of the last three steps over the first three. The policy server seeds each request
# from its prompt and the trainer orders rows by content, so the loop is the same run to run on
# one machine: 0.041 -> 0.153 (+0.112) in 2 of 2 runs, every answer and logprob equal. The rise
# still hangs on the draws: sampling seeds 1, 2, 3 gave +0.114, -0.028, +0.270.
MARGIN = 0.08


@dataclass
class Run:
    agl_code: int
    train_codes: tuple[int, int]
    stopped_at: int  # the step of the checkpoint the second trainer resumed from
    output: str
    batches: list[dict[str, Any]]
    generations: dict[tuple[int, ...], list[Generation]]
    trainer_state: dict[str, Any]


def start_trainer(tmp: Path, name: str, batches_dir: Path, sizes: list[str], *extra: str) -> Running:
    return Running.start(
        name,
        [
            sys.executable, str(EXAMPLE / "train.py"), "--batches-dir", str(batches_dir), "--port", "0",
            "--out", str(tmp / "out"), "--log", str(tmp / "generations.jsonl"), "--idle-timeout", "300",
            *sizes, *extra,
        ],
        "stdout",
        tmp / f"{name}.err",
    )  # fmt: skip


def run_loop(tmp: Path, node: str) -> Run:
    batches_dir = tmp / "batches"
    batches_dir.mkdir()
    sizes = ["--steps", str(STEPS), "--batch-size", str(BATCH_SIZE), "--group-size", str(GROUP_SIZE)]
    first = start_trainer(tmp, "trainer-1", batches_dir, sizes)
    processes = [first]
    second = None
    try:
        endpoint = first.wait_for("policy server: tiny at ").split(" at ")[1].strip()
        agl = Running.start(
            "agl train grpo",
            [
                node, str(CLI), "train", "grpo",
                "--agent", "examples/grpo-trainer/agent.mjs", "--train", "examples/grpo-trainer/train.jsonl",
                "--llm-model", "tiny", "--llm-endpoint", endpoint, "--db", str(tmp / "agl.duckdb"),
                "--port", str(free_port()), "--runners", "8", "--aggregation", "trajectory",
                "--batches-dir", str(batches_dir), *sizes,
            ],
            "stderr",
            tmp / "agl.out",
        )  # fmt: skip
        processes.append(agl)
        first.wait_for("'loss'")  # TRL logged a step
        first.process.send_signal(signal.SIGTERM)
        first_code = first.process.wait()
        stopped_at = max(int(path.name.split("-")[1]) for path in (tmp / "out").glob("checkpoint-*"))
        second = start_trainer(
            tmp, "trainer-2", batches_dir, sizes, "--resume", str(tmp / "out" / f"checkpoint-{stopped_at}")
        )
        processes.append(second)
        second_code = second.process.wait()
        agl_code = agl.process.wait(timeout=120) if second_code == 0 else -1
    finally:
        for process in reversed(processes):
            process.stop()
    return Run(
        agl_code=agl_code,
        train_codes=(first_code, second_code),
        stopped_at=stopped_at,
        output="\n".join(p.output() for p in processes) + (tmp / "trainer-2.err").read_text()[-4000:],
        batches=read_batches(batches_dir),
        generations=read_generations(tmp / "generations.jsonl"),
        trainer_state=json.loads((tmp / "out" / f"checkpoint-{STEPS}" / "trainer_state.json").read_text()),
    )


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    if not CLI.is_file():
        pytest.fail(f"agl is not built ({CLI.relative_to(ROOT)} is missing): run `npx tsc -p tsconfig.json`")
    node = project_node()
    if node is None or node_major(node) < 24:
        pytest.fail("agl needs the project's Node 24 (node_modules/node): run `npm ci`")
    yield run_loop(tmp_path_factory.mktemp("trl-loop"), node)


def test_both_processes_end_well_after_every_step(loop: Run) -> None:
    assert loop.train_codes == (0, 0), loop.output
    assert loop.agl_code == 0, loop.output
    assert len(loop.batches) == STEPS


def test_the_resumed_trainer_goes_on_with_new_unique_model_versions(loop: Run) -> None:
    assert 1 <= loop.stopped_at < STEPS
    versions = [batch["metadata"]["agl.model_version"] for batch in loop.batches]
    assert versions == [str(step) for step in range(STEPS)]  # one per step, none used twice
    # The batch the first trainer trained last was acknowledged by the second, not trained again.
    steps = [entry["step"] for entry in loop.trainer_state["log_history"] if "loss" in entry]
    assert steps == list(range(1, STEPS + 1))


def test_each_step_is_generated_by_the_model_of_the_step_before(loop: Run) -> None:
    for step, batch in enumerate(loop.batches, start=1):
        assert batch["metadata"]["agl.step"] == str(step)
        assert {row["model_version"] for row in batch["rows"]} == {str(step - 1)}


def test_trained_tokens_and_logprobs_are_what_the_policy_server_generated_inserted_ones_masked(loop: Run) -> None:
    checked = 0
    for batch in loop.batches:
        for row in batch["rows"]:
            prompt, response, mask, logprobs = (
                row["prompt_ids"],
                row["response_ids"],
                row["response_mask"],
                row["response_logprobs"],
            )
            for start, end in segments(mask):
                context = tuple(prompt + response[:start])
                found = [
                    g
                    for g in loop.generations.get(context, [])
                    if g.token_ids == tuple(response[start:end]) and g.version == row["model_version"]
                ]
                assert found, f"no generation of {response[start:end]} for {context}"
                np.testing.assert_allclose(logprobs[start:end], found[0].logprobs, rtol=0, atol=1e-6)
                checked += 1
            between = [index for index, value in enumerate(mask) if value == 0]
            assert all(logprobs[index] == 0 for index in between)
    assert checked >= STEPS * BATCH_SIZE * GROUP_SIZE * 2  # two answers per rollout


def test_trl_trainer_state_holds_the_loss_of_every_step(loop: Run) -> None:
    losses = [entry["loss"] for entry in loop.trainer_state["log_history"] if "loss" in entry]
    assert len(losses) == STEPS and all(np.isfinite(value) for value in losses)


def test_the_mean_reward_rises(loop: Run) -> None:
    rewards = [
        float(np.mean([rows[0]["reward"] for rows in rows_by_rollout(batch).values()])) for batch in loop.batches
    ]
    first, last = float(np.mean(rewards[:3])), float(np.mean(rewards[-3:]))
    print(f"\nmean reward per step: {[round(r, 3) for r in rewards]}")
    assert last > first + MARGIN, f"mean reward {first:.3f} (steps 1-3) -> {last:.3f} (last three)"
