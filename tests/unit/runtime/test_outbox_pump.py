"""The DTSB's release (``Outbox.pump``): held frames leave when their connection drains,
not on the next tick of a timer, and a transport that wakes its writers with nothing written
never makes the loop spin. On a real loopback connection and on a scripted one."""

from __future__ import annotations

import asyncio

import numpy as np
import pyarrow as pa

from sparkflux.protocol.messages import Data, Streams
from sparkflux.runtime.outbox import Outbox
from sparkflux.runtime.transport import Connection


def data(n: int) -> Data:
    e = np.zeros(0, dtype=np.int32)
    return Data(1, Streams(e, e.astype(np.int8), e, e.astype(np.int64), e.astype(np.int64)),
                pa.record_batch([pa.array(np.arange(n))], names=["x"]))


class Scripted:
    """A connection whose buffer and drain the test sets."""

    def __init__(self) -> None:
        self.sent: list[object] = []
        self.closed = False
        self.size = 1 << 20  # above the high-water mark: blocked
        self.drained = asyncio.Event()
        self.waits = 0
        self.got = asyncio.Event()

    def buffered(self) -> int:
        return self.size

    def send(self, msg: object) -> None:
        self.sent.append(msg)
        self.got.set()

    async def writable(self, high: int) -> None:
        self.waits += 1
        await self.drained.wait()


def test_held_frames_leave_when_the_connection_drains_not_on_the_timer() -> None:
    async def main() -> None:
        conn = Scripted()
        box = Outbox(lambda d: conn, capacity_rows=1_000)  # type: ignore[arg-type, return-value]
        pump = asyncio.create_task(box.pump(3600.0))  # a timer that never comes in the test
        msgs = [data(5) for _ in range(3)]
        for m in msgs:
            box.send(0, m)
        assert conn.sent == [] and box.held_rows() == 15
        await asyncio.sleep(0)  # the pump sees the held frames and waits for the drain
        conn.size = 0
        conn.drained.set()
        await asyncio.wait_for(conn.got.wait(), 5.0)
        assert conn.sent == msgs and box.held_rows() == 0
        pump.cancel()

    asyncio.run(main())


def test_a_drain_that_writes_nothing_leaves_the_next_wait_to_the_timer() -> None:
    """A transport that resumes its writers while its buffer is still full: each wake-up is
    followed by a wait on the timer, so the drain waits come at the timer's pace."""
    async def main() -> None:
        conn = Scripted()
        conn.drained.set()  # every drain wait returns at once; the buffer stays full
        box = Outbox(lambda d: conn, capacity_rows=1_000)  # type: ignore[arg-type, return-value]
        box.send(0, data(5))
        loop = asyncio.get_running_loop()
        began = loop.time()
        pump = asyncio.create_task(box.pump(0.05))
        await asyncio.sleep(0.5)
        pump.cancel()
        elapsed = loop.time() - began
        # one drain wait per timer period (a spinning loop would make thousands)
        assert conn.sent == [] and 1 <= conn.waits <= elapsed / 0.05 + 2, (conn.waits, elapsed)

    asyncio.run(main())


def test_a_real_connection_waits_until_its_reader_reads() -> None:
    """``Connection.writable``: a loopback connection whose peer does not read stays paused
    above the mark; once the peer reads, the wait ends."""
    async def main() -> None:
        read = asyncio.Event()
        done = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read.wait()
            while not done.is_set():
                if not await reader.read(1 << 16):
                    break
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = Connection(reader, writer, "peer")
        writer.write(bytes(4 << 20))  # far more than the kernel's buffers hold
        wait = asyncio.create_task(conn.writable(1 << 15))
        await asyncio.sleep(0.2)
        assert not wait.done() and conn.buffered() > 1 << 15
        read.set()
        await asyncio.wait_for(wait, 10.0)
        assert conn.buffered() <= (1 << 15) // 4
        done.set()
        conn.close()
        server.close()

    asyncio.run(main())
