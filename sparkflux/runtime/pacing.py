"""The driver's sources: the plan's sources read batch by batch, and the push source that
``--rate`` makes of them (the paper's packet sprayer), whose buffer overflow is counted as
dropped input."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.batch import concat
from sparkflux.runtime.run_config import LiveStats

WAIT = object()


class SourceFeed:
    """Batches from the plan's sources (several sources are interleaved batch by batch)."""

    def __init__(self, plan: PhysicalPlan) -> None:
        self._iters: deque[Iterator] = deque(s.batches() for s in plan.sources)

    def next(self) -> pa.RecordBatch | list[dict] | None:
        while self._iters:
            it = self._iters.popleft()
            try:
                item = next(it)
            except StopIteration:
                continue
            self._iters.append(it)
            return item
        return None


class PacedBuffer:
    """A push source (the paper's packet sprayer): records arrive at ``rate`` per second.

    What the ingress buffer cannot hold is dropped and counted (``ingress_dropped``).
    """

    def __init__(self, source: SourceFeed, rate: float, capacity: int, stats: LiveStats,
                 flush_rows: int = 8192, flush_s: float = 0.02) -> None:
        self.source = source
        self.rate = rate
        self.capacity = capacity
        self.stats = stats
        self.buffer: deque[pa.RecordBatch | list[dict]] = deque()
        self.held = 0
        self.exhausted = False
        self._carry: pa.RecordBatch | list[dict] | None = None
        self.flush_rows = flush_rows
        self.flush_s = flush_s
        self._last_take = time.monotonic()

    async def produce(self) -> None:
        t0 = time.monotonic()
        produced = 0
        while not self.exhausted:
            due = int((time.monotonic() - t0) * self.rate) - produced
            while due > 0 and not self.exhausted:
                item = self._carry if self._carry is not None else self.source.next()
                self._carry = None
                if item is None:
                    self.exhausted = True
                    break
                n = len(item) if isinstance(item, list) else item.num_rows
                if n > due:
                    item, self._carry = split(item, due)
                    n = due
                produced += n
                due -= n
                if self.held + n > self.capacity:
                    self.stats.dropped += n
                    continue
                self.buffer.append(item)
                self.held += n
            await asyncio.sleep(0.005)

    def take(self) -> Any:
        """Everything buffered, once it fills a batch or the flush interval has passed.

        Admitting every few milliseconds would multiply the per-message cost (every admission
        fans out into data and acknowledgements to every site and both replicas); flushing on
        size or a short timer keeps that cost bounded at any rate (DESIGN.md §6).
        """
        now = time.monotonic()
        due = self.held >= self.flush_rows or now - self._last_take >= self.flush_s
        if self.buffer and (due or self.exhausted):
            self._last_take = now
            parts = []
            while self.buffer:
                item = self.buffer.popleft()
                self.held -= len(item) if isinstance(item, list) else item.num_rows
                parts.append(item)
            return merge(parts)
        return None if self.exhausted else WAIT


def split(item: pa.RecordBatch | list[dict], n: int) -> tuple[Any, Any]:
    if isinstance(item, list):
        return item[:n], item[n:]
    return item.slice(0, n), item.slice(n)


def merge(parts: list[Any]) -> Any:
    if all(isinstance(p, pa.RecordBatch) for p in parts):
        return concat(parts, parts[0].schema) if len(parts) > 1 else parts[0]
    out: list[dict] = []
    for p in parts:
        out.extend(p if isinstance(p, list) else p.to_pylist())
    return out


def total(plan: PhysicalPlan) -> int | None:
    totals = [s.total() for s in plan.sources]
    return None if any(t is None for t in totals) else int(sum(totals))  # type: ignore[arg-type]
