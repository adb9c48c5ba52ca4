"""The example's modules on the path, and a model server on 127.0.0.1 for each test that asks."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from model_server import ModelService, start_server
from tiny_model import build_model, build_tokenizer


@dataclass
class RunningServer:
    url: str
    service: ModelService

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Status and JSON answer of a POST (errors too)."""
        request = Request(self.url + path, data=json.dumps(body).encode(), method="POST")
        request.add_header("content-type", "application/json")
        try:
            with urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except HTTPError as error:
            return error.code, json.loads(error.read())

    def get(self, path: str) -> dict[str, Any]:
        with urlopen(self.url + path, timeout=60) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer


@pytest.fixture
def server() -> Iterator[RunningServer]:
    tokenizer = build_tokenizer()
    service = ModelService(build_model(tokenizer, seed=0), tokenizer)
    http = start_server(service)
    thread = threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield RunningServer(f"http://127.0.0.1:{http.server_address[1]}", service)
    http.shutdown()
    http.server_close()
