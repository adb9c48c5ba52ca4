"""Pulls GRPO batches from the agl server that ``agl train grpo`` starts, over HTTP.

Standard library only (urllib): a trainer adds no HTTP client to its environment.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote
from urllib.request import Request, urlopen

import pyarrow as pa

from .batch import Batch, ModelRef, batch_of, done_body
from .errors import BatchRequestError, error_for_status

ARROW_STREAM = "application/vnd.apache.arrow.stream"
MAX_WAIT = 300


class BatchClient:
    """A trainer's side of the HTTP pull.

    ``url`` is the agl server (``http://127.0.0.1:4318``); ``token`` the one it was started
    with (sent as ``Authorization: Bearer``). ``timeout`` bounds each request, on top of the
    long-poll wait.

    >>> client = BatchClient("http://127.0.0.1:4318")       # doctest: +SKIP
    >>> batch = client.next(wait=30)                         # doctest: +SKIP
    >>> client.done(batch.batch_id, {"loss": 0.1})           # doctest: +SKIP
    """

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the agl server URL must start with http:// or https://, not {url!r}")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def next(self, wait: int = 30) -> Batch | None:
        """The next batch, or None when none is ready within ``wait`` seconds (0 to 300).

        A batch handed out and not acknowledged within its lease comes back again (same
        id, same rows). Raises BatchRequestError when agl refuses the request.
        """
        if isinstance(wait, bool) or not isinstance(wait, int) or not 0 <= wait <= MAX_WAIT:
            raise ValueError(f"wait is a whole number of seconds from 0 to {MAX_WAIT}, not {wait!r}")
        path = f"/v1/agl/training/batches/next?wait={wait}"
        status, headers, body = self._request("GET", path, None, self.timeout + wait)
        if status == 204:
            return None
        kind = headers.get("content-type", "").split(";")[0].strip()
        if kind != ARROW_STREAM:
            raise BatchRequestError(status, f"expected {ARROW_STREAM}, got {kind or 'no content type'}")
        table = pa.ipc.open_stream(body).read_all()
        told = {
            key: value
            for key, value in {
                "agl.batch_id": headers.get("agl-batch-id"),
                "agl.step": headers.get("agl-step"),
                "agl.model_version": headers.get("agl-model-version"),
                "agl.lease_seconds": headers.get("agl-lease-seconds"),
            }.items()
            if value is not None
        }
        return batch_of(table, told, f"{self.url}{path}")

    def done(
        self,
        batch_id: str,
        metrics: Mapping[str, Any] | None = None,
        model: ModelRef | None = None,
    ) -> dict[str, Any]:
        """Acknowledges a batch: the step is over; ``model``, when given, serves the next rollouts.

        Returns agl's answer (``batch_id``, ``step``, ``model_version``). Raises
        BatchNotFoundError (unknown id), BatchAlreadyDoneError (acknowledged before),
        BatchRequestError (anything else agl refuses), ValueError (a metric that is not a
        finite number, a model missing a field).
        """
        body = json.dumps(done_body(metrics, model)).encode()
        path = f"/v1/agl/training/batches/{quote(batch_id, safe='')}/done"
        _, _, answer = self._request("POST", path, body, self.timeout)
        parsed: dict[str, Any] = json.loads(answer)
        return parsed

    def _request(self, method: str, path: str, body: bytes | None, timeout: float) -> tuple[int, dict[str, str], bytes]:
        """Status, headers (lower-case names) and body of a 2xx answer; raises for anything else."""
        headers = {"accept": f"{ARROW_STREAM}, application/json"}
        if body is not None:
            headers["content-type"] = "application/json"
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        request = Request(self.url + path, data=body, method=method, headers=headers)
        try:
            with urlopen(request, timeout=timeout) as response:
                answer_headers = {name.lower(): value for name, value in response.headers.items()}
                return response.status, answer_headers, response.read()
        except HTTPError as error:
            raise error_for_status(error.code, _message_of(error.read())) from None
        except (URLError, TimeoutError, ConnectionError) as error:
            reason = error.reason if isinstance(error, URLError) else error
            raise BatchRequestError(None, f"{method} {self.url}{path}: {reason}") from error


def _message_of(body: bytes) -> str:
    """What an error body says: agl's ``detail``, an OpenAI-style ``error.message``, else the text."""
    text = body.decode("utf-8", errors="replace")
    try:
        value = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(value, dict):
        if isinstance(value.get("detail"), str):
            return str(value["detail"])
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return text[:500]
