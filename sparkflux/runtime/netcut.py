"""Network partitions on this machine's loopback interface, a test tool: cut a site's TCP
links to its peers (and, if asked, to the driver) for a while, then heal them.

Killing or stopping a process is not a partition: a real network cut leaves both ends alive
and their TCP connections open, and only packets go missing. This module makes one with
``iptables`` rules in the ``INPUT`` chain on ``lo`` (every packet between two processes of
this machine crosses it, whatever address they use)::

    iptables -w -I INPUT -i lo -p tcp -s A --sport a -d B --dport b \
        -m comment --comment sparkflux-netcut-<owner>-<n> -j DROP

Why ``INPUT`` and not ``OUTPUT``: a packet dropped in ``OUTPUT`` fails the sender's
``send``/``connect`` at once with ``EPERM``, which no real network does; dropped on the way
in, it is simply lost, and the sender's TCP retransmits with back-off as it would across a
broken switch. Rules are inserted at the head of the chain so that a broad ``-i lo -j
ACCEPT`` that a firewall may hold cannot overrule them.

What a cut drops, for the process ``pid`` (the site's Python worker):

- both directions of each of its open TCP connections that is a *peer link*: one it
  accepted on its own listening port, or one it dialled to a peer's listening port (given as
  ``peer_ports``, or found: a port some non-JVM process of this machine listens on);
- new connections to its listening port(s) (``--syn``: only the first packet of a TCP
  handshake), so a peer's re-dial cannot heal the cut; only this process listens there, so
  nothing else is hurt;
- with ``cut_driver=True``, both directions of its links to the driver too (a link whose
  local or remote port is one of ``driver_ports``);
- with ``block_redials=True``, new connections to the peers' listening ports (and to the
  driver's port when ``cut_driver``), so the site's own re-dials fail too. iptables cannot
  tell which process sends a SYN, so this blocks *every* process's new connections to those
  ports, a replacement site's included: off by default.

Links that are neither (e.g. the Python worker's socket to its executor JVM) are left alone
and listed in :attr:`Netcut.other`.

Each cut tags its rules with a comment unique to it, ``sparkflux-netcut-<owner pid>-<n>``,
so :meth:`Netcut.heal` deletes exactly its own rules; :func:`heal_all` deletes every rule
tagged ``sparkflux-netcut-`` (or only those of one owner process, or of owners that are
gone), and an ``atexit`` hook heals whatever this process still has cut when it exits
(which no hook can do after SIGKILL: :func:`heal_orphans` sweeps those).

Usage::

    with Netcut(site_pid, driver_ports=[driver_port]) as cut:   # cut now, heal on exit
        ...
    Netcut(site_pid, [driver_port], cut_driver=True).cut(duration=45.0)  # heals by itself

CLI: ``python -m sparkflux.runtime.netcut --pid PID --driver-port PORT --seconds 45``
(``--driver``, ``--peer-port``, ``--block-redials``, ``--dry-run``; ``--heal-all`` sweeps).

Limits: loopback only (a link to another machine does not cross ``lo``; its rules match
nothing); needs root (``CAP_NET_ADMIN``) and the ``iptables`` binary (Debian package
``iptables``; the nf_tables and the legacy backends both work); the connections are those
open when :meth:`Netcut.cut` is called; a connection that the site dials during the cut to a
port not in ``peer_ports`` is not cut unless ``block_redials``. After a long cut, traffic on
an old connection resumes at the sender's next retransmission, up to tens of seconds after
the heal (TCP's exponential back-off), not at once.
"""

from __future__ import annotations

import argparse
import atexit
import ipaddress
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

PROC = Path("/proc")
TAG_PREFIX = "sparkflux-netcut-"
CHAIN = "INPUT"
LOOPBACK = "lo"
TCP_LISTEN = "0A"  # the state column of /proc/net/tcp{,6} for a listening socket
# the binaries tried, in order, for IPv4 (the IPv6 one is named alike: ip6tables...)
IPTABLES_CANDIDATES = ("iptables", "iptables-nft", "iptables-legacy")
ENV_BINARY = "SPARKFLUX_IPTABLES"  # overrides the choice, e.g. iptables-legacy
IPTABLES_TIMEOUT_S = 30.0


class NetcutError(RuntimeError):
    """A cut could not be made or healed (no iptables, not permitted, process gone, ...)."""


# ---------------------------------------------------------------------------------------
# A process's TCP sockets, from /proc (no psutil: the project does not depend on it)


@dataclass(frozen=True)
class Endpoint:
    """One end of a TCP socket. IPv4-mapped IPv6 addresses (``::ffff:127.0.0.1``, what a
    dual-stack socket shows) are stored as IPv4: that is what crosses the wire."""

    address: str
    port: int

    @property
    def family(self) -> int:
        """4 or 6: which of iptables and ip6tables sees its packets."""
        return ipaddress.ip_address(self.address).version

    @property
    def wildcard(self) -> bool:
        return ipaddress.ip_address(self.address).is_unspecified

    def __str__(self) -> str:
        return f"[{self.address}]:{self.port}" if self.family == 6 else \
            f"{self.address}:{self.port}"


@dataclass(frozen=True)
class Link:
    """An open (not listening) TCP connection of the process, seen from its side."""

    local: Endpoint
    remote: Endpoint
    state: str  # the hex state of /proc/net/tcp (01: ESTABLISHED)

    def __str__(self) -> str:
        return f"{self.local} <-> {self.remote}"


@dataclass(frozen=True)
class Sockets:
    """A process's TCP sockets at one moment: its listening endpoints and open links."""

    pid: int
    listening: tuple[Endpoint, ...]
    links: tuple[Link, ...]

    @property
    def listen_ports(self) -> frozenset[int]:
        return frozenset(e.port for e in self.listening)


def _address(hex_addr: str) -> str:
    """An address of /proc/net/tcp{,6}: 32-bit words in host (little-endian) byte order;
    IPv4-mapped IPv6 addresses come back as IPv4."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def _endpoint(column: str) -> Endpoint:
    addr, port = column.rsplit(":", 1)
    return Endpoint(_address(addr), int(port, 16))


def _socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets among ``pid``'s open files."""
    try:
        fds = os.listdir(PROC / str(pid) / "fd")
    except FileNotFoundError as e:
        raise NetcutError(f"process {pid} is gone") from e
    except PermissionError as e:
        raise NetcutError(f"cannot read the open files of process {pid} (not root?)") from e
    inodes: set[int] = set()
    for fd in fds:
        try:
            target = os.readlink(PROC / str(pid) / "fd" / fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _tcp_table(pid: int) -> list[tuple[Endpoint, Endpoint, str, int]]:
    """Every TCP socket of ``pid``'s network namespace: (local, remote, state, inode)."""
    rows: list[tuple[Endpoint, Endpoint, str, int]] = []
    for name in ("tcp", "tcp6"):
        try:
            lines = (PROC / str(pid) / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue  # no IPv6 here, or the process is gone (its fds said so already)
        for line in lines:
            cols = line.split()
            if len(cols) >= 10:
                rows.append((_endpoint(cols[1]), _endpoint(cols[2]), cols[3], int(cols[9])))
    return rows


def process_sockets(pid: int) -> Sockets:
    """The TCP sockets that process ``pid`` holds open now, IPv4 and IPv6, from
    ``/proc/<pid>/fd`` (which sockets are its own) and ``/proc/<pid>/net/tcp{,6}`` (their
    addresses). Sockets in TIME_WAIT belong to no process and are not listed."""
    inodes = _socket_inodes(pid)
    listening: list[Endpoint] = []
    links: list[Link] = []
    for local, remote, state, inode in _tcp_table(pid):
        if inode == 0 or inode not in inodes:
            continue
        if state == TCP_LISTEN:
            listening.append(local)
        else:
            links.append(Link(local, remote, state))
    return Sockets(pid, tuple(sorted(set(listening), key=str)),
                   tuple(sorted(set(links), key=str)))


def _listener_owners(pid: int) -> dict[int, set[int]]:
    """Listening port -> the pids that hold a socket listening on it, in ``pid``'s network
    namespace (a scan of every process's open files: slow-ish, done once per cut)."""
    by_inode = {inode: local.port for local, _, state, inode in _tcp_table(pid)
                if state == TCP_LISTEN and inode}
    owners: dict[int, set[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            mine = _socket_inodes(int(entry.name))
        except NetcutError:
            continue
        for inode in mine & by_inode.keys():
            owners.setdefault(by_inode[inode], set()).add(int(entry.name))
    return owners


def _comm(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def discover_peer_ports(pid: int, driver_ports: Iterable[int] = ()) -> frozenset[int]:
    """Guess which of ``pid``'s outgoing links go to peers when their ports are not given:
    ports that another process of this machine listens on, that are no driver port and whose
    listener is no JVM (a Python worker also talks to its executor's JVM, which is no
    peer)."""
    drivers = set(driver_ports)
    mine = process_sockets(pid)
    owners = _listener_owners(pid)
    out: set[int] = set()
    for link in mine.links:
        port = link.remote.port
        if port in drivers or port in mine.listen_ports:
            continue
        holders = owners.get(port, set()) - {pid}
        if holders and not any(_comm(h) == "java" for h in holders):
            out.add(port)
    return frozenset(out)


@dataclass(frozen=True)
class Classified:
    """A process's links, sorted by what a cut does to them."""

    peer: tuple[Link, ...]
    driver: tuple[Link, ...]
    other: tuple[Link, ...]  # neither: left alone (e.g. a Python worker's link to its JVM)


def classify(sockets: Sockets, driver_ports: Iterable[int], peer_ports: Iterable[int]
             ) -> Classified:
    """Sort ``sockets``' links: a driver link has a driver port at either end (checked
    first); a peer link was accepted on one of the process's listening ports, or goes to one
    of ``peer_ports``; anything else is other."""
    drivers, peers = set(driver_ports), set(peer_ports)
    listen = sockets.listen_ports
    out: dict[str, list[Link]] = {"peer": [], "driver": [], "other": []}
    for link in sockets.links:
        if link.remote.port in drivers or link.local.port in drivers:
            out["driver"].append(link)
        elif link.local.port in listen or link.remote.port in peers:
            out["peer"].append(link)
        else:
            out["other"].append(link)
    return Classified(tuple(out["peer"]), tuple(out["driver"]), tuple(out["other"]))


# ---------------------------------------------------------------------------------------
# iptables


@dataclass(frozen=True)
class Rule:
    """One DROP rule of the ``INPUT`` chain, without its chain and comment: ``spec`` are the
    match arguments, ``family`` picks iptables (4) or ip6tables (6)."""

    family: int
    spec: tuple[str, ...]
    why: str

    def args(self, tag: str) -> list[str]:
        """The arguments after ``-I INPUT`` / ``-D INPUT``."""
        return [*self.spec, "-m", "comment", "--comment", tag, "-j", "DROP"]

    def __str__(self) -> str:
        tool = "iptables" if self.family == 4 else "ip6tables"
        return f"{tool} -I {CHAIN} {shlex.join(self.spec)} -j DROP  # {self.why}"


def _host(address: str) -> str:
    return f"{address}/{32 if ipaddress.ip_address(address).version == 4 else 128}"


def link_rules(link: Link, why: str) -> list[Rule]:
    """Two rules that drop both directions of one connection (by its 4-tuple)."""
    out = []
    for src, dst in ((link.local, link.remote), (link.remote, link.local)):
        spec = ("-i", LOOPBACK, "-p", "tcp", "-s", _host(src.address), "--sport",
                str(src.port), "-d", _host(dst.address), "--dport", str(dst.port))
        out.append(Rule(src.family, spec, f"{why} {src} -> {dst}"))
    return out


def syn_rules(port: int, families: Iterable[int], why: str) -> list[Rule]:
    """Rules that drop the opening packet (SYN) of any new connection to ``port``."""
    spec = ("-i", LOOPBACK, "-p", "tcp", "--syn", "--dport", str(port))
    return [Rule(f, spec, f"{why} (new connections to port {port})")
            for f in sorted(set(families))]


def _run(cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        # our own iptables commands, never a shell
        return subprocess.run(list(cmd), capture_output=True, text=True,  # noqa: S603
                              timeout=IPTABLES_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(list(cmd), 127, "", str(e))


def _v6_name(binary: str) -> str:
    head, sep, tail = binary.rpartition("iptables")
    return f"{head}ip6tables{tail}" if sep else binary


def _probe(binary: str) -> str | None:
    """Why ``binary`` cannot add and delete a tagged loopback rule here (None: it can)."""
    if shutil.which(binary) is None:
        return f"{binary} is not installed (Debian package: iptables)"
    args = ["-i", LOOPBACK, "-p", "tcp", "--dport", "9", "-m", "comment", "--comment",
            f"{TAG_PREFIX}probe-{os.getpid()}", "-j", "DROP"]  # 9: discard, unused
    added = _run([binary, "-w", "-A", CHAIN, *args])
    if added.returncode != 0:
        return f"{binary} cannot add a rule: {(added.stderr or added.stdout).strip()}"
    deleted = _run([binary, "-w", "-D", CHAIN, *args])
    if deleted.returncode != 0:
        return f"{binary} cannot delete a rule: {(deleted.stderr or deleted.stdout).strip()}"
    return None


_choice_lock = threading.Lock()
_choice: tuple[str | None, str] | None = None  # (binary, why not) once probed


def iptables_binary() -> str:
    """The iptables binary that works here (probed once per process: ``$SPARKFLUX_IPTABLES``
    if set, else the first of iptables, iptables-nft, iptables-legacy that can add and
    delete a rule). Raises :class:`NetcutError` saying why none can."""
    global _choice
    with _choice_lock:
        if _choice is None:
            forced = os.environ.get(ENV_BINARY)
            reasons = []
            for binary in (forced,) if forced else IPTABLES_CANDIDATES:
                reason = _probe(binary)
                if reason is None:
                    _choice = (binary, "")
                    break
                reasons.append(reason)
            else:
                _choice = (None, "; ".join(reasons))
        chosen, reason = _choice
    if chosen is None:
        raise NetcutError(f"no usable iptables: {reason}")
    return chosen


def unavailable_reason() -> str | None:
    """Why cuts cannot be made here (None: they can): for tests to skip with."""
    if sys.platform != "linux":
        return "netcut needs Linux (iptables)"
    try:
        iptables_binary()
    except NetcutError as e:
        return str(e)
    return None


def _sweep_binaries() -> list[str]:
    """Every iptables variant installed, both families: a sweep looks in each table a cut
    may have used (the nf_tables and the legacy ones are separate)."""
    names = [n for b in IPTABLES_CANDIDATES for n in (b, _v6_name(b))]
    forced = os.environ.get(ENV_BINARY)
    if forced:
        names += [forced, _v6_name(forced)]
    return [n for n in dict.fromkeys(names) if shutil.which(n)]


def tagged_rules(binary: str) -> list[tuple[str, list[str]]]:
    """The ``sparkflux-netcut-`` rules of ``binary``'s INPUT chain: (tag, the arguments
    after ``-A INPUT``)."""
    listed = _run([binary, "-w", "-S", CHAIN])
    if listed.returncode != 0:
        return []
    out = []
    for line in listed.stdout.splitlines():
        words = shlex.split(line)
        if len(words) < 3 or words[:2] != ["-A", CHAIN] or "--comment" not in words:
            continue
        at = words.index("--comment")
        tag = words[at + 1] if at + 1 < len(words) else ""
        if tag.startswith(TAG_PREFIX):
            out.append((tag, words[2:]))
    return out


def _owner(tag: str) -> int | None:
    """The pid of the process that made a cut, from its tag."""
    head = tag[len(TAG_PREFIX):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def heal_all(owner: int | None = None) -> int:
    """Delete every ``sparkflux-netcut-`` rule of every iptables table on this machine (with
    ``owner``: only the rules of cuts made by that pid); returns how many went. The safety
    net for tests and CI: whatever cut was left behind, this heals it."""
    removed = 0
    for binary in _sweep_binaries():
        for tag, args in tagged_rules(binary):
            if owner is not None and _owner(tag) != owner:
                continue
            if _run([binary, "-w", "-D", CHAIN, *args]).returncode == 0:
                removed += 1
    if owner is None or owner == os.getpid():
        with _live_lock:
            cuts = list(_live)
        for cut in cuts:
            if owner is None or cut.owner == owner:
                cut._forget()
    return removed


def heal_orphans() -> int:
    """Delete the rules of cuts whose owner process is gone (killed before it could heal);
    returns how many went."""
    removed = 0
    for binary in _sweep_binaries():
        for tag, args in tagged_rules(binary):
            pid = _owner(tag)
            if (pid is not None and not (PROC / str(pid)).exists()
                    and _run([binary, "-w", "-D", CHAIN, *args]).returncode == 0):
                removed += 1
    return removed


# ---------------------------------------------------------------------------------------
# A cut


_live_lock = threading.Lock()
_live: set[Netcut] = set()
_seq = 0
_atexit_armed = False


def _heal_live_at_exit() -> None:
    """atexit: heal what this process still has cut, then sweep any rule tagged with its
    pid (a cut dropped without heal)."""
    with _live_lock:
        cuts = list(_live)
    for cut in cuts:
        try:
            cut.heal()
        except NetcutError:
            pass
    heal_all(owner=os.getpid())


def _next_tag() -> str:
    global _seq, _atexit_armed
    with _live_lock:
        _seq += 1
        if not _atexit_armed:
            atexit.register(_heal_live_at_exit)
            _atexit_armed = True
        return f"{TAG_PREFIX}{os.getpid()}-{_seq}"


@dataclass(eq=False)
class Netcut:
    """A partition of one process (``pid``, a site's Python worker) from its peers, and from
    the driver too with ``cut_driver``: made by :meth:`cut`, undone by :meth:`heal`; a
    context manager that cuts on entry and heals on exit.

    ``driver_ports``: the port(s) the driver listens on (a link with one of them at either
    end is a driver link). ``peer_ports``: the peers' listening ports, telling the links the
    process dialled to a peer from others (None: found, see :func:`discover_peer_ports`).
    ``block_redials``: also drop new connections to the peers' ports (and to the driver's
    when ``cut_driver``) from any process; see the module's doc. ``binary``: an iptables
    binary to use instead of the probed one. ``towards``: the pids of the peers to cut it
    from (one side of a partition; None: every peer); then only the peer links whose other
    end one of them holds are cut, and new connections are not blocked (the process's own
    side still dials it)."""

    pid: int
    driver_ports: Sequence[int] = ()
    cut_driver: bool = False
    peer_ports: Iterable[int] | None = None
    block_redials: bool = False
    binary: str | None = None
    towards: Iterable[int] | None = None
    tag: str = field(default="", init=False)
    owner: int = field(default=0, init=False)
    links: Classified | None = field(default=None, init=False)
    rules: list[Rule] = field(default_factory=list, init=False)
    _applied: list[Rule] = field(default_factory=list, init=False, repr=False)
    _timer: threading.Timer | None = field(default=None, init=False, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    healed: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    @property
    def other(self) -> tuple[Link, ...]:
        """The process's links this cut leaves alone (neither peer nor driver links)."""
        return self.links.other if self.links is not None else ()

    @property
    def active(self) -> bool:
        return bool(self._applied)

    def plan(self) -> list[Rule]:
        """The rules a cut of the process, as it is now, would add (nothing is applied):
        reads ``/proc`` only, so it needs no iptables."""
        sockets = process_sockets(self.pid)
        peers = (frozenset(self.peer_ports) if self.peer_ports is not None
                 else discover_peer_ports(self.pid, self.driver_ports))
        self.links = classify(sockets, self.driver_ports, peers)
        rules: list[Rule] = []
        cut_peers = self.links.peer
        if self.towards is not None:  # one side of a partition: the links to the other
            theirs = {link.local for pid in self.towards for link in process_sockets(pid).links}
            cut_peers = tuple(link for link in cut_peers if link.remote in theirs)
        for link in cut_peers:
            rules += link_rules(link, "peer link")
        if self.cut_driver:
            for link in self.links.driver:
                rules += link_rules(link, "driver link")
        for port in sorted(sockets.listen_ports) if self.towards is None else ():
            families = {e.family for e in sockets.listening if e.port == port}
            if any(e.family == 6 and e.wildcard for e in sockets.listening if e.port == port):
                families.add(4)  # a dual-stack listener also takes IPv4 connections
            rules += syn_rules(port, families, "own listening port")
        if self.block_redials:
            dialled = {link.remote.port: link.remote.family for link in self.links.peer
                       if link.local.port not in sockets.listen_ports}
            targets = {p: {dialled.get(p, 4)} for p in peers}
            if self.cut_driver:
                targets.update({p: {4} for p in self.driver_ports})
                for link in self.links.driver:
                    if link.remote.port in self.driver_ports:
                        targets[link.remote.port].add(link.remote.family)
            for port, fams in sorted(targets.items()):
                rules += syn_rules(port, fams, "re-dials")
        return list(dict.fromkeys(rules))

    def _binary(self, family: int) -> str:
        base = self.binary or iptables_binary()
        return base if family == 4 else _v6_name(base)

    def cut(self, duration: float | None = None) -> Netcut:
        """Snapshot the process's connections and add the DROP rules (all or none: a failure
        removes those already added and raises :class:`NetcutError`). With ``duration``
        (seconds), :meth:`heal` runs by itself that long after, on a daemon timer thread;
        :attr:`healed` is set when it has. Returns ``self``."""
        with self._lock:
            if self._applied:
                raise NetcutError(f"{self.tag} is already cut; heal it first")
            rules = self.plan()
            self.tag = _next_tag()
            self.owner = os.getpid()
            self.rules = rules
            self.healed.clear()
            with _live_lock:
                _live.add(self)
            for rule in rules:
                binary = self._binary(rule.family)
                done = _run([binary, "-w", "-I", CHAIN, *rule.args(self.tag)])
                if done.returncode != 0:
                    self._heal_quietly()
                    raise NetcutError(f"{binary} refused {rule}: "
                                      f"{(done.stderr or done.stdout).strip()}")
                self._applied.append(rule)
            if duration is not None:
                self._timer = threading.Timer(duration, self._heal_quietly)
                self._timer.daemon = True
                self._timer.start()
        return self

    def _heal_quietly(self) -> None:
        try:
            self.heal()
        except NetcutError:
            pass  # the atexit sweep or heal_all() gets what is left

    def heal(self) -> None:
        """Delete this cut's rules (again: nothing to do). The connections were never closed,
        so they carry bytes again once the senders retransmit. Raises :class:`NetcutError`
        if a rule that is still there cannot be deleted."""
        with self._lock:
            if self._timer is not None and self._timer is not threading.current_thread():
                self._timer.cancel()
            self._timer = None
            failed = []
            for rule in list(self._applied):
                binary = self._binary(rule.family)
                done = _run([binary, "-w", "-D", CHAIN, *rule.args(self.tag)])
                # deleted, or not there any more (a sweep got it): ``-C`` exits 1 for
                # "no such rule", other codes for errors (4: not permitted)
                if done.returncode == 0 or _run(
                        [binary, "-w", "-C", CHAIN, *rule.args(self.tag)]).returncode == 1:
                    self._applied.remove(rule)
                else:
                    failed.append(f"{rule}: {(done.stderr or done.stdout).strip()}")
            if failed:
                raise NetcutError(f"cannot heal {self.tag}: " + "; ".join(failed))
            self._forget()

    def _forget(self) -> None:
        """Mark healed (its rules are gone, by :meth:`heal` or a sweep)."""
        with self._lock:
            self._applied.clear()
            with _live_lock:
                _live.discard(self)
            self.healed.set()

    def describe(self) -> str:
        """What the cut drops and leaves, one line each (for logs and the CLI)."""
        lines = [f"netcut {self.tag or '(planned)'} of process {self.pid}:"]
        lines += [f"  {r}" for r in self.rules]
        lines += [f"  left alone: {link}" for link in self.other]
        return "\n".join(lines)

    def __enter__(self) -> Netcut:
        return self.cut()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.heal()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sparkflux.runtime.netcut``: cut a process's links for some seconds (or
    print the plan), or sweep every netcut rule."""
    ap = argparse.ArgumentParser(prog="python -m sparkflux.runtime.netcut",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--pid", type=int, help="the site's Python worker process")
    ap.add_argument("--driver-port", type=int, action="append", default=[],
                    help="a port the driver listens on (repeatable)")
    ap.add_argument("--peer-port", type=int, action="append", default=None,
                    help="a peer's listening port (repeatable; default: found)")
    ap.add_argument("--driver", action="store_true", help="cut the driver links too")
    ap.add_argument("--block-redials", action="store_true",
                    help="also drop every new connection to the peers' (driver's) ports")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long the cut lasts")
    ap.add_argument("--dry-run", action="store_true", help="print the rules, add none")
    ap.add_argument("--heal-all", action="store_true", help="delete every netcut rule")
    a = ap.parse_args(argv)
    if a.heal_all:
        print(f"removed {heal_all()} netcut rule(s)")
        return 0
    if a.pid is None:
        ap.error("--pid is required (or --heal-all)")
    cut = Netcut(a.pid, a.driver_port, cut_driver=a.driver, peer_ports=a.peer_port,
                 block_redials=a.block_redials)
    if a.dry_run:
        cut.rules = cut.plan()
        print(cut.describe())
        return 0
    try:
        cut.cut(duration=a.seconds)
        print(cut.describe(), flush=True)
        cut.healed.wait()
    finally:
        cut.heal()
    print(f"healed {cut.tag}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
