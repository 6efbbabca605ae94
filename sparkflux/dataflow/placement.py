"""Replica placement: chained declustering over mini-partitions (thesis §3.1), laid
over the cluster's failure domains, then whatever the moves of unified Flux made of it (thesis
ch. 5).

Chained declustering puts replica ``r`` of mini-partition ``q`` (the same for every stage) on
ring position ``(q + r) mod N``: the primary of partition k at position k, its copies at k+1,
..., k+K-1 for K replicas. Two replicas of a partition never share a site, and with N = 4 and
K = 2 one site failure produces all four survival cases of a partition-pair quartet. With K
replicas any K - 1 sites may fail at once and every partition keeps a copy.

Which site sits at which ring position is the *ring* (a permutation of the site slots; the
identity by default: site ``(q + r) mod N``). On Spark several sites share an executor (one
JVM) and several executors a worker machine, and the loss of either takes all of its sites
down at once: if two ring neighbours share one, that loss is two failures of one process pair
and some partition loses every copy. So the controller, which learns every site's
``Domain`` when it registers, chooses the ring at view 1 (``choose_ring``): no K consecutive
positions in one executor, nor, where the sites are on more than one host, on one host
(hosts first, then executors). When that is impossible (one executor holds more than N/K
sites) the ring minimises the pairs that share a domain, and the controller says so.

The ring travels with view 1 (``InstallView``, the sites' ``View``) and every party, the
controller, the ingress and egress and every site, loads it into its copy of the table before
any data flows (the ingress starts only once every site has its view). A standby that adopts
a slot later gets the whole table as moves have left it (``Adopt``). A move (load balancing,
recovery onto the surviving sites, or the re-layout after a standby in a bad domain adopted a
slot) re-places one replica; every party keeps its own copy of the table and changes it when
it handles the move, in its own message order. The driver (ingress and egress) is ``DRIVER``.

Make before break (docs/design.md): with K >= 2 replicas the table has K + 1 columns, one of
them ``NOWHERE`` for every partition: a copy that does not exist, dead from the start for
every party. A move builds the new copy in that free column by catch-up while the K old copies
keep running, then retires the old one (its column becomes the free one): a partition never
has fewer than K complete copies because of a move.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sparkflux.model.errors import PlanError

DRIVER = -1
NOWHERE = -2  # a table entry for a copy that does not exist (a partition's free column)
STORE = -3  # where a site's checkpoint parts go: its run's snapshot store, not a party
EXACT_SITES = 7  # up to this many sites choose_ring tries every ring (6! of them)


@dataclass(frozen=True, slots=True)
class Domain:
    """What one failure takes down together with a site: its executor (the JVM its Python
    worker runs under; on Spark an executor's loss kills every site task in it) and its host
    (a worker machine, or its daemon, takes every executor on it down). An empty executor is
    unknown: the site is taken as a domain of its own."""

    host: str
    executor: str


def shared(a: Domain, b: Domain, hosts_differ: bool) -> tuple[int, int]:
    """(same host, same executor) of two sites, as 0/1: what one failure of theirs costs a
    process pair. The host counts only where the sites are on more than one host; an unknown
    executor is nobody else's."""
    same_exec = int(bool(a.executor) and a.executor == b.executor)
    same_host = int(hosts_differ and (a.host == b.host or bool(same_exec)))
    return same_host, same_exec


def hosts_differ(domains: Iterable[Domain]) -> bool:
    return len({d.host for d in domains}) > 1


def clash(site: int, others: Iterable[int], domains: Mapping[int, Domain]
          ) -> tuple[int, int]:
    """(host, executor) domains ``site`` shares with the sites of a partition's other copies
    (``shared``, summed; hosts count where the sites of ``domains`` are on more than one): what
    placing a copy there costs. (0, 0) when the domains are unknown."""
    if site not in domains:
        return 0, 0
    multi = hosts_differ(domains.values())
    h = e = 0
    for o in others:
        if o in domains and o != site:
            a, b = shared(domains[site], domains[o], multi)
            h, e = h + a, e + b
    return h, e


def ring_conflicts(ring: Sequence[int], domains: Sequence[Domain], replicas: int
                   ) -> tuple[int, int]:
    """(host, executor) conflicts of a ring: the pairs of sites within ``replicas``
    consecutive ring positions (the sites of one partition's copies under chained
    declustering) that share a host (only where hosts differ) or an executor."""
    n = len(ring)
    if replicas < 2 or n < 2:
        return 0, 0
    host, execu = _codes(domains)
    h, e = host[list(ring)], execu[list(ring)]
    out_h = out_e = 0
    for d in range(1, min(replicas, n)):  # every position's copy d places further on
        out_h += int((h == np.roll(h, -d)).sum())
        out_e += int((e == np.roll(e, -d)).sum())
    return (out_h if hosts_differ(domains) else 0), out_e


def table_conflicts(table: np.ndarray, domains: Sequence[Domain]) -> tuple[int, int]:
    """(host, executor) conflicts of a placement table (``[P, K]`` sites, ``NOWHERE`` for a
    free column): the pairs of sites holding copies of a common partition that share a host
    (only where hosts differ) or an executor. For chained declustering's table it is
    ``ring_conflicts``'s count (a ring of at least 2K sites); for a table placed by
    latency, what that placement could not avoid."""
    host, execu = _codes(domains)
    pairs: set[tuple[int, int]] = set()
    for row in np.asarray(table):
        sites = sorted({int(s) for s in row if s >= 0})
        pairs.update((a, b) for i, a in enumerate(sites) for b in sites[i + 1:])
    h = sum(int(host[a] == host[b]) for a, b in pairs) if hosts_differ(domains) else 0
    return h, sum(int(execu[a] == execu[b]) for a, b in pairs)


def _codes(domains: Sequence[Domain]) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of every site's host and executor; an unknown executor gets a code of
    its own (-1 - site), a host shared by nobody else likewise."""
    hosts: dict[str, int] = {}
    execs: dict[str, int] = {}
    h = np.array([hosts.setdefault(d.host, len(hosts)) for d in domains], dtype=np.int64)
    e = np.array([execs.setdefault(d.executor, len(execs)) if d.executor else -1 - i
                  for i, d in enumerate(domains)], dtype=np.int64)
    return h, e


def choose_ring(domains: Sequence[Domain], replicas: int) -> list[int]:
    """The ring (site slot at each chained-declustering position) for sites in these failure
    domains: fewest host conflicts first, then fewest executor conflicts (``ring_conflicts``).
    The identity unless another ring has strictly fewer, so nothing changes when the domains
    are unknown or all alike.

    Where it can be done (no host, or where all share one, no executor holds more than
    N // K sites) the ring is built (``_grid``). Otherwise it is searched for: up to
    ``EXACT_SITES`` sites every ring is tried, so the minimum is exact there; beyond, a
    greedy deal (``_deal``: the classic "k distance apart" rearrangement), then pairwise
    swaps while they lower the conflicts."""
    n = len(domains)
    identity = list(range(n))
    if replicas < 2 or n < 3:
        return identity
    base = ring_conflicts(identity, domains, replicas)
    if base == (0, 0):
        return identity
    host, execu = _codes(domains)
    ring = _grid(host if hosts_differ(domains) else execu, replicas)
    if ring is not None and ring_conflicts(ring, domains, replicas) == (0, 0):
        return ring
    candidates: Iterable[list[int]] = (
        ([0, *perm] for perm in itertools.permutations(range(1, n)))  # rotations alike: fix 0
        if n <= EXACT_SITES else
        (_improve(_deal(domains, replicas, order), domains, replicas) for order in (0, 1)))
    best, cost = identity, base
    for ring in candidates:
        c = ring_conflicts(ring, domains, replicas)
        if c < cost:
            best, cost = ring, c
            if c == (0, 0):
                break
    return best


def _grid(colour: np.ndarray, k: int) -> list[int] | None:
    """A ring in which no ``k`` consecutive positions share a colour (a host, or an
    executor), if no colour has more than m = N // k sites; else None.

    N = m k + s. Set s sites aside, each from the colour with the most sites left, so that
    at most k colours still have m. Deal the others, grouped by colour with the largest
    colours first, column by column into m blocks of k positions (block j, column t: ring
    position j k + t): a colour of m sites fills one column, a smaller one spans at most two
    adjacent columns in different blocks, so any two of its sites are k or more apart on the
    ring, across its end too. Then insert each site set aside where none of its colour lies
    within k - 1 positions (inserting only moves the others apart); such a place exists,
    since a colour holds at most two adjacent columns."""
    n = len(colour)
    m, extra = divmod(n, k)
    counts = {int(c): int((colour == c).sum()) for c in np.unique(colour)}
    if max(counts.values()) > m:
        return None
    members = {c: [j for j in range(n) if colour[j] == c] for c in counts}
    aside: list[int] = []
    for _ in range(extra):
        c = min(members, key=lambda c: (-len(members[c]), c))
        aside.append(members[c].pop())
    order = [j for c in sorted(members, key=lambda c: (-len(members[c]), c))
             for j in members[c]]
    ring = [0] * (m * k)
    for i, j in enumerate(order):
        t, block = divmod(i, m)
        ring[block * k + t] = j
    for j in aside:
        spots = [p for p in range(len(ring) + 1)
                 if all(colour[ring[(p + d) % len(ring)]] != colour[j] for d in range(k - 1))
                 and all(colour[ring[(p - 1 - d) % len(ring)]] != colour[j]
                         for d in range(k - 1))]
        if not spots:
            return None
        ring.insert(spots[0], j)
    return ring


def _deal(domains: Sequence[Domain], replicas: int, order: int = 0) -> list[int]:
    """Each position takes, among the sites left that add the fewest conflicts with the K - 1
    positions before it (and, near the end, with the first ones after it: the ring closes),
    one of the host and executor with the most sites left (``order`` 1: the fewest among
    equals, another deal to try)."""
    host, execu = _codes(domains)
    multi = hosts_differ(domains)
    n = len(domains)
    left = set(range(n))
    ring: list[int] = []
    while left:
        p = len(ring)
        near = ring[max(0, p - replicas + 1):]
        near += [ring[p + d - n] for d in range(1, replicas) if p + d >= n and p + d - n < p]
        h_left: dict[int, int] = {}
        e_left: dict[int, int] = {}
        for j in left:
            h_left[int(host[j])] = h_left.get(int(host[j]), 0) + 1
            e_left[int(execu[j])] = e_left.get(int(execu[j]), 0) + 1
        sign = 1 if order else -1
        keys = []
        for j in left:
            ch = sum(int(host[j] == host[i]) for i in near) if multi else 0
            ce = sum(int(execu[j] == execu[i]) for i in near)
            keys.append((ch, ce, sign * (h_left[int(host[j])] if multi else 0),
                         sign * e_left[int(execu[j])], j))
        pick = min(keys)[-1]
        ring.append(pick)
        left.discard(pick)
    return ring


def _improve(ring: list[int], domains: Sequence[Domain], replicas: int) -> list[int]:
    """Pairwise swaps while they lower the conflicts."""
    cost = ring_conflicts(ring, domains, replicas)
    n = len(ring)
    improved = True
    while improved and cost != (0, 0):
        improved = False
        for a, b in itertools.combinations(range(n), 2):
            ring[a], ring[b] = ring[b], ring[a]
            c = ring_conflicts(ring, domains, replicas)
            if c < cost:
                cost, improved = c, True
            else:
                ring[a], ring[b] = ring[b], ring[a]
    return ring


class Layout:
    """Where every copy of every mini-partition lives (``site[q, c]``, mutable by moves).

    ``replicas`` copies of each partition live; ``spare`` more columns (one by default with
    two or more replicas, none with one) hold ``NOWHERE`` until a move builds a new copy there
    (make before break). ``columns`` = replicas + spare is the width of every role array."""

    def __init__(self, sites: int, partitions: int, replicas: int,
                 ring: Sequence[int] | None = None, spare: int | None = None,
                 race: bool = False) -> None:
        if replicas < 1:
            raise PlanError(f"replicas must be at least 1 (got {replicas})")
        if sites < replicas:
            raise PlanError(f"--ha flux keeps {replicas} replicas of every partition on "
                            f"different sites: use --sites >= {replicas} or fewer --replicas")
        self.sites = sites
        self.partitions = partitions
        self.replicas = replicas
        self.spare = (1 if replicas > 1 else 0) if spare is None else spare
        self.columns = replicas + self.spare
        # How the copies feed each other (``protocol/roles.py``): False, Flux-HA's process
        # pairs (copy r of a producer sends to copy r of its consumer, the others hold); True,
        # racing replicas (every producer copy sends to every consumer copy, and each input
        # passes the first copy of a row that arrives: ``ConsumerSet._first_copies``)
        self.race = race
        self._site = np.full((partitions, self.columns), NOWHERE, dtype=np.int32)
        self.ring: tuple[int, ...] = ()
        # True once view 1 placed the copies by latency (``deployment.py``), not by the ring
        self.deployed = False
        self.set_ring(range(sites) if ring is None else ring)

    def set_ring(self, ring: Sequence[int]) -> None:
        """Chained declustering over ``ring``: replica r of q on site ``ring[(q + r) mod N]``,
        the spare columns ``NOWHERE``. In place, so that role arrays holding the table see it;
        only before any data flows (view 1), when no move has changed the table yet."""
        ring = tuple(int(s) for s in ring)
        if sorted(ring) != list(range(self.sites)):
            raise PlanError(f"a ring must order every site slot 0..{self.sites - 1} once "
                            f"(got {list(ring)})")
        self.ring = ring
        q = np.arange(self.partitions)[:, None]
        r = np.arange(self.replicas)[None, :]
        self._site[:, :self.replicas] = np.asarray(ring, dtype=np.int32)[(q + r) % self.sites]
        self._site[:, self.replicas:] = NOWHERE

    def place(self, table: np.ndarray) -> None:
        """View 1's placement by latency (``--placement latency``, ``deployment.py``):
        ``table`` is [P, replicas] or the whole [P, columns]; the spare columns hold
        ``NOWHERE``. Like ``set_ring``, only before any data flows."""
        t = np.asarray(table, dtype=np.int32)
        if t.shape not in ((self.partitions, self.replicas), (self.partitions, self.columns)):
            raise PlanError(f"a placement table is {self.partitions} x {self.replicas} "
                            f"(got {' x '.join(map(str, t.shape))})")
        live = t[:, :self.replicas]
        if ((live < 0) | (live >= self.sites)).any() or any(
                len(set(row)) < self.replicas for row in live.tolist()):
            raise PlanError("a placement table puts every copy of a partition on its own "
                            "site slot")
        self._site[:, :self.replicas] = live
        self._site[:, self.replicas:] = NOWHERE
        self.deployed = True

    def grow(self, sites: int) -> None:
        """Slots up to ``sites`` exist from now on (a rescale opened them, or a standby
        adopts one a rescale opened): every party addresses them. Never shrinks: a retired
        slot stays a number nobody talks to (a failed site, as the views say)."""
        self.sites = max(self.sites, sites)

    def copy(self) -> Layout:
        out = Layout(len(self.ring), self.partitions, self.replicas, self.ring, self.spare,
                     self.race)
        out._site[...] = self._site
        out.sites = self.sites
        out.deployed = self.deployed
        return out

    def site_of(self, part: int, replica: int) -> int:
        return int(self._site[part, replica])

    def table(self) -> np.ndarray:
        """``site[q, r]`` for every partition and replica (int32). The live array: role arrays
        that hold it see every move."""
        return self._site

    def hosted(self, site: int) -> dict[int, int]:
        """The partitions site ``site`` holds a replica of, as {partition: replica}."""
        q, r = np.nonzero(self._site == site)
        return {int(a): int(b) for a, b in zip(q, r, strict=True)}

    def only(self, part: int, replica: int) -> np.ndarray:
        """A ``[P, R]`` mask of just this replica (what a move fails)."""
        mask = np.zeros(self._site.shape, dtype=bool)
        mask[part, replica] = True
        return mask

    def others(self, part: int, replica: int) -> list[int]:
        """The sites of the partition's other copies (not ``NOWHERE``)."""
        return [int(s) for r, s in enumerate(self._site[part]) if r != replica and s != NOWHERE]

    def free(self, part: int) -> int | None:
        """A column of ``part`` that holds no copy (where a move builds the new one)."""
        cols = np.flatnonzero(self._site[part] == NOWHERE)
        return int(cols[0]) if cols.size else None

    def next_copy(self, part: int, replica: int) -> int:
        """The first column after ``replica`` that holds a copy of ``part`` (the default
        survivor a catch-up copies from)."""
        for k in range(1, self.columns):
            c = (replica + k) % self.columns
            if self._site[part, c] != NOWHERE:
                return c
        raise PlanError(f"partition {part} has no copy but column {replica}")

    def dead(self, dead_sites: Iterable[int]) -> np.ndarray:
        """``[P, C]``: the copies that are gone: on a failed site, or ``NOWHERE``."""
        return np.isin(self._site, [*dead_sites, NOWHERE])

    def first_live(self, dead_sites: Iterable[int]) -> np.ndarray:
        """``[P]``: the site of each partition's first copy on a live site, ``NOWHERE`` for a
        partition with none (where tentative rows go: ``protocol/tentative.py``)."""
        live = ~self.dead(dead_sites)
        first = np.argmax(live, axis=1)
        sites = self._site[np.arange(self.partitions), first]
        return np.where(live.any(axis=1), sites, NOWHERE).astype(np.int32)

    def move(self, part: int, replica: int, site: int) -> None:
        """Re-place one copy (``NOWHERE``: retire it); the others must live elsewhere (never
        two on one site)."""
        if site != NOWHERE and site in self.others(part, replica):
            raise PlanError(f"partition {part}: two replicas would be on site {site}")
        self._site[part, replica] = site

    def load(self, table: list[list[int]] | np.ndarray) -> None:
        self._site[...] = np.asarray(table, dtype=np.int32)
