"""Chat messages -> prompt text: the model's own Jinja template, or built-in ChatML without Jinja.

Hugging Face chat templates are Jinja; ``jinja2`` is optional for the runner, so the default
ChatML template is also rendered by plain Python and only a model-specific template needs it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..errors import ConfigError, InvalidInput

DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})

Messages = list[dict[str, str]]


def render_chatml(messages: Messages, add_generation_prompt: bool = True) -> str:
    """Exactly what DEFAULT_CHAT_TEMPLATE renders, without a template engine."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def _raise(message: str) -> None:
    raise InvalidInput(f"the chat template refused the messages: {message}")


def _compile_jinja(source: str) -> Callable[..., str]:
    try:
        from jinja2 import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ConfigError("this model's chat template needs jinja2 (pip install jinja2)") from None
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        template = env.from_string(source)
    except TemplateError as exc:
        raise ConfigError(f"manifest: generation.chat_template does not compile: {exc}") from None

    def render(**context: Any) -> str:
        try:
            return template.render(**context)
        except TemplateError as exc:
            raise InvalidInput(f"the chat template cannot render these messages: {exc}") from None

    return render


class ChatTemplate:
    """Renders OpenAI-style messages (already validated to role + text content) to prompt text."""

    def __init__(self, source: str | None, special_tokens: dict[str, str] | None = None) -> None:
        self.special_tokens = dict(special_tokens or {})
        self._jinja = None if source in (None, DEFAULT_CHAT_TEMPLATE) else _compile_jinja(source)

    def render(self, messages: Messages) -> str:
        if self._jinja is None:
            return render_chatml(messages)
        return self._jinja(messages=messages, add_generation_prompt=True, **self.special_tokens)
