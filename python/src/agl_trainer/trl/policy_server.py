"""An OpenAI-compatible chat server that generates with the model a trainer is training.

It runs in the trainer's process and samples from the very module the optimizer updates (a
PEFT model: with its adapter), so there are no weights to copy or reload between steps: the
next request after an update uses the new weights. Answers carry what agl's gateway reads, as
vLLM returns it: ``prompt_token_ids``, ``choices[i].token_ids`` (the stop token included) and
``choices[i].logprobs.content[]``, the logprob of each sampled token under the distribution it
was drawn from (logits / temperature, nothing cut off: no top-k, no top-p), which is what
TRL's GRPOTrainer recomputes.

Routes: ``POST /v1/chat/completions`` (not streamed), ``GET /v1/models``. ``temperature`` must
be the trainer's (a request without one gets it): logprobs at another temperature would not be
those TRL trains with. A request's ``seed`` seeds its draws; with a base ``seed`` given to the
server, a request without one gets its own seed from (base, model version, prompt ids, how many
requests for that prompt came before under that version: ``RequestSeeds``), so a closed loop
samples the same answers whichever order its rollouts arrive in; without a base seed it draws
from torch's global generator.
"""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from typing import Any, TextIO

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from ..chat_server import ChatRequest, RequestError, RequestSeeds, completion_answer, serve_routes


class PolicyServer:
    """Chat completions sampled from ``model`` at ``temperature``, served as ``name``.

    ``lock`` is held while answering; the trainer holds it while the optimizer changes the
    weights, so an answer never mixes two versions. ``version`` names the weights serving (the
    trainer sets it after each step); ``log`` gets one JSON line per request (version, prompt
    ids, each answer's ids and logprobs). ``seed``: the base seed of requests that bring none
    (see the module's doc); None: they draw from torch's global generator, in arrival order.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        name: str,
        temperature: float,
        *,
        version: str = "0",
        max_tokens: int = 256,
        log: TextIO | None = None,
        seed: int | None = None,
    ) -> None:
        if not temperature > 0:
            raise ValueError(f"the policy server samples at a temperature above 0, not {temperature}")
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token: answers would never stop")
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.temperature = temperature
        self.version = version
        self.max_tokens = max_tokens
        self.lock = threading.Lock()
        self._log = log
        self._seeds = None if seed is None else RequestSeeds(seed)
        self._server: ThreadingHTTPServer | None = None

    def models(self) -> dict[str, Any]:
        entry = {"id": self.name, "object": "model", "created": 0, "owned_by": "agl-trainer", "version": self.version}
        return {"object": "list", "data": [entry]}

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        request = ChatRequest.of(body, self.name, self.temperature)
        if request.temperature != self.temperature:
            raise RequestError(
                400,
                f"temperature must be the trainer's {self.temperature}, not {request.temperature}:"
                " TRL recomputes logprobs at its own temperature",
            )
        if request.max_tokens > self.max_tokens:
            raise RequestError(400, f"max_tokens must be at most {self.max_tokens} (the trainer's completion length)")
        with self.lock:
            prompt_ids = self.prompt_ids(request.messages)
            version = self.version
            seed = request.seed
            if seed is None and self._seeds is not None:
                seed = self._seeds.next(version, prompt_ids)
            answers = self.sample(prompt_ids, request.n, request.max_tokens, seed)
            self._log_generation(version, prompt_ids, answers)
        return self._answer(request, prompt_ids, answers, version)

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The messages through the chat template, ready for the answer."""
        rendered = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert isinstance(rendered, str)
        # The template writes the special tokens itself: encoding adds none.
        ids: list[int] = self.tokenizer.encode(rendered, add_special_tokens=False)
        return ids

    @torch.no_grad()
    def sample(
        self, prompt_ids: list[int], n: int, max_tokens: int, seed: int | None
    ) -> list[tuple[list[int], list[float]]]:
        """``n`` answers (ids up to and with the stop token) and each token's logprob."""
        device = next(self.model.parameters()).device
        input_ids = torch.tensor([prompt_ids] * n, dtype=torch.long, device=device)
        config = GenerationConfig(
            do_sample=True,
            temperature=self.temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_tokens,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        # generate draws from torch's global generator: a seeded request gets its own draws and
        # leaves the global sequence where it was; others advance it.
        with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                generation_config=config,
            )
        generated = out.sequences[:, len(prompt_ids) :]
        logits = torch.stack(out.logits, dim=1).float() / self.temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)
        answers = []
        for row in range(n):
            ids = generated[row].tolist()
            stop = ids.index(self.tokenizer.eos_token_id) + 1 if self.tokenizer.eos_token_id in ids else len(ids)
            answers.append((ids[:stop], logprobs[row, :stop].tolist()))
        return answers

    def _answer(
        self, request: ChatRequest, prompt_ids: list[int], answers: list[tuple[list[int], list[float]]], version: str
    ) -> dict[str, Any]:
        choices = []
        for index, (ids, logprobs) in enumerate(answers):
            stopped = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
            text = self.tokenizer.decode(ids[:-1] if stopped else ids, skip_special_tokens=True)
            choice: dict[str, Any] = {
                "index": index,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop" if stopped else "length",
                "logprobs": None,
            }
            if request.logprobs:
                tokens = self.tokenizer.convert_ids_to_tokens(ids)
                content = [
                    {"token": t, "logprob": lp, "top_logprobs": []} for t, lp in zip(tokens, logprobs, strict=True)
                ]
                choice["logprobs"] = {"content": content}
            if request.return_token_ids:
                choice["token_ids"] = ids
            choices.append(choice)
        completion_tokens = sum(len(ids) for ids, _ in answers)
        return completion_answer(self.name, version, prompt_ids, choices, completion_tokens, request)

    def _log_generation(
        self, version: str, prompt_ids: list[int], answers: list[tuple[list[int], list[float]]]
    ) -> None:
        if self._log is None:
            return
        entries = [{"token_ids": ids, "logprobs": logprobs} for ids, logprobs in answers]
        self._log.write(json.dumps({"version": version, "prompt_ids": prompt_ids, "answers": entries}) + "\n")
        self._log.flush()

    def start(self, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
        """Serves on host:port (0: any free port) from a daemon thread; ``shutdown()`` stops it."""
        server = serve_routes({"/v1/models": self.models}, {"/v1/chat/completions": self.chat}, host, port)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._server = server
        return server

    def endpoint(self) -> str:
        """The OpenAI base URL it serves at (``http://127.0.0.1:PORT/v1``), once started."""
        if self._server is None:
            raise RuntimeError("the policy server is not started: call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"
