"""The driver's read-ahead on a site's connection: frames are read as they arrive and
handled with an episode's ``Tentative`` rows first.

A site writes ``Tentative`` frames at once, past the stable rows its skew buffer holds
(``protocol/channels.py``, rule 2), but not past the stable rows already written to the
connection: during a reconciliation the redo's output fills it, and the driver, which handles
one frame at a time, would read a tentative answer only after every stable frame ahead of
it, which the delay bound forbids. So a reader task takes frames off the socket while the
handler works, and the handler takes the oldest ``Tentative`` read before anything else.
Only ``Tentative`` frames move forward, which the channel rules allow (they may overtake
ordered frames, never the other way round); every other frame keeps its order. The
simulator's links produce the same orders (``sim/run.py``, ``_overtakes``).

The read-ahead is bounded (``READ_AHEAD``): beyond it the reader waits, and the socket
holds the rest as before.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

import pyarrow as pa

from sparkflux.protocol.messages import Tentative
from sparkflux.runtime.transport import Connection, ConnectionLost

READ_AHEAD = 512  # frames read but not yet handled, at most, per connection
YIELD_S = 0.002  # the longest the handler works before the reader may read again


class Inbox:
    """Frames of one connection, read ahead by ``reader`` (a task the caller runs) and taken
    by ``next`` with ``Tentative`` first; ``next`` raises the connection's loss once every
    frame read before it was taken."""

    def __init__(self, conn: Connection, schema_of: dict[int, pa.Schema],
                 limit: int = READ_AHEAD) -> None:
        self.conn, self.schema_of, self.limit = conn, schema_of, limit
        self.tentative: deque[Any] = deque()
        self.other: deque[Any] = deque()
        self.lost: ConnectionLost | None = None
        self._arrived = asyncio.Event()
        self._taken = asyncio.Event()
        self._yielded = 0.0

    def __len__(self) -> int:
        return len(self.tentative) + len(self.other)

    async def reader(self) -> None:
        """Read frames until the connection is lost (kept for ``next`` to raise)."""
        try:
            while True:
                while len(self) >= self.limit:
                    self._taken.clear()
                    await self._taken.wait()
                msg = await self.conn.recv_message(self.schema_of)
                (self.tentative if isinstance(msg, Tentative) else self.other).append(msg)
                self._arrived.set()
        except ConnectionLost as e:
            self.lost = e
            self._arrived.set()

    async def next(self) -> Any:
        """The next frame to handle: the oldest ``Tentative`` read, else the oldest frame.
        Yields to the loop first once ``YIELD_S`` of handling has passed since the last
        time, so that the reader takes what arrived meanwhile."""
        now = time.monotonic()
        if now - self._yielded >= YIELD_S:
            await asyncio.sleep(0)
            self._yielded = time.monotonic()
        while not len(self):
            if self.lost is not None:
                raise self.lost
            self._arrived.clear()
            await self._arrived.wait()
            self._yielded = time.monotonic()
        msg = self.tentative.popleft() if self.tentative else self.other.popleft()
        self._taken.set()
        return msg
