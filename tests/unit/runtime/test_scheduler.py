"""The site scheduler's pass loop (``runtime/scheduler.py``): a pass that leaves work ready
starts the next one at once, with nothing new; and the pass budget follows the measured cost
per row."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sparkflux.runtime.scheduler import (
    PASS_MIN_ROWS,
    PASS_S,
    PASS_TENTATIVE_S,
    PassBudget,
    Scheduler,
)


def test_a_pass_that_leaves_work_ready_is_followed_by_one_at_once() -> None:
    passes: list[list[Any]] = []

    def on_pass(items: list[Any]) -> bool:
        passes.append(items)
        return len(passes) < 3  # two backlog passes after the first, then idle

    async def main() -> None:
        # a gathering time far longer than the test: only ``more`` can start a pass early
        sched = Scheduler(lambda cap: 60.0, 1 << 20, 1 << 21, None)
        task = asyncio.create_task(sched.run(on_pass))
        await sched.put((1, "frame"), 1, urgent=True, bounded=False)
        for _ in range(100):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert passes == [[(1, "frame")], [], []]


def test_the_budget_is_the_rows_the_measured_cost_allows_in_a_pass() -> None:
    b = PassBudget()
    assert b.rows() is None  # nothing measured: no limit
    b.observe(0.01, 0)  # a pass that released nothing says nothing of the cost
    assert b.rows() is None
    b.observe(0.04, 1000)  # 40 us a row
    rows = b.rows()
    assert rows is not None and abs(rows - PASS_S / 40e-6) <= 1
    short = b.rows(PASS_TENTATIVE_S)  # a tentative branch runs: short passes
    assert short is not None and abs(short - PASS_TENTATIVE_S / 40e-6) <= 1 and short < rows
    for _ in range(50):
        b.observe(1.0, 100)  # 10 ms a row: the floor
    assert b.rows() == PASS_MIN_ROWS
