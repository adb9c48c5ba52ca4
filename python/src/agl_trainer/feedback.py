"""Late feedback on stored calls, traces and rollouts (``POST /v1/agl/feedback``), from Python.

Standard library only (urllib), like the batch client: an app adds no HTTP client to send it.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from .client import _message_of
from .errors import FeedbackError


def send_feedback(
    url: str,
    *,
    name: str,
    value: float,
    trace_id: str | None = None,
    span_id: str | None = None,
    response_id: str | None = None,
    rollout_id: str | None = None,
    attempt_id: str | None = None,
    comment: str | None = None,
    feedback_id: str | None = None,
    token: str | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Gives the call, trace or rollout named by exactly one target a reward named ``name``.

    ``url`` is the agl server (``http://127.0.0.1:4318``). Returns agl's receipt
    (``feedback_id``, ``trace_id``, ``span_id``, ``target_span_id``, ``rollout_id``,
    ``attempt_id``, ``stored``); the same ``feedback_id`` sent twice is stored once. Raises
    FeedbackError with agl's reason for an unknown target (status 404) or a bad field (400).

    >>> send_feedback("http://127.0.0.1:4318", response_id="chatcmpl-1", name="thumbs", value=1)  # doctest: +SKIP
    """
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the agl server URL must start with http:// or https://, not {url!r}")
    fields = {
        "name": name,
        "value": value,
        "trace_id": trace_id,
        "span_id": span_id,
        "response_id": response_id,
        "rollout_id": rollout_id,
        "attempt_id": attempt_id,
        "comment": comment,
        "feedback_id": feedback_id,
    }
    body = json.dumps({key: field for key, field in fields.items() if field is not None}).encode()
    headers = {"content-type": "application/json", "accept": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    request = Request(f"{url.rstrip('/')}/v1/agl/feedback", data=body, method="POST", headers=headers)
    try:
        with urlopen(request, timeout=timeout) as response:
            receipt: dict[str, Any] = json.loads(response.read())
            return receipt
    except HTTPError as error:
        raise FeedbackError(error.code, _message_of(error.read())) from None
    except (URLError, TimeoutError, ConnectionError) as error:
        reason = error.reason if isinstance(error, URLError) else error
        raise FeedbackError(None, f"POST {url}/v1/agl/feedback: {reason}") from error
