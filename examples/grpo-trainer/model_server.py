"""An OpenAI-compatible server for the tiny model, answering as vLLM does for agl.

- ``POST /v1/chat/completions``: the messages through the chat template, ``n`` answers sampled
  (``temperature``, ``max_tokens`` / ``max_completion_tokens``, ``seed``); with
  ``return_token_ids: true`` the prompt's ids at the top level (``prompt_token_ids``) and each
  answer's ids in ``choices[i].token_ids`` (its stop token included); with ``logprobs: true``
  ``choices[i].logprobs.content[]`` = ``{token, logprob, top_logprobs: []}``, one per token id;
  usage. Not streamed: ``stream: true`` is refused (400).
- ``POST /reload`` ``{"path": DIR, "version": "2"}``: loads weights saved with
  ``tiny_model.save_weights``; the answers' ``system_fingerprint`` names the version serving.
  ``"name"`` serves them under a new model name (the SFT command of agl_trainer.trl names the
  model by its folder).
- ``GET /v1/models``: the one model, with its version.

A request's ``seed`` seeds its draws. One without gets its own seed from ``--sampling-seed``
(default ``--seed``), the model version, the prompt's ids and how many requests for that prompt
came before under that version (``agl_trainer.chat_server.RequestSeeds``): the answers to each
prompt do not depend on the order concurrent rollouts arrive in, so a closed loop is
reproducible.

``--log FILE`` appends one JSON line per chat request: the model version, the prompt's ids and
each answer's ids and logprobs (what a test checks agl's batches against).

Run: ``python model_server.py --port 8000`` (prints its URL once it listens).
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import ThreadingHTTPServer
from typing import Any, TextIO

import torch
from agl_trainer.chat_server import ChatRequest, RequestError, RequestSeeds, completion_answer, serve_routes
from sampling import Completion, sample
from tiny_model import MODEL_NAME, build_model, build_tokenizer, chat_prompt_ids, load_weights
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast


class ModelService:
    """The model behind the server: answers chat requests, swaps in new weights.

    One lock around sampling and reloading: a reload never lands in the middle of an answer.
    ``seed``: the base seed of requests that bring none (see the module's doc); None: they draw
    from torch's global generator, in arrival order.
    """

    def __init__(
        self,
        model: GPT2LMHeadModel,
        tokenizer: PreTrainedTokenizerFast,
        name: str = MODEL_NAME,
        version: str = "0",
        seed: int | None = None,
        log: TextIO | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.version = version
        self._log = log
        self._seeds = None if seed is None else RequestSeeds(seed)
        self._lock = threading.Lock()

    def models(self) -> dict[str, Any]:
        entry = {"id": self.name, "object": "model", "created": 0, "owned_by": "agl-example", "version": self.version}
        return {"object": "list", "data": [entry]}

    def reload(self, body: dict[str, Any]) -> dict[str, Any]:
        path, version, name = body.get("path"), body.get("version"), body.get("name", self.name)
        if not isinstance(path, str) or not path:
            raise RequestError(400, "path must be the directory of the saved weights")
        if not isinstance(version, str) or not version:
            raise RequestError(400, "version must be a non-empty string")
        if not isinstance(name, str) or not name:
            raise RequestError(400, "name, when given, must be a non-empty string: the name to serve the weights as")
        with self._lock:
            try:
                load_weights(self.model, path)
            except (OSError, ValueError, RuntimeError) as error:
                raise RequestError(400, f"cannot load weights from {path}: {error}") from None
            self.version = version
            self.name = name
        return {"model": self.name, "version": version}

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        request = ChatRequest.of(body, self.name)
        # Tokenizer and model are used by one request at a time (a fast tokenizer is not
        # safe to share across threads); the tiny model answers in milliseconds anyway.
        with self._lock:
            prompt_ids = chat_prompt_ids(self.tokenizer, request.messages)
            seed = request.seed
            if seed is None and self._seeds is not None:
                seed = self._seeds.next(self.version, prompt_ids)
            generator = None if seed is None else torch.Generator().manual_seed(seed)
            try:
                completions = sample(
                    self.model,
                    prompt_ids,
                    n=request.n,
                    max_tokens=request.max_tokens,
                    temperature=request.temperature,
                    stop_id=self.tokenizer.eos_token_id,
                    generator=generator,
                )
            except ValueError as error:
                raise RequestError(400, str(error)) from None
            choices = [self._choice(index, completion, request) for index, completion in enumerate(completions)]
            version = self.version
            self._log_generation(version, prompt_ids, completions)
        completion_tokens = sum(len(c.token_ids) for c in completions)
        return completion_answer(self.name, version, prompt_ids, choices, completion_tokens, request)

    def _log_generation(self, version: str, prompt_ids: list[int], completions: list[Completion]) -> None:
        if self._log is None:
            return
        answers = [{"token_ids": c.token_ids, "logprobs": c.logprobs} for c in completions]
        self._log.write(json.dumps({"version": version, "prompt_ids": prompt_ids, "answers": answers}) + "\n")
        self._log.flush()

    def _choice(self, index: int, completion: Completion, request: ChatRequest) -> dict[str, Any]:
        ids = completion.token_ids
        shown = ids[:-1] if completion.finish_reason == "stop" else ids
        choice: dict[str, Any] = {
            "index": index,
            "message": {"role": "assistant", "content": self.tokenizer.decode(shown, skip_special_tokens=True)},
            "finish_reason": completion.finish_reason,
            "logprobs": None,
        }
        if request.logprobs:
            tokens = self.tokenizer.convert_ids_to_tokens(ids)
            choice["logprobs"] = {
                "content": [
                    {"token": token, "logprob": logprob, "top_logprobs": []}
                    for token, logprob in zip(tokens, completion.logprobs, strict=True)
                ]
            }
        if request.return_token_ids:
            choice["token_ids"] = ids
        return choice


def start_server(service: ModelService, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server for ``service`` listening on host:port (0: any free port); serve it with serve_forever()."""
    return serve_routes(
        {"/v1/models": service.models}, {"/v1/chat/completions": service.chat, "/reload": service.reload}, host, port
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0: any free port (the URL printed says which)")
    parser.add_argument("--model-name", default=MODEL_NAME, help="the name requests must ask for")
    parser.add_argument("--seed", type=int, default=0, help="the initial weights' seed (train.py's --seed)")
    parser.add_argument(
        "--sampling-seed", type=int, help="the base seed of requests that bring none (default: --seed)"
    )
    parser.add_argument("--weights", help="start from weights saved by train.py instead of the seed's")
    parser.add_argument("--version", default="0", help="the version of the weights it starts with")
    parser.add_argument("--log", help="append each request's version, prompt ids, answer ids and logprobs (JSONL)")
    args = parser.parse_args(argv)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, args.seed)
    if args.weights:
        load_weights(model, args.weights)
    log = open(args.log, "a", encoding="utf-8") if args.log else None
    sampling_seed = args.seed if args.sampling_seed is None else args.sampling_seed
    service = ModelService(model, tokenizer, args.model_name, args.version, sampling_seed, log)
    server = start_server(service, args.host, args.port)
    port = server.server_address[1]
    print(f"model server: {args.model_name} (version {args.version}) at http://{args.host}:{port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if log is not None:
            log.close()


if __name__ == "__main__":
    main()
