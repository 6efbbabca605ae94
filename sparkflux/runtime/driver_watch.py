"""The driver host's clock: the core's ``Tick`` every 50 ms (sooner when an eventual run's
delay bound falls due: ``Boundary.next_due``), the watchdog fed from it (a stall
reported with what the run waits for, or the run stopped, ``control/watchdog.py``), and the
spans with a partition short of its copies (the metrics' time back to fault tolerance)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from sparkflux.control.events import Tick
from sparkflux.control.watchdog import Resumed, Stall, Watchdog, describe

if TYPE_CHECKING:
    from sparkflux.runtime.driver import Host

# The host's logger: a stall's report keeps the name docs/flow-control.md shows.
log = logging.getLogger("sparkflux.runtime.driver")
TICK_S = 0.05
TICK_MIN_S = 0.002


class Watch:
    """The ticker and the watchdog of one run on ``host``'s loop: ``ticker`` is its task."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.watchdog = Watchdog(host.cfg.stall_timeout)
        self._unsafe_since: float | None = None

    async def ticker(self) -> None:
        """The core's clock; the watchdog's too, once the input has started."""
        host = self.host
        while True:
            # every TICK_S, or sooner when the delay bound falls due (the input's clock is
            # the wall clock; a millisecond past it, so the judgment sees it passed), but
            # not more often than every TICK_MIN_S (a tiny bound must not spin the loop)
            due = host.core.next_due()
            wait = TICK_S if due is None else min(
                TICK_S, max(TICK_MIN_S, due - time.time() + 1e-3))
            await asyncio.sleep(wait)
            now = time.monotonic()
            host.actions.carry_out(host.core.handle(Tick(now=now, wall=time.time())))
            if host.input_state != "starting" and not host.over():
                self._watch(now)

    def safety(self) -> None:
        """When the dataflow lost and regained ``--replicas`` complete copies of every
        partition (``unsafe``: from the first failure to the last catch-up or re-placement
        after it), for the metrics' time to fault tolerance."""
        host = self.host
        incomplete = bool(host.controller.incomplete) and not host.over()
        if incomplete and self._unsafe_since is None:
            self._unsafe_since = time.time()
        elif not incomplete and self._unsafe_since is not None:
            host.unsafe.append((self._unsafe_since, time.time()))
            self._unsafe_since = None

    def _watch(self, now: float) -> None:
        """Feed the watchdog; report a stall with what it waits for, or stop the run."""
        host = self.host
        marks, owed = host.core.marks(host.input_state)
        seen = self.watchdog.observe(now, marks, host.input_state, owed=owed)
        if isinstance(seen, Stall):
            self._stalled(seen, now)
        elif isinstance(seen, Resumed):
            log.warning("the run progresses again, after %.0f s", seen.seconds)
            host.stats.phase = "running"

    def _stalled(self, stall: Stall, now: float) -> None:
        """A stall: recorded, and reported with what the run waits for, or the run
        stopped when it has lasted too long."""
        host = self.host
        standing = host.core.standing(host.input_state, host.feed.admission(), now)
        message = describe(stall, standing, host.cfg.stall_timeout)
        host.stalls.append({"at_s": round(now - host._mono_start, 3),
                            "seconds": round(stall.seconds, 3), "stopped": stall.stop,
                            "message": message})
        if stall.stop:
            host.abort(message)
        else:
            log.warning("%s", message)
            host.stats.phase = f"stalled for {stall.seconds:.0f} s"
