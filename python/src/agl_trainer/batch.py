"""A training batch as agl hands it out, and the acknowledgement a trainer sends back.

Both hand-offs (HTTP pull and a batches directory) carry the same table and the same ``agl.*``
metadata keys, and take the same acknowledgement body; this module holds what they share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, TypedDict

import pyarrow as pa

# A step's timing, as metrics of its acknowledgement (and a trainer's logs): the wait for the
# batch (agl's rollouts, building and sending it), turning it into tensors, and the update
# (forward, backward, optimizer step). agl's step record has its own rollout and build seconds.
WAIT_SECONDS = "agl/wait_seconds"
DECODE_SECONDS = "agl/decode_seconds"
UPDATE_SECONDS = "agl/update_seconds"


class ModelRef(TypedDict):
    """The model a step produced, served where the next rollouts can reach it.

    agl turns it into the ``llm`` resource of the next rollouts: ``endpoint`` is an
    OpenAI-compatible base URL (``http://127.0.0.1:8000/v1``), ``model`` the served name,
    ``version`` the weights' version (it becomes the rows' ``model_version``).
    """

    endpoint: str
    model: str
    version: str


@dataclass(frozen=True)
class Batch:
    """One training batch: its rows and where it stands in the run.

    ``metadata`` holds every ``agl.*`` key of the table (``agl.estimator``,
    ``agl.aggregation`` ...); ``lease_seconds`` is how long agl waits for the acknowledgement
    before handing the batch out again (None when not told, as in a batches directory).
    """

    batch_id: str
    step: int
    model_version: str
    table: pa.Table
    metadata: dict[str, str] = field(default_factory=dict)
    lease_seconds: float | None = None


def agl_metadata(schema: pa.Schema) -> dict[str, str]:
    """The ``agl.*`` keys of a table's schema metadata, decoded."""
    raw = schema.metadata or {}
    decoded = {key.decode(): value.decode() for key, value in raw.items()}
    return {key: value for key, value in decoded.items() if key.startswith("agl.")}


def batch_of(table: pa.Table, told: Mapping[str, str], where: str) -> Batch:
    """The batch a table holds: ids from its metadata, else from ``told`` (headers, file name).

    ``told`` uses the metadata's key names (``agl.batch_id``, ``agl.step``,
    ``agl.model_version``); ``where`` names the source in errors.
    """
    metadata = agl_metadata(table.schema)
    known = {**told, **metadata}

    def required(key: str) -> str:
        value = known.get(key)
        if value is None or value == "":
            raise ValueError(f"{where}: the batch has no {key}")
        return value

    step_text = required("agl.step")
    try:
        step = int(step_text)
    except ValueError:
        raise ValueError(f"{where}: agl.step is not a whole number: {step_text!r}") from None
    lease = known.get("agl.lease_seconds")
    return Batch(
        batch_id=required("agl.batch_id"),
        step=step,
        model_version=required("agl.model_version"),
        table=table,
        metadata=metadata,
        lease_seconds=float(lease) if lease else None,
    )


def done_body(metrics: Mapping[str, Any] | None, model: ModelRef | None) -> dict[str, Any]:
    """The acknowledgement's JSON body, checked: metrics are finite numbers, the model names all it must.

    Numbers that are not Python floats (numpy scalars, ints) become floats; a bool, a
    non-finite value or a non-number is a ValueError naming the metric.
    """
    body: dict[str, Any] = {"metrics": {}}
    for name, value in (metrics or {}).items():
        if not isinstance(name, str) or name == "":
            raise ValueError(f"metric names are non-empty strings, not {name!r}")
        if isinstance(value, bool) or not isinstance(value, Real):
            raise ValueError(f"metric {name!r} is not a number: {value!r}")
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"metric {name!r} is not finite: {number}")
        body["metrics"][name] = number
    if model is not None:
        for key in ("endpoint", "model", "version"):
            value = model.get(key)
            if not isinstance(value, str) or value == "":
                raise ValueError(f"model.{key} must be a non-empty string, not {value!r}")
        body["model"] = dict(model)
    return body
