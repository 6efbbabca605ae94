"""Forged connections against a live Flux run: nothing unauthenticated is decoded, and the run's
output stays exact.

The security issue: every server of a run (the driver's, each site's) used to unpickle
whatever reached its port. Now each connection starts with a mutual HMAC challenge-response
over the run's secret before a frame is read. ``tests/support/forge.py`` plays a local process
without the secret: it finds the servers through ``/proc`` and sends random bytes, a pickle that
would create a canary file (framed as the old wire did, and raw), well-formed HELLOs claiming live
sites with a proof it cannot compute, a replayed handshake, the server's own MAC reflected, a
4 GB frame header, and floods of idle connections. The quick tests below check the forger
itself (its pickle does fire on the old wire; its HELLO is well-formed; the project's door
refuses every attack); the Spark test runs it against a real run with a killed site.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkflux.io.sinks import DeadLetters, NullSink
from sparkflux.runner import reference_digest, run_example
from sparkflux.runtime.handshake import Claim, Gate
from sparkflux.runtime.security import Security
from sparkflux.runtime.transport import serve
from tests.support import forge

from .test_netmon_spark import netmon_args

EVENTS = 900_000
RATE = 60_000.0  # 15 s of input: the attacks run while it flows (at a rate a loaded two-core
# machine holds with the attacks and another test running: the ingress must drop nothing)
SITES = 4
PARTITIONS = 32
KILL = "1@input+180000"  # site 1 is killed 180,000 records (3 s) into the input
DRIVER_IDLE = 200  # idle connections against the driver: over its limit of 64 pending
SITE_IDLE = 16  # ... and against each site
HOLD_S = 8.0  # idle connections are held this long at most (the servers' timeout is 5 s)
REDISCOVER_S = 8.0  # after the first round, new site processes (the retried site 1) are
# looked for and attacked this long
DISCOVER_TIMEOUT_S = 180.0


# -- the forger itself, against stand-ins (no Spark) -------------------------------------------
class OldWireServer:
    """What every server did before the typed wire: ``u32 len | u8 kind | pickle``, unpickled.
    The positive control: the forger's canary must fire here."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                try:
                    size, _kind = struct.unpack("<IB", conn.recv(5, socket.MSG_WAITALL))
                    pickle.loads(conn.recv(size - 1, socket.MSG_WAITALL))
                except Exception:  # noqa: BLE001 - a stand-in: whatever fails, next one
                    pass


class GateServer:
    """The project's door (``Gate`` and ``serve``) on an asyncio loop in a thread, with a
    short handshake timeout and a small pending limit so that the idle attack is quick;
    records the first frame of every connection that authenticates."""

    def __init__(self, secret: bytes, timeout: float = 1.0, max_pending: int = 8) -> None:
        self.security = Security(secret=secret, handshake_timeout=timeout,
                                 max_pending=max_pending)
        self.gate = Gate(secret, lambda: (0, 0), timeout, max_pending)
        self.admitted: list[tuple[Claim, int]] = []  # (claim, kind of its first frame)
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        self._ready.wait(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted = await serve(reader, writer, self.gate, self.security)
            if accepted is not None:
                conn, claim = accepted
                kind, _ = await conn.recv()
                self.admitted.append((claim, kind))
                conn.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5)


@pytest.fixture
def gate_server() -> Iterator[tuple[GateServer, bytes]]:
    secret = os.urandom(32)
    server = GateServer(secret)
    yield server, secret
    server.close()


def test_the_canary_fires_on_the_old_wire(tmp_path: Path) -> None:
    """The pickle payload is armed: unpickled, or sent to a server of the old wire, it
    creates the canary (so its absence in the other tests means something)."""
    canary = tmp_path / "canary"
    pickle.loads(forge.canary_pickle(canary))  # our own payload
    assert canary.exists()
    canary.unlink()
    old = OldWireServer()
    out = forge.pickle_payload("127.0.0.1", old.port, canary)
    assert out.connections == 2
    deadline = time.monotonic() + 5
    while not canary.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert canary.exists()
    old.sock.close()


def test_a_forged_hello_is_well_formed(gate_server: tuple[GateServer, bytes]) -> None:
    """With the secret, the forger's HELLO passes the project's door: what refuses the forged
    ones below is the proof, not a malformed HELLO."""
    server, secret = gate_server
    first = forge.hello(forge.CONTROL, 2, 1)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(first)
        reply = forge._read_exactly(sock, forge.REPLY.size, 5)
        assert len(reply) == forge.REPLY.size
        head = reply[:forge.REPLY.size - 32]
        sock.sendall(hmac.new(secret, b"C" + first + head, hashlib.sha256).digest())
        sock.sendall(forge.old_wire_frame(b"\0", forge.MSG_KIND))
        deadline = time.monotonic() + 5
        while not server.admitted and time.monotonic() < deadline:
            time.sleep(0.01)
    assert [(c.channel, c.site, c.attempt) for c, _ in server.admitted] == [(2, 2, 1)]
    assert server.admitted[0][1] == forge.MSG_KIND and server.gate.total_refused == 0


def test_the_door_refuses_every_forged_connection(gate_server: tuple[GateServer, bytes],
                                                  tmp_path: Path) -> None:
    server, _ = gate_server
    canary = tmp_path / "canary"
    target = forge.Target("driver", os.getpid(), "127.0.0.1", server.port,
                          forge.identify("127.0.0.1", server.port))
    assert target.identity == (0, 0)
    outcomes = forge.attack_all([target], canary, idle_driver=20, hold_s=4.0)
    table = forge.summary_table(outcomes)
    assert not canary.exists(), table
    assert server.admitted == [], table  # not one frame was read
    assert len(outcomes) == 8 and all(o.all_closed for o in outcomes), table
    for o in outcomes:
        if o.attack.startswith(("forged_hello", "reflected_mac")):
            assert o.received == forge.REPLY.size, table  # it reached the proof
        elif o.attack.startswith("replayed"):
            assert o.received == 2 * forge.REPLY.size and o.note == "server nonce fresh", table
        elif not o.attack.startswith("idle"):
            assert o.received == 0 and o.seconds < 0.5, table  # refused at the HELLO
    idle = outcomes[-1]
    assert sum(t < 0.5 for t in idle.close_times) >= 20 - 8, table  # over the limit: at once
    deadline = time.monotonic() + 2
    while server.gate.total_refused < 1 + sum(o.closed for o in outcomes) \
            and time.monotonic() < deadline:
        time.sleep(0.01)  # the probe's refusal is counted after the forger has moved on
    refused = server.gate.refused
    assert server.gate.total_refused == 1 + sum(o.closed for o in outcomes), (refused, table)
    assert refused["not a sparkflux handshake"] == 4  # random, pickle x2, 4 GB header
    assert refused["the dialler does not hold this run's secret"] == 5
    assert refused["too many unauthenticated connections"] >= 12


def test_proc_discovery_finds_ports_and_children() -> None:
    with socket.create_server(("127.0.0.1", 0)) as v4, \
            socket.create_server(("::1", 0), family=socket.AF_INET6) as v6:
        ports = forge.listening_ports([os.getpid()])[os.getpid()]
        assert v4.getsockname()[1] in ports and v6.getsockname()[1] in ports
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in forge.descendants(os.getpid())
        assert forge.site_pids(os.getpid()) == []  # a plain Python child is not a site
    finally:
        child.kill()
        child.wait()
    with pytest.raises(ValueError, match="loopback"):
        forge.check_loopback("10.0.0.1")


# -- against a live run --------------------------------------------------------------------------
class Forger(threading.Thread):
    """Waits until the driver (this process) and ``SITES`` sites listen, attacks them all once,
    then for ``REDISCOVER_S`` attacks each new site process (the retried site 1) once."""

    def __init__(self, canary: Path, skip: set[tuple[int, int]]) -> None:
        super().__init__(name="forger", daemon=True)
        self.canary = canary
        self.skip = skip
        self.stop = threading.Event()
        self.first_round: list[forge.Outcome] = []
        self.later: list[forge.Outcome] = []
        self.targets: list[forge.Target] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def _run(self) -> None:
        cache: dict[forge.Listener, tuple[int, int] | None] = {}
        me = os.getpid()
        deadline = time.monotonic() + DISCOVER_TIMEOUT_S
        while not self.stop.is_set():
            found = forge.discover(me, skip=self.skip, cache=cache)
            if any(t.role == "driver" for t in found) and \
                    sum(t.role == "site" for t in found) >= SITES:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"only found {found} within {DISCOVER_TIMEOUT_S:.0f}s")
            time.sleep(0.1)
        else:
            return
        self.targets = list(found)
        self.first_round = forge.attack_all(found, self.canary, DRIVER_IDLE, SITE_IDLE, HOLD_S,
                                            self.stop)
        seen = {(t.pid, t.port) for t in found}
        until = time.monotonic() + REDISCOVER_S
        while not self.stop.is_set() and time.monotonic() < until:
            new = [t for t in forge.discover(me, skip=self.skip, cache=cache)
                   if t.role == "site" and (t.pid, t.port) not in seen]
            if new:
                seen |= {(t.pid, t.port) for t in new}
                self.targets += new
                self.later += forge.attack_all(new, self.canary, 0, SITE_IDLE, HOLD_S,
                                               self.stop)
            time.sleep(0.2)


@pytest.fixture(scope="module")
def expected(netmon: Any, spark: Any) -> tuple[str, int]:
    digest, rows, _ = reference_digest(netmon, netmon_args(events=EVENTS), spark=spark)
    return digest, rows


@pytest.mark.spark
def test_forged_connections_are_refused_and_the_run_survives(
        netmon: Any, spark: Any, expected: tuple[str, int], tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    me = os.getpid()
    # listeners this process had before the run (PySpark's own) are not the driver's server
    forger = Forger(canary, {(me, port) for port in forge.listening_ports([me])[me]})
    forger.start()
    # the dashboard off: its HTTP port is not the wire these attacks aim at (its own test,
    # tests/unit/runtime/test_dashboard.py, closes idle connections)
    args = netmon_args(events=EVENTS, rate=RATE, ha="flux", sites=SITES,
                       partitions=PARTITIONS, batch_size=8192, window=400_000, kill=[KILL],
                       ui_port=-1)
    try:
        result = run_example(netmon, args, sink=NullSink(), dead=DeadLetters(), spark=spark)
    finally:
        ended = time.monotonic()
        forger.stop.set()
        forger.join(60)
    outcomes = forger.first_round + forger.later
    table = forge.summary_table(outcomes)
    print(table)
    print("refused_connections:", result.metrics.get("refused_connections"))
    print("sites' own counts:", [(s.get("site"), s.get("attempt"), s.get("refused"))
                                 for s in result.sites])
    assert forger.error is None, repr(forger.error)
    m = result.metrics

    # nothing was unpickled, and the run was not disturbed
    assert not canary.exists(), table
    assert (m["output_digest"], m["output_tuples"]) == expected
    assert m["kills"] == 1 and m["ingress_dropped"] == 0

    # every attack reached the driver and each of the four first sites, before the run ended,
    # and every forged connection was closed by the server (or by the death of its process)
    driver = [o for o in forger.first_round if o.target.startswith("driver")]
    sites = [o for o in forger.first_round if not o.target.startswith("driver")]
    assert len(driver) == 8 and all(o.all_closed for o in driver), table
    assert all(o.finished_at < ended for o in forger.first_round), table
    assert len({t.pid for t in forger.targets if t.role == "site"}) >= SITES, table
    assert all(o.all_closed for o in outcomes if o.connections), table
    for o in driver:
        if o.attack.startswith(("forged_hello", "reflected_mac", "replayed")):
            assert o.received >= forge.REPLY.size, table  # it got as far as the proof
    idle = next(o for o in driver if o.attack.startswith("idle"))
    assert idle.closed == DRIVER_IDLE, table

    # ... and each one is counted: by the driver, and by the sites that were not killed
    refused = m["refused_connections"]
    assert refused["driver"] >= sum(o.closed for o in driver), (refused, table)
    reasons = " | ".join(refused["driver_reasons"])
    for why in ("not a sparkflux handshake", "secret", "too many", "no handshake"):
        assert why in reasons, (refused, table)
    killed = {f["site"] for f in m["failures"]}
    alive = {t.pid for t in forger.targets if t.role == "site" and t.identity is not None
             and t.identity[0] not in killed}
    by_pid = {s["pid"]: s for s in result.sites}
    closed_at = {pid: sum(o.closed for o in sites if f" pid {pid} " in o.target) for pid in alive}
    for pid, closed in closed_at.items():
        if pid in by_pid:
            assert sum(by_pid[pid].get("refused", {}).values()) >= closed, (by_pid[pid], table)
    assert refused["sites"] >= sum(closed_at.values()), (refused, table)
