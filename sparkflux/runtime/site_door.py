"""The site host's door: its links to its peers, both ways. An incoming connection is
authenticated (``handshake.py``), then kept only if the site's core admits the slot and
incarnation it claims (``SiteBoundary.admissible``, which lets it wait a while for news of a
member it does not know yet); a ``Dial`` of the core is carried out in a task of its own, never on a
reader, and a peer it cannot reach goes back to the core (``DialFailed``). Every link that
comes up, dialled or accepted, is offered to the core (``PeerLinked``), which may reject it
as stale."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from sparkflux.protocol.site_boundary import (
    CLAIM_WAIT_S,
    Dial,
    DialFailed,
    PeerLinked,
    Reject,
    Verdict,
)
from sparkflux.runtime import handshake
from sparkflux.runtime.handshake import Claim
from sparkflux.runtime.transport import Connection, ConnectionLost, connect, serve

if TYPE_CHECKING:
    from sparkflux.runtime.site import Site

# The host's logger: what the door logs keeps the name it always had.
log = logging.getLogger("sparkflux.runtime.site")
DIAL_TIMEOUT_S = 10.0  # a peer not reached within this is reported as unreachable
# ``CLAIM_WAIT_S`` (the core's default): how long a link may wait for news of the incarnation
# it claims; ``Site`` gives its core the value found here.
__all__ = ["CLAIM_WAIT_S", "DIAL_TIMEOUT_S", "Door"]
CLAIM_POLL_S = 0.1  # a waiting link is asked about again at least this often


class Door:
    """The peer links of ``host``: ``accept`` is its server's callback, ``dial`` carries out
    the core's ``Dial``; ``known`` is set whenever the core may know more members."""

    def __init__(self, host: Site) -> None:
        self.host = host
        self.known = asyncio.Event()  # set whenever the boundary may know more members
        self._dials: dict[int, asyncio.Task[None]] = {}  # slot -> the dial in progress

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A new connection: authenticated, admitted by the core (or refused and counted),
        then read by the host: a peer's data link, or its StateMover's connection."""
        host = self.host
        accepted = await serve(reader, writer, host.gate, host.cfg.security)
        if accepted is None:
            return
        conn, claim = accepted
        j = claim.site
        why = (await self._admissible(claim) if claim.channel in (handshake.PEER,
                                                                  handshake.STATE)
               else ("wrong channel", "sites accept only peer and state connections"))
        if why is not None:
            log.warning("site %d refused a %s connection: %s", host.id,
                        handshake.CHANNELS[claim.channel], why[1])
            host.gate.refuse(why[0], writer)
            return
        if claim.channel == handshake.STATE:  # the StateMover's connection: state only
            conn.peer = f"state mover of site {j}"
            host.state_in.setdefault(j, []).append(conn)
            try:
                await host.pump(conn, j, side=True)
            except asyncio.CancelledError:
                conn.close()
            return
        conn.peer = f"site {j}"
        if not self.offer(j, conn, claim.process, dialed=False):
            return
        try:
            await host.pump(conn, j)
        except asyncio.CancelledError:
            conn.close()

    async def _admissible(self, claim: Claim) -> tuple[str, str] | None:
        """Why a link that authenticated with ``claim`` must still be refused, or None: the
        boundary decides, asked again whenever it may know more (and at least every
        ``CLAIM_POLL_S``) with how long the link has waited, until it admits or refuses.
        Returns (what is counted, detail)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            verdict = self.host.boundary.admissible(claim.site, claim.process,
                                                    peer=claim.channel == handshake.PEER,
                                                    waited=loop.time() - start)
            if verdict is Verdict.ADMIT:
                return None
            if isinstance(verdict, tuple):
                return verdict
            self.known.clear()
            try:
                await asyncio.wait_for(self.known.wait(), CLAIM_POLL_S)
            except TimeoutError:
                pass

    def offer(self, j: int, conn: Connection, process: tuple[int, int], dialed: bool) -> bool:
        """A peer link is up: keep it unless the boundary finds it stale."""
        host = self.host
        actions = host.boundary.handle(PeerLinked(site=j, process=process, dialed=dialed))
        if any(isinstance(a, Reject) for a in actions):
            conn.close()
            return False
        host.peers[j] = host.wan_link(conn, j)
        host.actions.carry_out(actions)
        return True

    def dial(self, d: Dial) -> None:
        """The core's ``Dial``: a dial to the same slot still in progress gives way."""
        self.cancel_dial(d.site)
        self._dials[d.site] = self.host.spawn(self._dial_peer(d))

    def cancel_dial(self, slot: int) -> None:
        """The dial to ``slot`` in progress, if any, given up."""
        task = self._dials.pop(slot, None)
        if task is not None:
            task.cancel()

    async def _dial_peer(self, d: Dial) -> None:
        """Connect to slot ``d.site``'s current process in a task of its own, never on a
        reader: a peer that cannot be reached within ``DIAL_TIMEOUT_S`` goes to the
        boundary, which reports it as a suspected failure to the controller (which
        decides, and tells everybody with ``fail``)."""
        host = self.host
        try:
            conn = await connect(d.host, d.port, f"site {d.site}", host.cfg.security,
                                 host.claim(handshake.PEER), d.process, DIAL_TIMEOUT_S)
        except ConnectionLost as e:
            actions = host.boundary.handle(DialFailed(site=d.site, process=d.process,
                                                      reason=str(e)))
            if actions:
                log.warning("site %d: %s", host.id, e)
            host.actions.carry_out(actions)
            return
        if self.offer(d.site, conn, d.process, dialed=True):
            host.spawn(host.pump(conn, d.site))
