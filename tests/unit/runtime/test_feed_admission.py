"""The driver's feed admits what one take of the sources gave a batch at a time
(``Feed.admit_all``): each batch waits for the window on its own, so a take of several
batches cannot overrun it, and the loop's other tasks run between two admissions."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from sparkflux.control.boundary import Input
from sparkflux.runtime.driver_feed import Feed


class Core:
    """Admits a batch's rows into a window of ``window`` unacknowledged rows."""

    def __init__(self, window: int) -> None:
        self.window, self.unacked, self.events = window, 0, []

    def handle(self, event: Any) -> list:
        self.events.append(event)
        if isinstance(event, Input):
            self.unacked += event.batch.num_rows
        return []

    def unacknowledged(self) -> int:
        return self.unacked

    def held_back(self, window: int, pool_full: bool) -> str | None:
        return "window" if self.unacked >= window else None


def host(core: Core) -> SimpleNamespace:
    h = SimpleNamespace(
        core=core, actions=SimpleNamespace(carry_out=lambda actions: None),
        ingress=SimpleNamespace(next_isn=1), ingress_times=[], ingress_counts=[],
        stats=SimpleNamespace(events_in=0), source_rows=[0, 0],
        faults=SimpleNamespace(admitted=lambda n: None), unacked_max=0,
        outbox=SimpleNamespace(skew=SimpleNamespace(pool_used=lambda: 0)),
        cfg=SimpleNamespace(window=core.window), input_state="", blocked_by=None)
    h.plan = SimpleNamespace(streams=[])
    return h


def rows(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"x": list(range(n))})


def test_each_batch_of_a_take_waits_for_the_window_and_other_tasks_run_between() -> None:
    core = Core(window=10)
    h = host(core)
    feed = Feed.__new__(Feed)
    feed.host = h  # type: ignore[assignment]
    seen: list[int] = []  # admissions when another task of the loop ran

    async def go() -> None:
        h.heard = asyncio.Event()
        admitting = asyncio.create_task(feed.admit_all([(0, rows(10)), (1, rows(3)),
                                                        (0, rows(4))]))

        async def other() -> None:
            for _ in range(3):
                seen.append(len(core.events))
                await asyncio.sleep(0)

        await other()
        # the first batch filled the window: the second waits for an acknowledgement
        assert len(core.events) == 1 and h.input_state == "blocked"
        core.unacked = 0
        h.heard.set()
        await asyncio.wait_for(admitting, 1.0)

    asyncio.run(go())
    assert seen[0] == 0 and seen[-1] == 1  # the loop ran between the admissions
    assert [e.batch.num_rows for e in core.events] == [10, 3, 4]
    assert [e.stream for e in core.events] == [0, 1, 0]
