"""A site's scheduler: a bounded inbox of frames and the passes that hand them to the core.

Frames read from the links queue in the inbox, bounded in frames and rows, so a site that
falls behind stops reading and its senders' skew buffers (the DTSB) hold the rest. A pass
takes everything queued at once (the thesis' FluxPooler: under load, many small inputs
become one vectorized call). While the site is busy, input gathers for a few milliseconds
first, so the per-pass cost is paid once for many small frames. An idle site does not wait:
without a ``--site-cpu`` cap, when its passes have filled less than ``IDLE_DUTY`` of its
time lately (``Duty``), a frame starts a pass at once, so a row at low load waits for no
timer, and batches grow with the load (Nagle's rule, for passes). A capped site always
gathers: each pass must be worth its fixed cost, or its utilisation measures overhead. A
frame of take-over or catch-up (anything but data and acknowledgements) starts a pass at
once. The busy time of a pass, counted as the thread's CPU time (waiting for a core is not
work), is charged against the ``--site-cpu`` budget, which may then hold the next pass back.

A pass has a time budget too (``PassBudget``): the core releases about as many rows per
stage as the measured cost per row allows in ``PASS_S``, and when it held ready rows back
(a long backlog: the redo after a cut input heals, a producer's resent rows) the next pass
starts at once, with whatever the links brought meanwhile. So heartbeats and take-over
never wait behind a whole backlog, and the links are read between its parts. While the site
runs a tentative branch (an episode of ``--consistency eventual``) the budget is
``PASS_TENTATIVE_S``: a tentative row waits for a short pass, not for a part of the redo.
Otherwise it is long enough that a site under load still gathers large batches (the
per-pass cost paid once for many rows: with 20 ms passes a site at capacity fell behind).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from sparkflux.runtime.capacity import CpuCap

PASS_S = 0.1  # a pass's budget: about this much work on each stage's released rows
PASS_TENTATIVE_S = 0.02  # ... while the site runs a tentative branch
PASS_MIN_ROWS = 256  # ... but at least this many rows each pass (the per-pass cost)
LINK_TURNS = 16  # event-loop turns between back-to-back passes (``_let_links_run``)
IDLE_DUTY = 0.25  # an uncapped site whose passes fill less of its time than this does not gather
RESEND_S = 0.005  # held frames (the DTSB's) are offered to their connection this often
INBOX_FRAMES = 64  # frames read ahead of the scheduler, at most (and rows: twice what a
# pass gathers, so a control frame behind them waits one short pass)


def batch_delay(default_s: float, cap_ms: float | None) -> float:
    """A hop's coalescing time: its own ``default_s``, at most the user's
    ``--max-batch-delay`` ``cap_ms`` (milliseconds; None: no cap)."""
    return default_s if cap_ms is None else min(default_s, cap_ms / 1000)


class Scheduler:
    """The inbox and the pass loop of one site; ``gather_s(cap)``: how long input may
    gather at capacity ``cap``; ``cpu_cap``: ``--site-cpu``, or None."""

    def __init__(self, gather_s: Callable[[float], float], gather_rows: int, inbox_rows: int,
                 cpu_cap: float | None) -> None:
        self.gather_s = gather_s
        self.gather_rows = gather_rows
        self.inbox_rows = inbox_rows
        self.cap = CpuCap(cpu_cap) if cpu_cap else None
        self.inbox: deque[tuple[int, Any]] = deque()
        self._rows = 0
        self._urgent = False
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._first_at = 0.0
        self.duty = Duty()
        self._throttle_until = 0.0
        self.busy_s = 0.0
        self.passes = 0  # passes run (busy_s / passes: the cost of a pass)
        self._capacity_s = 0.0
        self._capacity_at = time.perf_counter()

    async def put(self, item: tuple[int, Any], rows: int, urgent: bool, bounded: bool) -> None:
        """Queue a frame; a ``bounded`` reader waits for room first."""
        while bounded and (len(self.inbox) >= INBOX_FRAMES or self._rows >= self.inbox_rows):
            self._room.clear()
            await self._room.wait()
        if not self.inbox:
            self._first_at = self._gather_from(time.perf_counter())
        self.inbox.append(item)
        self._rows += rows
        self._urgent = self._urgent or urgent
        self._ready.set()

    async def run(self, on_pass: Callable[[list[tuple[int, Any]]], bool]) -> None:
        """Run passes for ever: ``on_pass`` gets every frame queued, in arrival order, and
        says whether it left work ready (then the next pass starts without waiting)."""
        more = False
        while True:
            if not self.inbox and not more:
                self._ready.clear()
                await self._ready.wait()
            gather_s = self.gather_s(self.cap.cap if self.cap is not None else 1.0)
            wait = self._first_at + gather_s - time.perf_counter()
            while (not more and wait > 0 and len(self.inbox) < INBOX_FRAMES // 2
                   and self._rows < self.gather_rows and not self._urgent):
                self._ready.clear()
                try:
                    await asyncio.wait_for(self._ready.wait(), wait)
                except TimeoutError:
                    break
                wait = self._first_at + gather_s - time.perf_counter()
            if self._throttle_until > time.perf_counter():  # --site-cpu: over budget
                await asyncio.sleep(self._throttle_until - time.perf_counter())
                if self.cap is not None:
                    self.cap.slept_for(time.perf_counter())
            t = time.thread_time()
            began = time.perf_counter()
            items = list(self.inbox)
            self.inbox.clear()
            self._rows = 0
            self._urgent = False
            self._room.set()
            more = on_pass(items)
            busy = time.thread_time() - t
            now = time.perf_counter()
            self.busy_s += busy
            self.passes += 1
            if self.cap is not None:
                sleep = self.cap.spend(now, busy)
                if sleep:
                    self._throttle_until = max(self._throttle_until, now + sleep)
            # a pass runs whole, so the inbox is empty now: ``put`` starts the gathering
            # of the next frame
            self.duty.observe(began, time.perf_counter())
            await self._let_links_run(more)

    def _gather_from(self, now: float) -> float:
        """When the gathering for a frame queued ``now`` counts from: now, or, for an idle
        uncapped site, far enough back that the time is already up."""
        if self.cap is None and self.duty.value(now) < IDLE_DUTY:
            return now - self.gather_s(1.0)
        return now

    async def _let_links_run(self, more: bool) -> None:
        """Let the readers and writers run before the next pass. The links' buffers are small
        (backpressure reaches the senders' skew buffers), so each turn of the event loop
        moves a few tens of kilobytes a link; while a backlog keeps the passes back to back,
        one turn per pass would tie a link's rate to the pass rate, and frames due at once
        (tentative rows) would wait behind the backlog's. So after such a pass the loop
        turns up to ``LINK_TURNS`` times, until half an inbox has come in."""
        for _ in range(LINK_TURNS if more else 1):
            await asyncio.sleep(0)
            if len(self.inbox) >= INBOX_FRAMES // 2 or self._rows >= self.gather_rows:
                return

    def scale(self, factor: float) -> None:
        """``--slow``: from now on the site gets ``factor`` times its capacity."""
        self.capacity_now()
        if self.cap is None:
            self.cap = CpuCap(1.0)
        self.cap.scale(factor)

    def capacity_now(self) -> float:
        """Seconds of capacity this site has had so far: wall time times its cap (so that
        busy / capacity is the utilisation U_j relative to what the site can do)."""
        now = time.perf_counter()
        cap = self.cap.cap if self.cap is not None else 1.0
        self._capacity_s += (now - self._capacity_at) * cap
        self._capacity_at = now
        return self._capacity_s

    @property
    def slept_s(self) -> float:
        return self.cap.slept if self.cap is not None else 0.0


class Duty:
    """The share of a site's recent time its passes took (wall time, waiting for a core
    included: what a frame arriving meanwhile waits for): decaying sums of the passes'
    durations and of the time from one pass's end to the next's."""

    DECAY = 0.8

    def __init__(self) -> None:
        self._busy = 0.0
        self._span = 0.0
        self._last: float | None = None

    def observe(self, began: float, ended: float) -> None:
        """A pass ran from ``began`` to ``ended``."""
        if self._last is not None:
            self._busy = self.DECAY * self._busy + (ended - began)
            self._span = self.DECAY * self._span + (ended - self._last)
        self._last = ended

    def value(self, now: float | None = None) -> float:
        """The duty cycle, the time since the last pass counting as idle."""
        if self._last is None:
            return 0.0
        idle = (time.perf_counter() if now is None else now) - self._last
        span = self._span + idle
        return self._busy / span if span > 0 else 0.0


class PassBudget:
    """How many rows a stage's merge may release in one pass (``SiteCore.pass_rows``): as
    many as a pass's seconds of work at the cost per row measured so far (a decaying ratio of
    pass time to rows released, per-pass costs included, so it errs towards short passes
    when passes are small), at least ``PASS_MIN_ROWS``; None until a pass has released
    rows."""

    DECAY = 0.9

    def __init__(self) -> None:
        self._busy = 0.0
        self._rows = 0.0

    def observe(self, busy_s: float, rows: int) -> None:
        """A pass took ``busy_s`` of CPU and released ``rows`` rows."""
        if rows <= 0:
            return
        self._busy = self.DECAY * self._busy + busy_s
        self._rows = self.DECAY * self._rows + rows

    def rows(self, seconds: float = PASS_S) -> int | None:
        """The rows of about ``seconds`` of work (None: nothing measured yet, no limit)."""
        if self._rows <= 0 or self._busy <= 0:
            return None
        return max(PASS_MIN_ROWS, int(seconds * self._rows / self._busy))
