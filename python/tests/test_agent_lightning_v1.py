"""Agent Lightning v1's server API on `agl serve`, driven over HTTP with httpx as v1's clients do.

v1's trainer (``AglRolloutManagerBase``), controller (``LocalReconciler``) and agents use plain
httpx clients with a bearer key; the calls here are the ones they make, written for these tests.
The model behind the proxy is the vLLM-shaped stand-in of ``v1_model_server``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agl_serve import agl_serve
from v1_model_server import ModelServer, model_server, token_ids

KEY = "v1-test-key"
SERVED = "Qwen/Qwen3-0.6B"
AGENT = Path(__file__).with_name("v1_agent.py")
TERMINAL = ("succeeded", "failed")


def server_yaml(path: Path) -> Path:
    """A v1 ``config/server.yaml``: the served model and the per-mode sampling parameters."""
    config = path / "server.json"
    config.write_text(
        json.dumps(
            {
                "key": KEY,
                "default_proxy": {
                    "model_name": SERVED,
                    "include_log_probs": True,
                    "train": {"temperature": 1.0},
                    "val": {"temperature": 0.0},
                },
            }
        )
    )
    return config


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    with model_server() as server:
        yield server


@pytest.fixture(scope="module")
def agl(tmp_path_factory: pytest.TempPathFactory, model: ModelServer) -> Iterator[httpx.Client]:
    """One server for the module, its model registered as v1's trainer registers it."""
    tmp = tmp_path_factory.mktemp("v1")
    with agl_serve(tmp / "v1.duckdb", "--v1-config", str(server_yaml(tmp))) as url:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as client:
            registered = client.post("/api/models", json=[{"model": SERVED, "endpoint": model.url, "version": 7}])
            assert registered.status_code == 201, registered.text
            yield client


def enqueue(client: httpx.Client, *requests: dict[str, Any]) -> list[dict[str, Any]]:
    response = client.post("/api/rollouts", json=list(requests))
    assert response.status_code == 201, response.text
    return response.json()


def new_id() -> str:
    return uuid.uuid4().hex


def patch(client: httpx.Client, rollout_id: str, **status: Any) -> httpx.Response:
    return client.patch(f"/api/rollouts/{rollout_id}", json={"status": status})


def sql(client: httpx.Client, query: str) -> list[dict[str, Any]]:
    response = client.post("/v1/agl/query", json={"sql": query})
    assert response.status_code == 200, response.text
    return response.json()["rows"]


def sql_eventually(client: httpx.Client, query: str, expected: list[dict[str, Any]]) -> None:
    """The query's rows once they are ``expected``: the gateway stores its spans within about 100 ms."""
    deadline = time.monotonic() + 10
    while (rows := sql(client, query)) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rows == expected


def chat(client: httpx.Client, rollout_id: str, text: str, mode: str = "train", attempt: str = "0") -> httpx.Response:
    return client.post(
        f"/proxy/rollout/{rollout_id}/attempt/{attempt}/mode/{mode}/openai/v1/chat/completions",
        json={"model": "whatever-the-agent-says", "messages": [{"role": "user", "content": text}]},
    )


def test_healthz_needs_no_key_and_every_api_and_proxy_route_does(agl: httpx.Client) -> None:
    bare = httpx.Client(base_url=str(agl.base_url), timeout=10)
    assert bare.get("/healthz").json() == {"status": "ok"}
    for method, path in [("GET", "/api/rollouts?state_in=queuing"), ("POST", "/api/rollouts"), ("GET", "/proxy/state")]:
        assert bare.request(method, path).status_code == 401, path
        wrong = bare.request(method, path, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401, path
        assert bare.request(method, path, headers={"x-api-key": "nope"}).status_code == 401, path
    assert bare.get("/proxy/state", headers={"x-api-key": KEY}).status_code == 200, "v1 takes x-api-key too"
    assert bare.get("/v1/agl/health", headers={"x-api-key": KEY}).status_code == 401, "agl's own routes take a bearer"


def test_enqueue_answers_v1_rollouts_and_is_idempotent_by_id(agl: httpx.Client) -> None:
    rollout_id = new_id()
    [made, other] = enqueue(
        agl,
        {"input": {"question": "q1", "data_id": "d-1"}, "rollout_id": rollout_id, "metadata": {"batch_idx": 3, "tag": "x"}},
        {"input": "plain", "is_train": False},
    )
    assert made["rollout_id"] == rollout_id
    assert made["is_train"] is True and other["is_train"] is False
    assert made["config"] == {"timeout_seconds": 3600, "local": None, "k8s": None}
    assert made["metadata"] == {"batch_idx": 3, "sample_idx_in_batch": None, "tag": "x"}
    status = made["status"]
    assert (status["state"], status["version"], status["last_attempt_id"]) == ("queuing", 1, None)
    assert status["created_at"] == status["updated_at"]
    assert len(other["rollout_id"]) > 0 and other["rollout_id"] != rollout_id

    # A retried enqueue answers the rollout as it is, even one running with events.
    assert patch(agl, rollout_id, state="running", last_attempt_id="0").status_code == 200
    posted = agl.post(f"/api/rollouts/{rollout_id}/attempt/0/events", json={"event_type": "step", "data": {"n": 1}})
    assert posted.status_code == 200, posted.text
    [again] = enqueue(agl, {"input": "changed", "rollout_id": rollout_id})
    assert again["input"] == {"question": "q1", "data_id": "d-1"}
    assert again["status"]["state"] == "running" and again["status"]["version"] == 2
    events = agl.get(f"/api/rollouts/{rollout_id}/events").json()
    assert [(e["event_type"], e["data"]) for e in events] == [("step", {"n": 1})]


def test_bad_bodies_are_422_naming_the_field(agl: httpx.Client) -> None:
    assert agl.post("/api/rollouts", json={"input": 1}).status_code == 422
    bad_config = agl.post("/api/rollouts", json=[{"input": 1, "config": {"timeout_seconds": "soon"}}])
    assert bad_config.status_code == 422 and "timeout_seconds" in bad_config.json()["detail"]
    bad_id = agl.post("/api/rollouts", json=[{"input": 1, "rollout_id": "a/b"}])
    assert bad_id.status_code == 422 and "rollout_id" in bad_id.json()["detail"]
    [made] = enqueue(agl, {"input": 1})
    extra = patch(agl, made["rollout_id"], state="running", pod="p")
    assert extra.status_code == 422 and "pod" in extra.json()["detail"]
    unknown_state = patch(agl, made["rollout_id"], state="cancelled")
    assert unknown_state.status_code == 422 and "cancelled" in unknown_state.json()["detail"]
    assert agl.get("/api/rollouts").status_code == 422, "state_in is required"


def test_the_lifecycle_moves_forward_only(agl: httpx.Client) -> None:
    [made, dropped] = enqueue(agl, {"input": "a"}, {"input": "b"})
    rid = made["rollout_id"]

    def refused(state: str, current: str) -> None:
        response = patch(agl, rid, state=state)
        assert response.status_code == 409, response.text
        assert response.json()["detail"] == f"Rollout {rid}: cannot transition {current} -> {state}"

    refused("succeeded", "queuing")
    refused("queuing", "queuing")
    running = patch(agl, rid, state="running", last_attempt_id="0", k8s_job_name="job-1")
    assert running.status_code == 200
    assert running.json()["status"] | {"created_at": 0, "updated_at": 0} == {
        "state": "running",
        "k8s_job_name": "job-1",
        "last_attempt_id": "0",
        "error_message": None,
        "version": 2,
        "created_at": 0,
        "updated_at": 0,
    }
    refused("running", "running")
    refused("queuing", "running")
    noted = patch(agl, rid, error_message="slow pod")
    assert (noted.json()["status"]["version"], noted.json()["status"]["error_message"]) == (3, "slow pod")
    done = patch(agl, rid, state="succeeded")
    assert done.status_code == 200 and done.json()["status"]["version"] == 4
    assert done.json()["status"]["updated_at"] >= running.json()["status"]["updated_at"]
    refused("failed", "succeeded")
    detail = agl.get(f"/api/rollouts/{rid}").json()
    assert detail["attempts"] == ["0"] and detail["rollout"]["status"]["state"] == "succeeded"

    failed = patch(agl, dropped["rollout_id"], state="failed", error_message="no pod")
    assert failed.status_code == 200
    assert (failed.json()["status"]["state"], failed.json()["status"]["error_message"]) == ("failed", "no pod")
    assert agl.get(f"/api/rollouts/{dropped['rollout_id']}").json()["attempts"] == []
    assert patch(agl, "nope", state="running").status_code == 404

    # agl's own view of the same rollouts: an attempt "0" that succeeded, a rollout failed in the queue.
    rows = sql(agl, f"SELECT status FROM attempts WHERE rollout_id = '{rid}' AND attempt_id = '0'")
    assert rows == [{"status": "succeeded"}]
    assert sql(agl, f"SELECT status FROM rollouts WHERE rollout_id = '{dropped['rollout_id']}'") == [{"status": "failed"}]


def test_list_by_state_as_the_controller_polls(agl: httpx.Client) -> None:
    made = enqueue(agl, *({"input": i, "metadata": {"batch_idx": 99}} for i in range(3)))
    assert patch(agl, made[1]["rollout_id"], state="running").status_code == 200
    listed = agl.get("/api/rollouts", params=[("state_in", "queuing"), ("state_in", "running"), ("limit", 1000)])
    assert listed.status_code == 200
    states = {r["rollout_id"]: r["status"]["state"] for r in listed.json()}
    assert [states.get(r["rollout_id"]) for r in made] == ["queuing", "running", "queuing"]
    assert all(r["status"]["state"] in ("queuing", "running") for r in listed.json())
    assert len(agl.get("/api/rollouts", params={"state_in": "queuing", "limit": 1}).json()) == 1


def test_delete_hides_a_rollout_from_v1_and_keeps_its_data_in_agl(agl: httpx.Client) -> None:
    [made] = enqueue(agl, {"input": "to delete"})
    rid = made["rollout_id"]
    assert patch(agl, rid, state="running").status_code == 200
    assert chat(agl, rid, "kept").status_code == 200
    assert agl.delete(f"/api/rollouts/{rid}").status_code == 204
    assert agl.get(f"/api/rollouts/{rid}").status_code == 404
    assert agl.get(f"/api/rollouts/{rid}").json()["detail"] == f"Rollout not found: {rid}"
    assert agl.get(f"/api/rollouts/{rid}/events").status_code == 404
    assert agl.post(f"/api/rollouts/{rid}/attempt/0/events", json={"event_type": "x"}).status_code == 404
    assert chat(agl, rid, "after").status_code == 404
    assert agl.delete(f"/api/rollouts/{rid}").status_code == 204, "idempotent"
    assert agl.delete("/api/rollouts/never-was").status_code == 204
    listed = agl.get("/api/rollouts", params=[("state_in", s) for s in ("queuing", "running", "succeeded", "failed")])
    assert rid not in {r["rollout_id"] for r in listed.json()}
    assert sql(agl, f"SELECT status FROM rollouts WHERE rollout_id = '{rid}'") == [{"status": "cancelled"}]
    sql_eventually(agl, f"SELECT count(*) AS n FROM llm_calls WHERE rollout_id = '{rid}'", [{"n": 1}])
    again = agl.post("/api/rollouts", json=[{"input": 1, "rollout_id": rid}])
    assert again.status_code == 409 and "deleted" in again.json()["detail"]


def test_the_terminal_cursor_follows_completion_order(agl: httpx.Client) -> None:
    start = agl.get("/api/rollouts/terminal", params={"after": 0, "limit": 1}).json()["total_terminal"]
    made = enqueue(agl, *({"input": {"instance_id": f"i-{i}"}} for i in range(4)))
    ids = [r["rollout_id"] for r in made]
    for rid in ids:
        assert patch(agl, rid, state="running").status_code == 200
    for rid, state in [(ids[2], "succeeded"), (ids[0], "failed"), (ids[3], "succeeded"), (ids[1], "succeeded")]:
        assert patch(agl, rid, state=state).status_code == 200
    assert agl.delete(f"/api/rollouts/{ids[3]}").status_code == 204
    first = agl.get("/api/rollouts/terminal", params={"after": start, "limit": 2}).json()
    assert [(i["rollout_id"], i["state"], i["data_id"]) for i in first["items"]] == [
        (ids[2], "succeeded", "i-2"),
        (ids[0], "failed", "i-0"),
    ]
    assert first["next_after"] == start + 2 and first["total_terminal"] == start + 4
    rest = agl.get("/api/rollouts/terminal", params={"after": first["next_after"], "limit": 10}).json()
    assert [i["rollout_id"] for i in rest["items"]] == [ids[1]], "the deleted one keeps its place, unlisted"
    assert rest["next_after"] == start + 4
    assert agl.get("/api/rollouts/terminal", params={"after": rest["next_after"]}).json()["items"] == []


def test_posted_events_and_the_triplet_format(agl: httpx.Client) -> None:
    [made] = enqueue(agl, {"input": "events"})
    rid = made["rollout_id"]
    assert patch(agl, rid, state="running", last_attempt_id="a1").status_code == 200

    def post(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
        response = agl.post(f"/api/rollouts/{rid}/attempt/a1/events", json={"event_type": event_type, "data": data})
        assert response.status_code == 200, response.text
        return response.json()

    def request(prompt: list[int], answer: list[int]) -> dict[str, Any]:
        return {
            "model": SERVED,
            "request": {},
            "response": {"prompt_token_ids": prompt, "choices": [{"token_ids": answer}]},
            "server": {"model": SERVED, "endpoint": "http://m/v1", "version": 2},
            "http_status": 200,
            "status": "ok",
        }

    echoed = post("model_request", request([1, 2], [3]))
    assert (echoed["rollout_id"], echoed["attempt_id"], echoed["event_type"]) == (rid, "a1", "model_request")
    post("model_request", request([1, 2], [4]))
    post("model_request", request([5], [6]))
    post("reward", {"value": 0.75, "message": "close", "source": "agent", "reason": "partial"})
    post("trace", {"text": "kept as is"})
    events = agl.get(f"/api/rollouts/{rid}/events").json()
    assert [e["event_type"] for e in events] == ["model_request"] * 3 + ["reward", "trace"]
    assert events[3]["data"] == {"value": 0.75, "message": "close", "source": "agent", "reason": "partial"}
    assert [e["timestamp"] for e in events] == sorted(e["timestamp"] for e in events)
    triplets = agl.get(f"/api/rollouts/{rid}/events", params={"format": "triplet"}).json()
    assert [(e["event_type"], e["data"]) for e in triplets] == [
        ("model_request", {"prompt_token_ids": [1, 2], "response_token_ids": [4], "response_log_probs": None,
                           "server": {"model": SERVED, "version": 2}, "http_status": 200, "status": "ok"}),
        ("model_request", {"prompt_token_ids": [5], "response_token_ids": [6], "response_log_probs": None,
                           "server": {"model": SERVED, "version": 2}, "http_status": 200, "status": "ok"}),
        ("reward", {"value": 0.75, "source": "agent", "reason": "partial"}),
        ("trace", {"text": "kept as is"}),
    ]
    rewards = agl.get(f"/api/rollouts/{rid}/events", params={"event_type": "reward"}).json()
    assert [e["data"]["value"] for e in rewards] == [0.75]
    assert sql(agl, f"SELECT value, feedback, source FROM rewards WHERE rollout_id = '{rid}'") == [
        {"value": 0.75, "feedback": "close", "source": "agent"}
    ]
    not_a_number = agl.post(f"/api/rollouts/{rid}/attempt/a1/events", json={"event_type": "reward", "data": {"value": "high"}})
    assert not_a_number.status_code == 422 and "value" in not_a_number.json()["detail"]
    assert agl.post("/api/rollouts/nope/attempt/0/events", json={"event_type": "x"}).status_code == 404


def test_proxied_calls_are_model_request_events_and_llm_calls(agl: httpx.Client, model: ModelServer) -> None:
    [train, val] = enqueue(agl, {"input": "t"}, {"input": "v", "is_train": False})
    for made in (train, val):
        assert patch(agl, made["rollout_id"], state="running").status_code == 200
    answered = chat(agl, train["rollout_id"], "hello")
    assert answered.status_code == 200, answered.text
    assert model.requests[-1]["model"] == SERVED and model.requests[-1]["temperature"] == 1.0
    assert model.requests[-1]["logprobs"] is True
    assert chat(agl, val["rollout_id"], "hi", mode="val").status_code == 200
    assert model.requests[-1]["temperature"] == 0.0 and not model.requests[-1].get("logprobs")
    refused = chat(agl, train["rollout_id"], "fail")
    assert refused.status_code == 400

    [ok, error] = agl.get(f"/api/rollouts/{train['rollout_id']}/events").json()
    assert ok["event_type"] == "model_request" and ok["attempt_id"] == "0"
    data = ok["data"]
    assert data["server"] == {"model": SERVED, "endpoint": model.url, "version": 7}
    assert (data["model_version"], data["http_status"], data["status"]) == (7, 200, "ok")
    assert data["request"]["messages"] == [{"role": "user", "content": "hello"}]
    assert data["response"]["choices"][0]["message"]["content"] == "Echo: hello"
    assert data["usage"]["completion_tokens"] == len("Echo: hello") and data["finish_reason"] == "stop"
    assert (error["data"]["http_status"], error["data"]["status"]) == (400, "error")

    [ok_t, error_t] = agl.get(f"/api/rollouts/{train['rollout_id']}/events", params={"format": "triplet"}).json()
    assert ok_t["data"]["prompt_token_ids"] == token_ids("hello")
    assert ok_t["data"]["response_token_ids"] == token_ids("Echo: hello")
    assert ok_t["data"]["response_log_probs"] == [-0.25] * len("Echo: hello")
    assert (error_t["data"]["http_status"], error_t["data"]["status"]) == (400, "error")
    assert error_t["data"]["error"]["message"] == "the model refused"

    rows = sql(agl, f"SELECT attempt_id, prompt_token_ids, response_token_ids FROM llm_calls WHERE rollout_id = '{train['rollout_id']}' ORDER BY start_time")
    assert rows[0] == {"attempt_id": "0", "prompt_token_ids": token_ids("hello"), "response_token_ids": token_ids("Echo: hello")}


def test_pause_lets_calls_in_flight_finish_and_turns_new_ones_away(agl: httpx.Client, model: ModelServer) -> None:
    [made] = enqueue(agl, {"input": "pause"})
    rid = made["rollout_id"]
    assert patch(agl, rid, state="running").status_code == 200
    arrived = model.hold("slow")
    result: dict[str, httpx.Response] = {}
    caller = threading.Thread(target=lambda: result.setdefault("slow", chat(agl, rid, "slow")))
    caller.start()
    assert arrived.wait(timeout=30)
    paused = agl.post("/proxy/pause", json={"retry_after_seconds": 7, "reason": "weights update"})
    assert paused.json() == {"paused": True, "retry_after_seconds": 7, "reason": "weights update", "inflight": 1}
    turned_away = chat(agl, rid, "new")
    assert turned_away.status_code == 429 and turned_away.headers["retry-after"] == "7"
    assert agl.get("/proxy/state").json()["inflight"] == 1
    model.release("slow")
    caller.join(timeout=30)
    assert result["slow"].status_code == 200
    assert agl.get("/proxy/state").json() == {"paused": True, "retry_after_seconds": 7, "reason": "weights update", "inflight": 0}
    assert agl.post("/proxy/resume").json()["paused"] is False
    assert chat(agl, rid, "new").status_code == 200


def test_the_trainer_clears_its_models_and_the_proxy_has_nowhere_to_send(agl: httpx.Client, model: ModelServer) -> None:
    [made] = enqueue(agl, {"input": "models"})
    assert patch(agl, made["rollout_id"], state="running").status_code == 200
    assert agl.delete("/api/models").json() == {"status": "ok"}
    nowhere = chat(agl, made["rollout_id"], "hi")
    assert nowhere.status_code == 503 and SERVED in nowhere.json()["detail"]
    again = agl.post("/api/models", json=[{"model": SERVED, "endpoint": model.url, "version": 8}])
    assert again.status_code == 201
    assert chat(agl, made["rollout_id"], "hi").status_code == 200
    [event] = agl.get(f"/api/rollouts/{made['rollout_id']}/events").json()
    assert event["data"]["model_version"] == 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_controller_round(client: httpx.Client, url: str) -> int:
    """One round of v1's local controller: each queuing rollout runs as an agent process; returns how many ran."""
    queued = client.get("/api/rollouts", params=[("state_in", "queuing"), ("limit", 50)]).json()
    procs = []
    for rollout in queued:
        rid = rollout["rollout_id"]
        mode = "train" if rollout["is_train"] else "val"
        env = {
            **os.environ,
            "AGL_KEY": KEY,
            "AGL_OPENAI_BASE_URL": f"{url}/proxy/rollout/{rid}/attempt/0/mode/{mode}/openai/v1",
            "AGL_EVENT_URL": f"{url}/api/rollouts/{rid}/attempt/0/events",
        }
        for name, path in rollout["config"]["local"]["env_map"].items():
            env[name] = str(rollout["input"][path])
        procs.append((rid, subprocess.Popen([sys.executable, str(AGENT)], env=env)))
        assert patch(client, rid, state="running", last_attempt_id="0").status_code == 200
    for rid, proc in procs:
        code = proc.wait(timeout=60)
        state = "succeeded" if code == 0 else "failed"
        assert patch(client, rid, state=state, **({} if code == 0 else {"error_message": f"exit {code}"})).status_code == 200
    return len(procs)


def test_end_to_end_a_group_through_agents_and_a_restart(tmp_path: Path, model: ModelServer) -> None:
    db, port = tmp_path / "e2e.duckdb", free_port()
    config = str(server_yaml(tmp_path))
    questions = ["alpha", "beta"]
    group = [
        {
            "rollout_id": new_id(),
            "input": {"question": q, "data_id": f"d-{q}"},
            "is_train": True,
            "config": {"timeout_seconds": 600, "local": {"agent_class": "tests.Agent", "env_map": {"QUESTION": "question"}}},
            "metadata": {"batch_idx": 0, "sample_idx_in_batch": i},
        }
        for q in questions
        for i in range(2)
    ]
    ids = [r["rollout_id"] for r in group]
    with agl_serve(db, "--v1-config", config, port=port) as url:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as trainer:
            assert trainer.post("/api/models", json=[{"model": SERVED, "endpoint": model.url, "version": 1}]).status_code == 201
            assert len(enqueue(trainer, *group)) == 4
            assert len(enqueue(trainer, *group)) == 4, "the trainer's retry makes no second group"
            assert run_controller_round(trainer, url) == 4

    # The server stops and starts again on its file: the trainer goes on where it was.
    with agl_serve(db, "--v1-config", config, port=port) as url:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as trainer:
            deadline = time.monotonic() + 60
            while True:
                states = [trainer.get(f"/api/rollouts/{rid}").json()["rollout"]["status"]["state"] for rid in ids]
                if all(s in TERMINAL for s in states) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert states == ["succeeded"] * 4
            for rid, request in zip(ids, group, strict=True):
                triplets = trainer.get(f"/api/rollouts/{rid}/events", params={"format": "triplet"}).json()
                [call] = [e["data"] for e in triplets if e["event_type"] == "model_request"]
                question = request["input"]["question"]
                assert call["prompt_token_ids"] == token_ids(question)
                assert call["response_token_ids"] == token_ids(f"Echo: {question}")
                assert [e["data"]["value"] for e in triplets if e["event_type"] == "reward"] == [1.0]
            assert len(sql(trainer, f"SELECT 1 FROM llm_calls WHERE rollout_id IN ({', '.join(repr(i) for i in ids)})")) == 4
            rewards = sql(trainer, f"SELECT value, source FROM rewards WHERE rollout_id IN ({', '.join(repr(i) for i in ids)})")
            assert rewards == [{"value": 1.0, "source": "agent"}] * 4
            for rid in ids:
                assert trainer.delete(f"/api/rollouts/{rid}").status_code == 204
            assert len(sql(trainer, f"SELECT 1 FROM llm_calls WHERE rollout_id IN ({', '.join(repr(i) for i in ids)})")) == 4
