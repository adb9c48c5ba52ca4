"""The example's model: a 2-layer GPT-2 with random weights and a character tokenizer made here.

Nothing is downloaded: the tokenizer is built from a fixed vocabulary (characters, chat role
markers, two merged pairs), the model from a ``transformers`` config and a seed, so every
process that calls ``build_model(seed)`` holds the same weights.
"""

from __future__ import annotations

import os
import string

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

MODEL_NAME = "tiny"
PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
ROLES = ("system", "user", "assistant", "tool")
CHARACTERS = " " + string.ascii_lowercase + string.ascii_uppercase + string.digits + ".,:;?!'\"-()"
# Two merged pairs, so sampled tokens can spell text that tokenizes differently ("a" "b" -> "ab").
MERGES = [("a", "b"), ("b", "c")]
# Every turn ends with <eos>, the model's stop token: a generated answer ends with the very
# token the template puts after the message, so the next prompt can continue the previous one.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<eos>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A BPE tokenizer over single characters plus MERGES; role markers and <eos> are special tokens."""
    specials = [PAD, EOS, UNK] + [f"<|{role}|>" for role in ROLES]
    pieces = specials + list(CHARACTERS) + [a + b for a, b in MERGES]
    vocab = {piece: index for index, piece in enumerate(pieces)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=MERGES, unk_token=UNK))
    core.add_special_tokens(specials)
    core.decoder = decoders.Fuse()  # tokens join with nothing in between
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> GPT2LMHeadModel:
    """A GPT-2 of 2 layers, 64 wide, random weights from ``seed`` (about 0.1 M parameters)."""
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=256,
        n_embd=64,
        n_layer=2,
        n_head=4,
        # No dropout: the training forward pass must compute the logprobs the server sampled with.
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)  # type: ignore[no-untyped-call]
    model.eval()  # type: ignore[no-untyped-call]
    return model


def save_weights(model: GPT2LMHeadModel, path: str | os.PathLike[str]) -> None:
    """Writes the model (config.json, model.safetensors) to the directory ``path``."""
    model.save_pretrained(path)


def load_weights(model: GPT2LMHeadModel, path: str | os.PathLike[str]) -> None:
    """Loads weights that ``save_weights`` wrote into ``model``, in place."""
    saved = GPT2LMHeadModel.from_pretrained(path)
    model.load_state_dict(saved.state_dict())


def chat_prompt_ids(tokenizer: PreTrainedTokenizerFast, messages: list[dict[str, str]]) -> list[int]:
    """The prompt of a chat request: the messages through the chat template, ready for the answer."""
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert isinstance(rendered, str)
    # The special tokens are in the rendered text already (<|user|> ... <eos>): add none.
    ids: list[int] = tokenizer.encode(rendered, add_special_tokens=False)
    return ids
