"""A fake driver for tests of one real ``Site`` on loopback sockets, no Spark: it serves the
site's two authenticated connections, hands them to the test, and stops the site."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from typing import Any

from sparkflux.dataflow.compiler import compile_plan
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.protocol import control_messages as cm
from sparkflux.runtime.handshake import Gate
from sparkflux.runtime.security import Security
from sparkflux.runtime.site import Site, SiteConfig, schemas_of
from sparkflux.runtime.transport import Connection, serve

SEC = Security(secret=b"k" * 32)
DRIVER = (-1, 0)  # the driver's identity in the handshake


def small_plan(netmon: Any) -> PhysicalPlan:
    """netmon on 4 partitions over 2 sites."""
    args = argparse.Namespace(events=1000, batch_size=512, seed=7, cpu_work=False,
                              bad_every=0, skew=False)
    return compile_plan(netmon.build(netmon.options(args)), 4, 2)


@dataclass
class FakeDriver:
    site: Site
    running: asyncio.Task
    server: asyncio.Server
    ctl: Connection  # the site's control connection
    data: Connection  # its data connection
    register: cm.Register  # what it registered with

    async def stop(self) -> dict[str, Any]:
        """``stop`` on both connections; the site's summary."""
        for c in (self.ctl, self.data):
            c.send(cm.Stop(reason="test over"))
        summary = await asyncio.wait_for(self.running, 10.0)
        self.server.close()
        return summary


async def start_site(plan: PhysicalPlan, site: int = 0, attempt: int = 0) -> FakeDriver:
    """Run a real site that dials this fake driver; return once both of its connections
    have authenticated and sent their first frame."""
    schema_of = schemas_of(plan)
    accepted: asyncio.Queue = asyncio.Queue()
    gate = Gate(SEC.secret, lambda: DRIVER, 5.0, 8)

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got = await serve(reader, writer, gate, SEC)
        assert got is not None
        conn, _ = got
        await accepted.put((conn, await conn.recv_message(schema_of)))

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    s = Site(SiteConfig(site=site, attempt=attempt, controller_host="127.0.0.1",
                        controller_port=port, bind_host="127.0.0.1",
                        advertise_host="127.0.0.1", security=SEC, replicas=2,
                        heartbeat_interval=0.05), plan)
    running = asyncio.create_task(s.run())
    first = dict([(type(h).__name__, (c, h)) for c, h in [await accepted.get(),
                                                          await accepted.get()]])
    (ctl, _), (data, reg) = first["OpenControl"], first["Register"]
    return FakeDriver(s, running, server, ctl, data, reg)
