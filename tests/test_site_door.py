"""A site's door on real sockets, no Spark: an authenticated link is still refused unless its
claimed slot and incarnation are what the site's view says (a forged or stale claim for a live
site id never replaces the real link), and a driver refuses a registration that does not match
its handshake. Fake driver, one real ``Site``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sparkflux.dataflow.compiler import compile_plan
from sparkflux.protocol import control_messages as cm
from sparkflux.runtime import handshake
from sparkflux.runtime import site as site_module
from sparkflux.runtime.handshake import Claim, Gate
from sparkflux.runtime.security import Security
from sparkflux.runtime.site import Site, SiteConfig, schemas_of
from sparkflux.runtime.transport import ConnectionLost, connect, serve

SEC = Security(secret=b"k" * 32)


def test_a_site_refuses_links_its_view_does_not_vouch_for(netmon: Any,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    import argparse

    monkeypatch.setattr(site_module, "CLAIM_WAIT_S", 0.5)
    args = argparse.Namespace(events=1000, batch_size=512, seed=7, cpu_work=False,
                              bad_every=0, skew=False)
    plan = compile_plan(netmon.build(netmon.options(args)), 4, 2)
    schema_of = schemas_of(plan)

    async def driver() -> tuple[Site, list[str], dict[str, int]]:
        accepted: asyncio.Queue = asyncio.Queue()
        gate = Gate(SEC.secret, lambda: (-1, 0), 5.0, 8)

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            got = await serve(reader, writer, gate, SEC)
            assert got is not None
            conn, _ = got
            await accepted.put((conn, await conn.recv_message(schema_of)))

        server = await asyncio.start_server(accept, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        # site 1 of 2, attempt 0: site 0 (attempt 2) will dial it
        site = Site(SiteConfig(site=1, attempt=0, controller_host="127.0.0.1",
                               controller_port=port, bind_host="127.0.0.1",
                               advertise_host="127.0.0.1", security=SEC, replicas=2,
                               heartbeat_interval=0.05), plan)
        running = asyncio.create_task(site.run())
        conns = dict([(type(h).__name__, (c, h))
                      for c, h in [await accepted.get(), await accepted.get()]])
        (ctl, _), (data, reg) = conns["OpenControl"], conns["Register"]
        data.send(cm.View(number=1, members={
            0: cm.Member(host="127.0.0.1", port=1, attempt=2, registered=0),
            1: cm.Member(host="127.0.0.1", port=reg.port, attempt=0, registered=1)}))
        outcomes: list[str] = []
        keep: list = []  # links stay open (a dropped one would close, freeing its slot)

        async def link(claim: Claim) -> None:
            try:
                conn = await connect("127.0.0.1", reg.port, "site 1", SEC, claim, (1, 0), 2.0)
            except ConnectionLost:
                outcomes.append("refused at the handshake")
                return
            keep.append(conn)
            try:
                await asyncio.wait_for(conn.recv(), 1.5)
                outcomes.append("open")
            except ConnectionLost:
                outcomes.append("closed")
            except TimeoutError:
                outcomes.append("open")

        await link(Claim(handshake.PEER, 0, 1, 0))  # an older incarnation of site 0
        await link(Claim(handshake.PEER, 0, 2, 5))  # a spare's process claiming slot 0
        await link(Claim(handshake.PEER, 0, 2, 0))  # the real one
        await link(Claim(handshake.PEER, 0, 2, 0))  # a second link claiming the same
        await link(Claim(handshake.PEER, 3, 0, 3))  # a slot nobody knows
        await link(Claim(handshake.DATA, 0, 2, 0))  # a channel a site does not serve
        refused = dict(site.gate.refused)
        for c in (ctl, data):
            c.send(cm.Stop(reason="test over"))
        await asyncio.wait_for(running, 10.0)
        server.close()
        return site, outcomes, refused

    site, outcomes, refused = asyncio.run(driver())
    assert outcomes == ["closed", "closed", "open", "closed", "closed", "closed"]
    assert refused == {"claimed a replaced incarnation": 1, "claimed a linked site": 1,
                       "claimed an unknown incarnation": 2, "wrong channel": 1}
