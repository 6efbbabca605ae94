"""The driver host's door: every connection a site process opens to the driver, authenticated
(``handshake.py``), sorted by channel and paired. A data connection registers its process
once its control connection has come, and the core's ``Answer`` to it is carried out (the
process kept as its slot's member or as a standby, or stopped); a report connection carries
a site task's failure to start (``start_report.py``); anything else is refused and
counted."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from sparkflux.control.boundary import Answer
from sparkflux.control.events import Registered, SiteAddress
from sparkflux.protocol import control_messages as cm
from sparkflux.runtime import handshake
from sparkflux.runtime.handshake import Claim
from sparkflux.runtime.transport import Connection, ConnectionLost, serve

if TYPE_CHECKING:
    from sparkflux.runtime.driver import Host

# The host's logger: what the door logs keeps the name it always had.
log = logging.getLogger("sparkflux.runtime.driver")
PAIRING_S = 30.0  # how long a data connection and its control connection wait for each other


class Door:
    """Accepts the connections of one run's site processes and hands each registered process
    to ``host`` (its connections, the core's ``Registered``, the frames' pump)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._controls: dict[str, asyncio.Future[Connection]] = {}  # pairing token -> conn
        self._claims: dict[Connection, Claim] = {}  # what each connection authenticated as
        self._registered: dict[str, asyncio.Event] = {}  # pairing token -> data side done

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A new connection: authenticated, then read by the part its channel says."""
        host = self.host
        accepted = await serve(reader, writer, host.gate, host.security)
        if accepted is None:
            return
        conn, claim = accepted
        if claim.channel not in (handshake.DATA, handshake.CONTROL, handshake.REPORT):
            self._refuse(conn, "wrong channel", "the driver takes data, control and report "
                         "connections only")
            return
        msg = await self._first(conn)
        if msg is None:
            return
        if claim.channel == handshake.REPORT:
            self._start_failed(conn, claim, msg)
            return
        if claim.channel == handshake.CONTROL:
            if not isinstance(msg, cm.OpenControl):
                self._refuse(conn, "no valid first frame", f"control connection opened with "
                             f"{type(msg).__name__}")
                return
            self._claims[conn] = claim
            await self._accept_control(conn, msg.token)
            return
        await self._accept_data(conn, claim, msg)

    def tasks_failed(self, failed: int) -> None:
        """Spark counts ``failed`` failed attempts of the site tasks: before the run has
        started, each is a task that could not start (later, they are also killed sites)."""
        host = self.host
        if not host.controller.started:
            verdict = host.start_watch.tasks_failed(failed)
            if verdict is not None:
                host.abort(verdict)

    async def _accept_data(self, conn: Connection, claim: Claim, msg: Any) -> None:
        """A site's data connection: its registration, checked against its handshake and
        paired with its control connection, then its frames until it ends."""
        host = self.host
        if not isinstance(msg, cm.Register) or (msg.site, msg.attempt, msg.site) != (
                claim.site, claim.attempt, claim.registered):
            self._refuse(conn, "registration does not match the handshake",
                         f"data connection of site {claim.site} attempt {claim.attempt} "
                         f"opened with {msg!r}")
            return
        addr = SiteAddress(site=msg.site, attempt=msg.attempt, host=msg.host, port=msg.port,
                           pid=msg.pid, executor=msg.executor, machine=msg.machine)
        conn.peer = f"site {addr.site}"
        # The site opened its control connection before it registered; the two accepts may
        # still run in either order here.
        token = msg.token
        try:
            ctl = await asyncio.wait_for(asyncio.shield(self._control_conn(token)), PAIRING_S)
        except TimeoutError:
            log.warning("site %d registered without a control connection", addr.site)
            conn.close()
            return
        except asyncio.CancelledError:
            conn.close()  # the run is over
            return
        if self._claims.get(ctl) != Claim(handshake.CONTROL, addr.site, addr.attempt,
                                          addr.site):
            self._refuse(conn, "registration does not match the handshake",
                         f"site {addr.site} attempt {addr.attempt} paired with a control "
                         f"connection of another process")
            ctl.close()
            self._registered[token].set()
            return
        ctl.peer = f"site {addr.site} (control)"
        host.control_of[conn], host.data_of[ctl] = ctl, conn
        answer, *actions = host.core.handle(Registered(address=addr, now=time.monotonic()))
        assert isinstance(answer, Answer)  # the core answers a registration first
        if answer.role == "refused":
            assert isinstance(answer.message, cm.Stop)
            host.stop_process(conn, answer.message)
            conn.close()
            ctl.close()
            self._registered[token].set()  # its reader stops: the data side never registered
            return
        host.identity[conn] = (addr.site, addr.attempt, addr.pid)
        self._registered[token].set()
        if answer.role == "standby":
            assert answer.message is not None
            conn.send(answer.message)
            host.standbys.append(conn)
        else:
            host.conns[addr.site] = host.wan_link(conn, addr.site)
        host.actions.carry_out(actions)
        try:
            await host.pump(conn)
        except asyncio.CancelledError:
            conn.close()  # the run is over; the loop is shutting down

    async def _accept_control(self, conn: Connection, token: str) -> None:
        """A site's control connection: read once its data connection has registered."""
        fut = self._control_conn(token)
        if fut.done():
            conn.close()  # a second control connection for one token: not ours
            return
        fut.set_result(conn)
        try:
            try:  # the site registers right after it opened this; it may die in between
                await asyncio.wait_for(self._registered[token].wait(), PAIRING_S)
            except TimeoutError:
                conn.close()
                return
            if self.host.data_of.get(conn) not in self.host.identity:
                conn.close()  # excluded at registration
                return
            await self.host.pump(conn)
        except asyncio.CancelledError:
            conn.close()  # the run is over (possibly before this site registered)

    def _control_conn(self, token: str) -> asyncio.Future[Connection]:
        """The control connection paired by ``token``, as it comes (whichever side asks
        first makes the future)."""
        if token not in self._controls:
            self._controls[token] = asyncio.get_running_loop().create_future()
            self._registered[token] = asyncio.Event()
        return self._controls[token]

    async def _first(self, conn: Connection) -> Any:
        """The first frame of an authenticated connection, within the handshake's deadline
        (None: it sent nothing valid in time; the connection is closed and counted)."""
        try:
            return await asyncio.wait_for(conn.recv_message(self.host.schema_of),
                                          self.host.security.handshake_timeout)
        except (TimeoutError, ConnectionLost) as e:
            self._refuse(conn, "no valid first frame", str(e) or "timed out")
            return None

    def _refuse(self, conn: Connection, reason: str, detail: str) -> None:
        """Close an authenticated connection that broke the rules, counted by ``reason``."""
        log.warning("refused a connection (%s): %s", conn.peer, detail)
        self.host.gate.refuse(reason, conn.writer)
        conn.close()

    def _start_failed(self, conn: Connection, claim: Claim, msg: Any) -> None:
        """A site task's report that it failed before it registered (its connection's only
        frame); the connection closes once it is counted."""
        if not isinstance(msg, cm.StartFailed) or (msg.site, msg.attempt) != (
                claim.site, claim.attempt):
            self._refuse(conn, "report does not match the handshake",
                         f"report connection of site {claim.site} attempt {claim.attempt} "
                         f"sent {type(msg).__name__}")
            return
        conn.close()
        watch = self.host.start_watch
        if not watch.reports:  # the first one in full: the rest repeat it, mostly
            log.warning("site %d attempt %d failed before it registered:\n%s", msg.site,
                        msg.attempt, msg.traceback)
        verdict = watch.reported(msg)
        if verdict is not None:
            self.host.abort(verdict)
