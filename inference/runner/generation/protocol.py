"""OpenAI-compatible chat and completion requests in, response bodies and stream chunks out.

Only what this runner implements is accepted: one choice (``n`` = 1), no log-probabilities, no
penalties; anything else, and any field OpenAI does not define for the route, gets a 422 that names
the field rather than being silently ignored.
"""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass
from typing import Any

from ..config import RequestLimits
from ..errors import InvalidInput, PayloadTooLarge
from ..protocol import fields_require
from .chat_template import ROLES, Messages
from .sampling import SamplingParams

DEFAULT_LIMITS = RequestLimits()
MAX_STOPS = DEFAULT_LIMITS.stop_strings
# The fields OpenAI defines that this runner reads (or refuses with a reason, like ``n`` > 1); any other
# field is refused with 422. ``user`` is the caller's end-user id, accepted and not used.
_COMMON_FIELDS = {"model", "max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "stream",
                  "stream_options", "n", "logprobs", "presence_penalty", "frequency_penalty", "user"}  # fmt: skip
CHAT_FIELDS = frozenset(_COMMON_FIELDS | {"messages", "max_completion_tokens", "top_logprobs"})
COMPLETION_FIELDS = frozenset(_COMMON_FIELDS | {"prompt", "echo"})
MESSAGE_FIELDS = frozenset({"role", "content", "name"})
STREAM_OPTION_FIELDS = frozenset({"include_usage"})


@dataclass(frozen=True)
class GenerationRequest:
    model: str
    params: SamplingParams
    max_tokens: int | None  # None: as many as the context allows, up to the model's default
    stream: bool
    include_usage: bool
    messages: Messages | None = None
    prompt: str | None = None


def _number(data: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidInput(f"'{key}' must be a number")
    if not low <= value <= high:
        raise InvalidInput(f"'{key}' must be between {low} and {high}, got {value}")
    return float(value)


def _integer(data: dict[str, Any], key: str, minimum: int) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidInput(f"'{key}' must be an integer >= {minimum}, got {value!r}")
    return value


def _stops(value: Any, limit: int) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else value
    if stops is None:
        return ()
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise InvalidInput("'stop' must be a non-empty string or a list of non-empty strings")
    if len(stops) > limit:
        raise InvalidInput(f"'stop' holds {len(stops)} strings; the limit is {limit}")
    return tuple(stops)


def _check_prompt_bytes(texts: list[str], limit: int, what: str) -> None:
    size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
    if size > limit:
        raise PayloadTooLarge(f"{what} is {size} bytes (UTF-8); the limit is {limit}")


def _refuse_unsupported(data: dict[str, Any]) -> None:
    if data.get("n", 1) != 1:
        raise InvalidInput("'n' must be 1: this runner returns one choice per request")
    if data.get("logprobs") not in (None, False, 0) or data.get("top_logprobs"):
        raise InvalidInput("'logprobs' is not supported by this runner")
    for key in ("presence_penalty", "frequency_penalty"):
        if data.get(key) not in (None, 0, 0.0):
            raise InvalidInput(f"'{key}' is not supported by this runner")
    if data.get("echo"):
        raise InvalidInput("'echo' is not supported by this runner")


def _stream_flags(data: dict[str, Any]) -> tuple[bool, bool]:
    stream = data.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise InvalidInput("'stream' must be true or false")
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise InvalidInput("'stream_options' must be an object")
    fields_require(options, STREAM_OPTION_FIELDS, "stream_options")
    return bool(stream), bool(options.get("include_usage", False))


def parse_common(
    data: dict[str, Any], max_tokens_keys: tuple[str, ...], limits: RequestLimits = DEFAULT_LIMITS
) -> dict[str, Any]:
    """Fields shared by both routes: model, sampling parameters, streaming flags."""
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidInput("'model' (the deployment name) is required")
    _refuse_unsupported(data)
    key = next((k for k in max_tokens_keys if data.get(k) is not None), max_tokens_keys[0])
    max_tokens = _integer(data, key, 1)
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise InvalidInput("'seed' must be a non-negative integer")
    stream, include_usage = _stream_flags(data)
    params = SamplingParams(
        max_tokens=max_tokens or 1,  # replaced once the prompt length is known
        temperature=_number(data, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(data, "top_p", 1.0, 0.0, 1.0),
        top_k=_integer(data, "top_k", 0) or 0,
        stop=_stops(data.get("stop"), limits.stop_strings),
        seed=seed,
    )
    if params.top_p == 0:
        raise InvalidInput("'top_p' must be greater than 0")
    return {"model": model, "params": params, "max_tokens": max_tokens, "stream": stream,
            "include_usage": include_usage}  # fmt: skip


def _content(message: dict[str, Any], index: int) -> str:
    content = message.get("content")
    if content is None and message.get("role") == "assistant":
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    raise InvalidInput(f"messages[{index}].content must be a string or a list of text parts")


def parse_messages(value: Any, limits: RequestLimits = DEFAULT_LIMITS) -> Messages:
    if not isinstance(value, list) or not value:
        raise InvalidInput("'messages' must be a non-empty list")
    if len(value) > limits.messages:
        raise InvalidInput(f"'messages' holds {len(value)} messages; the limit is {limits.messages}")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise InvalidInput(f"messages[{index}] must be an object with 'role' and 'content'")
        fields_require(message, MESSAGE_FIELDS, f"messages[{index}]")
        role = message.get("role")
        if role not in ROLES:
            raise InvalidInput(
                f"messages[{index}].role {role!r} is unknown (expected one of {sorted(ROLES)})"
            )
        messages.append({"role": role, "content": _content(message, index)})
    _check_prompt_bytes([m["content"] for m in messages], limits.prompt_bytes, "the messages' content")
    if not any(m["content"].strip() for m in messages):
        raise InvalidInput("every message is empty")
    return messages


def parse_chat(data: dict[str, Any], limits: RequestLimits = DEFAULT_LIMITS) -> GenerationRequest:
    fields_require(data, CHAT_FIELDS)
    common = parse_common(data, ("max_completion_tokens", "max_tokens"), limits)
    return GenerationRequest(**common, messages=parse_messages(data.get("messages"), limits))


def parse_completion(data: dict[str, Any], limits: RequestLimits = DEFAULT_LIMITS) -> GenerationRequest:
    fields_require(data, COMPLETION_FIELDS)
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise InvalidInput("'prompt' must be a string (or a list holding one string)")
    _check_prompt_bytes([prompt], limits.prompt_bytes, "'prompt'")
    if not prompt.strip():
        raise InvalidInput("'prompt' must not be empty")
    return GenerationRequest(**parse_common(data, ("max_tokens",), limits), prompt=prompt)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    total = prompt_tokens + completion_tokens
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total}


class ResponseShape:
    """Builds bodies for one request: ``chat.completion`` or ``text_completion`` and their chunks."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def answer(self, text: str, finish_reason: str, counts: dict[str, int]) -> dict[str, Any]:
        if self.chat:
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
            return self._envelope("chat.completion", [choice]) | {"usage": counts}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return self._envelope("text_completion", [choice]) | {"usage": counts}

    def chunk(self, text: str | None, finish_reason: str | None = None, role: bool = False) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return self._envelope("chat.completion.chunk", [choice])
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        return self._envelope("text_completion", [choice])

    def usage_chunk(self, counts: dict[str, int]) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return self._envelope(obj, []) | {"usage": counts}
