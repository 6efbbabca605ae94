"""The duplicate filter of racing replicas (Hwang, Cetintemel and Zdonik, Algorithm 1).

With ``--ha race`` every copy of a producer partition sends to every copy of each consumer
partition, and a consumer takes whichever copy of a row arrives first. The filter sits at
each input of a consumer (one input: one producer partition, fed by its K copies, the
paper's *stream replicas*) and at the egress, and passes each row of the run without
replication exactly once, whatever the order and the delays across the copies.

Algorithm 1 counts, per tuple, how often each stream replica delivered it and passes a
tuple when one replica's count exceeds every other's, so a tuple that legitimately occurs m
times passes m times. Here every row carries its identity in the run without replication,
``(SN, SNM)`` (``model/schema.py``), unique in the run: every count of Algorithm 1 is 0 or
1, and "count exceeds every other's" is "not passed yet". The filter therefore keeps the
keys passed, and a copy that sends a row twice (a resend after a take-over) is filtered like
any other duplicate, which the counting version would not do.

Punctuations bound the filter's memory (the paper's lines 7-11). A copy's progress marker
``p`` says it has sent every row at or below ``p`` (rows and markers travel in order on a
link), so every row at or below the largest marker any copy sent has passed: such a row is a
duplicate without a lookup, and the keys at or below it are forgotten. A larger marker is
forwarded (it holds for the filter's output too).

The filter is vectorized: a batch is judged with numpy over its keys, never row by row.
"""

from __future__ import annotations

import numpy as np


def _keys(sn: np.ndarray, snm: np.ndarray) -> np.ndarray:
    """Each row's ``(SN, SNM)`` as one opaque 16-byte value: compared for equality only."""
    pair = np.ascontiguousarray(np.stack([sn.astype(np.int64), snm.astype(np.int64)], axis=1))
    return pair.view(np.dtype((np.void, 16))).ravel()


class DuplicateFilter:
    """One input fed by ``copies`` stream replicas (copy numbers ``0 .. copies - 1``)."""

    def __init__(self, copies: int) -> None:
        if copies < 1:
            raise ValueError(f"a duplicate filter needs at least one copy, not {copies}")
        self.copies = copies
        self.punctuation = -1  # the largest progress marker any copy sent
        self._sn = np.zeros(0, dtype=np.int64)  # keys passed above the punctuation
        self._keys = _keys(self._sn, self._sn)
        self.passed = 0  # rows passed so far
        self.dropped = [0] * copies  # duplicates per copy (how often each one was late)

    def offer(self, copy: int, sn: np.ndarray, snm: np.ndarray) -> np.ndarray:
        """A batch from copy ``copy``: the mask of its rows to pass on (the first arrival
        of each key, in the batch's order); the others are duplicates."""
        self._check(copy)
        sn = np.asarray(sn, dtype=np.int64)
        keys = _keys(sn, np.asarray(snm, dtype=np.int64))
        fresh = sn > self.punctuation
        if fresh.any() and self._keys.size:
            fresh &= ~np.isin(keys, self._keys)
        if fresh.any():  # a key twice in one batch: its first occurrence
            idx = np.flatnonzero(fresh)
            _, first = np.unique(keys[idx], return_index=True)
            fresh[:] = False
            fresh[idx[first]] = True
        n = int(fresh.sum())
        self.passed += n
        self.dropped[copy] += sn.size - n
        if n:
            self._sn = np.concatenate([self._sn, sn[fresh]])
            self._keys = np.concatenate([self._keys, keys[fresh]])
        return fresh

    def punctuate(self, copy: int, p: int) -> int | None:
        """Copy ``copy``'s progress marker ``p``: the marker to forward when it raises the
        filter's (None otherwise); the keys at or below it are forgotten."""
        self._check(copy)
        if p <= self.punctuation:
            return None
        self.punctuation = p
        keep = self._sn > p
        self._sn, self._keys = self._sn[keep], self._keys[keep]
        return p

    def held(self) -> int:
        """Keys remembered: those passed above the punctuation."""
        return int(self._sn.size)

    def _check(self, copy: int) -> None:
        if not 0 <= copy < self.copies:
            raise ValueError(f"copy {copy} of an input fed by {self.copies} copies")
