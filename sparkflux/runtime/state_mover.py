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
    state connection; ``spawn``: runs a coroutine as a task of the site's."""

    def __init__(self, security: Security, claim: Callable[[], Claim],
                 spawn: Callable[[Any], Any], dial_timeout: float) -> None:
        self.security = security
        self.claim = claim
        self.spawn = spawn
        self.dial_timeout = dial_timeout
        self.conns: dict[tuple[str, int], Connection] = {}
        self._dialing: dict[tuple[str, int], asyncio.Lock] = {}
        self.state_bytes: dict[tuple[int, int], int] = {}  # (stage, q) -> bytes sent
        self.state_move_s: dict[tuple[int, int], float] = {}  # ... and how long it took

    def send(self, site: int, msg: State | Installed, addr: tuple[str, int],
             expect: tuple[int, int]) -> None:
        """Send ``msg`` to slot ``site``'s process ``expect``, listening at ``addr``."""
        pieces = [bytes(p) if isinstance(p, memoryview) else p for p in encode(msg)]
        key = None
        if isinstance(msg, State):
            key = (msg.stage, msg.q)
            self.state_bytes[key] = sum(len(p) for p in pieces)
        self.spawn(self._move(site, pieces, key, addr, expect))

    def moved(self, stage: int, q: int) -> tuple[int, float]:
        """What was sent for the catch-up of ``(stage, q)``, and how long it took (for its
        ``cu-done``)."""
        key = (stage, q)
        return self.state_bytes.pop(key, 0), self.state_move_s.pop(key, 0.0)

    async def _move(self, site: int, pieces: list, key: tuple[int, int] | None,
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
                self.state_move_s[key] = time.perf_counter() - t
        except ConnectionLost as e:
            log.info("state move to site %d failed: %s", site, e)
