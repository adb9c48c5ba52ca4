"""train.py end to end over the files hand-off: a batch in, weights served, the done file out."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from conftest import RunningServer
from test_grpo_step import rows_from_server
from train import main


def write_batch(directory: Path, rows: list[dict[str, object]], batch_id: str, step: int) -> None:
    table = pa.Table.from_pylist(rows).replace_schema_metadata(
        {"agl.batch_id": batch_id, "agl.step": str(step), "agl.model_version": "0", "agl.estimator": "grpo"}
    )
    pq.write_table(table, directory / f"batch-{step:06d}-{batch_id}.parquet")


def test_a_step_trains_serves_the_new_weights_and_acknowledges_the_batch(server: RunningServer, tmp_path: Path) -> None:
    batches = tmp_path / "batches"
    batches.mkdir()
    rows = rows_from_server(server, ["Say a b c."], n=4)
    for index, row in enumerate(rows):
        row["reward"], row["advantage"] = float(index % 2), 1.0 if index % 2 else -1.0
    write_batch(batches, rows, "b-1", step=1)
    before = {name: value.clone() for name, value in server.service.model.state_dict().items()}

    code = main(
        [
            "--batches-dir", str(batches),
            "--model-server", server.url,
            "--steps", "2",  # one batch only: it stops once none comes
            "--idle-timeout", "0",
            "--out", str(tmp_path / "checkpoints"),
        ]
    )  # fmt: skip

    assert code == 0
    done = json.loads((batches / "batch-000001-b-1.done.json").read_text())
    assert done["model"] == {"endpoint": f"{server.url}/v1", "model": "tiny", "version": "1"}
    assert set(done["metrics"]) >= {"loss", "reward_mean", "clip_fraction", "approx_kl", "ratio_mean"}
    assert done["metrics"]["reward_mean"] == 0.5
    assert abs(done["metrics"]["ratio_mean"] - 1.0) < 1e-4  # the trainer starts from the server's weights
    assert server.service.version == "1"
    assert (tmp_path / "checkpoints" / "step-000001" / "model.safetensors").exists()
    after = server.service.model.state_dict()
    assert any(not torch.equal(after[name], value) for name, value in before.items())
