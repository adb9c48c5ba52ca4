"""The agent's reward (reward.mjs), run by node, against values worked out by hand."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent
NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not on the PATH")
def test_similarity_is_one_minus_edit_distance_over_the_longer_length() -> None:
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
    assert NODE is not None
    run = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True, text=True, check=True)
    assert json.loads(run.stdout) == pytest.approx([1.0, 0.0, 0.6, 0.8, 5 / 9, 0.0])


@pytest.mark.skipif(NODE is None, reason="node is not on the PATH")
def test_the_agent_module_parses() -> None:
    assert NODE is not None
    subprocess.run([NODE, "--check", str(EXAMPLE / "agent.mjs")], check=True)
