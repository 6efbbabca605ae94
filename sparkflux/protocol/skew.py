"""DTSB: the duplicate-eliminating transient skew buffer between a producer and its connections.

Shah's Flux thesis (ch. 4-5) puts a TSB in front of the outgoing connections of the ingress and
of FH-Prod so that one slow consumer neither stalls the others (no head-of-line blocking) nor
makes memory grow without bound. Its entries come from one shared pool, in rows, plus one entry
*reserved* per outgoing connection: a destination can always hold its next message even when the
pool is full of another destination's rows, so a slow consumer cannot starve the rest. A message
is forwarded at once to an unblocked destination that holds nothing; otherwise it queues behind
what that destination holds (FIFO per destination). It is *duplicate-eliminating* because a failed
destination's rows are discarded (``drop``, the take-over's ``ack_all``): FH-Prod re-sends them by
``reverse``/``reset`` if ever needed, so holding them too would only duplicate them.

Sans-I/O: the caller says whether a connection is blocked (write buffer above its high-water
mark), calls ``release`` when it drains and sends what is returned; ``can_admit`` is the producer's
back-pressure. A destination's queue head is its reserved entry; the rest count against the pool.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class SkewBufferFull(RuntimeError):
    """Neither the destination's reserved entry nor the shared pool has room for a message."""


class SkewBuffer(Generic[T]):
    """A DTSB over the outgoing connections ``destinations`` with a pool of ``capacity_rows``."""

    def __init__(self, capacity_rows: int, destinations: Iterable[int]) -> None:
        if capacity_rows < 0:
            raise ValueError(f"skew buffer capacity must be >= 0 rows, got {capacity_rows}")
        self.capacity_rows = capacity_rows
        self._held: dict[int, deque[tuple[T, int]]] = {}
        self._pool_used = 0
        self.peak_pool_used = 0  # statistics: the most pool rows ever in use at once
        self.sent_direct = 0  # messages forwarded at once, never held (bypassed the buffer)
        self.held_messages = 0  # messages that had to be held (reserved entry or pool)
        self.dropped_rows = 0  # rows discarded by drop/remove (failed destinations)
        for dest in destinations:
            self.add(dest)

    def _queue(self, dest: int) -> deque[tuple[T, int]]:
        try:
            return self._held[dest]
        except KeyError:
            raise KeyError(f"skew buffer: unknown destination {dest}") from None

    def add(self, dest: int) -> None:
        """Register a new destination (a standby took a slot, a site joined); no-op if known."""
        self._held.setdefault(dest, deque())

    def can_admit(self, rows: int) -> bool:
        """Whether the shared pool can take ``rows`` more rows: the producer admits input only then.

        A message offered to k destinations may need ``rows`` of pool for each of them."""
        return self._pool_used + rows <= self.capacity_rows

    def can_hold(self, dest: int, rows: int) -> bool:
        """Whether ``offer(dest, ., rows, blocked=True)`` would succeed (never raise)."""
        return not self._queue(dest) or self.can_admit(rows)

    def offer(self, dest: int, item: T, rows: int, blocked: bool) -> list[T]:
        """Route one message to ``dest``: ``[item]`` to send now, or ``[]`` if it is held.

        It is sent at once only if ``dest`` is unblocked and holds nothing; otherwise it queues
        behind what ``dest`` holds, in the reserved entry if free, else in the pool. Raises
        ``SkewBufferFull`` if neither has room (check ``can_admit``/``can_hold`` first)."""
        queue = self._queue(dest)
        if rows < 0:
            raise ValueError(f"skew buffer: negative row count {rows}")
        if not blocked and not queue:
            self.sent_direct += 1
            return [item]
        if queue:  # the reserved entry is taken by the head: this message needs the pool
            if not self.can_admit(rows):
                raise SkewBufferFull(f"skew buffer: no room for {rows} rows to destination "
                                     f"{dest} ({self._pool_used}/{self.capacity_rows} in pool)")
            self._pool_used += rows
            self.peak_pool_used = max(self.peak_pool_used, self._pool_used)
        queue.append((item, rows))
        self.held_messages += 1
        return []

    def _empty(self, dest: int) -> list[tuple[T, int]]:
        queue = self._queue(dest)
        entries = list(queue)
        queue.clear()
        self._pool_used -= sum(rows for _, rows in entries[1:])  # all but the reserved head
        return entries

    def release(self, dest: int) -> list[T]:
        """``dest`` became unblocked: everything it holds, FIFO, to send now; frees its space."""
        return [item for item, _ in self._empty(dest)]

    def release_next(self, dest: int) -> T | None:
        """``dest`` can take one more message: its oldest held one (or None). The next one
        moves into the reserved entry, so its rows leave the pool."""
        queue = self._queue(dest)
        if not queue:
            return None
        item, _ = queue.popleft()
        if queue:
            self._pool_used -= queue[0][1]
        return item

    def drop(self, dest: int) -> int:
        """``dest`` failed (``ack_all``): discard what it holds; return the rows discarded.

        The destination stays registered (a replica may rejoin under the same id)."""
        rows = sum(r for _, r in self._empty(dest))
        self.dropped_rows += rows
        return rows

    def remove(self, dest: int) -> int:
        """Drop ``dest`` and forget it: later offers to it raise ``KeyError``."""
        rows = self.drop(dest)
        del self._held[dest]
        return rows

    def held_rows(self, dest: int | None = None) -> int:
        """Rows held for ``dest`` (reserved entry and pool), or for every destination if None."""
        queues = self._held.values() if dest is None else [self._queue(dest)]
        return sum(rows for queue in queues for _, rows in queue)

    def pool_used(self) -> int:
        """Rows in the shared pool (reserved entries excluded)."""
        return self._pool_used

    def destinations(self) -> list[int]:
        """The registered destinations, sorted."""
        return sorted(self._held)

    def blocked_destinations(self) -> list[int]:
        """The destinations holding something (sorted): those awaiting ``release``."""
        return sorted(d for d, queue in self._held.items() if queue)
