"""The key/value cache of the sequences decoding together, as right-aligned (left-padded) rows.

Every row's real tokens sit at the right end of the cache, so one decode step appends one column
to all rows at once. Rows join (``merge``) and leave (``select``) only at step boundaries; columns
that became padding for every row are then trimmed so the cache never grows past the longest row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class KVBatch:
    cache: list[np.ndarray]  # 2 * layers arrays [rows, kv_heads, width, head_dim], key then value
    mask: np.ndarray  # [rows, width] int64: 1 for a real token, 0 for left padding
    positions: np.ndarray  # [rows] int64: the position id of each row's next token

    @property
    def rows(self) -> int:
        return int(self.mask.shape[0])

    @property
    def width(self) -> int:
        return int(self.mask.shape[1])

    def select(self, rows: list[int]) -> KVBatch:
        """Keep these rows (in this order) and drop the columns no kept row uses any more."""
        index = np.asarray(rows, dtype=np.int64)
        mask = self.mask[index]
        used = np.flatnonzero(mask.any(axis=0))
        start = int(used[0]) if used.size else self.width
        return KVBatch(
            [np.ascontiguousarray(c[index, :, start:]) for c in self.cache],
            np.ascontiguousarray(mask[:, start:]),
            self.positions[index].copy(),
        )

    def merge(self, other: KVBatch) -> KVBatch:
        """Stack ``other``'s rows under these, left-padding the narrower batch."""
        width = max(self.width, other.width)
        mine, theirs = self.padded(width), other.padded(width)
        return KVBatch(
            [np.concatenate(pair, axis=0) for pair in zip(mine.cache, theirs.cache, strict=True)],
            np.concatenate([mine.mask, theirs.mask], axis=0),
            np.concatenate([self.positions, other.positions]),
        )

    def padded(self, width: int) -> KVBatch:
        extra = width - self.width
        if extra <= 0:
            return self
        cache = [np.pad(c, ((0, 0), (0, 0), (extra, 0), (0, 0))) for c in self.cache]
        return KVBatch(cache, np.pad(self.mask, ((0, 0), (extra, 0))), self.positions)

    def appended(self, cache: list[np.ndarray]) -> KVBatch:
        """The batch after a decode step whose graph returned ``cache`` (one more column)."""
        mask = np.concatenate([self.mask, np.ones((self.rows, 1), dtype=np.int64)], axis=1)
        return KVBatch(cache, mask, self.positions + 1)
