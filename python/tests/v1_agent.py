"""An agent as Agent Lightning v1's local controller starts one: its rollout in the environment.

The controller gives it ``AGL_OPENAI_BASE_URL`` (the proxy, for this rollout, attempt and mode),
``AGL_EVENT_URL`` (where its events go), ``AGL_KEY``, and the rollout input's fields named by
``config.local.env_map`` (here ``QUESTION``). It asks the model once, then reports a reward.
"""

from __future__ import annotations

import os
import sys

import httpx


def main() -> int:
    key = os.environ["AGL_KEY"]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    question = os.environ["QUESTION"]
    with httpx.Client(headers=headers, timeout=30) as client:
        response = client.post(
            f"{os.environ['AGL_OPENAI_BASE_URL']}/chat/completions",
            json={"model": "agent-model", "messages": [{"role": "user", "content": question}]},
        )
        response.raise_for_status()
        answer = response.json()["choices"][0]["message"]["content"]
        value = 1.0 if question in answer else 0.0
        reward = {"event_type": "reward", "data": {"value": value, "message": f"answered {answer!r}", "source": "agent"}}
        client.post(os.environ["AGL_EVENT_URL"], json=reward).raise_for_status()
    return 0


if __name__ == "__main__":
    sys.exit(main())
