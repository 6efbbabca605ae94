"""The driver host's input: the sources read (paced by ``--rate``, ``pacing.py``) and fed to
the driver core a batch at a time, admission held back while the core says the sites have not
read enough (``Boundary.held_back``, docs/flow-control.md), and a source's own long wait
reported."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparkflux.control.boundary import Input, InputEnd
from sparkflux.control.watchdog import pool_reason, window_reason
from sparkflux.runtime.causes import cause
from sparkflux.runtime.pacing import FLUSH_S, WAIT, PacedBuffer, SourceFeed
from sparkflux.runtime.scheduler import batch_delay
from sparkflux.runtime.transport import ConnectionLost

if TYPE_CHECKING:
    from sparkflux.runtime.driver import Host

# The host's logger: what the feed logs keeps the name it always had.
log = logging.getLogger("sparkflux.runtime.driver")
INGRESS_POOL_ROWS = 100_000  # the ingress DTSB's shared pool
IDLE_S, IDLE_MAX_S = 0.002, 0.05  # the wait while the sources have nothing: doubles up to max


class Feed:
    """The input of one run on ``host``'s loop: ``run`` is its task. It keeps the host's
    ``input_state`` (what the ingress is doing) and ``blocked_by`` up to date."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._source: SourceFeed | None = None
        self._reported = False  # a source's own wait reported (``source_wait``)
        self._ending = False  # ``end``: the sources end at their next batch boundary
        # a restart: the records each source had handed over at the checkpoint's cut
        self.resumed = [0] * len(host.plan.streams)

    def positions(self) -> list[int]:
        """Each source's position: the records it has handed to the core (those of an
        earlier run restored from a checkpoint included), what a restart resumes it at."""
        host = self.host
        return [self.resumed[i] + n for i, n in enumerate(host.source_rows)]

    def cut(self, stream: int, seconds: float) -> bool:
        """``--cut-source``: hold source ``stream``'s records outside the dataflow for
        ``seconds`` from now; False if the input is not running."""
        if self._source is None:
            return False
        self._source.cut(stream, seconds)
        return True

    def end(self) -> None:
        """Every source ends at its next batch boundary (``FluxQuery.stop``)."""
        self._ending = True
        if self._source is not None:
            self._source.end()

    async def run(self) -> None:
        """Once the core starts the ingress: every source's batches to the core, each
        admitted when the window has room, then the input's end (a failure aborts the
        run)."""
        host = self.host
        assert host.start_ingress is not None
        await host.start_ingress.wait()
        host.input_state = "admitting"
        host.stats.phase = "running"
        start = time.time()
        host.metrics.start = start
        host.stats.started_at = start
        host._mono_start = time.monotonic()
        host.cpu_start = time.process_time()
        host.faults.arm()
        source = self._source = SourceFeed(host.plan, skip=self.resumed,
                                           read_ahead=host.eventual)
        if host.restored is not None:
            r = host.restored
            host.progress.note("restored", None, f"restored checkpoint {r.checkpoint}: the "
                               f"input goes on after record {r.cut + 1:,}")
            host.announce(f"restored checkpoint {r.checkpoint}: the output goes on after "
                          f"input record {r.cut + 1:,}")
        if self._ending:
            source.end()
        cfg = host.cfg
        if cfg.rate:
            buffer = PacedBuffer(source, cfg.rate, cfg.ingress_buffer, host.stats,
                                 flush_s=batch_delay(FLUSH_S, cfg.max_batch_delay))
            pump = asyncio.create_task(buffer.produce())
            take: Callable[[], Any] = buffer.take
        else:
            pump = None

            def take() -> Any:
                item = source.next()
                return item if item is None or item is WAIT else [item]
        idle = IDLE_S
        idle_since: float | None = None
        try:
            host.announce(f"input started: {host.plan.sites} sites ready "
                          f"{start - (host.launched_at or start):.1f} s after the launch")
            while True:
                items = take()
                if items is WAIT:
                    host.input_state = "idle"
                    idle_since = idle_since or time.monotonic()
                    self.source_wait(source, idle_since)
                    await asyncio.sleep(idle)
                    if not cfg.rate:  # a paced buffer is filled on its own clock
                        idle = min(idle * 2, IDLE_MAX_S)
                    continue
                idle, idle_since, self._reported = IDLE_S, None, False
                host.input_state = "admitting"
                if items is None:
                    break
                await self.admit_all(items)
            host.actions.carry_out(host.core.handle(InputEnd()))
            host.input_state = "ended"
        except ConnectionLost as e:
            host.abort(str(e))
        except Exception as e:  # noqa: BLE001 - a bug must stop the run, never hang it
            host.abort(f"the ingress failed: {cause(e)}")
        finally:
            if pump is not None:
                pump.cancel()

    async def admit_all(self, items: list[tuple[int, Any]]) -> None:
        """What one take of the sources gave, a batch at a time, the loop's other tasks (the
        sites' frames, an episode's tentative answers among them) running between two
        admissions, not after all of them; then the window. The take is admitted whole: what
        the sources produced while admission waited comes in at once when it resumes, as the
        records of a take always have (waiting for the window batch by batch would leave a
        paced source's buffer to overflow during a take-over)."""
        for k, (stream, item) in enumerate(items):
            if k:
                await asyncio.sleep(0)
            self._admit(stream, item)
        await self.wait_window()

    def _admit(self, stream: int, item: Any) -> None:
        """Stream ``stream``'s next batch (None: its end) to the core, and the records the
        ingress numbered for it to the host's counts."""
        host = self.host
        before = host.ingress.next_isn
        event = (InputEnd(stream=stream, now=time.time()) if item is None
                 else Input(batch=item, now=time.time(), stream=stream))
        host.actions.carry_out(host.core.handle(event))
        host.ingress_times.append(time.time())
        host.ingress_counts.append(host.ingress.next_isn - before)
        host.stats.events_in = host.ingress.next_isn
        if item is not None:
            host.source_rows[stream] += item.num_rows if hasattr(item, "num_rows") else len(item)
        else:
            host.progress.note("input-ended", None,
                               f"source {host.plan.streams[stream].name!r} ended")
        host.faults.admitted(host.stats.events_in)

    async def wait_window(self) -> None:
        """Admission (docs/flow-control.md): the next batch waits while the core holds it
        back (``Boundary.held_back``): for an acknowledgement that makes room in the
        window, or for the ingress's skew buffer pool to drain."""
        host = self.host
        assert host.heard is not None
        host.unacked_max = max(host.unacked_max, host.core.unacknowledged())
        while held := host.core.held_back(
                host.cfg.window, host.outbox.skew.pool_used() >= INGRESS_POOL_ROWS):
            host.input_state, host.blocked_by = "blocked", held
            if held == "window":
                host.heard.clear()
                await host.heard.wait()
            else:  # the DTSB's back-pressure: until a connection drains (at most 2 ms)
                await host.outbox.wait_writable(0.002)
                host.outbox.flush()
        host.input_state = "admitting"
        await asyncio.sleep(0)

    def source_wait(self, source: SourceFeed, since: float) -> None:
        """An idle source is no stall, unless it waits for work of its own (a Spark job):
        that is reported once the wait outlasts ``--stall-timeout``."""
        host = self.host
        now = time.monotonic()
        timeout = host.cfg.stall_timeout
        if self._reported or timeout <= 0 or now - since < timeout:
            return
        waits = source.waiting_for()
        if waits is None:
            return
        self._reported = True
        message = f"the input has waited {now - since:.0f} s: {waits}"
        host.stalls.append({"at_s": round(now - host._mono_start, 3),
                            "seconds": round(now - since, 3), "stopped": False,
                            "message": message})
        log.warning("%s", message)
        host.stats.phase = "waiting for the source"

    def admission(self) -> str:
        """Why admission waits (for the watchdog's report), or ""."""
        host = self.host
        if host.input_state != "blocked":
            return ""
        if host.blocked_by == "pool":
            return pool_reason(host.outbox.skew.pool_used(),
                               host.outbox.skew.blocked_destinations())
        low = host.core.slowest_first()
        if low is None:
            return f"{host.core.unacknowledged():,} records unacknowledged"
        return window_reason(host.core.unacknowledged(), host.cfg.window, *low)
