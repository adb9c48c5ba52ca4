"""The model server answers as vLLM does for agl's gateway, and swaps weights on /reload."""

from __future__ import annotations

from pathlib import Path

import torch
from conftest import RunningServer
from model_server import ModelService
from tiny_model import build_model, build_tokenizer, chat_prompt_ids, save_weights

MESSAGES = [{"role": "user", "content": "Say a b c."}]


def ask(server: RunningServer, **fields: object) -> dict[str, object]:
    status, answer = server.post("/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, **fields})
    assert status == 200, answer
    return answer


def test_token_ids_decode_to_the_text_and_logprobs_match_them(server: RunningServer) -> None:
    answer = ask(server, max_tokens=12, n=3, seed=7, logprobs=True, return_token_ids=True)
    tokenizer = server.service.tokenizer
    assert answer["prompt_token_ids"] == chat_prompt_ids(tokenizer, MESSAGES)
    choices = answer["choices"]
    assert isinstance(choices, list) and len(choices) == 3
    for choice in choices:
        ids = choice["token_ids"]
        # vLLM's token_ids hold the stop token; the text does not.
        body = ids[:-1] if choice["finish_reason"] == "stop" else ids
        assert choice["finish_reason"] in ("stop", "length")
        assert 1 <= len(ids) <= 12
        assert choice["message"]["content"] == tokenizer.decode(body, skip_special_tokens=True)
        content = choice["logprobs"]["content"]
        assert len(content) == len(ids)
        assert [entry["token"] for entry in content] == tokenizer.convert_ids_to_tokens(ids)
        assert all(entry["logprob"] <= 0 and entry["top_logprobs"] == [] for entry in content)
    usage = answer["usage"]
    assert usage == {
        "prompt_tokens": len(answer["prompt_token_ids"]),
        "completion_tokens": sum(len(c["token_ids"]) for c in choices),
        "total_tokens": len(answer["prompt_token_ids"]) + sum(len(c["token_ids"]) for c in choices),
    }


def test_no_token_ids_or_logprobs_unless_asked(server: RunningServer) -> None:
    answer = ask(server, max_tokens=4)
    assert "prompt_token_ids" not in answer
    choice = answer["choices"][0]  # type: ignore[index]
    assert "token_ids" not in choice and choice["logprobs"] is None


def test_the_same_seed_samples_the_same_answer(server: RunningServer) -> None:
    first = ask(server, max_tokens=8, seed=11, return_token_ids=True)
    second = ask(server, max_tokens=8, seed=11, return_token_ids=True)
    assert first["choices"][0]["token_ids"] == second["choices"][0]["token_ids"]  # type: ignore[index]


def test_reload_serves_the_new_weights_as_the_new_version(server: RunningServer, tmp_path: Path) -> None:
    before = ask(server, max_tokens=8, seed=5, logprobs=True, return_token_ids=True)
    other = build_model(server.service.tokenizer, seed=1)
    save_weights(other, tmp_path / "step-1")
    status, answer = server.post("/reload", {"path": str(tmp_path / "step-1"), "version": "7"})
    assert (status, answer) == (200, {"model": "tiny", "version": "7"})
    assert server.get("/v1/models")["data"][0]["version"] == "7"
    served = server.service.model.state_dict()
    assert all(torch.equal(served[name], value) for name, value in other.state_dict().items())
    after = ask(server, max_tokens=8, seed=5, logprobs=True, return_token_ids=True)
    assert after["system_fingerprint"] == "tiny-v7" and before["system_fingerprint"] == "tiny-v0"
    first_logprob = [a["choices"][0]["logprobs"]["content"][0]["logprob"] for a in (before, after)]  # type: ignore[index]
    assert first_logprob[0] != first_logprob[1]


def test_requests_it_cannot_answer(server: RunningServer, tmp_path: Path) -> None:
    status, answer = server.post("/v1/chat/completions", {"model": "gpt-4o", "messages": MESSAGES})
    assert status == 404 and "serves 'tiny'" in answer["error"]["message"]
    status, answer = server.post("/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, "stream": True})
    assert status == 400 and "stream is not supported" in answer["error"]["message"]
    status, answer = server.post("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "x"}]})
    assert status == 400 and "messages[0].role" in answer["error"]["message"]
    status, answer = server.post("/reload", {"path": str(tmp_path / "missing"), "version": "2"})
    assert status == 400 and "cannot load weights" in answer["error"]["message"]
    assert server.service.version == "0"


def test_with_a_base_seed_each_prompts_answers_do_not_depend_on_the_order_requests_arrive_in() -> None:
    tokenizer = build_tokenizer()
    prompts = {name: [{"role": "user", "content": text}] for name, text in (("a", "Say a b c."), ("b", "Go."))}

    def answers(order: str) -> dict[str, list[list[int]]]:
        service = ModelService(build_model(tokenizer, seed=0), tokenizer, seed=3)
        got: dict[str, list[list[int]]] = {name: [] for name in prompts}
        for name in order:
            body = {"model": "tiny", "messages": prompts[name], "max_tokens": 8, "return_token_ids": True}
            got[name].append(service.chat(body)["choices"][0]["token_ids"])
        return got

    first = answers("aabab")
    assert first == answers("bbaaa")
    # Repeats of a prompt are new draws, not the same answer again.
    assert len({tuple(ids) for ids in first["a"]}) == 3
