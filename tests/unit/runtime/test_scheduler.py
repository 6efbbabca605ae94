"""The site scheduler's pass loop (``runtime/scheduler.py``): a frame that finds the site idle
starts a pass at once, while a busy site's frames, and every frame of a capped site, gather;
a pass that leaves work ready starts the next one at once, with nothing new; and the pass
budget follows the measured cost per row."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sparkflux.runtime.scheduler import (
    PASS_MIN_ROWS,
    PASS_S,
    PASS_TENTATIVE_S,
    Duty,
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


async def turns(n: int = 100) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def busy_duty() -> Duty:
    """A duty cycle of one: the last two seconds were passes back to back."""
    d = Duty()
    t = time.perf_counter()
    d.observe(t - 2.0, t - 1.0)
    d.observe(t - 1.0, t)
    return d


def test_the_duty_cycle_is_the_share_of_recent_time_in_passes() -> None:
    d = Duty()
    assert d.value(now=5.0) == 0.0
    d.observe(0.0, 1.0)  # the first pass only starts the clock
    d.observe(3.0, 4.0)  # 1 s of pass in the 3 s since the last one ended
    assert d.value(now=4.0) == pytest.approx(1 / 3)
    assert d.value(now=7.0) == pytest.approx(1 / 6)  # the time since counts as idle
    d.observe(7.0, 8.0)  # decaying: the recent pass weighs most
    assert d.value(now=8.0) == pytest.approx((0.8 + 1) / (0.8 * 3 + 4))


def test_a_frame_that_finds_the_site_idle_starts_a_pass_at_once() -> None:
    passes: list[list[Any]] = []

    async def main() -> None:
        # a gathering time far longer than the test: a pass that starts came at once
        sched = Scheduler(lambda cap: 60.0, 1 << 20, 1 << 21, None)
        task = asyncio.create_task(sched.run(lambda items: bool(passes.append(items))))
        for k in range(3):
            await sched.put((k, "frame"), 1, urgent=False, bounded=False)
            await turns()
        assert passes == [[(0, "frame")], [(1, "frame")], [(2, "frame")]]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_a_busy_site_gathers_until_the_time_is_up_or_a_frame_must_not_wait() -> None:
    passes: list[tuple[float, list[Any]]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sched = Scheduler(lambda cap: 60.0, 1 << 20, 1 << 21, None)
        sched.duty = busy_duty()
        task = asyncio.create_task(
            sched.run(lambda items: bool(passes.append((loop.time(), items)))))
        await sched.put((1, "a"), 1, urgent=False, bounded=False)
        await sched.put((2, "b"), 1, urgent=False, bounded=False)
        await turns()
        assert passes == []
        await sched.put((3, "take-over"), 0, urgent=True, bounded=False)
        await turns()
        assert [items for _, items in passes] == [[(1, "a"), (2, "b"), (3, "take-over")]]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        passes.clear()
        sched = Scheduler(lambda cap: 0.05, 1 << 20, 1 << 21, None)
        sched.duty = busy_duty()
        task = asyncio.create_task(
            sched.run(lambda items: bool(passes.append((loop.time(), items)))))
        t0 = loop.time()
        await sched.put((4, "c"), 1, urgent=False, bounded=False)
        while not passes:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert passes[0][1] == [(4, "c")] and passes[0][0] - t0 >= 0.045

    asyncio.run(main())


def test_a_capped_site_gathers_before_every_pass() -> None:
    """Under ``--site-cpu`` a pass must be worth its fixed cost: even the first frame waits
    for the gathering time (or for enough rows)."""
    passes: list[list[Any]] = []

    async def main() -> None:
        sched = Scheduler(lambda cap: 60.0, 4, 8, 0.5)
        task = asyncio.create_task(sched.run(lambda items: bool(passes.append(items))))
        await sched.put((1, "a"), 1, urgent=False, bounded=False)
        await turns()
        assert passes == []
        await sched.put((2, "b"), 3, urgent=False, bounded=False)  # 4 rows: enough
        await turns()
        assert passes == [[(1, "a"), (2, "b")]]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


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
