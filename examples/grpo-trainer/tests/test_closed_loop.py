"""The closed loop of issue 23 with the real processes: model_server.py, `agl train grpo`, train.py.

The model server logs every generation (version, prompt ids, answer ids and logprobs); train.py
keeps every batch it received. The test checks the batches against the log token by token, the
advantages against the rewards, the model versions against the steps, which two-turn rollouts
merged into one row, and that the mean reward rises over the run.

Needs agl built (`npx tsc -p tsconfig.json`: dist/) and the project's Node (node_modules).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow.parquet as pq
import pytest

EXAMPLE = Path(__file__).resolve().parent.parent
ROOT = EXAMPLE.parent.parent
CLI = ROOT / "dist" / "src" / "runtime" / "cli.js"

STEPS = 16
BATCH_SIZE = 2  # tasks per step, each a group
GROUP_SIZE = 16  # rollouts per task
EPSILON = 1e-6  # docs/training.md: grpo's default epsilon
STARTUP_SECONDS = 180  # a guard against a process that never starts, not a measurement


def project_node() -> str | None:
    """The Node the project pins (node_modules' own), else one on PATH that `npm test` put first."""
    for candidate in (ROOT / "node_modules" / "node" / "bin" / "node", ROOT / "node_modules" / ".bin" / "node"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("node")


def node_major(node: str) -> int:
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
    return int(version.strip().lstrip("v").split(".")[0])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Running:
    """A process started by the test; its lines of one stream are kept, and awaited for a text."""

    name: str
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _ended: bool = False

    @staticmethod
    def start(name: str, args: list[str], stream: str, out: Path) -> Running:
        """Starts ``args``; ``stream`` (stdout or stderr) is read here, the other goes to ``out``."""
        sink = out.open("w")
        process = subprocess.Popen(
            args,
            cwd=ROOT,
            text=True,
            stdout=subprocess.PIPE if stream == "stdout" else sink,
            stderr=subprocess.PIPE if stream == "stderr" else sink,
        )
        running = Running(name, process)
        pipe = process.stdout if stream == "stdout" else process.stderr
        assert pipe is not None
        threading.Thread(target=running._read, args=(pipe,), daemon=True).start()
        return running

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, text: str) -> str:
        """The first line holding ``text``; fails when the process ends (or never says it) first."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: self._ended or any(text in line for line in self.lines), timeout=STARTUP_SECONDS
            )
            hit = next((line for line in self.lines if text in line), None)
        assert found and hit is not None, f"{self.name} never printed {text!r}:\n" + "\n".join(self.lines[-40:])
        return hit

    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass(frozen=True)
class Generation:
    version: str
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]


@dataclass
class Run:
    """What one closed loop left: the exit codes, the batches, the server's log, the steps."""

    agl_code: int
    train_code: int
    agl_output: str
    train_output: str
    batches: list[dict[str, Any]]  # one per step: metadata and rows
    generations: dict[tuple[int, ...], list[Generation]]  # by prompt ids
    steps: list[dict[str, Any]]  # training_steps, by step
    seconds: float


def read_generations(path: Path) -> dict[tuple[int, ...], list[Generation]]:
    by_prompt: dict[tuple[int, ...], list[Generation]] = defaultdict(list)
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        prompt = tuple(entry["prompt_ids"])
        for answer in entry["answers"]:
            by_prompt[prompt].append(
                Generation(entry["version"], prompt, tuple(answer["token_ids"]), tuple(answer["logprobs"]))
            )
    return by_prompt


def read_batches(directory: Path) -> list[dict[str, Any]]:
    batches = []
    for path in sorted(directory.glob("batch-*.parquet")):
        table = pq.read_table(path)
        metadata = {key.decode(): value.decode() for key, value in (table.schema.metadata or {}).items()}
        batches.append({"metadata": metadata, "rows": table.to_pylist()})
    return batches


def run_loop(tmp: Path, node: str) -> Run:
    """Model server, agl train grpo and train.py as processes, each to its end."""
    started = time.monotonic()
    python = sys.executable
    generations_log = tmp / "generations.jsonl"
    server = Running.start(
        "model_server.py",
        [python, str(EXAMPLE / "model_server.py"), "--port", "0", "--seed", "0", "--log", str(generations_log)],
        "stdout",
        tmp / "model-server.err",
    )
    processes = [server]
    try:
        ready = server.wait_for("model server: tiny (version 0) at ")
        endpoint = ready.split(" at ")[1].strip()  # http://127.0.0.1:PORT/v1
        base = endpoint.removesuffix("/v1")
        port = free_port()
        db = tmp / "agl.duckdb"
        agl = Running.start(
            "agl train grpo",
            [
                node, str(CLI), "train", "grpo",
                "--agent", "examples/grpo-trainer/agent.mjs",
                "--train", "examples/grpo-trainer/train.jsonl",
                "--llm-model", "tiny", "--llm-endpoint", endpoint,
                "--db", str(db), "--port", str(port), "--runners", "8",
                "--steps", str(STEPS), "--batch-size", str(BATCH_SIZE), "--group-size", str(GROUP_SIZE),
                "--aggregation", "trajectory",
            ],
            "stderr",
            tmp / "agl.out",
        )  # fmt: skip
        processes.append(agl)
        agl.wait_for(f"http://127.0.0.1:{port}/v1/agl/training/batches/next")
        trainer = Running.start(
            "train.py",
            [
                python, str(EXAMPLE / "train.py"),
                "--url", f"http://127.0.0.1:{port}", "--model-server", base,
                "--steps", str(STEPS), "--out", str(tmp / "checkpoints"),
                "--save-batches", str(tmp / "batches"), "--seed", "0", "--idle-timeout", "300",
            ],
            "stdout",
            tmp / "train.err",
        )  # fmt: skip
        processes.append(trainer)
        train_code = trainer.process.wait()
        agl_code = agl.process.wait(timeout=STARTUP_SECONDS) if train_code == 0 else -1
    finally:
        for process in reversed(processes):
            process.stop()
    steps_json = subprocess.run(
        [
            node, str(CLI), "query",
            "SELECT step, status, model_version, next_model_version, rollouts, kept_rollouts, groups, rows,"
            " reward_mean, dropped_failed, dropped_no_token_ids FROM training_steps ORDER BY step",
            "--db", str(db), "--format", "json",
        ],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return Run(
        agl_code=agl_code,
        train_code=train_code,
        agl_output=agl.output(),
        train_output=trainer.output() + (tmp / "train.err").read_text()[-4000:],
        batches=read_batches(tmp / "batches"),
        generations=read_generations(generations_log),
        steps=json.loads(steps_json),
        seconds=time.monotonic() - started,
    )


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    if not CLI.is_file():
        pytest.fail(f"agl is not built ({CLI.relative_to(ROOT)} is missing): run `npx tsc -p tsconfig.json`")
    node = project_node()
    if node is None:
        pytest.fail("no node: run `npm ci` (the project's Node is node_modules/node)")
    if node_major(node) < 24:
        pytest.fail(f"{node} is Node {node_major(node)}; agl needs the project's Node 24 (node_modules/node)")
    yield run_loop(tmp_path_factory.mktemp("closed-loop"), node)


def segments(mask: list[int]) -> list[tuple[int, int]]:
    """The [start, end) runs of 1 in a response mask: the generated answers of a row."""
    runs: list[tuple[int, int]] = []
    for index, value in enumerate(mask):
        if value == 1 and (not runs or runs[-1][1] != index):
            runs.append((index, index + 1))
        elif value == 1:
            runs[-1] = (runs[-1][0], index + 1)
    return runs


def matching_generation(run: Run, context: list[int], answer: list[int], version: str) -> Generation | None:
    """The logged generation for this prompt (context) whose answer is exactly these ids, by this version."""
    for generation in run.generations.get(tuple(context), []):
        if generation.token_ids == tuple(answer) and generation.version == version:
            return generation
    return None


def test_both_processes_end_well_after_every_step(loop: Run) -> None:
    assert loop.train_code == 0, loop.train_output
    assert loop.agl_code == 0, loop.agl_output
    assert len(loop.batches) == STEPS
    assert [step["step"] for step in loop.steps] == list(range(1, STEPS + 1))
    assert all(step["status"] == "trained" for step in loop.steps)


def test_each_step_is_generated_by_the_model_the_trainer_served_last(loop: Run) -> None:
    for step, batch in enumerate(loop.batches, start=1):
        version = str(step - 1)
        assert batch["metadata"]["agl.step"] == str(step)
        assert batch["metadata"]["agl.model_version"] == version
        assert batch["metadata"]["agl.aggregation"] == "trajectory"
        assert {row["model_version"] for row in batch["rows"]} == {version}
        assert {row["step"] for row in batch["rows"]} == {step}
        recorded = loop.steps[step - 1]
        assert (recorded["model_version"], recorded["next_model_version"]) == (version, str(step))


def test_every_trained_token_and_logprob_is_what_the_model_server_generated(loop: Run) -> None:
    checked = 0
    for batch in loop.batches:
        for row in batch["rows"]:
            prompt, response, mask = row["prompt_ids"], row["response_ids"], row["response_mask"]
            logprobs = row["response_logprobs"]
            assert len(response) == len(mask) == len(logprobs) > 0
            assert tuple(prompt) in loop.generations  # the prompt of a request the server answered
            answers = segments(mask)
            assert answers and answers[0][0] == 0  # a row's response starts with an answer
            for start, end in answers:
                # Each answer was generated for everything before it: the prompt, earlier answers,
                # and the inserted tokens between them.
                context = prompt + response[:start]
                generation = matching_generation(loop, context, response[start:end], row["model_version"])
                assert generation is not None, f"no generation of {response[start:end]} for {context}"
                np.testing.assert_allclose(logprobs[start:end], generation.logprobs, rtol=0, atol=1e-6)
                checked += 1
            inserted = [index for index, value in enumerate(mask) if value == 0]
            assert all(logprobs[index] == 0 for index in inserted)
    assert checked >= STEPS * BATCH_SIZE * GROUP_SIZE * 2  # two answers per rollout, merged or not


def test_advantages_are_the_groups_normalized_rewards(loop: Run) -> None:
    for batch in loop.batches:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in batch["rows"]:
            groups[row["group_id"]].append(row)
        assert len(groups) == BATCH_SIZE
        for rows in groups.values():
            rewards = np.array([row["reward"] for row in rows], dtype=np.float64)
            advantages = np.array([row["advantage"] for row in rows], dtype=np.float64)
            if np.all(rewards == rewards[0]):
                expected = np.zeros_like(rewards)
            else:  # the rows are the samples; std with Bessel's correction, as torch.std
                expected = (rewards - rewards.mean()) / (rewards.std(ddof=1) + EPSILON)
            np.testing.assert_allclose(advantages, expected, rtol=1e-5, atol=1e-5)


def rows_by_rollout(batch: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rollouts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in batch["rows"]:
        rollouts[row["rollout_id"]].append(row)
    return rollouts


def merge_counts(loop: Run) -> list[tuple[int, int]]:
    """Per step: rollouts whose two turns merged into one row, and those left as two rows."""
    counts = []
    for batch in loop.batches:
        merged = split = 0
        for rows in rows_by_rollout(batch).values():
            if len(rows) == 1:
                row = rows[0]
                answers = segments(row["response_mask"])
                assert len(answers) == 2  # two turns, one row: answer, inserted tokens, answer
                between = range(answers[0][1], answers[1][0])
                assert len(between) > 0 and all(row["response_mask"][index] == 0 for index in between)
                merged += 1
            else:
                first, second = rows
                assert len(segments(first["response_mask"])) == len(segments(second["response_mask"])) == 1
                # The second prompt does not continue the first prompt and answer: the answer's
                # text re-tokenized to other ids (a merged pair, a lost special token).
                continued = first["prompt_ids"] + first["response_ids"]
                assert second["prompt_ids"][: len(continued)] != continued
                split += 1
        counts.append((merged, split))
    return counts


def test_two_turns_merge_into_one_row_unless_the_answer_re_tokenizes_differently(loop: Run) -> None:
    counts = merge_counts(loop)
    print(f"\nmerged / split rollouts per step: {counts}")
    assert all(merged + split == BATCH_SIZE * GROUP_SIZE for merged, split in counts)
    assert sum(merged for merged, _ in counts) > 0
    assert all(step["kept_rollouts"] == BATCH_SIZE * GROUP_SIZE for step in loop.steps)


def test_the_mean_reward_rises(loop: Run) -> None:
    rewards = [step["reward_mean"] for step in loop.steps]
    from_batches = [
        float(np.mean([rows[0]["reward"] for rows in rows_by_rollout(batch).values()])) for batch in loop.batches
    ]
    np.testing.assert_allclose(rewards, from_batches, rtol=1e-5, atol=1e-6)
    first, last = float(np.mean(rewards[:2])), float(np.mean(rewards[-2:]))
    print(f"\nmean reward per step: {[round(r, 3) for r in rewards]} ({loop.seconds:.0f} s)")
    assert last > first + 0.1, f"mean reward {first:.3f} (steps 1-2) -> {last:.3f} (last two steps)"
