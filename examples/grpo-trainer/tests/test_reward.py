"""The agent's reward (reward.mjs), run by node, against values worked out by hand."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent


@pytest.fixture
def node() -> str:
    """node on the PATH (`npm test` puts the project's first); a test without one fails."""
    found = shutil.which("node")
    if found is None:
        pytest.fail("node is not on the PATH: run the tests with `npm test`")
    return found


def test_similarity_is_one_minus_edit_distance_over_the_longer_length(node: str) -> None:
    cases = [
        ["a b c", "a b c"],
        ["", "a b c"],
        ["a b", "a b c"],
        ["ab c", "a b c"],
        ["a b c d e", "a b c"],
        ["xyz", ""],
    ]
    script = (
        f"import {{ similarity }} from {json.dumps((EXAMPLE / 'reward.mjs').as_uri())};"
        f"console.log(JSON.stringify({json.dumps(cases)}.map(([a, t]) => similarity(a, t))));"
    )
    run = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, check=True)
    assert json.loads(run.stdout) == pytest.approx([1.0, 0.0, 0.6, 0.8, 5 / 9, 0.0])


def test_the_agent_module_parses(node: str) -> None:
    subprocess.run([node, "--check", str(EXAMPLE / "agent.mjs")], check=True)
