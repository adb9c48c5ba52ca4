"""The files variant of the hand-off: ``agl train grpo --batches-dir DIR``.

agl writes each batch as ``DIR/batch-<step, 6 digits>-<batch_id>.parquet`` (temp name, then
rename); the trainer ends the step by writing ``<same stem>.done.json`` the same way. agl
polls the directory, so nothing here needs a server.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from .batch import Batch, ModelRef, batch_of, done_body
from .errors import BatchAlreadyDoneError, BatchNotFoundError

BATCH_FILE = re.compile(r"^batch-(?P<step>\d{6,})-(?P<batch_id>.+)\.parquet$")
DONE_SUFFIX = ".done.json"


class BatchDirectory:
    """A trainer's side of the batches directory.

    ``next`` gives the oldest batch (lowest step) that has no done file yet, so a trainer
    that restarts picks up where it stopped; ``done`` writes the done file atomically.
    ``poll_interval`` is how often ``next`` looks again while it waits.
    """

    def __init__(self, path: str | os.PathLike[str], poll_interval: float = 0.5) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise ValueError(f"{self.path} is not a directory")
        self.poll_interval = poll_interval

    def pending(self) -> list[Path]:
        """The batch files without a done file, oldest step first."""
        found: list[tuple[int, str, Path]] = []
        for entry in self.path.iterdir():
            match = BATCH_FILE.match(entry.name)
            if match and not _done_path(entry).exists():
                found.append((int(match["step"]), entry.name, entry))
        return [entry for _, _, entry in sorted(found)]

    def next(self, wait: float = 0) -> Batch | None:
        """The oldest batch not yet done, or None when none appears within ``wait`` seconds.

        It is the same batch until ``done`` is called for it.
        """
        deadline = time.monotonic() + wait
        while True:
            pending = self.pending()
            if pending:
                return read_batch_file(pending[0])
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(self.poll_interval, max(0.0, deadline - time.monotonic())))

    def done(
        self,
        batch_id: str,
        metrics: Mapping[str, Any] | None = None,
        model: ModelRef | None = None,
    ) -> Path:
        """Writes the batch's done file (temp file, then rename) and returns its path.

        Raises BatchNotFoundError when no batch file has this id, BatchAlreadyDoneError when
        its done file exists, ValueError for metrics or a model agl would refuse.
        """
        body = json.dumps(done_body(metrics, model))
        batch_file = self._file_of(batch_id)
        target = _done_path(batch_file)
        if target.exists():
            raise BatchAlreadyDoneError(None, f"batch {batch_id} is done already ({target.name})")
        temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with open(temp, "w", encoding="utf-8") as file:
            file.write(body)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, target)
        return target

    def _file_of(self, batch_id: str) -> Path:
        for entry in self.path.iterdir():
            match = BATCH_FILE.match(entry.name)
            if match and match["batch_id"] == batch_id:
                return entry
        raise BatchNotFoundError(None, f"no batch file for batch {batch_id} in {self.path}")


def read_batch_file(path: Path) -> Batch:
    """A batch file's table and ids: the Parquet key-value metadata, else the file name."""
    match = BATCH_FILE.match(path.name)
    told = {"agl.step": match["step"], "agl.batch_id": match["batch_id"]} if match else {}
    file = pq.ParquetFile(path)
    table = file.read()
    # Key-value metadata written by a non-Arrow writer (DuckDB) is not always in the Arrow schema.
    extra = {key: value for key, value in (file.metadata.metadata or {}).items() if key.startswith(b"agl.")}
    if extra:
        table = table.replace_schema_metadata({**extra, **(table.schema.metadata or {})})
    return batch_of(table, told, str(path))


def _done_path(batch_file: Path) -> Path:
    return batch_file.with_name(batch_file.name[: -len(".parquet")] + DONE_SUFFIX)
