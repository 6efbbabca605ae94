"""The driver-side host: the driver core (``control/boundary.py``'s ``Boundary``: controller,
ingress and egress) around one asyncio loop, carrying out its actions and feeding it events.

``Host`` runs in a background thread (``spark/job.py`` starts it and the sites' Spark job). It
holds the run's state and records (what ``reports.py`` makes the metrics of), the site
processes' connections and the loop's life; its parts do the rest, each a module of its own:
the door that accepts and authenticates connections (``driver_door.py``), the input
(``driver_feed.py``), the core's actions carried out (``driver_actions.py``), the clock and
the watchdog (``driver_watch.py``), and the faults the options inject (``faults.py``). Any
site failure under ``--ha none`` aborts the run with a ``RunFailed`` that says what happened.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pyarrow as pa

from sparkflux.control.boundary import StartTimes, boundary_for, event_of
from sparkflux.control.controller import Controller, ControlOptions
from sparkflux.control.events import ConnectionClosed, Rescale, RescaleRefused
from sparkflux.control.policy import PolicyConfig
from sparkflux.control.start_failures import StartWatch
from sparkflux.control.watchdog import InputState
from sparkflux.dataflow.api import POLL_S
from sparkflux.dataflow.placement import DRIVER as DRIVER_ID
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.io.sinks import DeadLetters, NullSink, Sink
from sparkflux.io.tentative_output import TentativeOutput, op_schema
from sparkflux.model.digest import Digest
from sparkflux.model.rows_digest import RowsDigest
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.egress import Egress
from sparkflux.protocol.ingress import Ingress
from sparkflux.protocol.messages import CuStart
from sparkflux.runtime.causes import cause, sink_failure
from sparkflux.runtime.dashboard import Dashboard
from sparkflux.runtime.driver_actions import Actions
from sparkflux.runtime.driver_checkpoints import Checkpointing
from sparkflux.runtime.driver_door import Door
from sparkflux.runtime.driver_feed import INGRESS_POOL_ROWS, Feed
from sparkflux.runtime.driver_inbox import Inbox
from sparkflux.runtime.driver_watch import Watch
from sparkflux.runtime.faults import Faults
from sparkflux.runtime.handshake import Gate
from sparkflux.runtime.metrics import EgressMetrics
from sparkflux.runtime.outbox import Outbox
from sparkflux.runtime.pacing import total
from sparkflux.runtime.progress_log import ProgressLog
from sparkflux.runtime.restore import Restored
from sparkflux.runtime.run_config import LiveStats, RunConfig, RunFailed
from sparkflux.runtime.scheduler import RESEND_S, batch_delay
from sparkflux.runtime.security import make_security
from sparkflux.runtime.site import schemas_of
from sparkflux.runtime.site_load import site_load
from sparkflux.runtime.snapshots import SnapshotStore
from sparkflux.runtime.transport import Connection, ConnectionLost, bytes_sent_total, start_server
from sparkflux.runtime.wan import DRIVER_NODE, LinkDelay

log = logging.getLogger(__name__)
STOP_DRAIN_S = 5.0  # at the run's end, how long the ``stop`` frames may take to leave, in all
__all__ = ["INGRESS_POOL_ROWS", "Host", "site_load"]  # what other modules import from here
T = TypeVar("T")


class Host:
    """The driver side of one run: its core, its state and records, the site processes'
    connections, and the parts that carry out the core's actions (``door``, ``feed``,
    ``actions``, ``watch``, ``faults``), all on one asyncio loop."""

    def __init__(self, plan: PhysicalPlan, cfg: RunConfig, sink: Sink | None,
                 dead_letters: DeadLetters,
                 announce: Callable[[str], None] | None = None,
                 opened: list[Sink] | None = None, restored: Restored | None = None) -> None:
        self.plan = plan
        self.cfg = cfg
        self.announce = announce or log.info  # the run's milestones, for the user
        self.security = cfg.security or make_security(secrets.token_bytes(32))
        self.gate = Gate(self.security.secret, lambda: (DRIVER_ID, 0),
                         self.security.handshake_timeout, self.security.max_pending)
        # ``opened``: the sinks launch opened before Spark started (``open_sinks``)
        self.sinks = opened if opened is not None else sinks_of(plan, sink)
        self._sinks_open = opened is not None
        self.sink = self.sinks[0]
        # --consistency eventual: every sink with ``tentative`` gets every kind of delivery,
        # and so does --tentative-output's
        self.eventual = cfg.eventual is not None
        self.tentative_out = (TentativeOutput(cfg.tentative_output)
                              if cfg.tentative_output else None)
        self.digests = [Digest() for _ in plan.sinks]
        self.dead_letters = dead_letters
        self.replicas = cfg.replicas  # 1 with --ha none
        # The sans-I/O core of the driver side: everything the host does is carry out its
        # actions (``Actions.carry_out``) and feed it events.
        assert self.replicas is not None  # RunConfig sets it on construction
        self.core = boundary_for(plan, self.replicas, ControlOptions(
            heartbeat_timeout=cfg.heartbeat_timeout, recovery=cfg.recovery,
            balance=cfg.balance,
            policy=PolicyConfig(delta_min=cfg.delta_min, window_s=cfg.window_s,
                                mode=cfg.policy),
            placement=cfg.placement, latencies=cfg.latencies), eventual=cfg.eventual,
            race=cfg.ha == "race", unordered=cfg.unordered_output)
        self.core.handle(StartTimes(fixed=cfg.standby_wait))  # nothing measured yet
        self.digest = self.digests[0]  # the output digest: the first sink's
        # the same rows, order and numbering aside (each sink's)
        self.rows_digests = [RowsDigest() for _ in plan.sinks]
        self.rows_digest = self.rows_digests[0]
        self.sink_rows = [0 for _ in plan.sinks]
        self.dead_reasons: dict[str, list[Any]] = {}  # kind of reason -> [count, first reason]
        self.metrics = EgressMetrics()
        self.stats = LiveStats(total=total(plan))
        self.conns: dict[int, Connection] = {}  # slot -> its process's data connection
        # A site process's control connection (``move``, ``fail``, ``avail``, ``slow``,
        # ``kill``, ``stop``, ``cu-start`` out; heartbeats, ``moved``, errors in), keyed by
        # its data connection, and back: a control frame to a slowed site must not wait
        # behind the input queued on its data connection, which it reads only as fast as it
        # processes (docs/design-choices.md: "Two connections between the driver and each site").
        self.control_of: dict[Connection, Connection] = {}
        self.data_of: dict[Connection, Connection] = {}
        # The ingress's DTSB: input for a site that cannot take it waits here, in one pool.
        self.outbox = Outbox(self.conns.get, INGRESS_POOL_ROWS)
        self.schema_of = schemas_of(plan)
        self.standbys: list[Connection] = []
        self.identity: dict[Connection, tuple[int, int, int]] = {}  # slot, attempt, pid
        self.catch_ups: list[dict[str, Any]] = []
        self.recovered: list[dict[str, Any]] = []
        self.adoptions: list[dict[str, Any]] = []
        self.move_started: dict[int, float] = {}  # move epoch -> wall time it started
        self.utilisation: dict[int, list[tuple[float, float, float]]] = {}  # t, busy, slept
        self.site_load: dict[int, dict[str, float]] = {}  # the last heartbeat's counters
        self.site_refused: dict[tuple[int, int], int] = {}  # (slot, attempt) -> refused
        # (slot, attempt) -> bytes its process wrote to its connections, at its last heartbeat
        self.site_sent: dict[tuple[int, int], int] = {}
        # --stream-replicas: per site process, its streams collected and revived so far
        self.site_streams: dict[tuple[int, int], tuple[int, int]] = {}
        self.sent_at_start = bytes_sent_total()  # the driver's process hosts run after run
        self.port: int | None = None
        self.failure: str | None = None
        self.done = threading.Event()
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        # The loop's events (made on it, in ``_main``): the core started the ingress; ...
        self.start_ingress: asyncio.Event | None = None
        # Set whenever the core has handled an event: an acknowledgement, a failure's
        # ``ack_all`` or a rejoin may have made room in the admission window.
        self.heard: asyncio.Event | None = None
        self.finished: asyncio.Event | None = None  # ... and the run has ended
        self.faults = Faults(self)  # --kill, --hang, --slow
        # Site tasks that fail before they register: when their failures repeat, the run stops
        # with the error (``control/start_failures.py``).
        self.start_watch = StartWatch(tasks=plan.sites + cfg.spares, shipped=cfg.shipped,
                                      dataflow=cfg.dataflow)
        self.failures: list[dict[str, Any]] = []
        # (from, to): spans with a partition short of its copies (a failure until its
        # catch-ups end): the metrics' time back to fault tolerance
        self.unsafe: list[tuple[float, float]] = []
        self.ingress_times: list[float] = []
        self._mono_start = 0.0
        # the driver process's CPU seconds when input started and when the output ended
        self.cpu_start = self.cpu_end = 0.0
        self.completed: list[tuple[float, int]] = []  # (time, egress progress): input done
        self.ingress_counts: list[int] = []
        # Flow control and the watchdog (docs/flow-control.md): what the ingress is doing,
        # what admission waits for when it is blocked ("window" or "pool"), and the stalls.
        self.input_state: InputState = "starting"
        self.blocked_by = ""
        self.unacked_max = 0  # the most admitted records unacknowledged at an admission
        self.stalls: list[dict[str, Any]] = []
        # When the sites' job was submitted, and how long until every site registered: what
        # the standby wait is measured from.
        self.launched_at: float | None = None
        self.site_start_s: float | None = None
        self.executor_start_s: float | None = None  # a new cluster application's, if timed
        self.source_rows = [0] * len(plan.streams)  # rows admitted per source
        # the run's progress per interval, and its events (``query.last_progress``)
        self.progress = ProgressLog(self, cfg.progress_interval)
        self.dashboard: Dashboard | None = None  # started by the launch, stopped at the end
        # Rescaling (``control/rescale.py``): what starts new site tasks (set by the launch:
        # a Spark job of that many), the rescales done, and set when one ends
        self.launch_more: Callable[[int], None] = self._cannot_launch
        self.rescales: list[dict[str, Any]] = []
        self.rescaled = threading.Event()
        self.door = Door(self)  # the connections accepted, authenticated and paired
        self.feed = Feed(self)  # the input, paced and admitted
        self.actions = Actions(self)  # the core's actions carried out
        self.watch = Watch(self)  # the core's clock, the watchdog, the spans short of copies
        # --checkpoint: the checkpoints' store and their timer (``driver_checkpoints.py``)
        self.core.checkpoints.keep = cfg.checkpoint_keep
        self.core.checkpoints.timeout = max(120.0, 10 * cfg.checkpoint_interval)
        self.checkpointing = Checkpointing(
            self, SnapshotStore(cfg.checkpoint) if cfg.checkpoint else None)
        # a restart: the core, the sources' positions and the numbering go on from there
        self.restored = restored
        if restored is not None:
            self.core.restore(restored.manifest, restored.held, restored.complete,
                              restored.incomplete)
            self.feed.resumed = restored.sources

    # -- the core's parts, for reports and fault injection (read only) ------------------------
    @property
    def controller(self) -> Controller:
        """The core's controller (membership, views, recovery, load balancing)."""
        return self.core.controller

    @property
    def ingress(self) -> Ingress:
        """The core's ingress (the input's numbering and first-stage buffers)."""
        return self.core.ingress

    @property
    def egress(self) -> Egress:
        """The core's egress (the output, once and in order)."""
        return self.core.egress

    @property
    def dead(self) -> set[int]:
        """The slots the core counts as failed."""
        return self.core.dead

    def _cannot_launch(self, count: int) -> None:
        self.abort(f"a rescale needs {count} new site tasks, and this run has no Spark job "
                   f"to start them in")

    def rescale(self, sites: int) -> str:
        """Spread the query over ``sites`` sites from now on (``control/rescale.py``): ""
        once the core has taken the request (``rescaled`` is set when it ends, and the record
        is the last of ``rescales``), else why it cannot be done."""
        return self.on_loop(lambda: self.rescale_here(sites))

    def rescale_here(self, sites: int) -> str:
        """``rescale``, on the host's loop."""
        if self.done.is_set() or self.over():
            return "the query has ended"
        self.rescaled.clear()
        actions = self.core.handle(Rescale(sites=sites, now=time.monotonic()))
        self.actions.carry_out(actions)
        return next((a.reason for a in actions if isinstance(a, RescaleRefused)), "")

    # -- thread entry, and calls from other threads ------------------------------------------
    def serve_forever(self) -> None:
        """The host's thread: the loop runs until the run ends. Whatever ends it, the run
        ends with it: a failure of the thread itself is the run's failure, with its cause,
        and ``ready`` and ``done`` are set, so nothing waits for a thread that is gone."""
        try:
            asyncio.run(self._main())
        except BaseException as e:  # the run must end with the cause
            if self.failure is None:
                self.failure = f"the driver failed: {cause(e)}"
            log.debug("the driver's thread failed", exc_info=True)
        finally:
            if self.failure is not None:
                self.stats.phase = "failed"
            self.ready.set()
            self.done.set()
            if self.dashboard is not None:
                self.dashboard.stop()

    async def _main(self) -> None:
        """Listen, open the sinks, run the parts' tasks until the run ends, then stop every
        site process and close the server, the sources and the sinks."""
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(self._loop_error)
        self.start_ingress = asyncio.Event()
        self.heard = asyncio.Event()
        self.finished = asyncio.Event()
        server = await start_server(self.door.accept, self.cfg.bind_host, self.security)
        self.port = server.sockets[0].getsockname()[1]
        if not self._sinks_open and not self._open_sinks() or not self._open_tentative():
            server.close()
            self.dead_letters.close()
            return
        for k, digest in enumerate(self.digests):  # the digests start from the sinks' schemas
            nothing = pa.RecordBatch.from_pylist([], schema=self.plan.sink_schema(k))
            digest.update(nothing)
            self.rows_digests[k].update(nothing)
        self.ready.set()
        ticker = self._task(self.watch.ticker(), "the watchdog")
        flusher = self._task(self._flusher(), "the ingress's flusher")
        poller = self._task(self._poll_sinks(), "a sink's poll")
        feeder = self._task(self.feed.run(), "the ingress")
        progress = self._task(self.progress.run(), "the progress log")
        checkpoints = self._task(self.checkpointing.run(), "the checkpoints' timer")
        try:
            await self.finished.wait()
        finally:
            progress.cancel()
            if self.metrics.start is not None:
                self.progress.tick()  # the last interval, to the end
            for spec in self.faults.unfired():
                log.warning("%s did not fire: the run admitted %d input records", spec,
                            self.stats.events_in)
            feeder.cancel()
            checkpoints.cancel()
            ticker.cancel()
            flusher.cancel()
            poller.cancel()
            stopped = [c for conn in [*self.conns.values(), *self.standbys]
                       for c in self.stop_process(conn, cm.Stop(reason="run finished"))]
            await self._drain_all(stopped, STOP_DRAIN_S)
            server.close()
            for src in self.plan.sources:  # a source may hold a thread or a file open
                try:
                    src.close()
                except Exception:  # the run's outcome is decided already
                    log.exception("closing source %s failed", type(src).__name__)
            for out in self.sinks:
                out.close()
            if self.tentative_out is not None:
                self.tentative_out.close()
            self.dead_letters.close()
            if self.checkpointing.store is not None:
                self.checkpointing.store.close()  # the writes under way finish, none is torn
            self.done.set()

    def _open_sinks(self) -> bool:
        """Open every sink before any site starts (unless ``launch`` has); one that cannot
        open fails the run at once, naming it."""
        try:
            open_sinks(self.plan, self.sinks)
        except RunFailed as e:
            self.failure = str(e)
            return False
        return True

    def _open_tentative(self) -> bool:
        """``--tentative-output``'s directory, opened like a sink (a failure ends the run)."""
        if self.tentative_out is None:
            return True
        try:
            self.tentative_out.open(op_schema(self.plan.output_schema))
        except Exception as e:  # noqa: BLE001 - named to the user as the run's failure
            self.failure = (f"--tentative-output {self.tentative_out.path}: could not open: "
                            f"{type(e).__name__}: {e}")
            for out in self.sinks:
                out.close()
            return False
        return True

    def _task(self, coro: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        """A task of the run's: if it fails, the run fails with its cause (a task that dies
        unseen would leave the run waiting for it)."""
        task = asyncio.create_task(coro, name=what)

        def done(t: asyncio.Task[None]) -> None:
            if not t.cancelled() and (e := t.exception()) is not None:
                self.abort(f"{what} failed: {cause(e)}")

        task.add_done_callback(done)
        return task

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Any error the loop catches itself (a connection's handler, a timer's callback):
        the run fails with it rather than logging it and waiting."""
        e = context.get("exception")
        if isinstance(e, asyncio.CancelledError):
            return
        why = cause(e) if isinstance(e, BaseException) else context.get("message", "?")
        log.debug("the driver's loop caught: %s", context.get("message"), exc_info=e)
        if self.finished is not None and not self.finished.is_set():
            self.abort(f"the driver failed: {why}")

    @staticmethod
    async def _drain_all(conns: list[Connection], timeout: float) -> None:
        """Wait until every connection has sent what it holds (the ``stop`` frames), all
        together and at most ``timeout`` in all: a site that no longer reads (failed,
        hung, cut off) must not hold the run's end for a timeout per connection."""

        async def drain(c: Connection) -> None:
            try:
                await c.drain()
            except ConnectionLost:
                pass

        if conns:
            _, late = await asyncio.wait([asyncio.ensure_future(drain(c)) for c in conns],
                                         timeout=timeout)
            for task in late:  # their sites are told by their connections' end instead
                task.cancel()

    def stop(self, reason: str) -> None:
        """Abort from another thread (e.g. the Spark job died)."""
        self._call_soon(self.abort, reason)

    def end_input(self) -> None:
        """From another thread (``FluxQuery.stop``): every source ends at its next batch
        boundary; what was admitted is processed to the end, as at the input's own end."""
        self._call_soon(self.feed.end)

    def on_loop(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """``fn()`` run on the host's loop, from another thread (a consistent snapshot of
        state the loop changes); run here once the loop has ended."""
        loop = self._loop
        if loop is None or self.done.is_set():
            return fn()
        out: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                out.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
                out.set_exception(e)

        try:
            loop.call_soon_threadsafe(call)
        except RuntimeError:  # the loop closed meanwhile
            return fn()
        return out.result(timeout)

    def tasks_failed(self, failed: int) -> None:
        """From another thread: Spark counts ``failed`` failed attempts of the site tasks."""
        self._call_soon(self.door.tasks_failed, failed)

    def _call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        """``fn(*args)`` on the loop, from another thread (nothing once the run is over)."""
        if self._loop is not None and not self.done.is_set():
            try:
                self._loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:
                pass  # the loop has just closed: the run is over anyway

    # -- on the loop: the run's end, and the site processes' connections -------------------
    def over(self) -> bool:
        """The run has ended (or has not started its loop)."""
        return self.finished is None or self.finished.is_set()

    def control_conn(self, slot: int) -> Connection | None:
        """The control connection of the process in ``slot``."""
        data = self.conns.get(slot)
        return None if data is None else self.control_of.get(data, data)

    def tell(self, slot: int, message: cm.ControlMessage | CuStart) -> None:
        """A control frame (or ``cu-start``) to the process in ``slot``; one whose
        connection is gone is dropped (that site's own reader reports its failure, not the
        caller's)."""
        conn = self.control_conn(slot)
        if conn is not None and slot not in self.dead:
            try:
                conn.send(message)
            except ConnectionLost:
                pass

    def stop_process(self, data: Connection, message: cm.Stop) -> list[Connection]:
        """``stop`` on both of a process's connections, so that whichever the site reads
        first, it reads ``stop`` before that connection's end (not "lost the driver")."""
        sent = []
        for c in dict.fromkeys([self.control_of.get(data, data), data]):
            try:
                c.send(message)
                sent.append(c)
            except ConnectionLost:
                pass
        return sent

    def wan_link(self, conn: Connection, slot: int) -> Connection:
        """``--wan``: the frames the driver writes to site ``slot``, on its data and its
        control connection, wait for the link's latency and outages (``runtime/wan.py``)."""
        if self.cfg.wan is not None:
            for c in (conn, self.control_of.get(conn)):
                if c is not None:
                    c.delay = LinkDelay(self.cfg.wan, DRIVER_NODE, slot, self.cfg.wan_start)
        return conn

    async def pump(self, conn: Connection) -> None:
        """Frames from one of a site process's two connections; its identity (slot,
        attempt) may change when a standby adopts a slot."""
        data = self.data_of.get(conn, conn)
        inbox = Inbox(conn, self.schema_of)  # read ahead, ``Tentative`` rows first
        reader = self._task(inbox.reader(), f"reading from {conn.peer}")
        try:
            while True:
                msg = await inbox.next()
                slot, attempt, _ = self.identity[data]
                member = self.conns.get(slot) is data
                if isinstance(msg, cm.Heartbeat):  # the metrics' share of a heartbeat
                    self.utilisation.setdefault(slot, []).append((
                        time.time(), msg.busy_s, msg.slept_s))
                    self.site_load[slot] = site_load(msg, self.site_load.get(slot, {}))
                    if member:
                        self.progress.heartbeat(slot, msg)
                    self.site_refused[(slot, attempt)] = msg.refused
                    self.site_sent[(slot, attempt)] = msg.sent_bytes
                    self.site_streams[(slot, attempt)] = (msg.collected, msg.revived)
                elif isinstance(msg, cm.Unreachable) and member:
                    # (a crash resets its links at every peer: the exclusion, if any, is
                    # the controller's warning)
                    log.info("site %d cannot reach site %d: %s", slot, msg.peer, msg.reason)
                event = event_of(slot, attempt, member, msg, time.monotonic())
                if event is not None:
                    self.actions.carry_out(self.core.handle(event))
        except ConnectionLost as e:
            slot, attempt, _ = self.identity[data]
            if self.conns.get(slot) is not data:
                if data in self.standbys:
                    self.standbys.remove(data)
                return
            self.actions.carry_out(self.core.handle(ConnectionClosed(
                site=slot, attempt=attempt, reason=str(e), now=time.monotonic())))
        finally:
            reader.cancel()

    async def _poll_sinks(self) -> None:
        """Every ``POLL_S``: each sink may publish what it has held long enough
        (``Sink.poll``), on a timer of its own, not on the data path."""
        while True:
            await asyncio.sleep(POLL_S)
            for k, out in enumerate(self.sinks):
                try:
                    out.poll()
                except Exception as e:  # noqa: BLE001 - a sink that fails stops the run
                    self.abort(sink_failure(self.plan, k, out, "failed to publish", e))
                    return

    async def _flusher(self) -> None:
        """The ingress's DTSB released: what a connection could not take, sent once it
        drains (``Outbox.pump``; at the latest after ``RESEND_S``, capped by
        ``--max-batch-delay``)."""
        await self.outbox.pump(batch_delay(RESEND_S, self.cfg.max_batch_delay))

    def abort(self, reason: str) -> None:
        """End the run, failed with ``reason`` (unless it failed already, or its output
        ended: a late abort changes nothing)."""
        if self.failure is None and not self.egress.ended:
            self.failure = reason
            self.stats.phase = "failed"
        assert self.finished is not None
        self.finished.set()


def sinks_of(plan: PhysicalPlan, sink: Sink | None) -> list[Sink]:
    """The Sink object each sink of the dataflow writes to: its own, or the run's ``sink``
    (its ``--output``) for the first that has none; the others with none are counted only."""
    run_sink, sinks = sink, []
    for spec in plan.sinks:
        mine = spec.sink if spec.sink is not None else run_sink
        if spec.sink is None:
            run_sink = None
        sinks.append(mine if mine is not None else NullSink())
    return sinks


def open_sinks(plan: PhysicalPlan, sinks: list[Sink]) -> None:
    """Open every sink; one that cannot open (a path under a file, a directory without
    write permission) raises ``RunFailed`` naming it and the cause, the ones opened before
    it closed again."""
    for k, out in enumerate(sinks):
        try:
            out.open(plan.sink_schema(k))
        except Exception as e:
            for opened in sinks[:k]:
                opened.close()
            raise RunFailed(sink_failure(plan, k, out, "could not open", e)) from e
