"""The trainer of the example: pulls GRPO batches from agl, updates the tiny model, serves it.

Each step: take the next batch (HTTP pull from ``agl train grpo``'s server, or the files of
``--batches-dir``), one optimizer step on the clipped GRPO loss, save the weights, ask the
model server to load them (``POST /reload``), and acknowledge the batch with the metrics (the
step's timing among them: agl_trainer's WAIT_SECONDS, DECODE_SECONDS, UPDATE_SECONDS) and the
model the next rollouts should use. Stops after ``--steps`` batches, or when none comes
for ``--idle-timeout`` seconds.

    python train.py --url http://127.0.0.1:4318 --model-server http://127.0.0.1:8000 --steps 20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Protocol
from urllib.request import Request, urlopen

import pyarrow.parquet as pq
import torch
from agl_trainer import (
    DECODE_SECONDS,
    UPDATE_SECONDS,
    WAIT_SECONDS,
    Batch,
    BatchClient,
    BatchDirectory,
    ModelRef,
    to_tensors,
)
from grpo import grpo_step
from tiny_model import MODEL_NAME, build_model, build_tokenizer, load_weights, save_weights


class BatchSource(Protocol):
    """What train.py needs of a hand-off: BatchClient (HTTP) and BatchDirectory (files) both fit."""

    def next(self, wait: int = 30) -> Batch | None: ...

    def done(self, batch_id: str, metrics: Any = None, model: ModelRef | None = None) -> Any: ...


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--url", default="http://127.0.0.1:4318", help="the agl server of `agl train grpo`")
    source.add_argument("--batches-dir", help="take batches from this directory (agl train grpo --batches-dir)")
    parser.add_argument("--token", default=os.environ.get("AGL_TOKEN"), help="agl's token (default: AGL_TOKEN)")
    parser.add_argument("--model-server", default="http://127.0.0.1:8000", help="model_server.py's URL")
    parser.add_argument("--model-name", default=MODEL_NAME)
    parser.add_argument("--steps", type=int, default=20, help="batches to train on")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--clip-ratio", type=float, default=0.2)
    parser.add_argument("--temperature", type=float, default=1.0, help="the rollouts' sampling temperature")
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="initial weights: the same seed as model_server.py's")
    parser.add_argument("--init", help="start from weights saved before instead of the seed's")
    parser.add_argument("--out", default="checkpoints", help="where each step's weights are saved")
    parser.add_argument("--save-batches", help="also write each batch received to this directory (Parquet)")
    parser.add_argument("--wait", type=int, default=30, help="long-poll seconds per request for a batch")
    parser.add_argument("--idle-timeout", type=float, default=600, help="stop when no batch comes for this long")
    return parser.parse_args(argv)


def next_batch(source: BatchSource, wait: int, idle_timeout: float) -> Batch | None:
    """The next batch, asking again until one comes or ``idle_timeout`` seconds pass."""
    deadline = time.monotonic() + idle_timeout
    while True:
        left = deadline - time.monotonic()
        batch = source.next(wait=max(0, min(wait, int(left))))
        if batch is not None or time.monotonic() >= deadline:
            return batch


def reload_model_server(url: str, path: Path, version: str) -> None:
    """Asks model_server.py to serve the weights saved at ``path`` as ``version``."""
    body = json.dumps({"path": str(path.resolve()), "version": version}).encode()
    request = Request(f"{url}/reload", data=body, method="POST", headers={"content-type": "application/json"})
    with urlopen(request, timeout=120) as response:
        response.read()


def save_batch(batch: Batch, directory: Path) -> None:
    """Keeps a copy of the batch as received (its ``agl.*`` metadata too), for inspection."""
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(batch.table, directory / f"batch-{batch.step:06d}-{batch.batch_id}.parquet")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, args.seed)
    if args.init:
        load_weights(model, args.init)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    source: BatchSource = BatchDirectory(args.batches_dir) if args.batches_dir else BatchClient(args.url, args.token)
    server = args.model_server.rstrip("/")
    for done_steps in range(args.steps):
        asked = time.monotonic()
        batch = next_batch(source, args.wait, args.idle_timeout)
        if batch is None:
            print(f"train: no batch for {args.idle_timeout:.0f} s after {done_steps} step(s); stopping", flush=True)
            return 0 if done_steps else 1
        started = time.monotonic()
        if args.save_batches:
            save_batch(batch, Path(args.save_batches))
        decoding = time.monotonic()
        tensors = to_tensors(batch.table, tokenizer.pad_token_id)
        decoded = time.monotonic()
        metrics = grpo_step(
            model,
            optimizer,
            tensors,
            clip_ratio=args.clip_ratio,
            temperature=args.temperature,
            max_grad_norm=args.max_grad_norm,
        )
        timing = {
            WAIT_SECONDS: started - asked,
            DECODE_SECONDS: decoded - decoding,
            UPDATE_SECONDS: time.monotonic() - decoded,
        }
        version = str(batch.step)
        path = Path(args.out) / f"step-{batch.step:06d}"
        save_weights(model, path)
        reload_model_server(server, path, version)
        model_ref: ModelRef = {"endpoint": f"{server}/v1", "model": args.model_name, "version": version}
        source.done(batch.batch_id, {**metrics.as_dict(), **timing}, model_ref)
        print(
            f"train: step {batch.step} ({batch.table.num_rows} rows, generated by version {batch.model_version}): "
            f"reward {metrics.reward_mean:.3f}, loss {metrics.loss:+.4f}, ratio {metrics.ratio_mean:.4f}, "
            f"clipped {metrics.clip_fraction:.3f}; serving version {version} ({time.monotonic() - started:.1f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
