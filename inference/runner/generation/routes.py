"""HTTP routes ``POST /v1/chat/completions`` and ``POST /v1/completions`` (OpenAI-compatible).

Routes only translate HTTP: parse (protocol), encode and schedule (pipeline, scheduler), then
answer one JSON body or a Server-Sent Events stream ending with ``data: [DONE]``. When the
client goes away, aiohttp cancels the handler and the ``finally`` cancels the sequence, so the
next step boundary drops it from the batch. Before the sequence is queued, the request is admitted
against its key's quota with the most it can bill (the prompt plus its ``max_tokens`` cap); from then
on, whatever the outcome (done, failed, the client gone), the ``finally`` notes the prompt and the
tokens generated so far, which the middleware counts.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Any

from aiohttp import web

from contract.envelope import error_envelope

from ..errors import NotFound, RunnerError
from ..protocol import read_json
from ..usage import admit, record_usage
from .pipeline import TextGeneration
from .protocol import GenerationRequest, ResponseShape, parse_chat, parse_completion, usage
from .sequence import ERROR, Event, Sequence

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
FAILED = "generation failed; see the runner log"


class GenerationRoutes:
    def __init__(self, state_key: Any) -> None:
        self.state_key = state_key  # app.STATE, passed in so this module need not import app

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """OpenAI ``POST /v1/chat/completions``; ``model`` is the deployment name."""
        return await self._serve(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """OpenAI ``POST /v1/completions``; ``model`` is the deployment name."""
        return await self._serve(request, chat=False)

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        state = request.app[self.state_key]
        limits = state.config.limits
        data = await read_json(request, state.config.max_body_bytes, limits.json_depth)
        parsed = parse_chat(data, limits) if chat else parse_completion(data, limits)
        pipeline, scheduler = self._serving(state, parsed.model)
        loop = asyncio.get_running_loop()
        prompt = await loop.run_in_executor(state.preprocess_pool, pipeline.encode, parsed)
        max_tokens = pipeline.max_tokens(len(prompt), parsed.max_tokens)
        await admit(request, tokens=len(prompt) + max_tokens)  # 429 when the key's quota has no room
        sequence = pipeline.sequence(prompt, replace(parsed.params, max_tokens=max_tokens))
        scheduler.submit(sequence)
        shape = ResponseShape(chat, state.manifest.deployment)
        try:
            if parsed.stream:
                return await _stream(request, sequence, shape, parsed)
            return await _collect(sequence, shape)
        finally:
            # Every outcome, the client gone (CancelledError, ConnectionResetError) included: bill the
            # prompt and what was generated until now.
            record_usage(request, tokens=len(sequence.prompt) + len(sequence.generated))
            sequence.cancel()  # a no-op once finished; frees the batch row if the client left
            _observe(state.metrics, sequence)

    @staticmethod
    def _serving(state: Any, model: str) -> tuple[TextGeneration, Any]:
        if model != state.manifest.deployment:
            raise NotFound(f"this runner does not serve model {model!r}")
        pipeline, scheduler = state.serving()
        if not isinstance(pipeline, TextGeneration):
            raise NotFound(f"model {model!r} is an {state.manifest.task} model and does not generate text")
        return pipeline, scheduler


def _observe(metrics: Any, sequence: Sequence) -> None:
    now = time.perf_counter()
    admitted = sequence.admitted or now
    metrics.observe_latency(admitted - sequence.enqueued, now - admitted, now - sequence.enqueued)


def _counts(sequence: Sequence) -> dict[str, int]:
    return usage(len(sequence.prompt), len(sequence.generated))


async def _collect(sequence: Sequence, shape: ResponseShape) -> web.Response:
    parts: list[str] = []
    event = Event("")
    while event.finish_reason is None:
        event = await sequence.events.get()
        parts.append(event.text)
    if event.finish_reason == ERROR:
        raise RunnerError(FAILED)
    return web.json_response(shape.answer("".join(parts), event.finish_reason, _counts(sequence)))


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


async def _stream(
    request: web.Request, sequence: Sequence, shape: ResponseShape, parsed: GenerationRequest
) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    if shape.chat:
        await response.write(_sse(shape.chunk(None, role=True)))
    while True:
        event = await sequence.events.get()
        if event.finish_reason == ERROR:  # headers are sent: report in-band, as OpenAI does
            await response.write(_sse(error_envelope("internal_error", FAILED)))
            await response.write_eof()
            return response
        if event.text:
            await response.write(_sse(shape.chunk(event.text)))
        if event.finish_reason is not None:
            await response.write(_sse(shape.chunk(None, event.finish_reason)))
            break
    if parsed.include_usage:
        await response.write(_sse(shape.usage_chunk(_counts(sequence))))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def register(app: web.Application, state_key: Any) -> None:
    """Add the chat and completion routes to the runner's app."""
    routes = GenerationRoutes(state_key)
    app.router.add_post("/v1/chat/completions", routes.chat)
    app.router.add_post("/v1/completions", routes.completions)
