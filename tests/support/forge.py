"""A forger: attacks a running sparkflux job's servers the way an unauthenticated local
process could, to show that nothing it sends is decoded, let alone unpickled.

Every TCP connection of a run starts with a mutual HMAC challenge-response over the run's
secret (``sparkflux/runtime/handshake.py``). This module plays a process on the same host that
does not know that secret but can see the ports (``/proc`` is world-readable):

- discovery: the LISTEN ports of the driver process (the one that called
  ``sparkflux.runtime.driver.run``) and of its sites (PySpark Python workers forked by the
  ``pyspark.daemon`` under the Spark JVM, a child of the driver), read from ``/proc/<pid>/fd``
  and ``/proc/<pid>/net/tcp{,6}`` (no psutil);
- attacks against one ``(host, port)``, each returning an ``Outcome`` (did the server close
  the connection, how many bytes came back, how long it took): random bytes, a pickle that
  would create a canary file if anything unpickled it (framed as the old pickle wire did, and
  raw), a well-formed HELLO claiming a live site followed by a proof it cannot compute, a
  replayed handshake, the server's own MAC reflected back, a 4 GB frame header, and many idle
  connections (the door's timeout and its limit on unauthenticated connections).

The forger knows the wire's layout (it is public), not the run's secret. Every attack is
bounded in connections, bytes and time, and only loopback addresses are ever dialled.

CLI: ``python -m tests.support.forge --pid DRIVER_PID --canary PATH [--idle 200]`` attacks the
driver and every site once, prints a table, and exits 1 if the canary file exists afterwards (2:
no sparkflux server was found; 3: a forged connection was left open).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import hmac
import ipaddress
import os
import pathlib
import pickle
import secrets
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple

from sparkflux.runtime import frames, handshake

# -- the wire --------------------------------------------------------------------------------
# The layouts are taken from the project so that the forger speaks the current wire (the
# format is public: it is documented in handshake.py and frames.py); nothing else of the
# runtime is used, and no secret is read.
MAGIC = handshake.MAGIC
HELLO = handshake.HELLO  # magic, dialler nonce, channel, site, attempt[, registered]
REPLY = handshake.REPLY  # server nonce, server site, server attempt, MAC
PROOF_SIZE = handshake.PROOF.size
FRAME_HEADER = frames.FRAME_HEADER  # u32 little-endian length (kind + body), u8 kind
OLD_PICKLE_KIND = 2  # the kind the old wire used for a pickled message
MSG_KIND = frames.MSG  # the typed wire's message kind
DATA, CONTROL, PEER, STATE = handshake.DATA, handshake.CONTROL, handshake.PEER, handshake.STATE
CHANNEL_NAMES = dict(handshake.CHANNELS)
CLAIM_FIELDS = len(HELLO.unpack(bytes(HELLO.size))) - 2  # after magic and nonce

# -- bounds: every attack stops within these ---------------------------------------------------
MAX_IDLE = 1000  # idle connections one attack may open
MAX_RANDOM = 1 << 20  # random bytes one attack may send
MAX_RECEIVED = 1 << 16  # bytes read at a time from what a server sends back
CONNECT_TIMEOUT_S = 2.0
CLOSE_TIMEOUT_S = 10.0  # the servers close a bad handshake at once, an idle one after 5 s
TCP_LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket


# -- discovery through /proc ------------------------------------------------------------------
def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name in parentheses may itself hold spaces and parentheses
    return int(stat[stat.rindex(b")") + 2:].split()[1])


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, their children, ...), from the ppid field
    of ``/proc/*/stat``; a snapshot, so a process that just started or ended may be missed."""
    children: dict[int, list[int]] = {}
    for path in glob.glob("/proc/[0-9]*/stat"):
        child = int(path.split("/")[2])
        parent = _ppid(child)
        if parent is not None:
            children.setdefault(parent, []).append(child)
    out: list[int] = []
    stack = [pid]
    while stack:
        for child in sorted(children.get(stack.pop(), ())):
            out.append(child)
            stack.append(child)
    return out


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def _address(hex_addr: str) -> str:
    """An address of /proc/net/tcp{,6}: 32-bit words in host (little-endian) byte order."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def _listen_table(pid: int) -> dict[int, tuple[str, int]]:
    """Listening TCP sockets of ``pid``'s network namespace: inode -> (address, port)."""
    table: dict[int, tuple[str, int]] = {}
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != TCP_LISTEN:
                continue
            addr, port = cols[1].rsplit(":", 1)
            table[int(cols[9])] = (_address(addr), int(port, 16))
    return table


class Listener(NamedTuple):
    """A listening TCP socket; inodes are handed out in increasing order, so a larger one is
    (almost always) a newer socket."""

    inode: int
    address: str
    port: int


def listening_sockets(pids: Iterable[int]) -> dict[int, list[Listener]]:
    """The TCP LISTEN sockets, IPv4 and IPv6, owned by each pid, newest first ([] for a pid
    that is gone or not readable)."""
    out: dict[int, list[Listener]] = {}
    tables: dict[str, dict[int, tuple[str, int]]] = {}  # network namespace -> its table
    for pid in pids:
        inodes = _socket_inodes(pid)
        if not inodes:
            out[pid] = []
            continue
        try:
            ns = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            ns = f"pid {pid}"
        if ns not in tables:
            tables[ns] = _listen_table(pid)
        table = tables[ns]
        out[pid] = sorted((Listener(i, *table[i]) for i in inodes if i in table), reverse=True)
    return out


def listening_ports(pids: Iterable[int]) -> dict[int, list[int]]:
    """The TCP LISTEN ports (IPv4 and IPv6) owned by each pid, from the socket inodes of
    ``/proc/<pid>/fd`` and ``/proc/<pid>/net/tcp{,6}``."""
    return {pid: sorted({s.port for s in socks})
            for pid, socks in listening_sockets(pids).items()}


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def _is_pyspark_python(argv: Sequence[str]) -> bool:
    """A PySpark Python worker or daemon: ``python -m pyspark.daemon pyspark.worker`` (the
    daemon and the workers it forks share that command line) or ``python -m pyspark.worker``
    (without the daemon)."""
    return any(a.startswith("pyspark.") and a.split(".")[1] in ("daemon", "worker")
               for a in argv)


def site_pids(driver_pid: int) -> list[int]:
    """The driver's descendants that look like sparkflux sites: PySpark Python workers that
    have a LISTEN socket. The ``pyspark.daemon`` (a child of the JVM) also listens, for the JVM
    to ask it for workers; its forked workers share its command line but are its children,
    which is how the daemon is told apart."""
    procs = descendants(driver_pid)
    candidates = []
    for pid in procs:
        argv = _cmdline(pid)
        if not _is_pyspark_python(argv):
            continue
        parent = _ppid(pid)
        forked = parent is not None and _is_pyspark_python(_cmdline(parent))
        if forked or "pyspark.daemon" not in argv:
            candidates.append(pid)
    ports = listening_ports(candidates)
    return [pid for pid in candidates if ports.get(pid)]


def _loopback_target(address: str) -> str | None:
    """The loopback address to dial for a socket listening on ``address`` (None: it listens
    only on another interface, which the forger never dials)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        return "127.0.0.1" if ip.version == 4 else "::1"
    return str(ip) if ip.is_loopback else None


def check_loopback(host: str) -> None:
    """Refuse any target that is not this host's loopback interface."""
    if host == "localhost":
        return
    try:
        ok = ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"the forger only dials loopback addresses, not {host!r}")


@dataclass(frozen=True)
class Target:
    """One server to attack: the driver's or a site's, with the identity it gave (if probed)."""

    role: str  # "driver" or "site"
    pid: int
    host: str
    port: int
    identity: tuple[int, int] | None = None  # (site, attempt) from the server's reply

    @property
    def label(self) -> str:
        who = self.role
        if self.identity is not None and self.role == "site":
            who = f"site {self.identity[0]}.{self.identity[1]}"
        return f"{who} pid {self.pid} :{self.port}"


def discover(driver_pid: int, probe: bool = True, skip: Iterable[tuple[int, int]] = (),
             cache: dict[Listener, tuple[int, int] | None] | None = None) -> list[Target]:
    """The driver's and the sites' loopback servers; ``skip``: (pid, port) pairs to leave
    alone. With ``probe`` (the default), each process's listeners, newest first, are asked for
    their identity with a HELLO until one answers like a sparkflux server (one per process):
    the driver process holds other listeners (PySpark's accumulator server, which would log a
    traceback for a HELLO), and the newest first spares them. A probe is a connection the
    server counts as refused; ``cache`` (kept by the caller across calls) probes each listener
    once."""
    cache = {} if cache is None else cache
    skipped = set(skip)
    roles = (("driver", [driver_pid]), ("site", site_pids(driver_pid)))
    targets = []
    for role, pids in roles:
        for pid, socks in listening_sockets(pids).items():
            for sock in socks:
                host = _loopback_target(sock.address)
                if host is None or (pid, sock.port) in skipped:
                    continue
                if not probe:
                    targets.append(Target(role, pid, host, sock.port))
                    continue
                if sock not in cache:
                    cache[sock] = identify(host, sock.port)
                if cache[sock] is not None:
                    targets.append(Target(role, pid, host, sock.port, cache[sock]))
                    break
    return targets


# -- one connection ----------------------------------------------------------------------------
@dataclass
class Outcome:
    """What one attack saw. ``closed``: connections the server closed (EOF or reset) before
    the attack stopped waiting; ``seconds``: from the last byte sent to the slowest close (or to
    giving up); ``unreachable``: connections that could not be opened (no listener)."""

    attack: str
    target: str
    connections: int = 0
    closed: int = 0
    received: int = 0
    seconds: float = 0.0
    unreachable: int = 0
    note: str = ""
    close_times: list[float] = field(default_factory=list)
    finished_at: float = 0.0  # time.monotonic() when the attack returned

    @property
    def all_closed(self) -> bool:
        return self.connections > 0 and self.closed == self.connections

    def add(self, closed: bool, received: int, seconds: float) -> None:
        self.connections += 1
        self.closed += closed
        self.received += received
        self.seconds = max(self.seconds, seconds)
        if closed:
            self.close_times.append(seconds)


def _connect(host: str, port: int) -> socket.socket:
    check_loopback(host)
    sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _send(sock: socket.socket, data: bytes) -> bool:
    """Send; False if the server has already closed (the rest is not sent)."""
    try:
        sock.sendall(data)
        return True
    except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
        return False
    except TimeoutError:
        return True  # the server does not read: the kernel buffers are full


def _read_exactly(sock: socket.socket, n: int, timeout: float) -> bytes:
    """Up to ``n`` bytes: fewer if the server closes or goes quiet for ``timeout``."""
    out = b""
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(out))
        except (TimeoutError, ConnectionResetError, ConnectionAbortedError):
            break
        if not chunk:
            break
        out += chunk
    return out


def _await_close(sock: socket.socket, timeout: float) -> tuple[bool, int, float]:
    """Wait for the server to close: (closed, bytes received meanwhile, seconds waited)."""
    start = time.monotonic()
    received = 0
    while True:
        left = start + timeout - time.monotonic()
        if left <= 0:
            return False, received, time.monotonic() - start
        sock.settimeout(left)
        try:
            chunk = sock.recv(MAX_RECEIVED)
        except TimeoutError:
            return False, received, time.monotonic() - start
        except (ConnectionResetError, ConnectionAbortedError):
            return True, received, time.monotonic() - start
        if not chunk:
            return True, received, time.monotonic() - start
        received += len(chunk)


def _one_shot(attack: str, host: str, port: int, payloads: Sequence[bytes],
              timeout: float) -> Outcome:
    """One connection per payload: send it, then wait for the server to close."""
    out = Outcome(attack, f"{host}:{port}")
    for payload in payloads:
        try:
            sock = _connect(host, port)
        except OSError:
            out.unreachable += 1
            continue
        with sock:
            sent = _send(sock, payload)
            closed, received, seconds = _await_close(sock, timeout)
            out.add(closed or not sent, received, seconds)
    out.finished_at = time.monotonic()
    return out


# -- payloads ---------------------------------------------------------------------------------
def canary_pickle(canary_path: str | os.PathLike[str]) -> bytes:
    """A pickle that creates ``canary_path`` (``Path.touch``) when anything unpickles it: had
    a server unpickled a byte of it, the file would exist."""

    class Touch:
        def __reduce__(self) -> tuple[Callable[..., None], tuple[pathlib.Path]]:
            return pathlib.Path.touch, (pathlib.Path(os.path.abspath(canary_path)),)

    return pickle.dumps(Touch(), protocol=4)


def old_wire_frame(body: bytes, kind: int = OLD_PICKLE_KIND) -> bytes:
    """``u32 len | u8 kind | body``: how the old wire framed a pickled message."""
    return FRAME_HEADER.pack(1 + len(body), kind) + body


def hello(channel: int, site: int, attempt: int, nonce: bytes | None = None) -> bytes:
    """A well-formed HELLO: what a dialler sends first (any process can write one). The claim
    is (channel, site, attempt) and, where the wire has it, the slot the process registered
    as (a site's own slot unless it is a spare)."""
    claim = [channel, site, attempt, site]
    claim += [0] * (CLAIM_FIELDS - len(claim))
    return HELLO.pack(MAGIC, nonce or secrets.token_bytes(32), *claim[:CLAIM_FIELDS])


def _identity(reply: bytes) -> tuple[int, int]:
    """The (site, attempt) in a server's reply."""
    _, site, attempt, *_ = REPLY.unpack(reply)
    return site, attempt


# -- attacks ----------------------------------------------------------------------------------
def random_bytes(host: str, port: int, n: int = 4096, timeout: float = CLOSE_TIMEOUT_S
                 ) -> Outcome:
    """``n`` random bytes as the first bytes of a connection."""
    n = max(1, min(n, MAX_RANDOM))
    return _one_shot(f"random_bytes({n})", host, port, [secrets.token_bytes(n)], timeout)


def pickle_payload(host: str, port: int, canary_path: str | os.PathLike[str],
                   timeout: float = CLOSE_TIMEOUT_S) -> Outcome:
    """The canary pickle on two connections: framed as the old wire did (``u32 len | u8 2 |
    pickle``), and raw as the first bytes. The canary file must not appear."""
    blob = canary_pickle(canary_path)
    return _one_shot("pickle_payload", host, port, [old_wire_frame(blob), blob], timeout)


def _handshake_reply(sock: socket.socket, first: bytes, timeout: float) -> bytes:
    if not _send(sock, first):
        return b""
    return _read_exactly(sock, REPLY.size, timeout)


def forged_hello(host: str, port: int, site: int, attempt: int, channel: int,
                 canary_path: str | os.PathLike[str] | None = None,
                 timeout: float = CLOSE_TIMEOUT_S) -> Outcome:
    """A well-formed HELLO claiming to be ``site``'s incarnation ``attempt`` on ``channel``;
    the server's 72-byte reply is read, then a random proof (the forger cannot compute the
    HMAC) and a frame (the canary pickle in old-wire and in typed-message framing, if a canary
    is given) are sent. The server must close without reading the frame."""
    out = Outcome(f"forged_hello/{CHANNEL_NAMES.get(channel, channel)}", f"{host}:{port}")
    try:
        sock = _connect(host, port)
    except OSError:
        out.unreachable += 1
        out.finished_at = time.monotonic()
        return out
    with sock:
        reply = _handshake_reply(sock, hello(channel, site, attempt), timeout)
        tail = secrets.token_bytes(PROOF_SIZE)
        if canary_path is not None:
            blob = canary_pickle(canary_path)
            tail += old_wire_frame(blob) + old_wire_frame(blob, MSG_KIND)
        else:
            tail += old_wire_frame(b"\0" * 16, MSG_KIND)
        sent = len(reply) == REPLY.size and _send(sock, tail)
        closed, received, seconds = _await_close(sock, timeout)
        out.add(closed or not sent, len(reply) + received, seconds)
        if len(reply) == REPLY.size:
            s, a = _identity(reply)
            out.note = f"claimed site {site}.{attempt}; server is {s}.{a}"
        else:
            out.note = f"no reply ({len(reply)} bytes)"
    out.finished_at = time.monotonic()
    return out


def replayed_handshake(host: str, port: int, recorded_hello: bytes | None = None,
                       recorded_proof: bytes | None = None, site: int = 0, attempt: int = 0,
                       channel: int = CONTROL, timeout: float = CLOSE_TIMEOUT_S) -> Outcome:
    """A handshake replayed on a second connection. Without recorded bytes they are made up:
    connection A sends a HELLO and gets reply A; connection B sends A's HELLO again, gets reply
    B, and sends the proof a dialler would compute from reply A (with a guessed key: the real
    one is unknown; a recorded real proof would fail the same way, being bound to A's server
    nonce). A gets the same proof. Both must be closed, and B's server nonce must be fresh."""
    out = Outcome("replayed_handshake", f"{host}:{port}")
    first = recorded_hello or hello(channel, site, attempt)
    socks: list[socket.socket] = []
    try:
        replies = []
        for _ in range(2):
            try:
                sock = _connect(host, port)
            except OSError:
                out.unreachable += 1
                continue
            socks.append(sock)
            replies.append(_handshake_reply(sock, first, timeout))
        proof = recorded_proof
        if proof is None and replies and len(replies[0]) == REPLY.size:
            guessed_key = secrets.token_bytes(32)
            proof = hmac.new(guessed_key, b"C" + first + replies[0][:REPLY.size - 32],
                             hashlib.sha256).digest()
        proof = proof or secrets.token_bytes(PROOF_SIZE)
        for sock, reply in zip(socks, replies, strict=True):
            sent = len(reply) == REPLY.size and _send(sock, proof + old_wire_frame(b"x", MSG_KIND))
            closed, received, seconds = _await_close(sock, timeout)
            out.add(closed or not sent, len(reply) + received, seconds)
        if len(replies) == 2 and all(len(r) == REPLY.size for r in replies):
            fresh = replies[0][:32] != replies[1][:32]
            out.note = "server nonce fresh" if fresh else "SERVER NONCE REPEATED"
    finally:
        for sock in socks:
            sock.close()
    out.finished_at = time.monotonic()
    return out


def reflected_mac(host: str, port: int, site: int = 0, attempt: int = 0,
                  channel: int = CONTROL, timeout: float = CLOSE_TIMEOUT_S) -> Outcome:
    """The server's own MAC (from its reply) sent back as the dialler's proof: the two
    directions are labelled differently, so it must fail."""
    out = Outcome("reflected_mac", f"{host}:{port}")
    try:
        sock = _connect(host, port)
    except OSError:
        out.unreachable += 1
        out.finished_at = time.monotonic()
        return out
    with sock:
        reply = _handshake_reply(sock, hello(channel, site, attempt), timeout)
        sent = len(reply) == REPLY.size and _send(sock, reply[-32:])
        closed, received, seconds = _await_close(sock, timeout)
        out.add(closed or not sent, len(reply) + received, seconds)
    out.finished_at = time.monotonic()
    return out


def oversized_header(host: str, port: int, timeout: float = CLOSE_TIMEOUT_S) -> Outcome:
    """HELLO-sized garbage whose first 4 bytes announce a frame of 4 GB: a server that read a
    frame before authenticating would try to allocate (or wait for) 4 GB."""
    payload = FRAME_HEADER.pack(0xFFFFFFFF, MSG_KIND) + secrets.token_bytes(HELLO.size - 5)
    return _one_shot("oversized_header", host, port, [payload], timeout)


def idle_connections(host: str, port: int, n: int, hold_s: float) -> Outcome:
    """``n`` connections that send nothing, held for up to ``hold_s`` after the last one opened;
    ``closed`` is how many the server closed meanwhile, ``seconds`` the longest a connection
    lived. A sparkflux server closes those beyond its limit of pending handshakes at once and
    the others when its handshake timeout (5 s) expires. What is still open at the end is
    closed by the forger."""
    n = max(1, min(n, MAX_IDLE))
    out = Outcome(f"idle_connections({n})", f"{host}:{port}")
    sel = selectors.DefaultSelector()
    socks: list[socket.socket] = []
    opened: dict[socket.socket, float] = {}  # still open -> when it was opened

    def watch(timeout: float) -> None:
        for key, _ in sel.select(timeout=timeout):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                chunk = sock.recv(MAX_RECEIVED)
            except BlockingIOError:
                continue
            except (ConnectionResetError, ConnectionAbortedError):
                chunk = b""
            if chunk:
                out.received += len(chunk)
                continue
            sel.unregister(sock)
            out.add(True, 0, time.monotonic() - opened.pop(sock))

    try:
        opening = time.monotonic()
        for _ in range(n):
            if time.monotonic() - opening > hold_s:
                break  # the server's backlog is full: do not wait on it for ever
            try:
                sock = _connect(host, port)
            except OSError:
                out.unreachable += 1
                continue
            opened[sock] = time.monotonic()
            sock.setblocking(False)
            socks.append(sock)
            sel.register(sock, selectors.EVENT_READ)
            watch(0.0)  # closes at once are timed as such while the rest are opened
        deadline = time.monotonic() + hold_s
        while opened and time.monotonic() < deadline:
            watch(max(0.0, deadline - time.monotonic()))
        now = time.monotonic()
        for t in opened.values():
            out.add(False, 0, now - t)
        fast = sum(t < 1.0 for t in out.close_times)
        spread = sorted(out.close_times)
        median = f" (median {spread[len(spread) // 2]:.2f} s)" if spread else ""
        out.note = (f"{fast} closed within 1 s, {out.closed - fast} later{median}, "
                    f"{len(opened)} left open")
    finally:
        sel.close()
        for sock in socks:
            sock.close()
    out.finished_at = time.monotonic()
    return out


def identify(host: str, port: int, timeout: float = 2.0) -> tuple[int, int] | None:
    """The (site, attempt) a sparkflux server gives in reply to a HELLO, or None if it does not
    answer like one. The connection is then dropped (the server counts it as refused)."""
    try:
        sock = _connect(host, port)
    except OSError:
        return None
    with sock:
        reply = _handshake_reply(sock, hello(CONTROL, 0, 0), timeout)
    if len(reply) != REPLY.size:
        return None
    return _identity(reply)


# -- a whole round ------------------------------------------------------------------------------
def attacks_for(target: Target, canary_path: str | os.PathLike[str], idle: int,
                hold_s: float) -> list[tuple[str, Callable[[], Outcome]]]:
    """Every attack, once, against ``target``; the forged HELLOs claim live incarnations (slot
    0, or slot 1 against site 0) on each channel the target's role accepts."""
    h, p = target.host, target.port
    me = target.identity[0] if target.identity is not None else None
    other = 1 if me == 0 else 0
    channels = (DATA, CONTROL) if target.role == "driver" else (PEER, STATE)
    plan: list[tuple[str, Callable[[], Outcome]]] = [
        ("random_bytes", lambda: random_bytes(h, p)),
        ("pickle_payload", lambda: pickle_payload(h, p, canary_path)),
    ]
    for ch in channels:
        plan.append((f"forged_hello/{CHANNEL_NAMES[ch]}",
                     lambda ch=ch: forged_hello(h, p, other, 0, ch, canary_path)))
    plan += [
        ("replayed_handshake", lambda: replayed_handshake(h, p, site=other,
                                                          channel=channels[1])),
        ("reflected_mac", lambda: reflected_mac(h, p, site=other, channel=channels[0])),
        ("oversized_header", lambda: oversized_header(h, p)),
    ]
    if idle > 0:
        plan.append(("idle_connections", lambda: idle_connections(h, p, idle, hold_s)))
    return plan


def attack_all(targets: Sequence[Target], canary_path: str | os.PathLike[str],
               idle_driver: int = 200, idle_site: int = 16, hold_s: float = 8.0,
               stop: threading.Event | None = None) -> list[Outcome]:
    """Every attack against every target: targets in parallel (one thread each), a target's
    attacks one after another; ``stop`` ends the round between two attacks."""

    def against(t: Target) -> list[Outcome]:
        results = []
        idle = idle_driver if t.role == "driver" else idle_site
        for _, attack in attacks_for(t, canary_path, idle, hold_s):
            if stop is not None and stop.is_set():
                break
            o = attack()
            o.target = t.label
            results.append(o)
        return results

    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="forge") as pool:
        return [o for batch in pool.map(against, targets) for o in batch]


def summary_table(outcomes: Iterable[Outcome]) -> str:
    """attack, target, closed (yes/no, or how many of how many), seconds, bytes back, note."""
    rows = [("attack", "target", "closed", "seconds", "bytes back", "note")]
    for o in outcomes:
        if o.connections == 0:
            closed = "unreachable"
        elif o.all_closed:
            closed = "yes" if o.connections == 1 else f"yes ({o.connections})"
        else:
            closed = f"no ({o.closed}/{o.connections})" if o.closed else "no"
        rows.append((o.attack, o.target, closed, f"{o.seconds:.4f}", str(o.received), o.note))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.forge", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pid", type=int, required=True,
                    help="the driver process (the one running `sparkflux run`)")
    ap.add_argument("--canary", required=True,
                    help="a file the pickle payloads would create if any server unpickled them")
    ap.add_argument("--idle", type=int, default=200,
                    help="idle connections against the driver (default 200)")
    ap.add_argument("--site-idle", type=int, default=16,
                    help="idle connections against each site (default 16)")
    ap.add_argument("--hold", type=float, default=8.0,
                    help="how long idle connections are held, at most (default 8 s)")
    args = ap.parse_args(argv)
    canary = os.path.abspath(args.canary)
    if os.path.exists(canary):
        print(f"the canary {canary} exists already: remove it first", file=sys.stderr)
        return 2
    targets = discover(args.pid)
    if not any(t.role == "driver" for t in targets):
        print(f"no sparkflux server found in process {args.pid}", file=sys.stderr)
        return 2
    for t in targets:
        print(f"target: {t.label} ({t.host})")
    outcomes = attack_all(targets, canary, min(args.idle, MAX_IDLE),
                          min(args.site_idle, MAX_IDLE), args.hold)
    print(summary_table(outcomes))
    if os.path.exists(canary):
        print(f"CANARY {canary} EXISTS: a server unpickled attacker bytes", file=sys.stderr)
        return 1
    left_open = [o for o in outcomes if o.connections and not o.all_closed]
    if left_open:
        print(f"{len(left_open)} attack(s) left connections open", file=sys.stderr)
        return 3
    print(f"canary {canary} absent; every forged connection was closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
