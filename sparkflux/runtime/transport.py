"""Framed, authenticated TCP connections over asyncio streams.

Every connection starts with the run's mutual handshake (``handshake.py``; inside TLS when the
run has it) before a frame is read, and every frame is checked against a size limit before its
body is read. Every transport failure (reset, EOF, a truncated or malformed frame, a frame over
the limit) surfaces as one ``ConnectionLost`` for the caller (distributed's
``CommClosedError`` habit): the protocol layer sees "peer lost", never a zoo of socket errors.
Writes never block the event loop: ``send`` queues the frame (flow control is the ingress's
admission, docs/flow-control.md, and the skew buffer of ``outbox`` keeps data out of a blocked
connection), so two sites that send to each other cannot deadlock on full socket buffers.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections import deque
from typing import Any

import pyarrow as pa

from sparkflux.protocol.messages import Data
from sparkflux.runtime import handshake, trace
from sparkflux.runtime.frames import FRAME_HEADER, FrameError, decode, encode, frame_size
from sparkflux.runtime.handshake import Claim, Gate, HandshakeFailed
from sparkflux.runtime.security import TLS_NAME, Security
from sparkflux.runtime.wan import LinkDelay

SOCKET_BUFFER = 1 << 15
# asyncio's reader buffers up to twice this before it stops reading the socket: keep it
# small too, or a slow site would pull megabytes of backlog into its own memory.
READ_LIMIT = 1 << 14
# A start-failure report (``handshake.REPORT``) is one message of text: a traceback, no rows.
REPORT_MAX_FRAME = 1 << 20


_SENT = [0]  # bytes this process wrote to all its connections


def bytes_sent_total() -> int:
    """Bytes this process has written to all its connections so far (the run's replication
    cost: the heartbeats carry a site's, the metrics sum them)."""
    return _SENT[0]


class ConnectionLost(Exception):
    """The peer at the other end of a connection is gone (EOF, reset or bad frame)."""


class Connection:
    """One framed, multiplexed connection to an authenticated peer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 peer: str = "?", max_frame: int = 1 << 28) -> None:
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.max_frame = max_frame
        self.closed = False
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # Small kernel buffers: what a slow peer has not read waits in the sender's skew
            # buffer (the DTSB), where control frames can overtake it, not in the socket.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        self.bytes_sent = 0
        # ``--wan``: when each frame written may leave (None: at once), and the frames waiting
        # for their time, in order (``runtime/wan.py``)
        self.delay: LinkDelay | None = None
        self._delayed: deque[tuple[float, list[Any]]] = deque()
        self._sent_all = asyncio.Event()
        self._sent_all.set()
        self._close_after = False

    def _lost(self, why: str, cause: BaseException | None = None) -> ConnectionLost:
        self.close()
        e = ConnectionLost(f"connection to {self.peer} {why}")
        e.__cause__ = cause
        return e

    async def recv(self) -> tuple[int, memoryview]:
        """The next frame as (kind, body); raises ConnectionLost at EOF, on error, and for a
        frame over the size limit (its body is never read)."""
        try:
            head = await self.reader.readexactly(FRAME_HEADER.size)
            size, kind = FRAME_HEADER.unpack(head)
            if not 1 <= size <= self.max_frame:
                raise self._lost(f"sent a frame of {size} bytes (limit {self.max_frame}): "
                                 f"protocol error")
            body = await self.reader.readexactly(size - 1)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            raise self._lost(f"lost: {e!r}", e) from e
        return kind, memoryview(body)

    async def recv_message(self, schema_of: dict[int, pa.Schema]) -> Any:
        """The next frame, decoded; a frame that does not parse closes the connection."""
        kind, body = await self.recv()
        try:
            msg = decode(kind, body, schema_of)
        except FrameError as e:
            raise self._lost(f"sent a malformed frame ({e}): protocol error", e) from e
        if trace.TRACE is not None and isinstance(msg, Data):
            trace.TRACE.note("received", msg.stage, msg.batch)
        return msg

    def _write(self, pieces: list[Any]) -> None:
        if self.closed or self.writer.is_closing():
            raise ConnectionLost(f"connection to {self.peer} is closed")
        size = frame_size(pieces)
        self.bytes_sent += size
        _SENT[0] += size
        if self.delay is None:
            self.writer.writelines(pieces)
            return
        # a copy: a piece may view a buffer its owner changes before the frame's time
        self._delayed.append((self.delay.due(time.time()), [b"".join(pieces)]))
        if len(self._delayed) == 1:
            self._sent_all.clear()
            self._arm()

    def _arm(self) -> None:
        due = self._delayed[0][0]
        asyncio.get_running_loop().call_later(max(0.0, due - time.time()), self._release)

    def _release(self) -> None:
        """Write the delayed frames whose time has come (a lost connection drops them)."""
        now = time.time()
        while self._delayed and self._delayed[0][0] <= now:
            _, pieces = self._delayed.popleft()
            if not self.writer.is_closing():
                self.writer.writelines(pieces)
        if self._delayed:
            self._arm()
            return
        self._sent_all.set()
        if self._close_after:
            self._shut()

    def send(self, msg: Any) -> None:
        if trace.TRACE is not None and isinstance(msg, Data):
            trace.TRACE.note("sent", msg.stage, msg.batch)
        self._write(encode(msg))

    def buffered(self) -> int:
        """Bytes queued in the transport but not yet handed to the kernel. Frames on their way
        over a ``--wan`` link are not counted: they are in flight, as on a wide-area link
        whose TCP window covers its latency, not held up by a reader that does not read."""
        t = self.writer.transport
        if t is None or self.closed or t.is_closing():
            return 0
        try:
            return t.get_write_buffer_size()
        except AttributeError:  # a TLS transport whose socket has just gone
            return 0

    async def writable(self, high: int) -> None:
        """Until the transport can take more: its writer pauses above ``high`` bytes and
        resumes under a quarter of it (at once if it is not paused); a lost connection
        returns too (the next write finds it)."""
        t = self.writer.transport
        if t is None or self.closed or t.is_closing():
            return
        try:
            t.set_write_buffer_limits(high=high)
            await self.writer.drain()
        except (ConnectionError, OSError, AttributeError):
            return

    async def drain(self) -> None:
        try:
            await self._sent_all.wait()
            await self.writer.drain()
        except (ConnectionError, OSError) as e:
            self.closed = True
            raise ConnectionLost(f"connection to {self.peer} lost: {e!r}") from e

    def close(self) -> None:
        """Close; on a ``--wan`` link the frames written before still leave first (as TCP
        sends what it holds before its FIN), unless the connection is lost."""
        self.closed = True
        if self._delayed and not self.writer.is_closing():
            self._close_after = True
            return
        self._shut()

    def _shut(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001, S110 - closing a dead socket may fail any way
            pass


def frame_limit(security: Security, channel: int) -> int:
    if channel == handshake.STATE:
        return security.max_state_frame
    if channel == handshake.REPORT:
        return min(REPORT_MAX_FRAME, security.max_frame)
    return security.max_frame


async def connect(host: str, port: int, peer: str, security: Security, claim: Claim,
                  expect: tuple[int, int] | None = None, timeout: float = 30.0
                  ) -> Connection:
    """Dial, authenticate, and return the connection. Retries with jittered back-off until
    ``timeout`` while the peer is unreachable or closes during the handshake (still starting,
    or its door full); a peer that fails authentication is never retried."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.05
    while True:
        writer = None
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                host, port, limit=READ_LIMIT, ssl=security.client_ssl(),
                server_hostname=TLS_NAME if security.tls else None),
                max(0.1, deadline - loop.time()))
            await handshake.dial(reader, writer, security.secret, claim, expect,
                                 security.handshake_timeout)
            return Connection(reader, writer, peer, frame_limit(security, claim.channel))
        except HandshakeFailed as e:
            if writer is not None:
                writer.close()
            raise ConnectionLost(f"cannot connect to {peer} at {host}:{port}: {e}") from e
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
            if writer is not None:
                writer.close()
            if loop.time() + delay > deadline:
                raise ConnectionLost(f"cannot connect to {peer} at {host}:{port} within "
                                     f"{timeout:.0f}s: {e!r}") from e
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 1.0)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate,
                security: Security) -> tuple[Connection, Claim] | None:
    """An accepted connection once its dialler has authenticated (None: closed, counted)."""
    claim = await gate.admit(reader, writer)
    if claim is None:
        return None
    label = f"{handshake.CHANNELS[claim.channel]} connection of site {claim.site}"
    return Connection(reader, writer, label, frame_limit(security, claim.channel)), claim


async def start_server(client_connected: Any, host: str, security: Security
                       ) -> asyncio.Server:
    return await asyncio.start_server(client_connected, host, 0, limit=READ_LIMIT,
                                      ssl=security.server_ssl(),
                                      ssl_handshake_timeout=security.handshake_timeout
                                      if security.tls else None)
