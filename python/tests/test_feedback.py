"""send_feedback against a real `agl serve`: a rollout's feedback is stored once, an unknown target is named."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.request import Request, urlopen

import pytest
from agl_serve import agl_serve

from agl_trainer import FeedbackError, send_feedback


def post(url: str, path: str, body: object) -> object:
    request = Request(url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_feedback_on_a_rollout_is_stored_once_and_an_unknown_target_is_named(tmp_path: Path) -> None:
    with agl_serve(tmp_path / "feedback.duckdb") as url:
        rollout = post(url, "/v1/agl/rollouts", {"input": {"task": 1}})
        assert isinstance(rollout, dict)
        rollout_id = rollout["rollout_id"]
        first = send_feedback(url, rollout_id=rollout_id, name="rating", value=0.8, comment="good", feedback_id="f-1")
        again = send_feedback(url, rollout_id=rollout_id, name="rating", value=0.1, feedback_id="f-1")
        assert (first["stored"], again["stored"]) == (True, False)
        assert first["rollout_id"] == rollout_id
        rows = post(url, "/v1/agl/query", {"sql": "SELECT value, feedback, source FROM rewards"})
        assert isinstance(rows, dict)
        assert rows["rows"] == [{"value": 0.8, "feedback": "good", "source": "feedback"}]
        with pytest.raises(FeedbackError) as refused:
            send_feedback(url, rollout_id="ro-missing", name="rating", value=1)
        assert refused.value.status == 404
        assert "no rollout ro-missing" in refused.value.message
