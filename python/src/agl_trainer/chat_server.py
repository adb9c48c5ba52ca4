"""The OpenAI-compatible side of a model server that answers as vLLM does for agl's gateway.

What a chat completion request may hold (checked, with errors as OpenAI's ``{"error": {...}}``)
and the HTTP server around a model's routes. The model side (sampling, weights) is the
caller's: the example's ``model_server.py`` and ``agl_trainer.trl.PolicyServer`` both use this.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ROLES = ("system", "user", "assistant", "tool")
MAX_N = 64
DEFAULT_MAX_TOKENS = 16

Route = Callable[[dict[str, Any]], dict[str, Any]]


class RequestError(Exception):
    """A request the server refuses: its HTTP status and an OpenAI-style message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ChatRequest:
    """The fields of a chat completion request a server reads, checked."""

    messages: list[dict[str, str]]
    n: int
    max_tokens: int
    temperature: float
    seed: int | None
    logprobs: bool
    return_token_ids: bool

    @staticmethod
    def of(body: dict[str, Any], served: str, default_temperature: float = 1.0) -> ChatRequest:
        if body.get("model") != served:
            raise RequestError(404, f"the model {body.get('model')!r} does not exist; this server serves {served!r}")
        if body.get("stream"):
            raise RequestError(400, "stream is not supported by this server")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        return ChatRequest(
            messages=_messages(body.get("messages")),
            n=_whole(body, "n", 1, 1, MAX_N),
            max_tokens=_whole({"max_tokens": max_tokens}, "max_tokens", DEFAULT_MAX_TOKENS, 1, 1 << 20),
            temperature=_number(body, "temperature", default_temperature, 0.0, 2.0),
            seed=None if body.get("seed") is None else _whole(body, "seed", 0, -(1 << 63), (1 << 63) - 1),
            logprobs=body.get("logprobs") is True,
            return_token_ids=body.get("return_token_ids") is True,
        )



class RequestSeeds:
    """Seeds for the requests that bring none, so that what a run samples does not hang on timing.

    Concurrent rollouts reach a server in an order that depends on timing; drawing from one
    generator in that order makes every answer depend on it. Here the k-th request (from 0) for
    a prompt under a model version is seeded from (``base``, version, prompt ids, k): the answers
    to each prompt are the same whichever order the requests come in, so a whole closed loop
    (sampling, then training on what was sampled) is reproducible. Counts are kept for the
    current version only: a server's versions follow each other and do not come back. Not
    thread-safe: call it under the server's lock.
    """

    def __init__(self, base: int) -> None:
        self.base = base
        self._version: str | None = None
        self._counts: Counter[bytes] = Counter()

    def next(self, version: str, prompt_ids: list[int]) -> int:
        """The seed of this request: 63 bits of a hash, a new one for each repeat of the prompt."""
        if version != self._version:
            self._version, self._counts = version, Counter()
        prompt = hashlib.sha256(json.dumps([self.base, version, prompt_ids]).encode()).digest()
        count = self._counts[prompt]
        self._counts[prompt] += 1
        digest = hashlib.sha256(prompt + count.to_bytes(8, "big")).digest()
        return int.from_bytes(digest[:8], "big") >> 1


def completion_answer(
    model: str,
    version: str,
    prompt_ids: list[int],
    choices: list[dict[str, Any]],
    completion_tokens: int,
    request: ChatRequest,
) -> dict[str, Any]:
    """A chat completion as vLLM answers it: `system_fingerprint` names the model version, and the
    prompt's token ids come along when the request asked for token ids."""
    answer: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": f"{model}-v{version}",
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_ids) + completion_tokens,
        },
    }
    if request.return_token_ids:
        answer["prompt_token_ids"] = prompt_ids
    return answer

def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise RequestError(400, "messages must be a non-empty list")
    messages = []
    for index, message in enumerate(value):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ROLES:
            raise RequestError(400, f"messages[{index}].role must be one of {', '.join(ROLES)}")
        messages.append({"role": role, "content": _text(message.get("content"))})
    return messages


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts; none (a tool call) is ''."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _whole(body: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(400, f"{key} must be a whole number from {low} to {high}")
    return value


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(400, f"{key} must be a number from {low} to {high}")
    return float(value)


def handler_for(
    get: Mapping[str, Callable[[], dict[str, Any]]], post: Mapping[str, Route]
) -> type[BaseHTTPRequestHandler]:
    """The HTTP side: routes by path, JSON in and out, errors as OpenAI's ``{"error": {...}}``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request would drown the trainer's output

        def do_GET(self) -> None:
            route = get.get(self.path.split("?")[0])
            if route is None:
                self._send(404, _error(f"no route GET {self.path}"))
            else:
                self._send(200, route())

        def do_POST(self) -> None:
            route = post.get(self.path.split("?")[0])
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if route is None:
                return self._send(404, _error(f"no route POST {self.path}"))
            try:
                parsed = json.loads(body)
                if not isinstance(parsed, dict):
                    raise RequestError(400, "the body must be a JSON object")
                self._send(200, route(parsed))
            except json.JSONDecodeError as error:
                self._send(400, _error(f"the body is not JSON: {error}"))
            except RequestError as error:
                self._send(error.status, _error(error.message))
            except Exception as error:  # a bug here must answer, not leave the client waiting
                self._send(500, {"error": {"message": repr(error), "type": "server_error", "code": None}})

        def _send(self, status: int, value: dict[str, Any]) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


def serve_routes(
    get: Mapping[str, Callable[[], dict[str, Any]]],
    post: Mapping[str, Route],
    host: str = "127.0.0.1",
    port: int = 0,
) -> ThreadingHTTPServer:
    """A server of these routes on host:port (0: any free port); serve it with serve_forever()."""
    server = ThreadingHTTPServer((host, port), handler_for(get, post))
    server.daemon_threads = True
    return server
