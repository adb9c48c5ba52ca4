"""Agent Lightning v0.x's LightningStoreClient calls, made with aiohttp, against a real `agl serve`.

agl's store REST API promises the routes, bodies and status codes of Agent Lightning's server,
so that its clients work unchanged (docs/architecture.md, contract 4). Each test drives the
calls of one part of that client (lightning_store_client.py: same verbs, paths, bodies, query
parameters, headers) and checks the answers as its pydantic models would
(agent_lightning_models.py). The calls with no body at all, start_attempt without a worker and
update_worker without stats, go out as aiohttp sends them, an empty application/octet-stream:
agl answered those 415 before.

One server for the module, with its own DuckDB file; each test makes rollouts of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import agent_lightning_models as models
import aiohttp
import pytest
from agl_serve import agl_serve
from lightning_store_client import JsonObject, LightningStoreClient


class BlockingClient:
    """The client's methods run to their end on one event loop, so that a test reads as plain calls."""

    def __init__(self, client: LightningStoreClient, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self._loop = loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)
        return lambda *args, **kwargs: self._loop.run_until_complete(method(*args, **kwargs))


@pytest.fixture(scope="module")
def agl_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db: Path = tmp_path_factory.mktemp("agent-lightning-client") / "agl.duckdb"
    with agl_serve(db) as url:
        yield url


@pytest.fixture
def store(agl_url: str) -> Iterator[BlockingClient]:
    loop = asyncio.new_event_loop()

    async def connect() -> LightningStoreClient:  # aiohttp's session belongs to a running loop
        return LightningStoreClient(agl_url)

    client = loop.run_until_complete(connect())
    yield BlockingClient(client, loop)
    loop.run_until_complete(client.close())
    loop.close()


def sent_without_body(store: BlockingClient, path: str) -> None:
    """The last request to ``path`` was a POST with no body, labelled as aiohttp labels one."""
    method, _, headers = [sent for sent in store.client.sent if sent[1] == path][-1]
    assert method == "POST"
    assert headers.get("Content-Length") == "0"
    assert headers.get("Content-Type") == "application/octet-stream"


def ids(page: JsonObject, key: str = "rollout_id") -> list[str]:
    return [item[key] for item in page["items"]]


def test_the_model_checks_refuse_what_pydantic_would() -> None:
    """The checks the answers go through are not vacuous: each refuses what its model refuses."""
    rollout = {"rollout_id": "ro-1", "input": None, "start_time": 1.0}
    attempt = {"rollout_id": "ro-1", "attempt_id": "at-1", "sequence_id": 1, "start_time": 1.0}
    assert models.attempted_rollout({**rollout, "attempt": attempt})
    refused = [
        (models.rollout, {"rollout_id": "ro-1", "start_time": 1.0}, "Rollout.input is missing"),
        (models.rollout, {**rollout, "status": None}, "Rollout.status: None is refused"),
        (models.attempted_rollout, {**rollout, "attempt": None}, "Attempt: not an object"),
        (models.worker, {"worker_id": "w", "status": "busy?"}, "Worker.status"),
        (models.span, {**otel_span_fields("s", "00f067aa0ba902b7"), "rollout_id": "r"}, "Span.attempt_id"),
        (lambda page: models.page(page, models.rollout), {"items": [], "limit": -1}, "PaginatedResult.offset"),
    ]
    for check, answer, message in refused:
        with pytest.raises(AssertionError, match=message):
            check(answer)


def test_health_is_what_the_retry_probe_waits_for(store: BlockingClient) -> None:
    assert store.health()["status"] == "ok"


def test_statistics(store: BlockingClient) -> None:
    before = store.statistics()
    store.start_rollout(input="counted")
    after = store.statistics()
    assert after["total_rollouts"] == before["total_rollouts"] + 1
    assert after["total_attempts"] == before["total_attempts"] + 1


def test_enqueue_then_dequeue_as_a_runner_does(store: BlockingClient) -> None:
    first = store.enqueue_rollout({"task": 1}, mode="train", metadata={"source": "client"})
    assert (first["status"], first["mode"], first["metadata"]) == ("queuing", "train", {"source": "client"})
    assert "attempt" not in store.get_rollout_by_id(first["rollout_id"])  # a Rollout, not an AttemptedRollout

    retried = {"input": {"task": 2}, "config": {"max_attempts": 2, "retry_condition": ["failed"]}}
    many = store.enqueue_many_rollouts([retried, {"input": {"task": 3}, "mode": "val"}])
    assert [r["input"] for r in many] == [{"task": 2}, {"task": 3}]
    assert many[0]["config"] == {
        "timeout_seconds": None,
        "unresponsive_seconds": None,
        "max_attempts": 2,
        "retry_condition": ["failed"],
    }

    taken = store.dequeue_rollout(worker_id="runner-1")
    assert taken is not None and taken["rollout_id"] == first["rollout_id"]
    assert taken["status"] == "preparing"
    assert (taken["attempt"]["sequence_id"], taken["attempt"]["worker_id"]) == (1, "runner-1")
    runner = store.get_worker_by_id("runner-1")
    assert runner is not None and runner["status"] == "busy"
    assert runner["current_rollout_id"] == first["rollout_id"]
    assert runner["current_attempt_id"] == taken["attempt"]["attempt_id"]
    assert isinstance(runner["last_dequeue_time"], float)

    rest = store.dequeue_many_rollouts(limit=5)
    assert [r["rollout_id"] for r in rest] == [r["rollout_id"] for r in many]
    assert all(r["attempt"]["worker_id"] is None for r in rest)
    assert store.dequeue_rollout() is None
    assert store.dequeue_many_rollouts(limit=0) == []


def test_start_attempt_without_a_worker_posts_no_body(store: BlockingClient) -> None:
    rollout = store.start_rollout(input="retry me", worker_id="runner-2")
    rollout_id = rollout["rollout_id"]
    assert (rollout["status"], rollout["attempt"]["sequence_id"]) == ("preparing", 1)

    second = store.start_attempt(rollout_id)
    sent_without_body(store, f"/v1/agl/rollouts/{rollout_id}/attempts")
    assert second["rollout_id"] == rollout_id
    assert (second["attempt"]["sequence_id"], second["attempt"]["worker_id"]) == (2, None)

    third = store.start_attempt(rollout_id, worker_id="runner-3")
    assert (third["attempt"]["sequence_id"], third["attempt"]["worker_id"]) == (3, "runner-3")

    latest = store.get_latest_attempt(rollout_id)
    assert latest is not None and latest["attempt_id"] == third["attempt"]["attempt_id"]
    attempts = store.query_attempts(rollout_id)
    assert [a["sequence_id"] for a in attempts["items"]] == [1, 2, 3]
    assert (attempts["limit"], attempts["offset"], attempts["total"]) == (-1, 0, 3)
    newest_two = store.query_attempts(rollout_id, sort_order="desc", limit=2)
    assert [a["sequence_id"] for a in newest_two["items"]] == [3, 2]
    assert (newest_two["limit"], newest_two["total"]) == (2, 3)
    assert store.query_attempts(rollout_id, sort_by=None)["total"] == 3
    assert store.get_latest_attempt(store.enqueue_rollout("never started")["rollout_id"]) is None


def test_update_worker_without_stats_posts_no_body(store: BlockingClient) -> None:
    before = time.time()
    beat = store.update_worker("heartbeat-1")
    sent_without_body(store, "/v1/agl/workers/heartbeat-1")
    assert (beat["worker_id"], beat["heartbeat_stats"]) == ("heartbeat-1", None)
    assert beat["last_heartbeat_time"] >= before - 1

    with_stats = store.update_worker("heartbeat-1", {"gpu_memory": 0.5, "rollouts": 3})
    assert with_stats["heartbeat_stats"] == {"gpu_memory": 0.5, "rollouts": 3}
    read = store.get_worker_by_id("heartbeat-1")
    assert read is not None and read["heartbeat_stats"] == {"gpu_memory": 0.5, "rollouts": 3}
    assert store.get_worker_by_id("never-seen") is None

    store.update_worker("heartbeat-2")
    assert {"heartbeat-1", "heartbeat-2"} <= set(ids(store.query_workers(), "worker_id"))
    mine = store.query_workers(worker_id_contains="heartbeat-", sort_by="worker_id", sort_order="desc")
    assert ids(mine, "worker_id") == ["heartbeat-2", "heartbeat-1"]
    assert (mine["limit"], mine["offset"], mine["total"]) == (-1, 0, 2)
    unknown = store.query_workers(status_in=["unknown"], worker_id_contains="heartbeat-")
    assert set(ids(unknown, "worker_id")) == {"heartbeat-1", "heartbeat-2"}
    either = store.query_workers(status_in=["busy"], worker_id_contains="heartbeat-", filter_logic="or")
    assert {"heartbeat-1", "heartbeat-2"} <= set(ids(either, "worker_id"))


def test_query_and_get_rollouts(store: BlockingClient) -> None:
    started = [store.start_rollout(input={"n": n}, mode="train") for n in range(3)]
    mine = [r["rollout_id"] for r in started]

    everything = store.query_rollouts()
    assert set(mine) <= set(ids(everything))
    assert (everything["limit"], everything["offset"]) == (-1, 0)
    assert everything["total"] == len(everything["items"])

    by_id = store.query_rollouts(rollout_id_in=mine, status_in=["preparing"])
    assert sorted(ids(by_id)) == sorted(mine)
    assert all("attempt" in item for item in by_id["items"])  # AttemptedRollouts, checked as such

    paged = store.query_rollouts(rollout_id_in=mine, sort_by="start_time", sort_order="desc", limit=2, offset=1)
    assert ids(paged) == [mine[1], mine[0]]
    assert (paged["limit"], paged["offset"], paged["total"]) == (2, 1, 3)

    assert ids(store.query_rollouts(rollout_id_contains=mine[0][3:])) == [mine[0]]
    assert store.query_rollouts(rollout_id_in=mine, status_in=["succeeded"])["total"] == 0
    either = store.query_rollouts(rollout_id_in=mine[:1], status_in=["preparing"], filter_logic="or")
    assert set(mine) <= set(ids(either))

    got = store.get_rollout_by_id(mine[2])
    assert got is not None and got["input"] == {"n": 2}
    assert got["attempt"]["attempt_id"] == started[2]["attempt"]["attempt_id"]
    assert store.get_rollout_by_id("ro-never-made") is None


def test_update_attempt_and_rollout_then_wait(store: BlockingClient) -> None:
    done = store.start_rollout(input="to finish", worker_id="runner-4")
    open_one = store.start_rollout(input="to cancel")
    done_id, attempt_id = done["rollout_id"], done["attempt"]["attempt_id"]

    now = time.time()
    running = store.update_attempt(done_id, attempt_id, status="running", last_heartbeat_time=now, metadata={"step": 1})
    assert (running["status"], running["metadata"], running["last_heartbeat_time"]) == ("running", {"step": 1}, now)
    assert store.get_rollout_by_id(done_id)["status"] == "running"
    finished = store.update_attempt(done_id, "latest", status="succeeded")
    assert (finished["attempt_id"], finished["status"]) == (attempt_id, "succeeded")
    assert finished["end_time"] is not None
    assert store.get_rollout_by_id(done_id)["status"] == "succeeded"
    idle = store.get_worker_by_id("runner-4")
    assert idle is not None and idle["status"] == "idle"

    waited = store.wait_for_rollouts(rollout_ids=[done_id, open_one["rollout_id"]], timeout=0.1)
    assert [r["rollout_id"] for r in waited] == [done_id]

    cancelled = store.update_rollout(
        open_one["rollout_id"],
        status="cancelled",
        mode="test",
        metadata={"reason": "test"},
        config={"timeout_seconds": 30.0, "max_attempts": 3},
    )
    assert (cancelled["status"], cancelled["mode"], cancelled["metadata"]) == ("cancelled", "test", {"reason": "test"})
    assert (cancelled["config"]["timeout_seconds"], cancelled["config"]["max_attempts"]) == (30.0, 3)
    assert store.update_rollout(open_one["rollout_id"], input={"edited": True})["input"] == {"edited": True}
    waited = store.wait_for_rollouts(rollout_ids=[done_id, open_one["rollout_id"]], timeout=0.1)
    assert {r["rollout_id"] for r in waited} == {done_id, open_one["rollout_id"]}
    assert store.wait_for_rollouts(rollout_ids=[], timeout=None) == []


def test_resources_add_update_and_read(store: BlockingClient) -> None:
    resources = {
        "main_llm": {
            "resource_type": "llm",
            "endpoint": "http://127.0.0.1:9/v1",
            "model": "tiny",
            "sampling_parameters": {"temperature": 0.7},
        },
        "system_prompt": {"resource_type": "prompt_template", "template": "Answer {question}", "engine": "f-string"},
    }
    added = store.add_resources(resources)
    resources_id = added["resources_id"]
    assert added["version"] == 1
    assert added["resources"]["main_llm"]["api_key"] is None
    assert added["resources"]["system_prompt"]["template"] == "Answer {question}"

    rewritten = {**resources["system_prompt"], "template": "Think, then answer {question}"}
    changed = {**resources, "system_prompt": rewritten}
    updated = store.update_resources(resources_id, changed)
    assert (updated["resources_id"], updated["version"]) == (resources_id, 2)
    assert updated["update_time"] >= updated["create_time"]

    by_id = store.get_resources_by_id(resources_id)
    assert by_id is not None and by_id["resources"]["system_prompt"]["template"] == "Think, then answer {question}"
    latest = store.get_latest_resources()
    assert latest is not None and latest["resources_id"] == resources_id
    assert store.get_resources_by_id("rs-never-made") is None

    assert resources_id in ids(store.query_resources(), "resources_id")
    assert ids(store.query_resources(resources_id=resources_id), "resources_id") == [resources_id]
    newest = store.query_resources(
        resources_id_contains=resources_id[3:], sort_by="update_time", sort_order="desc", limit=1
    )
    assert ids(newest, "resources_id") == [resources_id]
    assert (newest["limit"], newest["offset"]) == (1, 0)

    rollout = store.start_rollout(input="with resources", resources_id=resources_id)
    assert rollout["resources_id"] == resources_id


def otel_span_fields(name: str, span_id: str, parent_id: str | None = None, start: float = 1.0) -> JsonObject:
    """What Span.from_opentelemetry(...).model_dump(mode="json") holds besides the rollout, attempt and sequence ids."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    context = {"trace_id": trace_id, "span_id": span_id, "is_remote": False, "trace_state": {}}
    parent = None if parent_id is None else {**context, "span_id": parent_id}
    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_id": parent_id,
        "name": name,
        "status": {"status_code": "OK", "description": None},
        "attributes": {"gen_ai.request.model": "tiny", "agentlightning.rollout_id": "ignored here"},
        "events": [{"name": "token", "attributes": {"index": 0}, "timestamp": start + 0.1}],
        "links": [],
        "start_time": start,
        "end_time": start + 0.5,
        "context": context,
        "parent": parent,
        "resource": {"attributes": {"service.name": "agent"}, "schema_url": ""},
    }


def test_spans_as_the_tracer_sends_them(store: BlockingClient) -> None:
    rollout = store.start_rollout(input="traced")
    rollout_id, attempt_id = rollout["rollout_id"], rollout["attempt"]["attempt_id"]

    first = store.get_next_span_sequence_id(rollout_id, attempt_id)
    ids_for_root = {"rollout_id": rollout_id, "attempt_id": attempt_id, "sequence_id": first}
    root = store.add_span({**ids_for_root, **otel_span_fields("agent", "00f067aa0ba902b7")})
    assert root is not None and (root["sequence_id"], root["name"], root["parent_id"]) == (first, "agent", None)

    llm = otel_span_fields("llm", "00f067aa0ba902b8", parent_id="00f067aa0ba902b7", start=2.0)
    child = store.add_otel_span(rollout_id, attempt_id, llm)
    assert child is not None and child["sequence_id"] > first
    assert child["parent"]["span_id"] == "00f067aa0ba902b7"

    later = store.get_many_span_sequence_ids([(rollout_id, attempt_id), (rollout_id, attempt_id)])
    assert later[0] < later[1]
    tools = [
        {
            "rollout_id": rollout_id,
            "attempt_id": attempt_id,
            "sequence_id": sequence_id,
            **otel_span_fields("tool", span_id, parent_id="00f067aa0ba902b7", start=3.0 + i),
        }
        for i, (sequence_id, span_id) in enumerate(zip(later, ("00f067aa0ba902b9", "00f067aa0ba902ba"), strict=True))
    ]
    assert [s["span_id"] for s in store.add_many_spans(tools)] == ["00f067aa0ba902b9", "00f067aa0ba902ba"]

    every = store.query_spans(rollout_id)
    assert [s["name"] for s in every["items"]] == ["agent", "llm", "tool", "tool"]
    assert (every["limit"], every["offset"], every["total"]) == (-1, 0, 4)
    stored = every["items"][1]
    assert (stored["attributes"]["gen_ai.request.model"], stored["events"][0]["name"]) == ("tiny", "token")
    assert stored["resource"]["attributes"] == {"service.name": "agent"}

    assert [s["name"] for s in store.query_spans(rollout_id, "latest", name="llm")["items"]] == ["llm"]
    assert store.query_spans(rollout_id, attempt_id, parent_id="00f067aa0ba902b7")["total"] == 3
    either = store.query_spans(rollout_id, name="agent", span_id_contains="02ba", filter_logic="or")
    assert sorted(s["span_id"] for s in either["items"]) == ["00f067aa0ba902b7", "00f067aa0ba902ba"]
    newest = store.query_spans(rollout_id, sort_by="start_time", sort_order="desc", limit=2, offset=1)
    assert [s["span_id"] for s in newest["items"]] == ["00f067aa0ba902b9", "00f067aa0ba902b8"]
    assert store.query_spans(rollout_id, trace_id_contains="4bf92f", name_contains="to")["total"] == 2


def test_application_errors_are_4xx_so_the_client_does_not_retry(store: BlockingClient) -> None:
    """The client retries 5xx and network errors; a 4xx is final, and must be one for a bad request."""
    with pytest.raises(aiohttp.ClientResponseError) as missing:
        store.update_rollout("ro-never-made", status="failed")
    assert missing.value.status == 404
    with pytest.raises(aiohttp.ClientResponseError) as bad_sort:
        store.query_rollouts(sort_by="no_such_field")
    assert bad_sort.value.status == 400
    rollout = store.start_rollout(input="strict")
    with pytest.raises(aiohttp.ClientResponseError) as null_status:
        store.update_attempt(rollout["rollout_id"], "latest", status=None)
    assert null_status.value.status == 400
