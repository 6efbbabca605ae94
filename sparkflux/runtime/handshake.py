"""The mutual challenge-response that opens every connection of a run.

Before either side decodes a frame, both prove that they hold the run's secret, and the dialler
binds its claim (which channel, which site slot, which incarnation) into the proof, so a peer
cannot later pretend to be another site or another incarnation of its own slot:

1. dialler -> server ``HELLO``: magic, a fresh 32-byte nonce ``nc``, the claim
   ``(channel, site, attempt, registered)``;
2. server -> dialler ``REPLY``: a fresh nonce ``ns``, the server process's identity
   ``(site, attempt)``, and ``HMAC(secret, "S" | HELLO | ns | identity)``;
3. dialler -> server ``PROOF``: ``HMAC(secret, "C" | HELLO | ns | identity)``.

Each side checks the other's MAC in constant time. A replayed HELLO/PROOF fails (the server's
nonce is new on every connection), a reflected MAC fails (the two directions are labelled),
and a dialler that reached the wrong process (an old incarnation still holding a port) sees
the server's identity in a MAC it cannot forge. The server gives a dialler
``HANDSHAKE_TIMEOUT_S`` to finish and holds at most ``MAX_PENDING`` unauthenticated
connections; what fails any of this is closed and counted, never decoded.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

MAGIC = b"SPRKFLX1"
HELLO = struct.Struct("<8s32sBiii")
REPLY = struct.Struct("<32sii32s")
PROOF = struct.Struct("<32s")

# channels: what a connection is for, bound into the claim
DATA = 1  # a site's data connection to the driver
CONTROL = 2  # a site's control connection to the driver
PEER = 3  # the dataflow link between two sites
STATE = 4  # a StateMover connection between two sites
REPORT = 5  # a site task's one report to the driver that it failed before it registered
CHANNELS = {DATA: "data", CONTROL: "control", PEER: "peer", STATE: "state", REPORT: "report"}


class HandshakeFailed(Exception):
    """The peer did not prove it holds the run's secret, or is not who it should be."""


@dataclass(frozen=True, slots=True)
class Claim:
    """What the dialler says it is: a connection of kind ``channel`` from the process that
    holds site slot ``site``, Spark attempt ``attempt`` of the task for slot ``registered`` (a
    spare's differs from the slot it adopted: the pair names one process)."""

    channel: int
    site: int
    attempt: int
    registered: int

    @property
    def process(self) -> tuple[int, int]:
        return self.registered, self.attempt


def _mac(secret: bytes, label: bytes, hello: bytes, reply_head: bytes) -> bytes:
    return hmac.new(secret, label + hello + reply_head, hashlib.sha256).digest()


async def dial(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes,
               claim: Claim, expect: tuple[int, int] | None, timeout: float
               ) -> tuple[int, int]:
    """The dialler's side; returns the server's identity (site, attempt). ``expect``: the
    identity the dialler meant to reach (None: any, e.g. the driver)."""
    hello = HELLO.pack(MAGIC, secrets.token_bytes(32), claim.channel, claim.site,
                       claim.attempt, claim.registered)
    writer.write(hello)
    try:
        raw = await asyncio.wait_for(reader.readexactly(REPLY.size), timeout)
    except asyncio.IncompleteReadError as e:
        raise ConnectionResetError("the server closed the connection during the handshake"
                                   ) from e
    ns, site, attempt, mac = REPLY.unpack(raw)
    head = raw[: REPLY.size - 32]
    if not hmac.compare_digest(mac, _mac(secret, b"S", hello, head)):
        raise HandshakeFailed("the server does not hold this run's secret")
    if expect is not None and (site, attempt) != expect:
        raise HandshakeFailed(f"reached site {site} attempt {attempt}, expected site "
                              f"{expect[0]} attempt {expect[1]}")
    writer.write(PROOF.pack(_mac(secret, b"C", hello, head)))
    await writer.drain()
    return site, attempt


async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes,
                 me: tuple[int, int], timeout: float) -> Claim:
    """The server's side; returns the dialler's authenticated claim."""

    async def run() -> Claim:
        hello = await reader.readexactly(HELLO.size)
        magic, _nc, channel, site, attempt, registered = HELLO.unpack(hello)
        if magic != MAGIC or channel not in CHANNELS:
            raise HandshakeFailed("not a sparkflux handshake")
        head = struct.pack("<32sii", secrets.token_bytes(32), me[0], me[1])
        writer.write(head + _mac(secret, b"S", hello, head))
        await writer.drain()
        (proof,) = PROOF.unpack(await reader.readexactly(PROOF.size))
        if not hmac.compare_digest(proof, _mac(secret, b"C", hello, head)):
            raise HandshakeFailed("the dialler does not hold this run's secret")
        return Claim(channel, site, attempt, registered)

    try:
        return await asyncio.wait_for(run(), timeout)
    except TimeoutError as e:
        raise HandshakeFailed(f"no handshake within {timeout:.0f}s") from e
    except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
        raise HandshakeFailed(f"connection closed during the handshake ({e!r})") from e


class Gate:
    """A server's door: at most ``max_pending`` connections in their handshake at once, each
    closed unless it authenticates in time; refusals counted by reason (the run's metrics)."""

    def __init__(self, secret: bytes, me: Callable[[], tuple[int, int]], timeout: float,
                 max_pending: int) -> None:
        self.secret = secret
        self.me = me
        self.timeout = timeout
        self.max_pending = max_pending
        self.pending = 0
        self.refused: Counter[str] = Counter()

    def refuse(self, reason: str, writer: asyncio.StreamWriter) -> None:
        self.refused[reason] += 1
        try:
            writer.close()
        except Exception:  # noqa: BLE001, S110 - closing a dead socket may fail any way
            pass

    async def admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                    ) -> Claim | None:
        """The dialler's claim once it has authenticated, or None (closed and counted)."""
        if self.pending >= self.max_pending:
            self.refuse("too many unauthenticated connections", writer)
            return None
        self.pending += 1
        try:
            return await accept(reader, writer, self.secret, self.me(), self.timeout)
        except HandshakeFailed as e:
            reason = str(e).split(" (")[0]
            self.refuse(reason, writer)
            return None
        finally:
            self.pending -= 1

    @property
    def total_refused(self) -> int:
        return sum(self.refused.values())
