"""The run's door (``runtime/handshake.py``, ``runtime/transport.py``) on real loopback
sockets, no Spark: only a holder of the secret gets a connection, its claim is bound, a replay
or a reflected proof fails, a frame over the limit closes the connection before its body is
read, and a server holds a bounded number of silent connections for a bounded time."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sparkflux.protocol import control_messages as cm
from sparkflux.runtime import handshake
from sparkflux.runtime.handshake import HELLO, MAGIC, PROOF, REPLY, Claim, Gate
from sparkflux.runtime.security import Security, make_security
from sparkflux.runtime.transport import ConnectionLost, connect, serve, start_server

SERVER = (7, 3)  # the server process's identity: slot 7, attempt 3
CLAIM = Claim(handshake.PEER, 2, 1, 2)


def sec(secret: bytes = b"k" * 32, **kw: Any) -> Security:
    return Security(secret=secret, **kw)


async def with_server(security: Security, body: Callable[[int, Gate, list], Awaitable[Any]],
                      timeout: float = 1.0, max_pending: int = 4) -> Any:
    """Run ``body(port, gate, accepted)`` against a server that authenticates every
    connection and then reads messages into ``accepted``."""
    gate = Gate(security.secret, lambda: SERVER, timeout, max_pending)
    accepted: list = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got = await serve(reader, writer, gate, security)
        if got is None:
            return
        conn, claim = got
        accepted.append(claim)
        try:
            while True:
                accepted.append(await conn.recv_message({}))
        except ConnectionLost as e:
            accepted.append(e)

    server = await start_server(on_conn, "127.0.0.1", security)
    try:
        return await body(server.sockets[0].getsockname()[1], gate, accepted)
    finally:
        server.close()


async def raw(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), seconds) == b""
    except (TimeoutError, ConnectionError):
        return False


def test_a_holder_of_the_secret_connects_and_its_claim_is_bound() -> None:
    async def body(port: int, gate: Gate, accepted: list) -> None:
        conn = await connect("127.0.0.1", port, "s", sec(), CLAIM, SERVER, 5.0)
        conn.send(cm.Moved(epoch=4))
        await asyncio.sleep(0.1)
        assert accepted == [CLAIM, cm.Moved(epoch=4)]
        assert gate.total_refused == 0

    asyncio.run(with_server(sec(), body))


def test_a_wrong_secret_is_refused_on_both_sides() -> None:
    async def body(port: int, gate: Gate, accepted: list) -> None:
        with pytest.raises(ConnectionLost, match="does not hold this run's secret"):
            await connect("127.0.0.1", port, "s", sec(b"x" * 32), CLAIM, SERVER, 5.0)
        await asyncio.sleep(0.1)
        assert accepted == []

    asyncio.run(with_server(sec(), body))


def test_the_dialler_refuses_a_server_that_is_not_who_it_expected() -> None:
    async def body(port: int, gate: Gate, accepted: list) -> None:
        with pytest.raises(ConnectionLost, match="expected site 7 attempt 2"):
            await connect("127.0.0.1", port, "s", sec(), CLAIM, (7, 2), 5.0)

    asyncio.run(with_server(sec(), body))


def test_a_forged_hello_without_the_secret_gets_nothing_decoded() -> None:
    async def body(port: int, gate: Gate, accepted: list) -> None:
        r, w = await raw(port)
        w.write(HELLO.pack(MAGIC, b"n" * 32, handshake.PEER, 0, 0, 0))
        await r.readexactly(REPLY.size)
        w.write(PROOF.pack(b"\0" * 32))  # cannot compute the MAC
        w.write(struct.pack("<IB", 5, 6) + b"abcd")  # a frame that is never read
        assert await closed_within(r, 2.0)
        assert accepted == []
        assert gate.refused["the dialler does not hold this run's secret"] == 1

    asyncio.run(with_server(sec(), body))


def test_a_replayed_handshake_fails() -> None:
    """A recorded HELLO and proof do not open a second connection: the server's nonce is new
    every time, so the old proof does not match."""

    async def body(port: int, gate: Gate, accepted: list) -> None:
        sent: list[bytes] = []
        r, w = await raw(port)
        orig_write = w.write
        w.write = lambda data: (sent.append(bytes(data)), orig_write(data))  # type: ignore
        await handshake.dial(r, w, b"k" * 32, CLAIM, SERVER, 2.0)
        assert len(sent) == 2
        r2, w2 = await raw(port)
        w2.write(sent[0])
        await r2.readexactly(REPLY.size)
        w2.write(sent[1])
        assert await closed_within(r2, 2.0)
        await asyncio.sleep(0.1)
        assert accepted == [CLAIM]  # the real one only
        assert gate.total_refused == 1

    asyncio.run(with_server(sec(), body))


def test_a_reflected_server_mac_is_not_a_proof() -> None:
    async def body(port: int, gate: Gate, accepted: list) -> None:
        r, w = await raw(port)
        w.write(HELLO.pack(MAGIC, b"n" * 32, handshake.PEER, 0, 0, 0))
        reply = await r.readexactly(REPLY.size)
        w.write(reply[-32:])  # the server's own MAC back at it
        assert await closed_within(r, 2.0)
        assert accepted == []

    asyncio.run(with_server(sec(), body))


@pytest.mark.parametrize("first", [b"", b"GET / HTTP/1.1\r\n\r\n", bytes(range(256)) * 4,
                                   struct.pack("<IB", 0xFFFFFFFF, 2) + b"\x80\x05"])
def test_garbage_or_silence_is_closed_within_the_deadline(first: bytes) -> None:
    async def body(port: int, gate: Gate, accepted: list) -> None:
        r, w = await raw(port)
        w.write(first)
        t = asyncio.get_running_loop().time()
        assert await closed_within(r, 3.0)
        assert asyncio.get_running_loop().time() - t < 2.0
        assert accepted == [] and gate.total_refused == 1

    asyncio.run(with_server(sec(), body, timeout=1.0))


def test_a_frame_over_the_limit_closes_the_connection_unread() -> None:
    async def body(port: int, gate: Gate, accepted: list) -> None:
        conn = await connect("127.0.0.1", port, "s", sec(max_frame=1024), CLAIM, SERVER, 5.0)
        conn.writer.write(struct.pack("<IB", 1 << 30, 6))  # says 1 GB: never read
        await asyncio.sleep(0.2)
        assert accepted[0] == CLAIM
        assert isinstance(accepted[1], ConnectionLost) and "limit 1024" in str(accepted[1])

    asyncio.run(with_server(sec(max_frame=1024), body))


def test_a_malformed_frame_after_the_handshake_closes_the_connection() -> None:
    async def body(port: int, gate: Gate, accepted: list) -> None:
        conn = await connect("127.0.0.1", port, "s", sec(), CLAIM, SERVER, 5.0)
        body_ = b"\x80\x04\x95" + b"pickle?"
        conn.writer.write(struct.pack("<IB", 1 + len(body_), 6) + body_)
        await asyncio.sleep(0.2)
        assert isinstance(accepted[1], ConnectionLost) and "malformed" in str(accepted[1])

    asyncio.run(with_server(sec(), body))


def test_unauthenticated_connections_are_bounded() -> None:
    """Beyond ``max_pending`` silent connections, new ones are closed at once; the silent
    ones go at the deadline; then a real peer gets in."""

    async def body(port: int, gate: Gate, accepted: list) -> None:
        idle = [await raw(port) for _ in range(4)]
        await asyncio.sleep(0.1)
        r, _w = await raw(port)
        assert await closed_within(r, 0.5)  # the door is full
        assert gate.refused["too many unauthenticated connections"] == 1
        assert all([await closed_within(ir, 2.0) for ir, _ in idle])
        conn = await connect("127.0.0.1", port, "s", sec(), CLAIM, SERVER, 5.0)
        conn.close()
        assert gate.refused["no handshake within 1s"] == 4

    asyncio.run(with_server(sec(), body, timeout=1.0, max_pending=4))


def test_tls_carries_the_same_handshake() -> None:
    tls = make_security(b"k" * 32, tls=True)

    async def body(port: int, gate: Gate, accepted: list) -> None:
        conn = await connect("127.0.0.1", port, "s", tls, CLAIM, SERVER, 5.0)
        conn.send(cm.Moved(epoch=1))
        await asyncio.sleep(0.2)
        assert accepted == [CLAIM, cm.Moved(epoch=1)]
        with pytest.raises(ConnectionLost):  # a plain-TCP dialler gets nowhere
            await connect("127.0.0.1", port, "s", sec(), CLAIM, SERVER, 1.0)

    asyncio.run(with_server(tls, body))
