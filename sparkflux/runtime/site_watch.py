"""The site host's clocks: the heartbeat to the controller (the site's load and progress, what
the driver's failure detection, load-balancing policy and watchdog read), and the link check
(a keepalive on every peer link idle since the last check, then each link's silence measured
for the boundary's ``LinkCheck``: a peer cut off, or hung, whose TCP connection does not
break, is reported after the link timeout)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

import numpy as np

from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.messages import Keepalive
from sparkflux.protocol.site_boundary import LinkCheck
from sparkflux.runtime.transport import Connection, ConnectionLost

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
        """Every ``heartbeat_interval``: the site's counters to the controller, on the
        control connection (lost: the site stops)."""
        host = self.host
        assert host.control is not None
        none = np.zeros(0, dtype=np.int64)
        while True:
            await asyncio.sleep(host.cfg.heartbeat_interval)
            core = host.core
            in_sn, in_part, out_sn, out_part = core.lowest() if core else (none,) * 4
            try:
                host.control.send(cm.Heartbeat(
                    site=host.id, pid=os.getpid(), attempt=host.cfg.attempt,
                    busy_s=host.scheduler.busy_s, slept_s=host.scheduler.slept_s,
                    passes=host.scheduler.passes, cpu_s=time.process_time(),
                    buffered=(sum(b.buffered_rows() for b in core.prods) if core else 0),
                    # the policy's statistics (thesis ch. 4): capacity so far, rows per
                    # mini-partition, sampled now on this site's clock
                    capacity_s=host.scheduler.capacity_now(), at=time.monotonic(),
                    counts=core.processed.copy() if core else none,
                    refused=host.gate.total_refused,
                    # where this site's progress stands (the driver's watchdog)
                    in_sn=in_sn, in_part=in_part, out_sn=out_sn, out_part=out_part,
                    held=host.outbox.held_rows(),
                    pending=core.pending_rows() if core else 0))
            except ConnectionLost:
                host.fail("lost the driver")
                return

    async def links(self) -> None:
        """Every ``LINK_CHECK_S``: a keepalive on every peer link this site wrote nothing to
        since the last check, then the boundary's look at how long each link has been
        waited on in silence (``LinkCheck``: a peer cut off, or hung, whose TCP connection
        does not break, is reported after the link timeout)."""
        host = self.host
        last = time.monotonic()
        while True:
            await asyncio.sleep(LINK_CHECK_S)
            now = time.monotonic()
            lag, last = max(0.0, now - last - LINK_CHECK_S), now
            silent: dict[int, float] = {}
            for j, conn in list(host.peers.items()):
                if conn.bytes_sent == self._sent.get(j):
                    try:
                        conn.send(Keepalive())
                    except ConnectionLost:
                        pass
                self._sent[j] = conn.bytes_sent
                since = self.reading.get(conn)
                silent[j] = 0.0 if since is None else now - since
            host.handle(LinkCheck(silent=silent, lag=lag))
