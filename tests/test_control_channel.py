"""The driver's control connection to each site (``runtime.driver.Host``, no Spark): the
controller's frames (``slow``, ``move``, ``fail``, ...) must reach a site that has stopped
reading its data connection, as a slowed site does while its inbox is full; on the data
connection they would wait behind the input queued there (a move's confirmation from a slowed
site took 0.3-0.4 s). Two fake sites register with a real host and never read their data."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from sparkflux.dataflow.compiler import compile_plan
from sparkflux.runtime.driver import Host, RunConfig
from sparkflux.runtime.frames import CONTROL, decode
from sparkflux.runtime.sinks import DeadLetters, NullSink
from sparkflux.runtime.site import schemas_of
from sparkflux.runtime.transport import Connection, connect

SITES = 2


@pytest.fixture
def host(netmon: Any) -> Any:
    import argparse

    args = argparse.Namespace(events=400_000, batch_size=4096, seed=7, cpu_work=False,
                              bad_every=0, skew=False)
    plan = compile_plan(netmon.build(netmon.options(args)), 8, SITES)
    h = Host(plan, RunConfig(sites=SITES, partitions=8, ha="flux", window=200_000,
                             heartbeat_timeout=60.0), NullSink(), DeadLetters())
    thread = threading.Thread(target=h.serve_forever, daemon=True)
    thread.start()
    assert h.ready.wait(10) and h.port is not None
    yield h
    h.stop("test over")
    thread.join(10)


async def next_control(conn: Connection, schema_of: dict) -> dict[str, Any]:
    while True:
        kind, body = await conn.recv()
        if kind == CONTROL:
            msg = decode(kind, body, schema_of)
            assert isinstance(msg, dict)
            return msg


async def fake_sites(host: Host) -> tuple[dict[str, Any], int]:
    """Register SITES fake sites, let the ingress fill their data connections, then have
    the host slow site 0: return the frame site 0's control connection got, and how many
    input bytes were still unread on its data connection (not read at all, in fact)."""
    assert host.port is not None and host._loop is not None
    schema_of = schemas_of(host.plan)
    data: list[Connection] = []
    control: list[Connection] = []
    for s in range(SITES):
        ctl = await connect("127.0.0.1", host.port, "driver (control)")
        ctl.send_control({"type": "control", "token": f"token-{s}"})
        d = await connect("127.0.0.1", host.port, "driver")
        d.send_control({"type": "register", "site": s, "attempt": 0, "host": "127.0.0.1",
                        "port": 1, "pid": 100 + s, "token": f"token-{s}"})
        control.append(ctl)
        data.append(d)
    for s in range(SITES):  # the view comes on the data connection, ahead of any input
        view = await next_control(data[s], schema_of)
        assert view["type"] == "view"
        data[s].send_control({"type": "ready", "site": s, "attempt": 0})
    # Input for both sites now queues in the host's skew buffer, the sockets and the
    # StreamReader buffers: nobody reads it. Wait for that to happen (the host's own count).
    while host.outbox.held_rows() == 0:
        await asyncio.sleep(0.05)
    host._loop.call_soon_threadsafe(host._slow, 0, 0.5)
    frame = await asyncio.wait_for(next_control(control[0], schema_of), 10.0)
    unread = len(data[0].reader._buffer)  # type: ignore[attr-defined]
    for c in [*data, *control]:
        c.close()
    return frame, unread


def test_a_control_frame_overtakes_input_the_site_has_not_read(host: Host) -> None:
    frame, unread = asyncio.run(fake_sites(host))
    assert frame == {"type": "slow", "factor": 0.5}
    assert unread > 0  # the data connection had input waiting in front of where it would be
    assert host.outbox.held_rows() > 0  # ... and more of it held in the host's skew buffer

