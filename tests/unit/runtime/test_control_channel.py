"""The driver's control connection to each site (``runtime.driver.Host``, no Spark): the
controller's frames (``slow``, ``move``, ``fail``, ...) must reach a site that has stopped
reading its data connection, as a slowed site does while its inbox is full; on the data
connection they would wait behind the input queued there (a move's confirmation from a slowed
site took 0.3-0.4 s). Two fake sites register with a real host and never read their data."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from sparkflux.dataflow.compiler import compile_plan
from sparkflux.io.sinks import DeadLetters, NullSink
from sparkflux.protocol import control_messages as cm
from sparkflux.runtime import handshake
from sparkflux.runtime.driver import Host
from sparkflux.runtime.handshake import Claim
from sparkflux.runtime.run_config import RunConfig
from sparkflux.runtime.site import schemas_of
from sparkflux.runtime.transport import Connection, connect
from tests.support.fake_driver import DRIVER, SEC, small_plan, start_site

SITES = 2


@pytest.fixture
def host(netmon: Any) -> Any:
    import argparse

    args = argparse.Namespace(events=400_000, batch_size=4096, seed=7, cpu_work=False,
                              bad_every=0, skew=False)
    plan = compile_plan(netmon.build(netmon.options(args)), 8, SITES)
    h = Host(plan, RunConfig(sites=SITES, partitions=8, ha="flux", window=200_000,
                             heartbeat_timeout=60.0, security=SEC), NullSink(), DeadLetters())
    thread = threading.Thread(target=h.serve_forever, daemon=True)
    thread.start()
    assert h.ready.wait(10) and h.port is not None
    yield h
    h.stop("test over")
    thread.join(10)


async def on_host(host: Host, fn: Callable[[], Any]) -> Any:
    """``fn()`` on the host's loop (its buffers are the host thread's to touch)."""
    assert host._loop is not None

    async def call() -> Any:
        return fn()

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), host._loop))


async def next_control(conn: Connection, schema_of: dict) -> Any:
    while True:
        msg = await conn.recv_message(schema_of)
        if isinstance(msg, cm.CONTROL_TYPES):
            return msg


async def fake_sites(host: Host) -> tuple[dict[str, Any], int, int]:
    """Register SITES fake sites, let the ingress fill their data connections, then have
    the host slow site 0: return the frame site 0's control connection got, how many input
    bytes were still unread on its data connection (not read at all, in fact), and how many
    rows the host held for the sites when it sent the ``slow``."""
    assert host.port is not None and host._loop is not None
    schema_of = schemas_of(host.plan)
    data: list[Connection] = []
    control: list[Connection] = []
    for s in range(SITES):
        ctl = await connect("127.0.0.1", host.port, "driver (control)", SEC,
                            Claim(handshake.CONTROL, s, 0, s), DRIVER)
        ctl.send(cm.OpenControl(token=f"token-{s}"))
        d = await connect("127.0.0.1", host.port, "driver", SEC, Claim(handshake.DATA, s, 0, s),
                          DRIVER)
        d.send(cm.Register(site=s, attempt=0, host="127.0.0.1", port=1, pid=100 + s,
                           token=f"token-{s}"))
        control.append(ctl)
        data.append(d)
    for s in range(SITES):  # the view comes on the data connection, ahead of any input
        view = await next_control(data[s], schema_of)
        assert isinstance(view, cm.View)
        data[s].send(cm.Ready(site=s, attempt=0))
    # Input for both sites now queues in the host's skew buffer, the sockets and the
    # StreamReader buffers: nobody reads it. Wait for that to happen (the host's own count).
    # (Read when the slow is sent: once the ingress pool is full it writes what it held,
    # so a later reading may find it empty again.)
    deadline = asyncio.get_running_loop().time() + 20.0
    while (held := await on_host(host, host.outbox.held_rows)) == 0:
        assert asyncio.get_running_loop().time() < deadline, "the host never held input"
        await asyncio.sleep(0.05)
    await on_host(host, lambda: host.faults.slow(0, 0.5))
    frame = await asyncio.wait_for(next_control(control[0], schema_of), 10.0)
    unread = len(data[0].reader._buffer)  # type: ignore[attr-defined]
    for c in [*data, *control]:
        c.close()
    return frame, unread, held


def test_a_control_frame_overtakes_input_the_site_has_not_read(host: Host) -> None:
    frame, unread, held = asyncio.run(fake_sites(host))
    assert frame == cm.Slow(factor=0.5)
    assert unread > 0  # the data connection had input waiting in front of where it would be
    assert held > 0  # ... and more of it held in the host's skew buffer



def test_a_site_handles_a_fail_that_overtook_its_view(netmon: Any) -> None:
    """The view comes on the data connection, ``fail`` on the control connection: a site
    that reads the ``fail`` first must hold it until it has its core, not stop on it."""
    plan = small_plan(netmon)
    schema_of = schemas_of(plan)

    async def driver() -> tuple[list[str], dict[str, Any]]:
        fake = await start_site(plan)
        site, ctl, data = fake.site, fake.ctl, fake.data
        # site 1 failed before site 0 even got the view: its ``fail`` comes first
        ctl.send(cm.Fail(dead=(1,)))
        await asyncio.sleep(0.2)  # the site has read it by now (its heartbeats flow)
        data.send(cm.View(number=1, members={
            0: cm.Member(host="127.0.0.1", port=1, attempt=0, registered=0)}))
        seen: list[str] = []
        while "Ready" not in seen:
            seen.append(type(await next_control(data, schema_of)).__name__)
        while True:  # heartbeats on the control connection; an error report would be here
            msg = await asyncio.wait_for(next_control(ctl, schema_of), 5.0)
            seen.append(type(msg).__name__)
            if isinstance(msg, cm.Heartbeat) and site.core is not None \
                    and 1 in site.core.dead_sites:
                break
            assert not isinstance(msg, cm.SiteError), msg
        return seen, await fake.stop()

    seen, summary = asyncio.run(driver())
    assert "SiteError" not in seen and summary["site"] == 0 and summary["excluded"] is None


def test_a_peer_that_cannot_be_dialled_is_reported_not_waited_for(
        netmon: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A site dials peers in tasks of their own: while the view's other member, and then a
    standby announced by ``avail``, cannot be reached, the site's control reader goes on (a
    ``fail`` is handled at once), the site reports each peer it could not reach
    (``Unreachable``, for the controller to judge), and it does not stop."""
    import socket

    from sparkflux.runtime import site_door

    monkeypatch.setattr(site_door, "DIAL_TIMEOUT_S", 0.5)
    plan = small_plan(netmon)
    schema_of = schemas_of(plan)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]

    async def driver() -> list[Any]:
        fake = await start_site(plan)
        site, ctl, data = fake.site, fake.ctl, fake.data
        data.send(cm.View(number=1, members={
            0: cm.Member(host="127.0.0.1", port=1, attempt=0, registered=0),
            1: cm.Member(host="127.0.0.1", port=dead_port, attempt=0, registered=1)}))
        reports: list[Any] = []

        async def until(kind: type, conn: Connection) -> Any:
            while True:
                msg = await asyncio.wait_for(next_control(conn, schema_of), 5.0)
                if not isinstance(msg, cm.Heartbeat):
                    reports.append(msg)
                if isinstance(msg, kind):
                    return msg

        await until(cm.Unreachable, ctl)
        ctl.send(cm.Fail(dead=(1,)))  # the controller agrees: site 1 is gone
        await until(cm.Ready, data)
        # a standby adopts slot 1 and dies before anyone reaches it
        ctl.send(cm.Avail(slot=1, epoch=1, host="127.0.0.1", port=dead_port, attempt=1,
                          registered=1))
        ctl.send(cm.Slow(factor=0.5))
        t = asyncio.get_running_loop().time()
        while site.scheduler.cap is None:  # the reader went on past the avail
            assert asyncio.get_running_loop().time() - t < 0.3
            await asyncio.sleep(0.01)
        await until(cm.Unreachable, ctl)
        await asyncio.sleep(0.3)
        assert not site._stop.is_set()
        assert (await fake.stop())["excluded"] is None
        return reports

    reports = asyncio.run(driver())
    assert [type(r).__name__ for r in reports] == ["Unreachable", "Ready", "Unreachable"]
    assert (reports[0].peer, reports[0].peer_attempt) == (1, 0)
    assert (reports[2].peer, reports[2].peer_attempt) == (1, 1)
