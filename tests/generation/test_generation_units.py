"""Pure pieces of runner generation: sampling, streaming text, stop strings, cache rows, templates."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from inference.runner.errors import ConfigError, InvalidInput
from inference.runner.generation.chat_template import DEFAULT_CHAT_TEMPLATE, ChatTemplate, render_chatml
from inference.runner.generation.detokenizer import IncrementalDetokenizer, StopMatcher
from inference.runner.generation.kv_batch import KVBatch
from inference.runner.generation.protocol import parse_chat, parse_completion
from inference.runner.generation.sampling import SamplingParams, sample
from inference.runner.generation.sequence import Sequence
from inference.runner.generation.spec import parse_generation

LOGITS = np.array([0.1, 3.0, 2.9, -1.0, 0.5], dtype=np.float32)


def byte_tokenizer() -> Tokenizer:
    """Byte-level tokens only: every UTF-8 byte is its own token, like a BPE before merges."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def test_temperature_zero_is_greedy_and_top_k_one_agrees() -> None:
    rng = np.random.default_rng(0)
    assert sample(LOGITS, SamplingParams(max_tokens=1, temperature=0), rng) == 1
    assert {sample(LOGITS, SamplingParams(max_tokens=1, top_k=1), rng) for _ in range(20)} == {1}


def test_a_seed_reproduces_the_samples_and_top_p_keeps_the_nucleus() -> None:
    params = SamplingParams(max_tokens=1, temperature=1.5, seed=7)
    first, second = params.rng(), params.rng()
    draws = [sample(LOGITS, params, first) for _ in range(50)]
    assert draws == [sample(LOGITS, params, second) for _ in range(50)]
    assert len(set(draws)) > 2
    nucleus = SamplingParams(max_tokens=1, top_p=0.6, seed=1)
    rng = nucleus.rng()
    assert {sample(LOGITS, nucleus, rng) for _ in range(50)} == {1, 2}


def test_streamed_text_never_splits_a_character_across_chunks() -> None:
    tokenizer = byte_tokenizer()
    ids = tokenizer.encode("Lantau 大嶼山 ok").ids
    detokenizer = IncrementalDetokenizer(tokenizer, [])
    chunks = [detokenizer.add(token) for token in ids]
    assert "".join(chunks) + detokenizer.flush() == "Lantau 大嶼山 ok"
    assert "\ufffd" not in "".join(chunks)
    assert chunks[7:10] == ["", "", "大"]  # three bytes, one character


def test_stop_strings_are_cut_even_across_chunks_and_held_text_is_released() -> None:
    matcher = StopMatcher(("</s>", "END"))
    assert matcher.feed("hello <") == ("hello ", False)
    assert matcher.feed("/") == ("", False)
    assert matcher.feed("s> more") == ("", True)
    other = StopMatcher(("END",))
    assert other.feed("the EN") == ("the ", False)
    assert other.feed("try") == ("ENtry", False)
    assert other.feed("E") == ("", False)
    assert other.flush() == "E"


def test_a_sequence_stops_on_eos_on_a_stop_string_or_at_max_tokens() -> None:
    tokenizer = byte_tokenizer()
    ids = tokenizer.encode("abc").ids

    def run(params: SamplingParams, eos: frozenset[int]) -> tuple[str, str | None]:
        sequence = Sequence([0], params, tokenizer, eos)
        text, event = "", None
        for token in ids:
            event = sequence.advance(np.eye(256, dtype=np.float32)[token])
            text += event.text
            if event.finish_reason:
                break
        return text, event.finish_reason if event else None

    assert run(SamplingParams(max_tokens=9, temperature=0), frozenset({ids[2]})) == ("ab", "stop")
    assert run(SamplingParams(max_tokens=9, temperature=0, stop=("bc",)), frozenset()) == ("a", "stop")
    assert run(SamplingParams(max_tokens=2, temperature=0), frozenset()) == ("ab", "length")


def kv(rows: list[list[int]]) -> KVBatch:
    """A one-layer cache whose values equal the token they stand for (0 = padding)."""
    width = max(len(r) for r in rows)
    mask = np.array([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=np.int64)
    values = np.array([[0] * (width - len(r)) + r for r in rows], dtype=np.float32)
    cache = values[:, None, :, None]
    return KVBatch([cache, cache.copy()], mask, np.array([len(r) for r in rows], dtype=np.int64))


def test_cache_rows_stay_right_aligned_through_merge_and_select() -> None:
    merged = kv([[1, 2]]).merge(kv([[3, 4, 5, 6], [7]]))
    assert merged.mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1]]
    assert merged.cache[0][:, 0, :, 0].tolist() == [[0, 0, 1, 2], [3, 4, 5, 6], [0, 0, 0, 7]]
    kept = merged.select([2, 0])  # the long row left: its columns are trimmed
    assert kept.width == 2 and kept.cache[1][:, 0, :, 0].tolist() == [[0, 7], [1, 2]]
    assert kept.positions.tolist() == [1, 2]


def test_builtin_chatml_renders_exactly_like_the_jinja_template() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    jinja = ChatTemplate(DEFAULT_CHAT_TEMPLATE + " ")  # a different source forces the Jinja path
    assert jinja.render(messages) == render_chatml(messages) + " "
    assert ChatTemplate(None).render(messages).endswith("<|im_start|>assistant\n")


def test_a_model_template_can_refuse_messages_with_a_422() -> None:
    template = ChatTemplate(
        "{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}x"
    )
    with pytest.raises(InvalidInput, match="user first"):
        template.render([{"role": "assistant", "content": "hi"}])
    with pytest.raises(ConfigError):
        ChatTemplate("{% if %}")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"model": "m", "messages": []}, "non-empty list"),
        ({"model": "m", "messages": [{"role": "user", "content": "  "}]}, "every message is empty"),
        ({"model": "m", "messages": [{"role": "robot", "content": "hi"}]}, "role 'robot' is unknown"),
        ({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "text parts"),
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 3}, "temperature"),
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}, "'n' must be 1"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "'model'"),
    ],
)
def test_chat_requests_are_refused_with_the_reason(body: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_chat(body)


def test_completion_requests_accept_one_prompt_and_the_sampling_fields() -> None:
    parsed = parse_completion(
        {"model": "m", "prompt": ["hi"], "max_tokens": 5, "top_p": 0.5, "top_k": 3, "stop": "x", "seed": 1}
    )
    assert parsed.prompt == "hi" and parsed.max_tokens == 5
    assert (parsed.params.top_p, parsed.params.top_k, parsed.params.stop, parsed.params.seed) == (
        0.5,
        3,
        ("x",),
        1,
    )
    with pytest.raises(InvalidInput, match="must not be empty"):
        parse_completion({"model": "m", "prompt": ""})


def test_the_generation_section_is_validated() -> None:
    good = {"num_layers": 2, "num_kv_heads": 2, "head_dim": 16, "context_length": 64, "eos_token_ids": [2]}
    assert parse_generation(good).eos_token_ids == (2,)
    with pytest.raises(ConfigError, match="num_layers"):
        parse_generation(good | {"num_layers": 0})
    with pytest.raises(ConfigError, match="eos_token_ids"):
        parse_generation(good | {"eos_token_ids": ["x"]})
