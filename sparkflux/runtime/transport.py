"""Framed TCP connections over asyncio streams.

Every transport failure (reset, EOF, a truncated frame) surfaces as one ``ConnectionLost``
for the caller (distributed's ``CommClosedError`` habit): the protocol layer sees "peer lost",
never a zoo of socket errors. Writes never block the event loop: ``send`` queues the frame
(flow control is end to end, in the ingress window, and the skew buffer of ``outbox`` keeps
data out of a blocked connection), so two sites that send to each other cannot deadlock on
full socket buffers.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from sparkflux.protocol.messages import Message
from sparkflux.runtime.frames import FRAME_HEADER, KINDS, encode, encode_control

SOCKET_BUFFER = 1 << 15
# asyncio's reader buffers up to twice this before it stops reading the socket: keep it
# small too, or a slow site would pull megabytes of backlog into its own memory.
READ_LIMIT = 1 << 14


class ConnectionLost(Exception):
    """The peer at the other end of a connection is gone (EOF, reset or bad frame)."""


class Connection:
    """One framed, multiplexed connection to a peer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 peer: str = "?") -> None:
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.closed = False
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # Small kernel buffers: what a slow peer has not read waits in the sender's skew
            # buffer (the DTSB), where control frames can overtake it, not in the socket.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        self.bytes_sent = 0

    async def recv(self) -> tuple[int, bytes]:
        """The next frame as (kind, body); raises ConnectionLost at EOF or on error."""
        try:
            head = await self.reader.readexactly(FRAME_HEADER.size)
            size, kind = FRAME_HEADER.unpack(head)
            body = await self.reader.readexactly(size - 1)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            self.closed = True
            raise ConnectionLost(f"connection to {self.peer} lost: {e!r}") from e
        if kind not in KINDS:
            self.closed = True
            raise ConnectionLost(f"connection to {self.peer}: unknown frame kind {kind}")
        return kind, body

    def _write(self, pieces: list) -> None:
        if self.closed or self.writer.is_closing():
            raise ConnectionLost(f"connection to {self.peer} is closed")
        self.writer.writelines(pieces)
        self.bytes_sent += sum(p.nbytes if isinstance(p, memoryview) else len(p)
                               for p in pieces)

    def send(self, msg: Message) -> None:
        self._write(encode(msg))

    def send_control(self, message: dict[str, Any]) -> None:
        self._write(encode_control(message))

    def buffered(self) -> int:
        """Bytes queued in the transport but not yet handed to the kernel."""
        t = self.writer.transport
        return t.get_write_buffer_size() if t is not None else 0

    async def drain(self) -> None:
        try:
            await self.writer.drain()
        except (ConnectionError, OSError) as e:
            self.closed = True
            raise ConnectionLost(f"connection to {self.peer} lost: {e!r}") from e

    def close(self) -> None:
        self.closed = True
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - closing a dead socket may fail any way
            pass


async def connect(host: str, port: int, peer: str, timeout: float = 30.0) -> Connection:
    """Connect with jittered back-off until ``timeout`` (the peer may still be starting)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.05
    while True:
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=READ_LIMIT)
            return Connection(reader, writer, peer)
        except OSError as e:
            if loop.time() + delay > deadline:
                raise ConnectionLost(f"cannot connect to {peer} at {host}:{port}: {e}") from e
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

