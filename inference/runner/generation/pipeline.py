"""The text-generation task: prompt text or chat messages -> token ids -> a sequence to schedule.

``load_text_generation`` is the runner's entry point for this task: it builds the session, the
tokenizer and the chat template once, warms the graph up, and returns the scheduler that the
runner keeps as its batcher.
"""

from __future__ import annotations

import logging
from typing import Any

from tokenizers import Tokenizer

from ..engine import Engine
from ..errors import ConfigError, InvalidInput, NotFound
from .chat_template import ChatTemplate
from .continuous_batch import ContinuousBatch
from .decoder import Decoder
from .protocol import GenerationRequest
from .sampling import SamplingParams
from .scheduler import GenerationScheduler
from .sequence import Sequence
from .spec import GenerationSpec

log = logging.getLogger("lantau.runner.generation")
TEXT_GENERATION = "text-generation"


class TextGeneration:
    """Tokenizer, chat template and context rules of one generation model (thread-safe reads)."""

    task = TEXT_GENERATION
    labels: tuple[str, ...] = ()  # the image predict route reads this before refusing the task

    def __init__(self, spec: GenerationSpec, tokenizer_path: str, decoder: Decoder) -> None:
        self.spec = spec
        self.decoder = decoder
        try:
            self.tokenizer = Tokenizer.from_file(tokenizer_path)
        except Exception as exc:  # tokenizers raises a bare Exception for a bad file
            raise ConfigError(f"cannot load tokenizer: {str(exc).splitlines()[0]}") from None
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.template = ChatTemplate(spec.chat_template, spec.special_tokens)
        self.eos = frozenset(spec.eos_token_ids)

    def prepare(self, _: Any) -> Any:
        raise NotFound("this deployment generates text; use /v1/chat/completions or /v1/completions")

    def encode(self, request: GenerationRequest) -> list[int]:
        """Token ids of a chat (rendered through the template) or of a completion's prompt."""
        if request.messages is not None:
            return self._ids(self.template.render(request.messages), special=False)
        if request.prompt is not None:
            return self._ids(request.prompt, special=True)
        raise InvalidInput("send 'messages' (chat) or 'prompt' (completion)")

    def _ids(self, text: str, *, special: bool) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=special).ids  # tokenizers is untyped
        return ids

    def max_tokens(self, prompt_tokens: int, requested: int | None) -> int:
        """How many tokens may follow the prompt; 422 with the numbers when it does not fit."""
        context = self.spec.context_length
        if not prompt_tokens:
            raise InvalidInput("the prompt encodes to no tokens")
        if prompt_tokens >= context:
            raise InvalidInput(
                f"the prompt is {prompt_tokens} tokens; this model's context is {context} tokens "
                "and needs room for at least one new token"
            )
        if requested is None:
            return min(self.spec.default_max_tokens, context - prompt_tokens)
        if prompt_tokens + requested > context:
            raise InvalidInput(
                f"the prompt ({prompt_tokens} tokens) plus max_tokens ({requested}) is "
                f"{prompt_tokens + requested} tokens; this model's context is {context} tokens"
            )
        return requested

    def sequence(self, prompt: list[int], params: SamplingParams) -> Sequence:
        return Sequence(prompt, params, self.tokenizer, self.eos)

    def warmup(self, max_batch_size: int) -> None:
        """Prefill and decode at batch 1 and at the largest batch so first requests run warm."""
        batch = ContinuousBatch(self.decoder)
        for size in sorted({1, max_batch_size}):
            params = SamplingParams(max_tokens=2, temperature=0)
            batch.step([self.sequence([0, 0], params) for _ in range(size)])
            batch.step([])
        batch.fail_all([])


def load_text_generation(state: Any) -> GenerationScheduler:
    """Blocking: build the session, tokenizer and template, warm up; return the scheduler.

    ``state`` is the runner's ``app.State``; ``state.pipeline`` is set to the TextGeneration.
    """
    config, manifest = state.config, state.manifest
    spec: GenerationSpec = manifest.generation
    engine = Engine(
        manifest.model_path, config.threads, device=config.device, trt_cache_dir=config.trt_cache_dir
    )
    pipeline = TextGeneration(spec, str(manifest.tokenizer_path), Decoder(engine, spec))
    pipeline.warmup(config.max_batch_size)
    state.pipeline = pipeline
    log.info("text generation ready: context %d, batch up to %d", spec.context_length, config.max_batch_size)
    return GenerationScheduler(
        ContinuousBatch(pipeline.decoder),
        max_batch_size=config.max_batch_size,
        max_queue=config.max_queue,
        metrics=state.metrics,
    )
