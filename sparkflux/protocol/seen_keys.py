"""The duplicate filter's memory for streams out of SN order (racing copies, Algorithm 1).

A consumer of an order-insensitive stage run in arrival order (``ConsumerSet.unordered``)
gets rows above its streams' progress, from every copy. Each row passes once: its key
``(stream, SN, SNM, port)`` is kept from its first copy until the stream's progress covers
it; the progress alone judges the rows at or below it. The paper counts copies per tuple; a
copy sends a row once, so here the count is a key present or not.

A frame's lookups cost what its rows do, not what the memory holds: the keys live in a hash
set (as bytes), and the keys the progress covers are dropped in bulk, once the memory has
doubled since the last time. A covered key left meanwhile does no harm: a row at or below
the progress is dropped before the memory is asked, and a key names one row of one stream.
"""

from __future__ import annotations

import numpy as np

PRUNE_AT = 4096  # keys kept before the first bulk drop of the covered ones


def as_bytes(keys: np.ndarray) -> list[bytes]:
    """Each row of an int64 key array as one bytes value (hashable, C-speed to make)."""
    k = np.ascontiguousarray(keys, dtype=np.int64)
    out: list[bytes] = k.view(np.dtype((np.void, 8 * k.shape[1]))).ravel().tolist()  # type: ignore[assignment]
    return out


class SeenKeys:
    """Keys ``(qi * streams + p, SN, SNM, port)`` of the rows passed above their stream's
    progress, for one ``ConsumerSet`` (``streams``: its producer partitions P)."""

    def __init__(self, streams: int) -> None:
        self.streams = streams
        self._parts: list[np.ndarray] = []
        self._set: set[bytes] = set()
        self._n = 0
        self._kept = 0  # keys left by the last bulk drop

    def __len__(self) -> int:
        return self._n

    def first(self, keys: np.ndarray) -> np.ndarray:
        """Which of ``keys`` (an [n, 4] int64 array) were not passed before (nor earlier in
        ``keys``); those are kept from now on."""
        kb = as_bytes(keys)
        seen, add = self._set, self._set.add
        # each key is added as it is met (``add`` returns None): one twice passes once
        new = np.fromiter((k not in seen and add(k) is None for k in kb), dtype=bool,
                          count=len(kb))
        if new.any():
            self._parts.append(keys[new])
            self._n += int(new.sum())
        return new

    def add(self, keys: np.ndarray) -> None:
        """Keys passed elsewhere (a catch-up's snapshot): not to be passed here again."""
        if keys.shape[0]:
            self.first(keys.astype(np.int64))

    def prune(self, progress_sn: np.ndarray, force: bool = False) -> None:
        """Drop the keys at or below their stream's progress (``progress_sn[qi, p]``): at
        once with ``force``, else only once the memory has doubled since the last drop."""
        if not self._n or (not force and self._n < max(PRUNE_AT, 2 * self._kept)):
            return
        self._keep(self._all_keys()[self._above(progress_sn)])

    def of(self, i: int, progress_sn: np.ndarray) -> np.ndarray:
        """Partition index ``i``'s keys above the progress, as (p, SN, SNM, port)."""
        self.prune(progress_sn, force=True)
        if not self._n:
            return np.zeros((0, 4), dtype=np.int64)
        keys = self._all_keys()
        out: np.ndarray = keys[keys[:, 0] // self.streams == i].copy()
        out[:, 0] %= self.streams
        return out

    def forget(self, i: int) -> None:
        """Drop every key of partition index ``i`` (its copy left, or a snapshot replaces
        it)."""
        if self._n:
            keys = self._all_keys()
            self._keep(keys[keys[:, 0] // self.streams != i])

    def array(self, progress_sn: np.ndarray) -> np.ndarray:
        """Every key above the progress (for tests and reports)."""
        self.prune(progress_sn, force=True)
        return self._all_keys()

    def _all_keys(self) -> np.ndarray:
        if not self._parts:
            return np.zeros((0, 4), dtype=np.int64)
        if len(self._parts) > 1:
            self._parts = [np.concatenate(self._parts)]
        return self._parts[0]

    def _above(self, progress_sn: np.ndarray) -> np.ndarray:
        keys = self._all_keys()
        stream = keys[:, 0]
        above: np.ndarray = keys[:, 1] > progress_sn[stream // self.streams,
                                                     stream % self.streams]
        return above

    def _keep(self, keys: np.ndarray) -> None:
        self._parts = [keys] if keys.shape[0] else []
        self._set = set(as_bytes(keys)) if keys.shape[0] else set()
        self._n = self._kept = int(keys.shape[0])
