"""BatchDirectory over a real directory of Parquet batch files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from agl_trainer import BatchAlreadyDoneError, BatchDirectory, BatchNotFoundError, ModelRef
from batch_rows import batch_table, row


def write_batch(directory: Path, table: pa.Table) -> Path:
    """As agl does: a temp name first, then the batch name."""
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    name = f"batch-{int(meta['agl.step']):06d}-{meta['agl.batch_id']}.parquet"
    temp = directory / f".{name}.tmp"
    pq.write_table(table, temp)
    os.replace(temp, directory / name)
    return directory / name


def test_next_is_the_oldest_batch_not_done_and_done_writes_the_done_file(tmp_path: Path) -> None:
    write_batch(tmp_path, batch_table([row([1], [2])], batch_id="b-2", step=2, version="1"))
    first = batch_table([row([1], [2], reward=1.0, advantage=0.5)], batch_id="b-1", step=1)
    write_batch(tmp_path, first)
    (tmp_path / ".batch-000003-b-3.parquet.tmp").write_bytes(b"partial")  # agl still writing it
    directory = BatchDirectory(tmp_path)

    batch = directory.next()
    assert batch is not None
    assert (batch.batch_id, batch.step, batch.model_version) == ("b-1", 1, "0")
    assert batch.metadata["agl.estimator"] == "grpo"
    assert batch.table.equals(first)
    assert directory.next() is not None and directory.next().batch_id == "b-1"  # type: ignore[union-attr]

    model: ModelRef = {"endpoint": "http://127.0.0.1:8000/v1", "model": "tiny", "version": "1"}
    done = directory.done("b-1", {"loss": 0.5}, model)
    assert done == tmp_path / "batch-000001-b-1.done.json"
    assert json.loads(done.read_text()) == {"metrics": {"loss": 0.5}, "model": model}
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") and "done" in p.name] == []

    second = directory.next()
    assert second is not None and (second.batch_id, second.step, second.model_version) == ("b-2", 2, "1")
    directory.done("b-2")
    assert json.loads((tmp_path / "batch-000002-b-2.done.json").read_text()) == {"metrics": {}}
    assert directory.next() is None


def test_next_waits_for_a_batch_to_appear(tmp_path: Path) -> None:
    table = batch_table([row([1], [2])], batch_id="b-1")

    class WritesOnFirstLook(BatchDirectory):
        """Stands for agl: the batch lands between the first look and the second."""

        looks = 0

        def pending(self) -> list[Path]:
            found = super().pending()
            self.looks += 1
            if self.looks == 1:
                write_batch(tmp_path, table)
            return found

    directory = WritesOnFirstLook(tmp_path, poll_interval=0.01)
    batch = directory.next(wait=60)
    assert batch is not None and batch.batch_id == "b-1"
    assert directory.looks == 2


def test_ids_come_from_the_file_name_when_the_file_has_no_metadata(tmp_path: Path) -> None:
    table = batch_table([row([1], [2])]).replace_schema_metadata({"agl.model_version": "4"})
    pq.write_table(table, tmp_path / "batch-000012-abc-def.parquet")
    batch = BatchDirectory(tmp_path).next()
    assert batch is not None and (batch.batch_id, batch.step, batch.model_version) == ("abc-def", 12, "4")


def test_done_of_an_unknown_or_finished_batch(tmp_path: Path) -> None:
    write_batch(tmp_path, batch_table([row([1], [2])], batch_id="b-1"))
    directory = BatchDirectory(tmp_path)
    with pytest.raises(BatchNotFoundError, match="no batch file for batch b-9"):
        directory.done("b-9")
    directory.done("b-1")
    with pytest.raises(BatchAlreadyDoneError, match="batch b-1 is done already"):
        directory.done("b-1")


def test_a_path_that_is_no_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a directory"):
        BatchDirectory(tmp_path / "missing")
