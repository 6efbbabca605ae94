"""Where a process's outgoing messages wait for a connection that can take them: the DTSB.

Data frames, and the frames that must stay in order with them on a connection (the table in
``protocol/channels.py``: ``retaining`` and ``psync``, whose receivers count on everything
sent before them; ``cu-done``, which the controller may act on only once the egress has the
``psync`` before it), go through the duplicate-eliminating transient skew buffer
(``protocol.skew.SkewBuffer``): they are written only while the destination's connection has
room (its write buffer below ``high_water``), otherwise held in the process's pool, FIFO per
destination, so one slow site neither stalls the others (no head-of-line blocking) nor piles
an unbounded backlog in front of its own input. Protocol control frames (acknowledgements,
``reverse``, ``rejoin``, ``retain``, ``installed``) are never held behind data: they overtake
it, so take-over and catch-up are not delayed by a slow site's queue. A failed destination's
held frames are dropped (``ack_all``; FH-Prod resends by ``reverse`` if ever needed).

Held frames leave when their connection drains: a blocked connection's transport pauses its
writer above ``high_water`` (``set_write_buffer_limits``) and resumes it under a quarter of
it, and ``wait_writable`` wakes on that resumption, not on a timer; the timer it is given
only bounds the wait (and stands in if a transport wakes its writers with nothing written).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sparkflux.protocol.channels import ordered_with_data
from sparkflux.protocol.messages import Data, Frame
from sparkflux.protocol.skew import SkewBuffer
from sparkflux.runtime.transport import Connection, ConnectionLost


def rows_of(msg: Frame) -> int:
    return msg.batch.num_rows if isinstance(msg, Data) and msg.batch is not None else 0


class Outbox:
    """The DTSB in front of the connections ``conn_of(destination)`` finds."""

    def __init__(self, conn_of: Callable[[int], Connection | None], capacity_rows: int,
                 high_water: int = 1 << 15) -> None:
        self.conn_of = conn_of
        self.skew: SkewBuffer[Frame] = SkewBuffer(capacity_rows, [])
        self.high_water = high_water
        self._blocked = asyncio.Event()  # set when a frame is held

    def send(self, dest: int, msg: Frame) -> None:
        conn = self.conn_of(dest)
        if conn is None:
            return
        try:
            if not ordered_with_data(msg):
                conn.send(msg)
                return
            self.skew.add(dest)
            blocked = conn.buffered() > self.high_water
            rows = rows_of(msg)
            if not self.skew.can_hold(dest, rows):
                # The pool is full: write it. At the driver admission waits while the pool
                # is full; a site's peer that reads this slowly reads the driver's input as
                # slowly, which holds admission back (docs/flow-control.md).
                blocked = False
                for held in self.skew.release(dest):
                    conn.send(held)
            sent = self.skew.offer(dest, msg, rows, blocked)
            for m in sent:
                conn.send(m)
            if not sent:
                self._blocked.set()
        except ConnectionLost:
            self.drop(dest)  # a control frame to a lost peer may come before any data

    def flush(self) -> int:
        """Write what held destinations can take now (called after every event and when a
        connection drains); returns how many frames were written."""
        written = 0
        for dest in self.skew.blocked_destinations():
            conn = self.conn_of(dest)
            if conn is None or conn.closed:
                self.skew.drop(dest)
                continue
            try:
                while conn.buffered() <= self.high_water:
                    m = self.skew.release_next(dest)
                    if m is None:
                        break
                    conn.send(m)
                    written += 1
            except ConnectionLost:
                self.skew.drop(dest)
        return written

    async def wait_writable(self, timeout: float, drains: bool = True) -> bool:
        """Until a connection holding frames drains (its writer resumes: True), or
        ``timeout`` (False); with nothing held, or ``drains`` False, until a frame is held
        or ``timeout``."""
        conns = [c for d in self.skew.blocked_destinations()
                 if (c := self.conn_of(d)) is not None and not c.closed] if drains else []
        if not conns:
            self._blocked.clear()
            try:
                await asyncio.wait_for(self._blocked.wait(), timeout)
            except TimeoutError:
                pass
            return False
        waits = [asyncio.ensure_future(c.writable(self.high_water)) for c in conns]
        try:
            done, _ = await asyncio.wait(waits, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:  # (the pump cancelled too: no wait outlives it)
            for f in waits:
                f.cancel()
        return bool(done)

    async def pump(self, every: float) -> None:
        """Release held frames as their connections drain, and at least every ``every``
        seconds. A drain wake-up that could write nothing (a transport that woke its writers
        with its buffer still above ``high_water``) leaves the next wait to the timer, so the
        loop never spins."""
        drains = True
        while True:
            woke = await self.wait_writable(every, drains)
            written = self.flush()
            drains = not woke or written > 0

    def drop(self, dest: int) -> None:
        if dest in self.skew.destinations():
            self.skew.drop(dest)

    def held_rows(self) -> int:
        return self.skew.held_rows()
