"""The StateMover: a partition's snapshot goes to the new replica's site over a connection of
its own (thesis Fig. 3.9), so it never queues ahead of data frames nor behind them; the new
replica's ``installed`` comes back the same way, not behind the input queued for the
survivor. One connection per destination, dialled on first use."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from sparkflux.protocol.messages import Installed, State
from sparkflux.runtime.frames import encode
from sparkflux.runtime.handshake import Claim
from sparkflux.runtime.security import Security
from sparkflux.runtime.transport import Connection, ConnectionLost, connect

log = logging.getLogger(__name__)


class StateMover:
    """Sends snapshots and ``installed`` for one site; ``claim``: this site's claim for a
    state connection; ``spawn``: runs a coroutine as a task of the site's; ``sent``: called
    with ``(stage, q, bytes, seconds)`` once a snapshot is written (for its ``cu-done``)."""

    def __init__(self, security: Security, claim: Callable[[], Claim],
                 spawn: Callable[[Any], Any], dial_timeout: float,
                 sent: Callable[[int, int, int, float], None]) -> None:
        self.security = security
        self.claim = claim
        self.spawn = spawn
        self.dial_timeout = dial_timeout
        self.sent = sent
        self.conns: dict[tuple[str, int], Connection] = {}
        self._dialing: dict[tuple[str, int], asyncio.Lock] = {}

    def send(self, site: int, msg: State | Installed, addr: tuple[str, int],
             expect: tuple[int, int]) -> None:
        """Send ``msg`` to slot ``site``'s process ``expect``, listening at ``addr``."""
        pieces = [bytes(p) if isinstance(p, memoryview) else p for p in encode(msg)]
        key = (msg.stage, msg.q) if isinstance(msg, State) else None  # a snapshot is timed
        self.spawn(self._move(site, pieces, key, addr, expect))

    async def _move(self, site: int, pieces: list[Any], key: tuple[int, int] | None,
                    addr: tuple[str, int], expect: tuple[int, int]) -> None:
        try:
            # one connection per destination (two tasks of one pass must not both dial)
            async with self._dialing.setdefault(addr, asyncio.Lock()):
                conn = self.conns.get(addr)
                if conn is None or conn.closed:
                    conn = await connect(addr[0], addr[1], f"state mover to site {site}",
                                         self.security, self.claim(), expect,
                                         self.dial_timeout)
                    self.conns[addr] = conn
            t = time.perf_counter()
            conn._write(pieces)
            await conn.drain()
            if key is not None:
                self.sent(*key, sum(len(p) for p in pieces), time.perf_counter() - t)
        except ConnectionLost as e:
            log.info("state move to site %d failed: %s", site, e)
