"""The driver's feed admits what one take of the sources gave a batch at a time
(``Feed.admit_all``): the loop's other tasks run between two admissions, and the take is
admitted whole before admission waits for the window."""

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
    return SimpleNamespace(
        core=core, actions=SimpleNamespace(carry_out=lambda actions: None),
        ingress=SimpleNamespace(next_isn=1), ingress_times=[], ingress_counts=[],
        stats=SimpleNamespace(events_in=0), source_rows=[0, 0],
        faults=SimpleNamespace(admitted=lambda n: None), unacked_max=0,
        outbox=SimpleNamespace(skew=SimpleNamespace(pool_used=lambda: 0)),
        cfg=SimpleNamespace(window=core.window), input_state="", blocked_by=None,
        plan=SimpleNamespace(streams=[]))


def rows(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"x": list(range(n))})


def test_other_tasks_run_between_the_batches_of_a_take_and_then_the_window_holds() -> None:
    core = Core(window=10)
    h = host(core)
    feed = Feed.__new__(Feed)
    feed.host = h  # type: ignore[assignment]
    seen: list[int] = []  # admissions made when another task of the loop ran

    async def go() -> None:
        h.heard = asyncio.Event()
        admitting = asyncio.create_task(feed.admit_all([(0, rows(10)), (1, rows(3)),
                                                        (0, rows(4))]))

        async def other() -> None:
            for _ in range(4):
                seen.append(len(core.events))
                await asyncio.sleep(0)

        await other()
        # the whole take is in though the first batch filled the window; the next waits
        assert len(core.events) == 3 and h.input_state == "blocked"
        assert not admitting.done()
        core.unacked = 0
        h.heard.set()
        await asyncio.wait_for(admitting, 1.0)

    asyncio.run(go())
    assert seen[:3] == [0, 1, 2]  # the loop ran between two admissions
    assert [e.batch.num_rows for e in core.events] == [10, 3, 4]
    assert [e.stream for e in core.events] == [0, 1, 0]
