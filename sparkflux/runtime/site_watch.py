"""The site host's clocks: the heartbeat's (this process's measures to the core's ``Beat``,
which sends the site's load and progress: what the driver's failure detection,
load-balancing policy and watchdog read), and the link check's (the links written nothing
to since the last check, and each link's silence, measured for the core's ``LinkCheck``:
it sends the keepalives, and reports a peer cut off, or hung, whose TCP connection does not
break, after the link timeout)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

from sparkflux.protocol.site_boundary import Beat, LinkCheck, MemoryCheck
from sparkflux.runtime.transport import Connection, bytes_sent_total

if TYPE_CHECKING:
    from sparkflux.runtime.site import Site

LINK_CHECK_S = 0.1  # how often a site looks at its links (and sends keepalives on idle ones)


class Watch:
    """The heartbeat and the link check of ``host``: ``heartbeat`` and ``links`` are its
    tasks; ``reading`` is kept by the host's readers."""

    def __init__(self, host: Site) -> None:
        self.host = host
        # a peer link -> since when its reader waits for bytes (absent: not waiting)
        self.reading: dict[Connection, float] = {}
        self._sent: dict[int, int] = {}  # peer -> bytes written to it at the last link check

    async def heartbeat(self) -> None:
        """Every ``heartbeat_interval``: this process's measures to the core (``Beat``),
        which sends the heartbeat on the control connection."""
        host = self.host
        while True:
            await asyncio.sleep(host.cfg.heartbeat_interval)
            sched = host.scheduler
            host.handle(Beat(pid=os.getpid(), busy_s=sched.busy_s, slept_s=sched.slept_s,
                             passes=sched.passes, cpu_s=time.process_time(),
                             capacity_s=sched.capacity_now(), at=time.monotonic(),
                             refused=host.gate.total_refused, held=host.outbox.held_rows(),
                             memory_pause_s=host.memory_pause_s,
                             sent_bytes=bytes_sent_total() - host.sent_at_start))
            host.memory_step(MemoryCheck(now=time.monotonic()))  # spills and loads, if any

    async def links(self) -> None:
        """Every ``LINK_CHECK_S``: the boundary's ``LinkCheck``, with the peer links this
        site wrote nothing to since the last check (the core sends each a keepalive) and
        how long each link has been waited on in silence (a peer cut off, or hung, whose
        TCP connection does not break, is reported after the link timeout)."""
        host = self.host
        last = time.monotonic()
        while True:
            await asyncio.sleep(LINK_CHECK_S)
            now = time.monotonic()
            lag, last = max(0.0, now - last - LINK_CHECK_S), now
            silent: dict[int, float] = {}
            idle: set[int] = set()
            for j, conn in list(host.peers.items()):
                if conn.bytes_sent == self._sent.get(j):
                    idle.add(j)
                self._sent[j] = conn.bytes_sent
                since = self.reading.get(conn)
                silent[j] = 0.0 if since is None else now - since
            host.handle(LinkCheck(silent=silent, lag=lag, idle=frozenset(idle), now=now))
