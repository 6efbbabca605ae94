"""A site's door on real sockets, no Spark: an authenticated link is still refused unless its
claimed slot and incarnation are what the site's view says (a forged or stale claim for a live
site id never replaces the real link), and a driver refuses a registration that does not match
its handshake. Fake driver, one real ``Site``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sparkflux.protocol import control_messages as cm
from sparkflux.runtime import handshake, site_door
from sparkflux.runtime.handshake import Claim
from sparkflux.runtime.site import Site
from sparkflux.runtime.transport import ConnectionLost, connect
from tests.support.fake_driver import SEC, small_plan, start_site


def test_a_site_refuses_links_its_view_does_not_vouch_for(netmon: Any,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(site_door, "CLAIM_WAIT_S", 0.5)
    plan = small_plan(netmon)

    async def driver() -> tuple[Site, list[str], dict[str, int]]:
        # site 1 of 2, attempt 0: site 0 (attempt 2) will dial it
        fake = await start_site(plan, site=1)
        site, reg = fake.site, fake.register
        fake.data.send(cm.View(number=1, members={
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
        await fake.stop()
        return site, outcomes, refused

    site, outcomes, refused = asyncio.run(driver())
    assert outcomes == ["closed", "closed", "open", "closed", "closed", "closed"]
    assert refused == {"claimed a replaced incarnation": 1, "claimed a linked site": 1,
                       "claimed an unknown incarnation": 2, "wrong channel": 1}
