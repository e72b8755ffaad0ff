"""Token ids -> text deltas while generating, and stop strings that may span several tokens.

Decoding one token at a time is wrong for byte-level and SentencePiece tokenizers (a character
can span tokens; a leading space depends on the previous token), so the text of a short window
of ids is decoded and only the part past what was already emitted is returned, once it no
longer ends in an incomplete character.
"""

from __future__ import annotations

from tokenizers import Tokenizer

CONTEXT_TOKENS = 4  # prompt tokens decoded with the first new ones so leading spaces come out right
INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, prompt: list[int]) -> None:
        self._tokenizer = tokenizer
        self._ids = list(prompt[-CONTEXT_TOKENS:])
        self._prefix = 0  # start of the decoding window
        self._read = len(self._ids)  # end of what was already emitted

    def _decode(self, ids: list[int]) -> str:
        text: str = self._tokenizer.decode(ids, skip_special_tokens=True)  # tokenizers is untyped
        return text

    def add(self, token: int) -> str:
        """Take one new token; return the text it completes (possibly empty)."""
        self._ids.append(token)
        done = self._decode(self._ids[self._prefix : self._read])
        text = self._decode(self._ids[self._prefix :])
        if len(text) <= len(done) or text.endswith(INCOMPLETE):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return text[len(done) :]

    def flush(self) -> str:
        """Whatever is still held back at the end (an incomplete character decodes as U+FFFD)."""
        done = self._decode(self._ids[self._prefix : self._read])
        text = self._decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return text[len(done) :] if len(text) > len(done) else ""


class StopMatcher:
    """Holds back text that could still become a stop string; cuts the output before one."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""

    def feed(self, delta: str) -> tuple[str, bool]:
        """Return (text safe to emit, whether a stop string was hit)."""
        if not self._stops:
            return delta, False
        text = self._held + delta
        hits = [i for i in (text.find(stop) for stop in self._stops) if i >= 0]
        if hits:
            self._held = ""
            return text[: min(hits)], True
        hold = self._partial_suffix(text)
        self._held = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold], False

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest end of ``text`` that begins some stop string."""
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if stop.startswith(text[-size:]):
                    longest = size
                    break
        return longest

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held
