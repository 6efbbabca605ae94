"""``sparkflux/runtime/netcut.py`` on plain sockets: a cut drops a site's peer links without
closing them, leaves its driver link alone (unless asked), blocks new connections to its
port, and after the heal the very same connections carry bytes again.

The world of these tests: an echo process stands for the site (its own server, a link it
dialled to the driver and one to peer B); the test process plays the driver (a listening
port), peer B (another) and peer A (which dials the site). Every byte the site gets it sends
back, so "the link carries bytes" is "what was sent comes back".

Tests that add iptables rules skip, saying why, where iptables is missing or not permitted
(the project installs Debian's ``iptables`` package; rules need root). They remove only their
own process's rules (tests may run in parallel workers).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from sparkflux.runtime import netcut
from sparkflux.runtime.netcut import Netcut

HOST = "127.0.0.1"
SILENCE_S = 1.0  # how long a cut link must stay silent to count as cut
RESUME_S = 30.0  # bound on a healed link's first bytes (a retransmission after back-off)
STEP_S = 10.0  # bound on anything else that should happen at once

# The site: listens, dials the driver then peer B, prints its port, then echoes every byte
# on every connection until its stdin closes.
SITE = r"""
import selectors, socket, sys
driver_port, peer_port = int(sys.argv[1]), int(sys.argv[2])
srv = socket.create_server(("127.0.0.1", 0))
sel = selectors.DefaultSelector()
sel.register(srv, selectors.EVENT_READ)
sel.register(sys.stdin, selectors.EVENT_READ)
for port in (driver_port, peer_port):
    sel.register(socket.create_connection(("127.0.0.1", port)), selectors.EVENT_READ)
print(srv.getsockname()[1], flush=True)
while True:
    for key, _ in sel.select():
        sock = key.fileobj
        if sock is sys.stdin:
            sys.exit(0)
        if sock is srv:
            sel.register(srv.accept()[0], selectors.EVENT_READ)
            continue
        data = sock.recv(65536)
        if not data:
            sel.unregister(sock)
            sock.close()
        else:
            sock.sendall(data)
"""


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``cond`` until true, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.02)


def read_exactly(sock: socket.socket, n: int, timeout: float) -> bytes:
    """Up to ``n`` bytes, fewer if ``timeout`` runs out first (or the peer closes)."""
    deadline = time.monotonic() + timeout
    out = b""
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(out))
        except TimeoutError:
            break
        if not chunk:
            raise AssertionError("the connection was closed")
        out += chunk
    return out


def echoes(sock: socket.socket, payload: bytes, timeout: float = STEP_S) -> bool:
    sock.sendall(payload)
    return read_exactly(sock, len(payload), timeout) == payload


def silent(sock: socket.socket, payload: bytes) -> bool:
    """Sent ``payload`` and nothing came back within ``SILENCE_S`` (a bounded negative
    check: there is no event to await for bytes that must not arrive)."""
    sock.sendall(payload)
    return read_exactly(sock, 1, SILENCE_S) == b""


def dial_times_out(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=SILENCE_S).close()
    except TimeoutError:
        return True
    return False


@dataclass
class World:
    site: subprocess.Popen[str]
    site_port: int
    driver_port: int
    peer_b_port: int
    to_driver: socket.socket  # the driver's end of the site's driver link
    to_b: socket.socket  # peer B's end of the link the site dialled
    to_a: socket.socket  # peer A's link, dialled to the site's port

    @property
    def pid(self) -> int:
        return self.site.pid


@pytest.fixture
def world() -> Iterator[World]:
    driver = socket.create_server((HOST, 0))
    peer_b = socket.create_server((HOST, 0))
    driver.settimeout(STEP_S)
    peer_b.settimeout(STEP_S)
    site = subprocess.Popen([sys.executable, "-c", SITE, str(driver.getsockname()[1]),
                             str(peer_b.getsockname()[1])],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    socks: list[socket.socket] = [driver, peer_b]
    try:
        to_driver = driver.accept()[0]
        to_b = peer_b.accept()[0]
        assert site.stdout is not None
        site_port = int(site.stdout.readline())
        to_a = socket.create_connection((HOST, site_port), timeout=STEP_S)
        socks += [to_driver, to_b, to_a]
        w = World(site, site_port, driver.getsockname()[1], peer_b.getsockname()[1],
                  to_driver, to_b, to_a)
        for s in (to_driver, to_b, to_a):
            assert echoes(s, b"hello"), "the echo site does not answer"
        yield w
    finally:
        netcut.heal_all(owner=os.getpid())
        for s in socks:
            s.close()
        if site.stdin is not None:
            site.stdin.close()
        try:
            site.wait(STEP_S)
        except subprocess.TimeoutExpired:
            site.kill()
            site.wait()


@pytest.fixture
def iptables() -> str:
    reason = netcut.unavailable_reason()
    if reason is not None:
        pytest.skip(f"netcut needs iptables rules on lo (root, Debian package iptables): "
                    f"{reason}")
    return netcut.iptables_binary()


def my_tags(binary: str) -> set[str]:
    return {tag for tag, _ in netcut.tagged_rules(binary)
            if tag.startswith(f"{netcut.TAG_PREFIX}{os.getpid()}-")}


# --- /proc and the plan: no iptables needed -------------------------------------------


def test_addresses_of_proc_net_tcp() -> None:
    assert netcut._address("0100007F") == "127.0.0.1"
    assert netcut._address("00000000000000000000000001000000") == "::1"
    # a dual-stack socket's IPv4 peer: what crosses the wire is IPv4
    assert netcut._address("0000000000000000FFFF00000100007F") == "127.0.0.1"


def test_process_sockets_lists_a_listener_and_both_ends_of_a_link() -> None:
    with socket.create_server((HOST, 0)) as srv:
        port = srv.getsockname()[1]
        with socket.create_connection((HOST, port)) as client, srv.accept()[0] as served:
            mine = netcut.process_sockets(os.getpid())
            assert port in mine.listen_ports
            ends = {(link.local.port, link.remote.port) for link in mine.links}
            assert (client.getsockname()[1], port) in ends
            assert (port, served.getpeername()[1]) in ends


def test_process_sockets_of_a_gone_process_says_so() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(netcut.NetcutError, match="gone"):
        netcut.process_sockets(proc.pid)


def test_the_plan_cuts_peer_links_and_the_site_port_not_the_driver_link(world: World) -> None:
    cut = Netcut(world.pid, [world.driver_port])
    rules = cut.plan()
    assert cut.links is not None
    assert {link.remote.port for link in cut.links.peer} == {
        world.peer_b_port, world.to_a.getsockname()[1]}  # B found: a non-JVM listener
    assert [link.remote.port for link in cut.links.driver] == [world.driver_port]
    specs = [" ".join(r.spec) for r in rules]
    assert len(rules) == 5, specs  # two links both ways, SYNs to the site's port
    assert sum(f"--syn --dport {world.site_port}" in s for s in specs) == 1
    assert not any(str(world.driver_port) in s for s in specs)
    assert not any(str(world.peer_b_port) in s and "--syn" in s for s in specs)

    with_driver = Netcut(world.pid, [world.driver_port], cut_driver=True).plan()
    assert sum(str(world.driver_port) in " ".join(r.spec) for r in with_driver) == 2

    no_peers = Netcut(world.pid, [world.driver_port], peer_ports=[])
    no_peers.plan()
    assert no_peers.links is not None
    assert [link.remote.port for link in no_peers.other] == [world.peer_b_port]

    redials = Netcut(world.pid, [world.driver_port], cut_driver=True,
                     block_redials=True).plan()
    syns = {r.spec[-1] for r in redials if "--syn" in r.spec}
    assert syns == {str(world.site_port), str(world.peer_b_port), str(world.driver_port)}


# --- real cuts ---------------------------------------------------------------------------


def test_a_cut_silences_peer_links_keeps_the_driver_link_and_heals_them(
        world: World, iptables: str) -> None:
    a_port = world.to_a.getsockname()[1]
    cut = Netcut(world.pid, [world.driver_port]).cut()
    try:
        assert cut.active and my_tags(iptables) == {cut.tag}
        assert silent(world.to_a, b"A-during"), "peer A's link still carries bytes"
        assert silent(world.to_b, b"B-during"), "peer B's link still carries bytes"
        assert echoes(world.to_driver, b"D-during"), "the driver link was cut"
        assert dial_times_out(world.site_port), "a new connection to the site got through"
    finally:
        cut.heal()
    assert not cut.active and cut.healed.is_set() and my_tags(iptables) == set()

    # the very same connections deliver what was sent during the cut, then more
    assert read_exactly(world.to_a, 8, RESUME_S) == b"A-during"
    assert read_exactly(world.to_b, 8, RESUME_S) == b"B-during"
    assert echoes(world.to_a, b"A-after") and echoes(world.to_b, b"B-after")
    assert a_port in {link.remote.port for link in netcut.process_sockets(world.pid).links}
    socket.create_connection((HOST, world.site_port), timeout=STEP_S).close()
    cut.heal()  # again: nothing to do


def test_cut_driver_silences_the_driver_link_too_and_heals_by_itself(
        world: World, iptables: str) -> None:
    cut = Netcut(world.pid, [world.driver_port], cut_driver=True).cut(duration=4.0)
    assert silent(world.to_driver, b"D-during"), "the driver link still carries bytes"
    assert silent(world.to_a, b"A-during")
    assert cut.healed.wait(STEP_S), "the timed cut did not heal by itself"
    assert my_tags(iptables) == set()
    assert read_exactly(world.to_driver, 8, RESUME_S) == b"D-during"
    assert read_exactly(world.to_a, 8, RESUME_S) == b"A-during"


def test_the_context_manager_heals_on_exit(world: World, iptables: str) -> None:
    with Netcut(world.pid, [world.driver_port], peer_ports=[world.peer_b_port]) as cut:
        assert len(cut.rules) == 5 and my_tags(iptables) == {cut.tag}
        assert silent(world.to_b, b"B-during")
    assert my_tags(iptables) == set()
    assert read_exactly(world.to_b, 8, RESUME_S) == b"B-during"


def test_heal_all_sweeps_a_forgotten_cut(world: World, iptables: str) -> None:
    cut = Netcut(world.pid, [world.driver_port]).cut()
    assert my_tags(iptables) == {cut.tag}
    assert netcut.heal_all(owner=os.getpid()) == len(cut.rules)
    assert my_tags(iptables) == set() and cut.healed.is_set() and not cut.active
    assert echoes(world.to_a, b"swept")
    cut.heal()  # a swept cut heals as a no-op


def test_a_failed_cut_adds_nothing(world: World, iptables: str) -> None:
    cut = Netcut(world.pid, [world.driver_port], binary="sparkflux-no-such-iptables")
    with pytest.raises(netcut.NetcutError, match="refused"):
        cut.cut()
    assert not cut.active and my_tags(iptables) == set()


# A process that cuts a link of its own, prints the cut's tag, then exits (atexit heals) or,
# with "hold", waits for its stdin to close (the test SIGKILLs it first: no hook runs).
CUTTER = r"""
import os, socket, sys
from sparkflux.runtime.netcut import Netcut
srv = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(srv.getsockname())
served = srv.accept()[0]
cut = Netcut(os.getpid(), []).cut()
print(cut.tag, flush=True)
if sys.argv[1] == "hold":
    sys.stdin.read()
"""


def run_cutter(mode: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", CUTTER, mode], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def all_tags(binary: str) -> set[str]:
    return {tag for tag, _ in netcut.tagged_rules(binary)}


def test_a_process_that_exits_without_healing_heals_at_exit(iptables: str) -> None:
    proc, tag = run_cutter("exit")
    assert tag.startswith(f"{netcut.TAG_PREFIX}{proc.pid}-")
    assert proc.wait(STEP_S) == 0
    assert tag not in all_tags(iptables)


def test_heal_orphans_sweeps_the_cut_of_a_killed_process(iptables: str) -> None:
    proc, tag = run_cutter("hold")
    try:
        assert tag in all_tags(iptables)
    finally:
        proc.kill()
        proc.wait()
    assert tag in all_tags(iptables)  # SIGKILL: no hook ran
    assert netcut.heal_orphans() >= 1
    assert tag not in all_tags(iptables)
