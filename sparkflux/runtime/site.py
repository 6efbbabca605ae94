"""A site: one long-lived Python process (one Spark task) running its mini-partitions.

Life of a site (DESIGN.md §1): open a data server, register with the controller in the driver
over the control connection (which also carries the ingress's and egress's data), receive the
view, connect to every other site (one multiplexed connection per pair: the lower site id
dials), report ready, then run the event loop until told to stop. A site that loses the driver
stops at once (fail-stop: no zombies); an invariant violation or operator error is reported to
the controller and stops the site.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import traceback
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.dataflow.routing import Router
from sparkflux.model.progress import Progress
from sparkflux.runtime.frames import DATA, DataFrame
from sparkflux.runtime.stage import StageRunner
from sparkflux.runtime.transport import Connection, ConnectionLost, connect, decode

log = logging.getLogger(__name__)

INGRESS = -1
DRIVER = -1


@dataclass(frozen=True)
class SiteConfig:
    site: int
    attempt: int
    controller_host: str
    controller_port: int
    bind_host: str
    advertise_host: str
    heartbeat_interval: float = 0.25


class SiteStopped(Exception):
    """The controller excluded or stopped this site."""


class Site:
    """The event loop of one site."""

    def __init__(self, cfg: SiteConfig, plan: PhysicalPlan) -> None:
        self.cfg = cfg
        self.plan = plan
        self.id = cfg.site
        n_stages = len(plan.stages)
        self.runners = [
            StageRunner(s, [INGRESS] if s.index == 0 else range(plan.sites)) for s in plan.stages
        ]
        self.routers = [Router(plan, plan.stages[i + 1]) for i in range(n_stages - 1)]
        self.schema_of = {s.index: s.input_schema for s in plan.stages}
        self.peers: dict[int, Connection] = {}
        self.driver: Connection | None = None
        self._peers_ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._last_sent: dict[int, Progress] = {}
        self.busy_s = 0.0
        self.error: str | None = None
        self.excluded: str | None = None

    # -- set-up ------------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        server = await asyncio.start_server(self._accept, self.cfg.bind_host, 0, limit=1 << 24)
        port = server.sockets[0].getsockname()[1]
        self.driver = await connect(self.cfg.controller_host, self.cfg.controller_port, "driver")
        self.driver.send_control({
            "type": "register", "site": self.id, "attempt": self.cfg.attempt,
            "host": self.cfg.advertise_host, "port": port, "pid": os.getpid(),
        })
        tasks = [asyncio.create_task(self._pump(self.driver, DRIVER)),
                 asyncio.create_task(self._heartbeat())]
        try:
            await self._stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            for c in [*self.peers.values(), self.driver]:
                c.close()
            server.close()
        if self.error:
            raise RuntimeError(self.error)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        return {
            "site": self.id, "attempt": self.cfg.attempt, "pid": os.getpid(),
            "excluded": self.excluded,
            "busy_s": round(self.busy_s, 3),
            "rows_in": [r.rows_in for r in self.runners],
            "rows_out": [r.rows_out for r in self.runners],
        }

    async def _install_view(self, members: dict[int, dict]) -> None:
        for j, m in sorted(members.items()):
            if j > self.id:
                conn = await connect(m["host"], m["port"], f"site {j}")
                conn.send_control({"type": "hello", "site": self.id})
                self.peers[j] = conn
                asyncio.create_task(self._pump(conn, j))
        await self._wait_peers(len(members) - 1)
        assert self.driver is not None
        self.driver.send_control({"type": "ready", "site": self.id, "attempt": self.cfg.attempt})

    async def _wait_peers(self, n: int) -> None:
        while len(self.peers) < n:
            self._peers_ready.clear()
            await self._peers_ready.wait()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer, "site ?")
        try:
            kind, body = await conn.recv()
            hello = decode(kind, body, self.schema_of)
        except ConnectionLost:
            return
        if not isinstance(hello, dict) or hello.get("type") != "hello":
            conn.close()
            return
        j = int(hello["site"])
        conn.peer = f"site {j}"
        self.peers[j] = conn
        self._peers_ready.set()
        try:
            await self._pump(conn, j)
        except asyncio.CancelledError:
            conn.close()

    async def _heartbeat(self) -> None:
        assert self.driver is not None
        while True:
            await asyncio.sleep(self.cfg.heartbeat_interval)
            try:
                self.driver.send_control({"type": "hb", "site": self.id,
                                          "attempt": self.cfg.attempt})
            except ConnectionLost:
                self._fail("lost the driver")
                return

    # -- the loop ----------------------------------------------------------------------------
    async def _pump(self, conn: Connection, peer: int) -> None:
        try:
            while True:
                kind, body = await conn.recv()
                t = time.perf_counter()
                if kind == DATA:
                    self._on_data(decode(kind, body, self.schema_of))  # type: ignore[arg-type]
                else:
                    await self._on_control(decode(kind, body, self.schema_of))  # type: ignore
                self.busy_s += time.perf_counter() - t
        except ConnectionLost as e:
            if not self._stop.is_set():
                if peer == DRIVER:
                    self._fail(f"lost the driver ({e}); stopping (fail-stop)")
                else:
                    log.warning("site %d: %s", self.id, e)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - any bug stops the site, with its report
            self._report_error(traceback.format_exc())

    async def _on_control(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "view":
            await self._install_view(msg["members"])
        elif kind == "kill":
            # A real crash on request (clusters, where the driver cannot signal the process).
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "stop":
            log.info("site %d stopping: %s", self.id, msg.get("reason", ""))
            if msg.get("excluded"):
                # Not an error of this task: Spark must not retry it (no zombies either).
                self.excluded = str(msg.get("reason"))
            self._stop.set()

    def _on_data(self, frame: DataFrame) -> None:
        self.runners[frame.stage].push(
            INGRESS if frame.stage == 0 else frame.producer, frame.batch, frame.progress
        )
        self._drive(frame.stage)

    def _drive(self, first: int) -> None:
        """Step stages from ``first`` on; local deliveries feed the next stage at once."""
        for s in range(first, len(self.runners)):
            out = self.runners[s].step()
            if out is None:
                if s > first:
                    break
                return
            batch, progress = out
            self._emit(s, batch, progress)

    def _emit(self, s: int, batch: pa.RecordBatch, progress: Progress) -> None:
        last = s == len(self.runners) - 1
        if last:
            assert self.driver is not None
            if batch.num_rows or self._last_sent.get(s) != progress:
                self.driver.send_data(s + 1, self.id, progress, batch if batch.num_rows else None)
                self._last_sent[s] = progress
            return
        parts = self.routers[s].route(batch)
        moved = bool(parts) or self._last_sent.get(s) != progress
        if not moved:
            return
        self._last_sent[s] = progress
        for j in range(self.plan.sites):
            rows = parts.get(j)
            if j == self.id:
                self.runners[s + 1].push(self.id, rows, progress)
            else:
                self.peers[j].send_data(s + 1, self.id, progress, rows)

    def _report_error(self, tb: str) -> None:
        self.error = f"site {self.id} failed:\n{tb}"
        try:
            if self.driver is not None:
                self.driver.send_control({"type": "error", "site": self.id,
                                          "attempt": self.cfg.attempt, "error": tb})
        except ConnectionLost:
            pass
        self._stop.set()

    def _fail(self, reason: str) -> None:
        self.error = f"site {self.id}: {reason}"
        self._stop.set()


def run_site(cfg: SiteConfig, plan: PhysicalPlan) -> dict[str, Any]:
    """Run a site to completion in a fresh event loop (the body of a Spark site task)."""
    logging.basicConfig(level=logging.WARNING)
    return asyncio.run(Site(cfg, plan).run())
