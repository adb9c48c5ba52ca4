"""TRL's SFTTrainer as the training command of ``agl train sft``.

    agl train sft ... --train-cmd 'python -m agl_trainer.trl.sft {dataset} {output} --model {model}'

Fine-tunes ``--model`` (a Hugging Face model folder or hub id; ``{model}`` is the model the
iteration's rollouts used) on agl's chat JSONL (``{"messages": [...]}`` per line), with the loss
on the last assistant message only (TRL's completion-only loss: each transcript becomes a prompt,
every message before the last, and a completion, the last assistant message). With ``--lora``
it trains a LoRA adapter and merges it, so ``{output}`` is a whole model any server loads. It
saves model and tokenizer to ``{output}``, optionally asks a model server to load them
(``--reload URL``: ``POST URL {"path", "version", "name"}``, as examples/grpo-trainer's
model_server.py takes it), and prints ``AGL_MODEL_NAME={output}``, which agl publishes as the
model of the next iteration's rollouts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from urllib.request import Request, urlopen

from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
from trl import SFTConfig, SFTTrainer


def prompt_completion(path: Path) -> Dataset:
    """agl's chat JSONL as TRL's conversational prompt-completion rows; a bad line is a ValueError naming it."""
    rows: dict[str, list[Any]] = {"prompt": [], "completion": []}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path}:{number}: not a JSON object with messages") from None
        if not isinstance(messages, list) or len(messages) < 2 or not isinstance(messages[-1], dict):
            raise ValueError(f"{path}:{number}: messages must be a list of at least two messages")
        if messages[-1].get("role") != "assistant":
            raise ValueError(f"{path}:{number}: the last message is not the assistant's")
        rows["prompt"].append(messages[:-1])
        rows["completion"].append([messages[-1]])
    if not rows["prompt"]:
        raise ValueError(f"{path}: no records to train on")
    return Dataset.from_dict(rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m agl_trainer.trl.sft", description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="agl's chat JSONL ({dataset})")
    parser.add_argument("output", type=Path, help="where the trained model goes ({output})")
    parser.add_argument("--model", required=True, help="the model to start from: a folder or hub id ({model})")
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter (merged before saving)")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--lora-targets", default="all-linear", help="comma-separated module names, or all-linear")
    parser.add_argument("--reload", help="a model server's reload URL to POST the saved model to")
    parser.add_argument("--version", default="", help="the version named in the reload request ({iteration})")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU even when a GPU is there")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.epochs <= 0 or args.lr <= 0 or args.batch_size < 1 or args.lora_rank < 1:
        parser.error("--epochs, --lr, --batch-size and --lora-rank must be positive")
    if args.reload and not args.reload.startswith(("http://", "https://")):
        parser.error(f"--reload must be an http(s) URL, not {args.reload!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        dataset = prompt_completion(args.dataset)
    except (OSError, ValueError) as error:
        print(f"agl_trainer.trl.sft: {error}", file=sys.stderr)
        return 2
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    # SFTTrainer wraps the model in the adapter before Trainer seeds: seeded here, the adapter's
    # initial weights (and so the trained model) are the same run to run.
    set_seed(args.seed)
    targets: str | list[str] = args.lora_targets if args.lora_targets == "all-linear" else args.lora_targets.split(",")
    lora = LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, target_modules=targets, task_type="CAUSAL_LM")
    config = SFTConfig(
        output_dir=str(args.output / "trainer"),
        num_train_epochs=args.epochs,
        learning_rate=args.lr,
        per_device_train_batch_size=args.batch_size,
        completion_only_loss=True,
        loss_type="nll",  # TRL's chunked loss refuses a LoRA-wrapped lm_head (all-linear wraps it)
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=args.cpu,
        seed=args.seed,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora if args.lora else None,
    )
    result = trainer.train()
    trained = trainer.model.merge_and_unload() if args.lora else trainer.model
    trained.save_pretrained(args.output)
    tokenizer.save_pretrained(args.output)
    print(f"agl_trainer.trl.sft: {len(dataset)} record(s), loss {result.training_loss:.4f}; saved {args.output}")
    if args.reload:
        body = {
            "path": str(args.output.resolve()),
            "version": args.version or str(args.output),
            "name": str(args.output),
        }
        request = Request(args.reload, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
        with urlopen(request, timeout=300) as response:
            response.read()
    print(f"AGL_MODEL_NAME={args.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
