"""What a two-turn conversation looks like in tokens, as agl's trajectory aggregation sees it.

agl merges two calls of a rollout into one row when the second prompt starts with the first
prompt + the first answer's token ids; the tokens between that and the second answer (here
the template's turn markers and the user's follow-up) join the response with mask 0. These
tests show both cases with this tokenizer:

- the answer's text re-tokenizes to the ids the model generated: the second prompt
  continues the first call exactly, and what it inserts is ``<|user|>``, the follow-up's
  characters, ``<eos>``, ``<|assistant|>`` (the answer's own ``<eos>`` is the generated stop
  token, so it is trained on; an answer cut by max_tokens gets ``<eos>`` inserted instead);
- it does not (the model sampled ``a`` then ``b``, which the tokenizer merges into ``ab``; or it
  sampled a special token that the text leaves out): the second prompt does not continue the
  first, and agl has to start a new row (the two calls are trained as separate transitions).
"""

from __future__ import annotations

import pytest
from tiny_model import build_tokenizer, chat_prompt_ids
from transformers import PreTrainedTokenizerFast

QUESTION = {"role": "user", "content": "Say a b c."}
FOLLOW_UP = {"role": "user", "content": "Once more."}


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return build_tokenizer()


def second_prompt(tokenizer: PreTrainedTokenizerFast, generated: list[int]) -> list[int]:
    """The second call's prompt: what an agent sends back is the first answer's text, not its ids."""
    eos = tokenizer.eos_token_id
    text = tokenizer.decode([t for t in generated if t != eos], skip_special_tokens=True)
    return chat_prompt_ids(tokenizer, [QUESTION, {"role": "assistant", "content": str(text)}, FOLLOW_UP])


def ids(tokenizer: PreTrainedTokenizerFast, *tokens: str) -> list[int]:
    converted = tokenizer.convert_tokens_to_ids(list(tokens))
    assert isinstance(converted, list)
    return converted


def test_the_second_prompt_continues_the_first_call_and_inserts_the_turn_markers(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    first = chat_prompt_ids(tokenizer, [QUESTION])
    generated = ids(tokenizer, "a", " ", "b", " ", "c", "<eos>")  # as the model would sample "a b c"
    second = second_prompt(tokenizer, generated)
    assert second[: len(first) + len(generated)] == first + generated
    inserted = tokenizer.convert_ids_to_tokens(second[len(first) + len(generated) :])
    assert inserted == ["<|user|>", *"Once more.", "<eos>", "<|assistant|>"]


def test_an_answer_cut_by_max_tokens_gets_its_eos_inserted(tokenizer: PreTrainedTokenizerFast) -> None:
    first = chat_prompt_ids(tokenizer, [QUESTION])
    generated = ids(tokenizer, "a", " ", "b")  # finish_reason "length": no stop token
    second = second_prompt(tokenizer, generated)
    assert second[: len(first) + len(generated)] == first + generated
    inserted = tokenizer.convert_ids_to_tokens(second[len(first) + len(generated) :])
    assert inserted[:2] == ["<eos>", "<|user|>"]


def test_sampled_tokens_that_merge_differently_break_the_continuation(tokenizer: PreTrainedTokenizerFast) -> None:
    first = chat_prompt_ids(tokenizer, [QUESTION])
    generated = ids(tokenizer, "a", "b", " ", "c", "<eos>")  # "a" then "b": two tokens
    assert tokenizer.decode(generated, skip_special_tokens=True) == "ab c"
    second = second_prompt(tokenizer, generated)
    assert second[: len(first) + len(generated)] != first + generated
    answer_in_second = tokenizer.convert_ids_to_tokens(second[len(first) : len(first) + 4])
    assert answer_in_second == ["ab", " ", "c", "<eos>"]  # the text re-tokenized: "ab" is one token


def test_a_sampled_special_token_is_lost_from_the_text(tokenizer: PreTrainedTokenizerFast) -> None:
    first = chat_prompt_ids(tokenizer, [QUESTION])
    generated = ids(tokenizer, "a", "<unk>", " ", "b", "<eos>")
    second = second_prompt(tokenizer, generated)
    assert second[: len(first) + len(generated)] != first + generated
    assert tokenizer.convert_ids_to_tokens(second[len(first) : len(first) + 4]) == ["a", " ", "b", "<eos>"]
