"""The sequences decoding together: one engine call advances every one of them by one token.

Newcomers are prefilled (left-padded, in one call) at a step boundary and merged into the
running cache; finished and cancelled sequences leave at the next boundary. Every method here
runs on the single inference thread.
"""

from __future__ import annotations

import logging

from .decoder import Decoder
from .kv_batch import KVBatch
from .sequence import Event, Sequence

log = logging.getLogger("lantau.runner.generation")

StepEvents = list[tuple[Sequence, Event]]


class ContinuousBatch:
    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self.rows: list[Sequence] = []
        self.kv: KVBatch | None = None

    def step(self, newcomers: list[Sequence]) -> StepEvents:
        """Decode one token for the running rows, prefill the newcomers; return their events."""
        self._keep_live_rows()
        events: StepEvents = []
        if self.rows and self.kv is not None:
            logits, self.kv = self.decoder.decode(self.kv, [s.last_token for s in self.rows])
            events += [(s, s.advance(row)) for s, row in zip(self.rows, logits, strict=True)]
        if newcomers:
            logits, kv = self.decoder.prefill([s.prompt for s in newcomers])
            events += [(s, s.advance(row)) for s, row in zip(newcomers, logits, strict=True)]
            self.kv = kv if self.kv is None else self.kv.merge(kv)
            self.rows += newcomers
        self._keep_live_rows()
        return events

    def _keep_live_rows(self) -> None:
        keep = [i for i, s in enumerate(self.rows) if not s.finished and not s.cancelled]
        if len(keep) == len(self.rows):
            return
        for seq in self.rows:
            if seq.cancelled and not seq.finished:
                log.info("sequence %d cancelled after %d tokens", seq.id, len(seq.generated))
                seq.fail("cancelled")
        self.rows = [self.rows[i] for i in keep]
        self.kv = self.kv.select(keep) if keep and self.kv is not None else None

    def fail_all(self, newcomers: list[Sequence]) -> StepEvents:
        """After a failed engine call: end every sequence it touched and start from an empty cache."""
        failed = [(s, s.fail()) for s in [*self.rows, *newcomers] if not s.finished]
        self.rows, self.kv = [], None
        return failed
