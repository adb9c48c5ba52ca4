"""The HTTP calls of Agent Lightning v0.x's `LightningStoreClient` (agentlightning/store/client_server.py).

Each method sends what that client's method of the same name sends, with aiohttp as it does: the
verb, the path under /v1/agl, the JSON body built the same way (fields it leaves out left out,
`json=None` where it posts nothing, which aiohttp sends as an empty application/octet-stream),
the query parameters. Answers are checked against the pydantic models the client validates them
with (agent_lightning_models.py), so a field that model would reject fails the test.

Unlike the real client, nothing is retried and no error becomes None or []: its dequeue and
get_* calls swallow every exception, which would make a 415 look like an empty queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import agent_lightning_models as models
import aiohttp

JsonObject = dict[str, Any]


class LightningStoreClient:
    """One aiohttp session to an agl server, with the real client's methods; every request it sent is kept."""

    def __init__(self, server_address: str) -> None:
        self.server_address = server_address.rstrip("/") + "/v1/agl"
        self.sent: list[tuple[str, str, Mapping[str, str]]] = []  # (method, path, headers)
        trace = aiohttp.TraceConfig()
        trace.on_request_headers_sent.append(self._keep_headers)
        self._session = aiohttp.ClientSession(trace_configs=[trace])

    async def _keep_headers(self, _session: Any, _context: Any, sent: aiohttp.TraceRequestHeadersSentParams) -> None:
        self.sent.append((sent.method, sent.url.path, sent.headers))

    async def close(self) -> None:
        await self._session.close()

    async def _request_json(
        self,
        method: str,
        path: str,
        *,
        json: Any | None = None,
        params: Sequence[tuple[str, Any]] | None = None,
    ) -> Any:
        call = getattr(self._session, method)
        async with call(f"{self.server_address}{path}", json=json, params=params) as response:
            response.raise_for_status()
            return await response.json()

    # ---- health and statistics

    async def health(self) -> Any:
        """What `_wait_until_healthy` probes between retries: it needs a 200."""
        return await self._request_json("get", "/health")

    async def statistics(self) -> JsonObject:
        return models.statistics(await self._request_json("get", "/statistics"))

    # ---- rollouts and the queue

    async def start_rollout(
        self,
        input: Any,
        mode: str | None = None,
        resources_id: str | None = None,
        config: JsonObject | None = None,
        metadata: JsonObject | None = None,
        worker_id: str | None = None,
    ) -> JsonObject:
        # RolloutRequest(...).model_dump(exclude_none=False): every field, null when not given.
        body = {
            "input": input,
            "mode": mode,
            "resources_id": resources_id,
            "config": models.rollout_config_dump(config),
            "metadata": metadata,
            "worker_id": worker_id,
        }
        return models.attempted_rollout(await self._request_json("post", "/rollouts", json=body))

    async def enqueue_rollout(
        self,
        input: Any,
        mode: str | None = None,
        resources_id: str | None = None,
        config: JsonObject | None = None,
        metadata: JsonObject | None = None,
    ) -> JsonObject:
        request = {"input": input, "mode": mode, "resources_id": resources_id, "config": config, "metadata": metadata}
        data = await self._request_json("post", "/queues/rollouts/enqueue", json=enqueue_body([request]))
        assert data, "enqueue_rollout returned no rollouts"
        return models.rollout(data[0])

    async def enqueue_many_rollouts(self, rollouts: Sequence[JsonObject]) -> list[JsonObject]:
        if not rollouts:
            return []
        data = await self._request_json("post", "/queues/rollouts/enqueue", json=enqueue_body(rollouts))
        return [models.rollout(entry) for entry in data]

    async def dequeue_rollout(self, worker_id: str | None = None) -> JsonObject | None:
        attempted = await self.dequeue_many_rollouts(limit=1, worker_id=worker_id)
        return attempted[0] if attempted else None

    async def dequeue_many_rollouts(self, *, limit: int = 1, worker_id: str | None = None) -> list[JsonObject]:
        if limit <= 0:
            return []
        body: JsonObject = {"limit": limit}
        if worker_id is not None:
            body["worker_id"] = worker_id
        data = await self._request_json("post", "/queues/rollouts/dequeue", json=body)
        return [models.attempted_rollout(item) for item in data]

    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> JsonObject:
        body = {"worker_id": worker_id} if worker_id is not None else None
        return models.attempted_rollout(await self._request_json("post", f"/rollouts/{rollout_id}/attempts", json=body))

    async def query_rollouts(
        self,
        *,
        status_in: Sequence[str] | None = None,
        rollout_id_in: Sequence[str] | None = None,
        rollout_id_contains: str | None = None,
        filter_logic: str = "and",
        sort_by: str | None = None,
        sort_order: str = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> JsonObject:
        body: JsonObject = {"limit": limit, "offset": offset}
        if status_in is not None:
            body["status_in"] = list(status_in)
        if rollout_id_in is not None:
            body["rollout_id_in"] = list(rollout_id_in)
        if rollout_id_contains is not None:
            body["rollout_id_contains"] = rollout_id_contains
        body["filter_logic"] = filter_logic
        add_sort(body, sort_by, sort_order)
        page = await self._request_json("post", "/rollouts/search", json=body)
        return models.page(page, models.rollout_or_attempted)

    async def get_rollout_by_id(self, rollout_id: str) -> JsonObject | None:
        data = await self._request_json("get", f"/rollouts/{rollout_id}")
        return None if data is None else models.rollout_or_attempted(data)

    async def update_rollout(self, rollout_id: str, **changes: Any) -> JsonObject:
        """Only the fields given are sent (the client's UNSET); `config` goes as `config.model_dump()`."""
        body = dict(changes)
        if "config" in body:
            body["config"] = models.rollout_config_dump(body["config"])
        return models.rollout(await self._request_json("post", f"/rollouts/{rollout_id}", json=body))

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: float | None = None) -> list[JsonObject]:
        assert timeout is None or timeout <= 0.1, "the client refuses timeouts over 0.1 s"
        body = {"rollout_ids": rollout_ids, "timeout": timeout}
        return [models.rollout(item) for item in await self._request_json("post", "/waits/rollouts", json=body)]

    # ---- attempts

    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: str | None = "sequence_id",
        sort_order: str = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> JsonObject:
        body: JsonObject = {"limit": limit, "offset": offset}
        add_sort(body, sort_by, sort_order)
        page = await self._request_json("post", f"/rollouts/{rollout_id}/attempts/search", json=body)
        return models.page(page, models.attempt)

    async def get_latest_attempt(self, rollout_id: str) -> JsonObject | None:
        data = await self._request_json("get", f"/rollouts/{rollout_id}/attempts/latest")
        return models.attempt(data) if data else None

    async def update_attempt(self, rollout_id: str, attempt_id: str, **changes: Any) -> JsonObject:
        """Only the fields given are sent (status, worker_id, last_heartbeat_time, metadata)."""
        data = await self._request_json("post", f"/rollouts/{rollout_id}/attempts/{attempt_id}", json=dict(changes))
        return models.attempt(data)

    # ---- resources

    async def query_resources(
        self,
        *,
        resources_id: str | None = None,
        resources_id_contains: str | None = None,
        sort_by: str | None = None,
        sort_order: str = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> JsonObject:
        # The one query the client sends as GET parameters, in this order.
        params: list[tuple[str, Any]] = [("limit", limit), ("offset", offset)]
        if sort_by is not None:
            params += [("sort_by", sort_by), ("sort_order", sort_order)]
        if resources_id is not None:
            params.append(("resources_id", resources_id))
        if resources_id_contains is not None:
            params.append(("resources_id_contains", resources_id_contains))
        return models.page(await self._request_json("get", "/resources", params=params), models.resources_update)

    async def add_resources(self, resources: Mapping[str, JsonObject]) -> JsonObject:
        data = await self._request_json("post", "/resources", json=models.named_resources_dump(resources))
        return models.resources_update(data)

    async def update_resources(self, resources_id: str, resources: Mapping[str, JsonObject]) -> JsonObject:
        body = models.named_resources_dump(resources)
        data = await self._request_json("post", f"/resources/{resources_id}", json=body)
        return models.resources_update(data)

    async def get_resources_by_id(self, resources_id: str) -> JsonObject | None:
        data = await self._request_json("get", f"/resources/{resources_id}")
        return models.resources_update(data) if data else None

    async def get_latest_resources(self) -> JsonObject | None:
        data = await self._request_json("get", "/resources/latest")
        return models.resources_update(data) if data else None

    # ---- spans

    async def add_span(self, span: JsonObject) -> JsonObject | None:
        data = await self._request_json("post", "/spans", json=span)
        return None if data is None else models.span(data)

    async def add_many_spans(self, spans: Sequence[JsonObject]) -> list[JsonObject]:
        added = [await self.add_span(span) for span in spans]
        return [span for span in added if span is not None]

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        body = {"rollout_id": rollout_id, "attempt_id": attempt_id}
        data = await self._request_json("post", "/spans/next", json=body)
        return models.next_sequence_id(data)

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        return [await self.get_next_span_sequence_id(rollout, attempt) for rollout, attempt in rollout_attempt_ids]

    async def add_otel_span(self, rollout_id: str, attempt_id: str, span: JsonObject) -> JsonObject | None:
        """`span`: Span.from_opentelemetry's fields but the three ids, whose sequence id is asked first."""
        sequence_id = await self.get_next_span_sequence_id(rollout_id, attempt_id)
        ids = {"rollout_id": rollout_id, "attempt_id": attempt_id, "sequence_id": sequence_id}
        return await self.add_span({**ids, **span})

    async def query_spans(
        self,
        rollout_id: str,
        attempt_id: str | None = None,
        *,
        filter_logic: str = "and",
        limit: int = -1,
        offset: int = 0,
        sort_by: str | None = "sequence_id",
        sort_order: str = "asc",
        **filters: str,
    ) -> JsonObject:
        """``filters``: trace_id, span_id, parent_id, name and their ``_contains``, sent when given."""
        body: JsonObject = {"rollout_id": rollout_id, "limit": limit, "offset": offset}
        if attempt_id is not None:
            body["attempt_id"] = attempt_id
        body.update(filters)
        body["filter_logic"] = filter_logic
        add_sort(body, sort_by, sort_order)
        return models.page(await self._request_json("post", "/spans/search", json=body), models.span)

    # ---- workers

    async def query_workers(
        self,
        *,
        status_in: Sequence[str] | None = None,
        worker_id_contains: str | None = None,
        filter_logic: str = "and",
        sort_by: str | None = None,
        sort_order: str = "asc",
    ) -> JsonObject:
        # The client sends no limit or offset here: the server's defaults (all, from the first).
        body: JsonObject = {}
        if status_in is not None:
            body["status_in"] = list(status_in)
        if worker_id_contains is not None:
            body["worker_id_contains"] = worker_id_contains
        body["filter_logic"] = filter_logic
        add_sort(body, sort_by, sort_order)
        return models.page(await self._request_json("post", "/workers/search", json=body), models.worker)

    async def get_worker_by_id(self, worker_id: str) -> JsonObject | None:
        data = await self._request_json("get", f"/workers/{worker_id}")
        return None if data is None else models.worker(data)

    async def update_worker(self, worker_id: str, heartbeat_stats: JsonObject | None = None) -> JsonObject:
        """Without stats (the client's UNSET; None here) it posts `json=None`: no body at all."""
        body = {"heartbeat_stats": heartbeat_stats} if heartbeat_stats is not None else None
        return models.worker(await self._request_json("post", f"/workers/{worker_id}", json=body))


def enqueue_body(rollouts: Sequence[JsonObject]) -> JsonObject:
    """EnqueueManyRolloutsRequest(...).model_dump(exclude_none=False): each request with all its fields."""
    fields = ("input", "mode", "resources_id", "config", "metadata")
    requests = [{name: rollout.get(name) for name in fields} for rollout in rollouts]
    for request in requests:
        request["config"] = models.rollout_config_dump(request["config"])
    return {"rollouts": requests}


def add_sort(body: JsonObject, sort_by: str | None, sort_order: str) -> None:
    """The client sends sort_order only with a sort_by."""
    if sort_by is not None:
        body["sort_by"] = sort_by
        body["sort_order"] = sort_order
