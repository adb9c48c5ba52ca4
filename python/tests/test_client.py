"""BatchClient against a real HTTP server on 127.0.0.1 that answers as agl's batch endpoints do."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pyarrow as pa
import pytest
from agl_trainer import BatchAlreadyDoneError, BatchClient, BatchNotFoundError, BatchRequestError, ModelRef
from batch_rows import batch_table, row

TOKEN = "secret"


@dataclass
class FakeAgl:
    """The batch endpoints' state: batches waiting, those handed out, those done, what was asked."""

    ready: list[pa.Table] = field(default_factory=list)
    handed_out: dict[str, pa.Table] = field(default_factory=dict)
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    waits: list[str] = field(default_factory=list)


def stream_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def handler_for(state: FakeAgl) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep pytest's output clean
            pass

        def answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, status: int, detail: str) -> None:
            self.answer(status, json.dumps({"detail": detail}).encode(), {"content-type": "application/json"})

        def authorized(self) -> bool:
            if self.headers.get("authorization") == f"Bearer {TOKEN}":
                return True
            self.error(401, "missing or wrong token")
            return False

        def do_GET(self) -> None:
            url = urlparse(self.path)
            if not self.authorized():
                return
            if url.path != "/v1/agl/training/batches/next":
                return self.error(404, f"no route {url.path}")
            state.waits.append(parse_qs(url.query)["wait"][0])
            if not state.ready:
                return self.answer(204)
            table = state.ready.pop(0)
            meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
            state.handed_out[meta["agl.batch_id"]] = table
            headers = {
                "content-type": "application/vnd.apache.arrow.stream",
                "agl-batch-id": meta["agl.batch_id"],
                "agl-step": meta["agl.step"],
                "agl-model-version": meta["agl.model_version"],
                "agl-lease-seconds": "600",
            }
            self.answer(200, stream_bytes(table), headers)

        def do_POST(self) -> None:
            if not self.authorized():
                return
            parts = urlparse(self.path).path.split("/")
            batch_id = parts[-2]
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if batch_id not in state.handed_out:
                return self.error(404, f"no batch {batch_id}")
            if batch_id in state.done:
                return self.error(409, f"batch {batch_id} is done already")
            state.done[batch_id] = body
            answer = {"batch_id": batch_id, "step": 1, "model_version": body.get("model", {}).get("version", "0")}
            self.answer(200, json.dumps(answer).encode(), {"content-type": "application/json"})

    return Handler


@pytest.fixture
def agl() -> Iterator[tuple[FakeAgl, str]]:
    state = FakeAgl()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_next_reads_the_arrow_stream_and_its_ids(agl: tuple[FakeAgl, str]) -> None:
    state, url = agl
    table = batch_table([row([1, 2], [3], reward=1.0, advantage=0.5)], batch_id="b-7", step=3, version="2")
    state.ready.append(table)
    batch = BatchClient(url, token=TOKEN).next(wait=5)
    assert batch is not None
    assert (batch.batch_id, batch.step, batch.model_version, batch.lease_seconds) == ("b-7", 3, "2", 600.0)
    assert batch.metadata["agl.estimator"] == "grpo"
    assert batch.metadata["agl.aggregation"] == "trajectory"
    assert batch.table.equals(table)
    assert state.waits == ["5"]


def test_next_is_none_when_no_batch_is_ready(agl: tuple[FakeAgl, str]) -> None:
    state, url = agl
    assert BatchClient(url, token=TOKEN).next(wait=0) is None
    assert state.waits == ["0"]


def test_done_posts_metrics_and_model(agl: tuple[FakeAgl, str]) -> None:
    state, url = agl
    state.ready.append(batch_table([row([1], [2])], batch_id="b-1"))
    client = BatchClient(url + "/", token=TOKEN)
    batch = client.next(wait=0)
    assert batch is not None
    model: ModelRef = {"endpoint": "http://127.0.0.1:8000/v1", "model": "tiny", "version": "1"}
    answer = client.done(batch.batch_id, {"loss": 0.25, "reward_mean": 1}, model)
    assert answer == {"batch_id": "b-1", "step": 1, "model_version": "1"}
    assert state.done["b-1"] == {"metrics": {"loss": 0.25, "reward_mean": 1.0}, "model": model}


def test_done_of_an_unknown_batch_raises_not_found(agl: tuple[FakeAgl, str]) -> None:
    _, url = agl
    with pytest.raises(BatchNotFoundError) as caught:
        BatchClient(url, token=TOKEN).done("b-none")
    assert caught.value.status == 404
    assert caught.value.message == "no batch b-none"


def test_done_twice_raises_already_done(agl: tuple[FakeAgl, str]) -> None:
    state, url = agl
    state.ready.append(batch_table([row([1], [2])], batch_id="b-1"))
    client = BatchClient(url, token=TOKEN)
    assert client.next(wait=0) is not None
    client.done("b-1", {"loss": 0.1})
    with pytest.raises(BatchAlreadyDoneError) as caught:
        client.done("b-1", {"loss": 0.1})
    assert caught.value.status == 409


def test_a_wrong_token_is_a_request_error(agl: tuple[FakeAgl, str]) -> None:
    _, url = agl
    with pytest.raises(BatchRequestError, match="401: missing or wrong token"):
        BatchClient(url, token="wrong").next(wait=0)


def test_metrics_agl_would_refuse_are_refused_before_sending(agl: tuple[FakeAgl, str]) -> None:
    state, url = agl
    client = BatchClient(url, token=TOKEN)
    with pytest.raises(ValueError, match="metric 'loss' is not finite"):
        client.done("b-1", {"loss": float("nan")})
    with pytest.raises(ValueError, match="metric 'ok' is not a number"):
        client.done("b-1", {"ok": True})
    with pytest.raises(ValueError, match=r"model\.version must be a non-empty string"):
        client.done("b-1", model={"endpoint": "http://x/v1", "model": "tiny", "version": ""})
    assert state.done == {}


def test_wait_outside_0_to_300_is_refused() -> None:
    client = BatchClient("http://127.0.0.1:9")
    for wait in (-1, 301, 1.5):
        with pytest.raises(ValueError, match="wait is a whole number of seconds"):
            client.next(wait=wait)  # type: ignore[arg-type]


def test_an_unreachable_server_is_a_request_error_without_status() -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        url = f"http://127.0.0.1:{closed.server_address[1]}"
    with pytest.raises(BatchRequestError) as caught:
        BatchClient(url).next(wait=0)
    assert caught.value.status is None
