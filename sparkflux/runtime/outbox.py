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
"""

from __future__ import annotations

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
            for m in self.skew.offer(dest, msg, rows, blocked):
                conn.send(m)
        except ConnectionLost:
            self.drop(dest)  # a control frame to a lost peer may come before any data

    def flush(self) -> None:
        """Write what held destinations can take now (called after every event and on a
        short timer)."""
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
            except ConnectionLost:
                self.skew.drop(dest)

    def drop(self, dest: int) -> None:
        if dest in self.skew.destinations():
            self.skew.drop(dest)

    def held_rows(self) -> int:
        return self.skew.held_rows()
