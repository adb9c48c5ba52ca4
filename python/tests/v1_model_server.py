"""A vLLM-shaped OpenAI chat server for the Agent Lightning v1 tests: the remote LLM service's stand-in.

It answers ``POST /v1/chat/completions`` as vLLM does with ``return_token_ids``: the prompt's
token ids at the top level, each choice's ``token_ids``, and ``logprobs.content`` when asked.
Tokens are characters (ids their code points), so a test can tell what it sent from the ids. A
last message ``fail`` gets a 400; one registered with :meth:`ModelServer.hold` waits until the
test releases it, so calls can be kept in flight.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def token_ids(text: str) -> list[int]:
    return [ord(c) for c in text]


class ModelServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._held: dict[str, tuple[threading.Event, threading.Event]] = {}
        self._lock = threading.Lock()
        self._count = 0
        self.url = ""

    def hold(self, text: str) -> threading.Event:
        """Holds the next call whose last message is ``text``; the event returned is set once it arrived."""
        arrived, release = threading.Event(), threading.Event()
        self._held[text] = (arrived, release)
        return arrived

    def release(self, text: str) -> None:
        self._held[text][1].set()

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            self._count += 1
            number = self._count
        messages = body.get("messages") or []
        last = str(messages[-1].get("content", "")) if messages else ""
        if last in self._held:
            arrived, release = self._held[last]
            arrived.set()
            release.wait(timeout=60)
        if last == "fail":
            return 400, {"error": {"message": "the model refused", "type": "invalid_request_error", "code": 400}}
        prompt = "\n".join(str(m.get("content", "")) for m in messages)
        answer = f"Echo: {last}"
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": answer},
            "finish_reason": "stop",
            "token_ids": token_ids(answer),
        }
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": c, "logprob": -0.25, "top_logprobs": []} for c in answer]}
        return 200, {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model"),
            "prompt_token_ids": token_ids(prompt),
            "choices": [choice],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(answer), "total_tokens": len(prompt) + len(answer)},
        }


@contextmanager
def model_server() -> Iterator[ModelServer]:
    """The server on 127.0.0.1 and a free port; its ``url`` is the base URL with ``/v1``."""
    model = ModelServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            status, answer = model.answer(body) if self.path == "/v1/chat/completions" else (404, {"error": "no route"})
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    model.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield model
    finally:
        for _, release in model._held.values():
            release.set()
        server.shutdown()
        server.server_close()
