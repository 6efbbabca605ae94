"""A site: one long-lived Python process (one Spark task) running its mini-partition replicas.

Life of a site: open a data server, open a control connection to the driver (the
controller's ``move``, ``fail``, ``avail``, ``slow``, ``kill``, ``stop`` and ``cu-start``; the
site's heartbeats, ``moved`` and reports), register over a second connection to it (which
carries the ingress's and egress's traffic, and the set-up: view, standby, adopt), then read
every connection into events for the site's sans-I/O core (``protocol/site_boundary.py``:
when the site is ready, whom it dials, what a ``fail``, ``move`` or ``avail`` means, which
incoming link it admits, when it stops) and carry out the actions it returns.

The host (``Site``) holds no protocol decision. It holds the site's connections and the
readers that turn their frames into the core's events, the scheduler's passes
(``scheduler.py``, with the ``--site-cpu`` budget), the DTSB (``outbox.py``), the StateMover
(``state_mover.py``) and the site's own life (stopped, failed, an error reported and the
linger after it); its parts do the rest, each a module of its own: the door that accepts,
admits and dials the peer links (``site_door.py``), the core's actions carried out
(``site_actions.py``), and the clocks, the heartbeat and the link check (``site_watch.py``).
Every connection, in or out, is authenticated with the run's secret and bound to the slot
and incarnation it claims (``handshake.py``) before the core is asked whether to keep it. An
invariant violation or operator error is reported to the controller and stops the site.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkflux.control.checkpoints import part_name
from sparkflux.dataflow.placement import DRIVER, Layout
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.messages import Ack, Data, Echo, Keepalive, Probe, StoredPartition
from sparkflux.protocol.site import SiteCore, wire_schema
from sparkflux.protocol.site_boundary import (
    LINK_TIMEOUT_S,
    DriverLost,
    Echoed,
    Frames,
    FromDriver,
    Loaded,
    MemoryCheck,
    PeerLost,
    Probed,
    SiteBoundary,
    SiteBoundaryEvent,
    StateSent,
    from_link,
)
from sparkflux.runtime import failure_domain, handshake, site_door, trace
from sparkflux.runtime.handshake import Claim, Gate
from sparkflux.runtime.outbox import Outbox, rows_of
from sparkflux.runtime.scheduler import (
    PASS_S,
    PASS_TENTATIVE_S,
    RESEND_S,
    PassBudget,
    Scheduler,
    batch_delay,
)
from sparkflux.runtime.security import Security
from sparkflux.runtime.site_actions import Actions
from sparkflux.runtime.site_door import Door
from sparkflux.runtime.site_watch import Watch
from sparkflux.runtime.snapshots import SnapshotStore
from sparkflux.runtime.state_mover import StateMover
from sparkflux.runtime.transport import (
    Connection,
    ConnectionLost,
    bytes_sent_total,
    connect,
    start_server,
)
from sparkflux.runtime.wan import LinkDelay, WanModel

log = logging.getLogger(__name__)
# what other modules import from here (``LINK_TIMEOUT_S``: the core's, the options' default)
__all__ = ["LINK_TIMEOUT_S", "Site", "SiteConfig", "run_site", "schemas_of"]
SITE_POOL_ROWS = 2_000_000  # a site's DTSB pool; beyond it frames are written (see Outbox)
GATHER_UNCAPPED_S = 0.01  # how long the scheduler lets input gather before a pass, at most,
GATHER_ROWS = 8192  # ... or until this many rows wait
# Under --site-cpu: at least GATHER_S, and long enough that a pass is worth GATHER_CPU_S of
# the site's CPU budget (GATHER_CPU_S / cap), or until GATHER_ROWS_CAPPED rows wait: a pass
# has a fixed cost whatever it carries, and it must stay a small part of a capped site's
# budget, or its utilisation measures overhead, not load (docs/availability.md: "Scheduling").
GATHER_S = 0.05
GATHER_CPU_S = 0.012
GATHER_ROWS_CAPPED = 2 * 8192
LINGER_S = 10.0  # after an error report, the longest a site waits for the driver to close


@dataclass(frozen=True)
class SiteConfig:
    """What a site task is started with: its slot and Spark attempt, where the driver
    listens, where the site listens and is reached, the run's security and replicas, and
    the timing options that reach the site (heartbeats, ``--site-cpu``, ``--link-timeout``)."""

    site: int
    attempt: int
    controller_host: str
    controller_port: int
    bind_host: str
    advertise_host: str
    security: Security
    replicas: int = 1
    race: bool = False  # --ha race: every copy feeds every copy (``protocol/roles.py``)
    wan: WanModel | None = None  # --wan: the links' model, and the run's start (its clock)
    wan_start: float = 0.0
    # Heartbeats carry the load counters too: the driver answers the policy's collect from
    # the first one after it, so a round waits at most this long for each sample.
    heartbeat_interval: float = 0.1
    cpu_cap: float | None = None  # --site-cpu: busy at most this fraction of wall time
    link_timeout: float = LINK_TIMEOUT_S  # --link-timeout: a peer link silent this long
    checkpoint: str | None = None  # --checkpoint: the snapshot store's URI (parts go there)
    restore: int = -1  # the checkpoint the site's first view starts from (-1: none)
    memory: int | None = None  # --site-memory: the budget in bytes (``protocol/memory.py``)
    max_batch_delay: float | None = None  # --max-batch-delay (ms): caps the gathering

    def gather_s(self, cap: float) -> float:
        """How long the scheduler lets input gather at capacity ``cap`` (the current one:
        ``--slow`` changes it): long enough under a capacity cap that a pass's fixed cost is
        a small part of the budget and utilisation measures load, not per-pass overhead;
        short otherwise (latency); never above ``--max-batch-delay``."""
        own = max(GATHER_S, GATHER_CPU_S / cap) if self.cpu_cap else GATHER_UNCAPPED_S
        return batch_delay(own, self.max_batch_delay)

    @property
    def gather_rows(self) -> int:
        """How many rows waiting start a pass before the gathering time is up."""
        return GATHER_ROWS_CAPPED if self.cpu_cap else GATHER_ROWS

    @property
    def inbox_rows(self) -> int:
        """How many rows the inbox takes before the readers wait (two passes' worth)."""
        return 2 * self.gather_rows


def schemas_of(plan: PhysicalPlan) -> dict[int, pa.Schema]:
    """Wire schema of every exchange's DATA frames, by consumer stage (egress = n stages)."""
    out = {s.index: wire_schema(s.input_schema) for s in plan.stages}
    out[len(plan.stages)] = wire_schema(plan.output_schema)
    return out


class Site:
    """The event loop of one site: reads its connections into ``SiteBoundary`` events and
    carries out the actions it returns, with its parts (``door``, ``actions``, ``watch``)."""

    def __init__(self, cfg: SiteConfig, plan: PhysicalPlan,
                 on_registered: Callable[[], None] | None = None) -> None:
        self.cfg = cfg
        # Called once the registration is sent: from then on an error is the site's own
        # (``SiteError``), before it a start failure (``runtime/start_report.py``).
        self.on_registered = on_registered
        self.plan = plan
        self.boundary = SiteBoundary(cfg.site, cfg.attempt, plan,
                                     Layout(plan.sites, plan.partitions, cfg.replicas,
                                            race=cfg.race),
                                     cfg.link_timeout, site_door.CLAIM_WAIT_S,
                                     budget=cfg.memory)
        self.schema_of = schemas_of(plan)
        # this process may have hosted a site before (Spark reuses its Python workers)
        self.sent_at_start = bytes_sent_total()
        self.peers: dict[int, Connection] = {}
        self.driver: Connection | None = None  # data (and set-up) connection to the driver
        self.control: Connection | None = None  # the controller's: never behind data
        self._stop = asyncio.Event()
        self.scheduler = Scheduler(cfg.gather_s, cfg.gather_rows, cfg.inbox_rows, cfg.cpu_cap)
        self.outbox = Outbox(self._conn_of, SITE_POOL_ROWS)
        self.error: str | None = None
        self._reported = False  # an error went to the driver: linger until it has read it
        self._driver_gone = asyncio.Event()  # the driver closed its control connection
        self.excluded: str | None = None
        self.mover = StateMover(cfg.security, lambda: self.claim(handshake.STATE),
                                self.spawn, site_door.DIAL_TIMEOUT_S,
                                lambda stage, q, nbytes, move_s: self.handle(StateSent(
                                    stage=stage, q=q, nbytes=nbytes, move_s=move_s)))
        self.state_in: dict[int, list[Connection]] = {}  # peers' StateMover connections here
        self.gate = Gate(cfg.security.secret, lambda: (cfg.site, cfg.attempt),
                         cfg.security.handshake_timeout, cfg.security.max_pending)
        self._tasks: set[asyncio.Task[Any]] = set()  # asyncio keeps only weak references
        self.actions = Actions(self)  # the boundary's actions carried out
        self.door = Door(self)  # the peer links: accepted, admitted, dialled, offered
        self.watch = Watch(self)  # the heartbeat and the link check
        self.store: SnapshotStore | None = None  # the checkpoints' store, opened at first use
        # spilled partitions (``protocol/memory.py``): a directory of this process's own under
        # the executor's local directories, opened at the first spill, removed at the end
        self.spill_store: SnapshotStore | None = None
        # A restart from a checkpoint: the first view's partitions start from their parts,
        # read on a thread (the loop keeps heartbeating) before the first pass.
        self.restored = asyncio.Event()
        self._restoring = cfg.restore >= 0
        self.memory_pause_s = 0.0  # the longest step that spilled or loaded a partition
        if not self._restoring:
            self.restored.set()

    @property
    def id(self) -> int:
        """The slot this site holds (an adoption changes it)."""
        return self.boundary.site

    @property
    def core(self) -> SiteCore | None:
        """The site's protocol core, once a view or an adoption has given it one."""
        return self.boundary.core

    def wan_link(self, conn: Connection, dst: int) -> Connection:
        """``--wan``: the frames this site writes to ``dst`` (a slot, or the driver) wait for
        the link's latency and outages (``runtime/wan.py``)."""
        if self.cfg.wan is not None:
            conn.delay = LinkDelay(self.cfg.wan, lambda: self.id, dst, self.cfg.wan_start)
        return conn

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """``coro`` as a task of the site's, kept until it ends."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def claim(self, channel: int) -> Claim:
        """What this site claims to be on a connection it opens on ``channel``."""
        return Claim(channel, self.id, self.cfg.attempt, self.cfg.site)

    # -- set-up ------------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        """Listen, connect to the driver and register, then run the readers, the clocks and
        the scheduler's passes until the site stops; its summary, or its error raised."""
        sec = self.cfg.security
        server = await start_server(self.door.accept, self.cfg.bind_host, sec)
        port = server.sockets[0].getsockname()[1]
        # Two connections to the driver: control frames on their own, so that a ``move`` or
        # ``fail`` is read at once even while this site has input queued that it has not read
        # (the pump stops reading the data connection while the inbox is full). The token
        # pairs them in the driver.
        token = secrets.token_hex(8)
        host, cport = self.cfg.controller_host, self.cfg.controller_port
        driver = (DRIVER, 0)
        self.control = self.wan_link(await connect(host, cport, "driver (control)", sec,
                                                   self.claim(handshake.CONTROL), driver),
                                     DRIVER)
        self.control.send(cm.OpenControl(token=token))
        self.driver = self.wan_link(await connect(host, cport, "driver", sec,
                                                  self.claim(handshake.DATA), driver), DRIVER)
        domain = failure_domain.of_this_process()
        self.driver.send(cm.Register(site=self.id, attempt=self.cfg.attempt,
                                     host=self.cfg.advertise_host, port=port, pid=os.getpid(),
                                     token=token, executor=domain.executor,
                                     machine=domain.host))
        if self.on_registered is not None:
            self.on_registered()
        tasks = [asyncio.create_task(self.pump(self.driver, DRIVER)),
                 asyncio.create_task(self.pump(self.control, DRIVER, control=True)),
                 asyncio.create_task(self.watch.heartbeat()),
                 asyncio.create_task(self._flusher()),
                 asyncio.create_task(self.watch.links()),
                 asyncio.create_task(self._process())]
        try:
            await self._stop.wait()
            if self._reported:
                await self._linger()
        finally:
            for t in tasks:
                t.cancel()
            for c in [*self.peers.values(), self.driver, self.control]:
                c.close()
            server.close()
            if trace.TRACE is not None:
                trace.TRACE.write()
            if self.store is not None:
                self.store.close()  # the parts being written finish: none is left half written
            if self.spill_store is not None:
                self.spill_store.close()
                shutil.rmtree(self.spill_store.root, ignore_errors=True)
        if self.error:
            raise RuntimeError(self.error)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """What the site task returns to Spark: who it was, its role, its busy time, the
        connections it refused and the rows its consumers took."""
        core = self.core
        return {
            "site": self.id, "attempt": self.cfg.attempt, "pid": os.getpid(),
            "role": self.boundary.role, "excluded": self.excluded,
            "busy_s": round(self.scheduler.busy_s, 3), "refused": dict(self.gate.refused),
            "rows_in": [c.rows_in for c in core.cons] if core else [],
        }

    def memory_step(self, ev: MemoryCheck | Loaded) -> None:
        """``handle`` of a memory check or a load, timed when a partition's state left or
        came back in it: that long the site's other partitions waited
        (``memory_pause_s``, the longest such step)."""
        m = self.core.memory if self.core is not None else None
        before = (m.spills, m.loads) if m is not None else None
        t = time.monotonic()
        self.handle(ev)
        if m is not None and (isinstance(ev, Loaded) or (m.spills, m.loads) != before):
            self.memory_pause_s = max(self.memory_pause_s, time.monotonic() - t)

    def handle(self, *events: SiteBoundaryEvent) -> None:
        """One step of the site's core, carried out."""
        self.actions.carry_out(self.boundary.handle(*events))
        if self._restoring and self.core is not None:
            self._restoring = False
            if self.boundary.adopted:  # a standby adopting a slot is caught up instead
                self.restored.set()
            else:
                self.spawn(self._restore(self.core))

    async def _restore(self, core: SiteCore) -> None:
        """The parts of checkpoint ``cfg.restore`` for every partition replica this site
        hosts, read from the store on a thread, installed in the core before its first pass
        (a part that cannot be read stops the site, and so the run, with the cause)."""
        assert self.cfg.checkpoint is not None
        k = self.cfg.restore
        wanted = [(s, int(q)) for s, cons in enumerate(core.cons)
                  for q in cons.parts[cons.installed]]
        if self.store is None:
            self.store = SnapshotStore(self.cfg.checkpoint)
        store = self.store

        def read() -> dict[tuple[int, int], StoredPartition]:
            return {(s, q): store.get(part_name(k, s, q)) for s, q in wanted}

        try:
            parts = await asyncio.to_thread(read)
            core.restore(parts)
        except Exception as e:  # noqa: BLE001 - the run stops with the cause
            self.report_error(f"site {self.id} could not restore checkpoint {k}: "
                              f"{type(e).__name__}: {e}")
            return
        self.restored.set()

    # -- the loop ----------------------------------------------------------------------------
    async def pump(self, conn: Connection, peer: int, control: bool = False,
                   side: bool = False) -> None:
        """Read one connection: control frames are handled at once, protocol frames queue
        in the inbox (bounded, so a site that falls behind stops reading and its senders'
        skew buffers hold the rest). Not bounded: the driver's ``control`` connection (its
        few protocol frames, ``cu-start``, must not wait for room) and a peer's StateMover
        connection (``side``: snapshots and ``installed`` only)."""
        bounded = not (control or side)
        watched = bounded and peer != DRIVER  # a peer's link: its silence is measured
        reading = self.watch.reading
        try:
            while True:
                if watched:
                    reading[conn] = time.monotonic()
                msg = await conn.recv_message(self.schema_of)
                if watched:
                    reading.pop(conn, None)
                    if isinstance(msg, Keepalive):
                        continue
                if isinstance(msg, (Probe, Echo)) and not side:
                    # latency probes are answered and timed here, not behind the inbox
                    self.handle(Probed(peer=peer, sent=msg.sent) if isinstance(msg, Probe)
                                else Echoed(peer=peer, sent=msg.sent, now=time.monotonic()))
                    continue
                try:
                    item = from_link(peer, msg, state_link=side)
                except ProtocolError as e:
                    if side:
                        raise
                    raise ConnectionLost(f"{e}: protocol error") from e
                if isinstance(item, FromDriver):
                    self.handle(item)
                    continue
                # take-over and catch-up frames start a pass at once: no gathering
                await self.scheduler.put(item, rows_of(msg),
                                         urgent=not isinstance(msg, (Data, Ack)),
                                         bounded=bounded)
        except ConnectionLost as e:
            conn.close()
            if peer == DRIVER and control:
                self._driver_gone.set()
            if peer == DRIVER:
                self.handle(DriverLost(reason=str(e)))
            elif not side and self.peers.get(peer) is conn:
                log.info("site %d: %s", self.id, e)
                self.peers.pop(peer, None)
                self.handle(PeerLost(site=peer, reason=str(e)))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - any bug stops the site, with its report
            self.report_error(traceback.format_exc())
        finally:
            reading.pop(conn, None)

    async def _process(self) -> None:
        """The scheduler's passes: the core takes every frame queued (``scheduler.py``)."""
        budget = PassBudget()

        def one_pass(items: list[tuple[int, Any]]) -> bool:
            core = self.core
            before = int(core.processed.sum()) if core is not None else 0
            if core is not None:
                core.pass_rows = budget.rows(
                    PASS_TENTATIVE_S if core.tentative_open else PASS_S)
            if trace.TRACE is not None:
                for _, msg in items:
                    if isinstance(msg, Data):
                        trace.TRACE.note("pass", msg.stage, msg.batch)
            t = time.thread_time()
            self.handle(Frames(items))
            self.outbox.flush()
            core = self.core
            if core is None:
                return False
            budget.observe(time.thread_time() - t, int(core.processed.sum()) - before)
            return bool(core.backlog) and not core.stopped

        try:
            await self.restored.wait()
            await self.scheduler.run(one_pass)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - any bug stops the site, with its report
            self.report_error(traceback.format_exc())

    def _conn_of(self, site: int) -> Connection | None:
        """The DTSB's connection toward ``site`` (the driver's data connection, or a peer's
        link), None while there is none."""
        return self.driver if site == DRIVER else self.peers.get(site)

    async def _flusher(self) -> None:
        """Hand held frames to connections that drained (the DTSB's release)."""
        await self.outbox.pump(batch_delay(RESEND_S, self.cfg.max_batch_delay))

    async def _linger(self) -> None:
        """After an error report: keep the connections open until the driver, which stops
        the run on it, closes them (at most ``LINGER_S``). Closed at once, the driver could
        see the data connection drop before it read the report on the control connection,
        and a connection torn down with unread bytes is reset, which discards what it
        still held for the driver: the run would stop as "connection lost", its cause only
        in Spark's log."""
        for conn in (self.control, self.driver):
            if conn is not None:
                try:
                    await conn.drain()
                except ConnectionLost:
                    pass
        try:
            await asyncio.wait_for(self._driver_gone.wait(), LINGER_S)
        except TimeoutError:
            log.warning("site %d: the driver did not close after its error report within "
                        "%.0f s", self.id, LINGER_S)

    def stop(self, reason: str, how: str) -> None:
        """The boundary's ``Stop``: the site stops, failed with ``reason`` if ``how`` is
        ``error`` (unless it is stopping already: it keeps the error it stopped on)."""
        if how == "error":
            if not self._stop.is_set():  # keep the error it stopped on
                self.fail(reason)
        else:
            # excluded: not an error of this task, Spark must not retry it
            self.excluded = reason if how == "excluded" else self.excluded
            self._stop.set()

    def report_error(self, tb: str) -> None:
        """An invariant violation or a bug (``tb``): reported to the controller on the
        control connection (the data connection if there is none yet), and the site stops;
        ``run`` lingers until the driver has read the report."""
        self.error = f"site {self.id} failed:\n{tb}"
        try:
            conn = self.control or self.driver
            if conn is not None:
                conn.send(cm.SiteError(site=self.id, attempt=self.cfg.attempt, error=tb))
                self._reported = True
        except ConnectionLost:
            pass
        self._stop.set()

    def fail(self, reason: str) -> None:
        """The site stops, failed with ``reason`` (``run`` raises it)."""
        self.error = f"site {self.id}: {reason}"
        self._stop.set()


def run_site(cfg: SiteConfig, plan: PhysicalPlan,
             on_registered: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run a site to completion in a fresh event loop (the body of a Spark site task);
    ``on_registered``: called once the site has sent its registration."""
    logging.basicConfig(level=logging.WARNING)
    prof_dir = os.environ.get("SPARKFLUX_PROFILE")  # developers: where sites write cProfile
    if not prof_dir:
        return asyncio.run(Site(cfg, plan, on_registered).run())
    import cProfile

    with cProfile.Profile() as prof:
        try:
            return asyncio.run(Site(cfg, plan, on_registered).run())
        finally:
            prof.dump_stats(os.path.join(prof_dir, f"site-{cfg.site}-{cfg.attempt}.prof"))
