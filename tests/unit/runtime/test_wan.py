"""Wide-area links (``runtime/wan.py``, ``--wan FILE``): the model file checked, each frame's
time on a link (latency, jitter, FIFO, outages), and a real loopback connection that holds
its frames for that time, keeps their order, and sends what it holds before it closes."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import pytest

from sparkflux.model.errors import PlanError
from sparkflux.protocol import control_messages as cm
from sparkflux.runtime.transport import connect
from sparkflux.runtime.wan import DRIVER_NODE, LinkDelay, Outage, WanModel

from .test_handshake import CLAIM, SERVER, sec, with_server

MODEL = {"latency_ms": [[0, 10, 40], [10, 0, 5], [40, 5, 0]], "jitter_ms": 2,
         "outages": [{"from": 0, "to": 1, "at": 1.0, "seconds": 0.5}]}


def test_a_model_file_is_read_and_checked(tmp_path: Path) -> None:
    f = tmp_path / "wan.json"
    f.write_text(json.dumps(MODEL))
    m = WanModel.load(f, sites=2)
    assert m.latency_s(DRIVER_NODE, 1) == 0.04 and m.latency_s(0, 1) == 0.005
    assert m.outages == (Outage(0, 1, 1.0, 0.5),) and m.jitter_ms == 2.0


@pytest.mark.parametrize(("raw", "message"), [
    ({"latency_ms": [[0, 1], [1, 0]]}, r"latency_ms must be 3 rows of 3 numbers \(the driver "
                                       r"first, then site 0 \.\. 1\)"),
    ({**MODEL, "latency_ms": [[0, 1, 2], [1, 0, -3], [2, 3, 0]]},
     "every latency must be a number of milliseconds, 0 or more"),
    ({**MODEL, "jitter": 1}, r"unknown keys \['jitter'\]"),
    ({**MODEL, "outages": [{"from": 0, "to": 5, "at": 1, "seconds": 1}]},
     r"an outage is .* with sites -1 \(the driver\) \.\. 1"),
    ([1, 2], "give an object with \"latency_ms\""),
    ({**MODEL, "changes": [{"at": 2.0}]}, r"a change is \{\"at\": SECONDS, \"latency_ms\""),
    ({**MODEL, "changes": [{"at": 2.0, "latency_ms": [[0]]}]}, "latency_ms must be 3 rows"),
])
def test_a_bad_model_says_what_to_change(raw: object, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        WanModel.of(raw, sites=2)


def test_changes_give_the_latencies_from_their_time_on() -> None:
    """``changes``: the matrix in force from each change's time (seconds from the start)."""
    later = [[0, 60, 40], [60, 0, 5], [40, 5, 0]]
    m = WanModel.of({**MODEL, "changes": [{"at": 3.0, "latency_ms": later},
                                          {"at": 1.5, "latency_ms": MODEL["latency_ms"]}]},
                    sites=2)
    assert [at for at, _ in m.changes] == [1.5, 3.0]  # in time order
    assert m.latency_s(DRIVER_NODE, 0, 2.9) == 0.01 and m.latency_s(DRIVER_NODE, 0, 3.0) == 0.06
    link = LinkDelay(m, DRIVER_NODE, 0, start=100.0, rng=random.Random(1))
    assert 0.010 <= link.due(100.5) - 100.5 <= 0.012
    assert 0.060 <= link.due(103.5) - 103.5 <= 0.062  # a frame written after the change


def test_a_frame_leaves_after_the_latency_never_before_the_one_ahead_nor_in_an_outage() -> None:
    m = WanModel.of(MODEL, sites=2)
    link = LinkDelay(m, 0, 1, start=100.0, rng=random.Random(1))
    dues = [link.due(100.0 + k * 0.001) for k in range(50)]
    assert all(b >= a for a, b in zip(dues, dues[1:], strict=False))  # FIFO
    assert all(0.005 <= d - (100.0 + k * 0.001) <= 0.007 for k, d in enumerate(dues))
    assert link.due(101.2) == 101.5  # due inside the outage: held to its end
    assert 101.505 <= link.due(101.6) <= 101.607
    back = LinkDelay(m, 1, 0, start=100.0)  # the outage is one way only
    assert back.due(101.2) < 101.3


def test_a_wan_connection_holds_each_frame_for_its_time_in_order_and_flushes_at_close() -> None:
    m = WanModel.of({"latency_ms": [[0, 80], [80, 0]]}, sites=1)

    async def body(port: int, gate: object, accepted: list) -> None:
        conn = await connect("127.0.0.1", port, "s", sec(), CLAIM, SERVER, 5.0)
        conn.delay = LinkDelay(m, 0, DRIVER_NODE, start=time.time())
        t = time.monotonic()
        for e in range(5):
            conn.send(cm.Moved(epoch=e))
        assert conn.buffered() == 0  # in flight: not a backlog the skew buffer holds back for
        await asyncio.sleep(0.04)
        assert accepted == [CLAIM]  # nothing before the latency
        conn.close()  # closed with frames held: they leave first
        while len(accepted) < 7 and time.monotonic() - t < 2:
            await asyncio.sleep(0.01)
        assert accepted[1:6] == [cm.Moved(epoch=e) for e in range(5)]
        assert time.monotonic() - t >= 0.08

    asyncio.run(with_server(sec(), body))
