"""The step timing agl_trainer.trl's GRPO trainer logs to TRL and sends agl with each batch's acknowledgement.

The tiny model of examples/grpo-trainer with LoRA, one step on a batch from a batches directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
from agl_trainer import DECODE_SECONDS, UPDATE_SECONDS, WAIT_SECONDS, BatchDirectory
from agl_trainer.trl import AglGRPOTrainer, PolicyServer
from batch_rows import batch_table, row
from peft import LoraConfig
from trl import GRPOConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "grpo-trainer"))
from tiny_model import build_model, build_tokenizer

TIMING = (WAIT_SECONDS, DECODE_SECONDS, UPDATE_SECONDS)


def test_the_acknowledgement_and_trl_log_carry_the_steps_wait_decode_and_update_seconds(tmp_path: Path) -> None:
    batches = tmp_path / "batches"
    batches.mkdir()
    rows = [
        row([5, 6], [8, 9, 1], group="g", rollout=f"ro-{index}", reward=float(index), advantage=index - 1.5)
        for index in range(4)
    ]
    pq.write_table(batch_table(rows), batches / "batch-000001-b-1.parquet")
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=0)
    policy = PolicyServer(model, tokenizer, "tiny", 1.0, max_tokens=8)
    server = policy.start(port=0)
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        num_generations=4,
        per_device_train_batch_size=4,
        logging_steps=1,
        disable_dropout=True,
        gradient_checkpointing=False,
        report_to=[],
        use_cpu=True,
    )
    trainer = AglGRPOTrainer(
        model=model,
        args=config,
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, target_modules=["c_attn"], lora_dropout=0.0, task_type="CAUSAL_LM"),
        source=BatchDirectory(batches),
        policy=policy,
    )
    try:
        trainer.train()
    finally:
        server.shutdown()
    metrics = json.loads((batches / "batch-000001-b-1.done.json").read_text())["metrics"]
    # The step's own log, not the run's summary that TRL logs after it.
    assert "loss" in metrics and "train_runtime" not in metrics
    step_log = next(entry for entry in trainer.state.log_history if "loss" in entry)
    for key in TIMING:
        assert metrics[key] >= 0 and step_log[key] == metrics[key], key
    # TRL's step_time is training_step's: the wait and the decode are in it, the optimizer step is not.
    assert metrics["step_time"] >= metrics[WAIT_SECONDS] + metrics[DECODE_SECONDS]
