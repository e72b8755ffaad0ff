"""One request being generated: its prompt, sampling state, text so far and the events it emits.

``advance`` runs on the inference thread; ``events`` and ``cancel`` belong to the event loop
(the scheduler hands each step's events over on the loop), so no lock is needed.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from .detokenizer import IncrementalDetokenizer, StopMatcher
from .sampling import SamplingParams, sample

STOP, LENGTH, CANCELLED, ERROR = "stop", "length", "cancelled", "error"
_ids = itertools.count(1)


@dataclass(frozen=True)
class Event:
    """New text for the client; ``finish_reason`` is set on a sequence's last event."""

    text: str
    finish_reason: str | None = None


class Sequence:
    def __init__(
        self, prompt: list[int], params: SamplingParams, tokenizer: Tokenizer, eos: frozenset[int]
    ) -> None:
        self.id = next(_ids)
        self.prompt = prompt
        self.params = params
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.generated: list[int] = []
        self.finish_reason: str | None = None
        self.cancelled = False
        self.enqueued = time.perf_counter()
        self.admitted: float | None = None
        self._eos = eos
        self._rng = params.rng()
        self._detokenizer = IncrementalDetokenizer(tokenizer, prompt)
        self._stop = StopMatcher(params.stop)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def last_token(self) -> int:
        return self.generated[-1]

    def cancel(self) -> None:
        """Called from the loop when the client goes away; the next step drops the row."""
        self.cancelled = True

    def advance(self, logits: np.ndarray) -> Event:
        """Sample one token from this row's logits and return what the client should see."""
        token = sample(logits, self.params, self._rng)
        if token in self._eos:
            return self._finish(STOP, "")
        self.generated.append(token)
        text, stopped = self._stop.feed(self._detokenizer.add(token))
        if stopped:
            self.finish_reason = STOP
            return Event(text, STOP)
        if len(self.generated) >= self.params.max_tokens:
            return self._finish(LENGTH, text)
        return Event(text)

    def _finish(self, reason: str, text: str) -> Event:
        """End without a stop string: emit what the detokenizer and stop matcher still hold."""
        tail, stopped = self._stop.feed(self._detokenizer.flush())
        self.finish_reason = STOP if stopped else reason
        return Event(text + tail + ("" if stopped else self._stop.flush()), self.finish_reason)

    def fail(self, reason: str = ERROR) -> Event:
        self.finish_reason = reason
        return Event("", reason)
