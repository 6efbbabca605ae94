"""Latency-aware replica deployment (``--placement latency``): the racing-replicas paper's
replica deployment (Section V-A, Algorithm 5) over a matrix of one-way latencies between the
driver and every site.

Chained declustering (``placement.py``) knows nothing of distance: over wide-area links it
may put every copy of a partition far from the driver and from each other's consumers, and
with racing replicas a partition is as fast as its fastest copy. Algorithm 5 deploys the
copies in K phases: each phase gives every partition one more copy. Where the paper picks
the site that adds the least *network cost* (the sum over the streams the copy would send and
receive of their rate times their latency, the bandwidth-delay product) among the sites with
room and far enough from the other copies, this deployment first keeps the sites' loads at
chained declustering's (no work moves) and the failure domains apart, then minimises the
partition's *latency bound* (its round trip from the driver through its nearest copy), then
keeps the copies at least ``DMIN_MS`` apart (the paper's ``d_min``, 30-70 ms in its tests:
copies far apart do not fall into one network partition), and only then the network cost
(``deploy`` has the exact order). With every copy feeding every copy and equal loads, the
network cost of a whole table is the same for any pairing, so the latency bound decides.

Streams and their rates (unit input rate; the rates are not known before the run, the
paper's first-phase case): the ingress sends 1/P to every copy of every partition of the
first stage, every copy sends 1/P to the egress, and each of the ``exchanges`` stage
boundaries carries 1/P^2 from every copy of each producer partition to every copy of each
consumer partition (racing replicas: every copy feeds every copy). The same table serves
every stage (copy r of partition q of every stage lives on one site), as chained
declustering's does, so a partition's stages talk to each other on one site.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from sparkflux.dataflow.placement import Domain, clash
from sparkflux.model.errors import PlanError

# a latency matrix: rows of one-way milliseconds, the driver first (a list, or an array)
Matrix = Sequence[Sequence[float]] | np.ndarray
DMIN_MS = 30.0  # peer copies at least this far apart where possible (the paper's d_min)


def _matrix(latency_ms: Matrix, sites: int,
            table: np.ndarray | None = None) -> np.ndarray:
    """The matrix as an array, checked: square over the driver and ``sites`` slots, and
    covering every site of ``table``."""
    try:
        m = np.asarray(latency_ms, dtype=np.float64)
    except ValueError as e:
        raise PlanError(f"a latency matrix has one row of numbers per node ({e})") from e
    if table is not None and table.size and int(table.max()) >= sites:
        raise PlanError(f"the placement uses site slot {int(table.max())}, which the latency "
                        f"matrix does not cover ({sites} sites)")
    if m.shape != (sites + 1, sites + 1):
        raise PlanError(f"a latency matrix for {sites} sites is {sites + 1} x {sites + 1} "
                        f"(the driver first), not {' x '.join(map(str, m.shape))}")
    return m


def network_cost(table: np.ndarray, latency_ms: Matrix,
                 exchanges: int) -> float:
    """The paper's network cost of a placement ``table`` ([P, K] site slots, every copy of
    every partition): the sum over every stream of its rate times its latency (module
    docstring), in milliseconds per unit of input."""
    t = np.asarray(table)
    parts = t.shape[0]
    m = _matrix(latency_ms, len(latency_ms) - 1, t)
    nodes = t.reshape(-1) + 1  # matrix index of every copy's site
    edge = (m[0, nodes].sum() + m[nodes, 0].sum()) / parts
    cross = m[np.ix_(nodes, nodes)].sum() * exchanges / parts ** 2
    return float(edge + cross)


def round_trips(latency_ms: Matrix) -> np.ndarray:
    """[N]: the driver's round trip through each site (ingress there, egress back), ms."""
    m = _matrix(latency_ms, len(latency_ms) - 1)
    return m[0, 1:] + m[1:, 0]


def latency_bound(table: np.ndarray, latency_ms: Matrix) -> float:
    """The placement's latency bound with racing replicas: the worst partition's round trip
    from the driver through its nearest copy (a partition is as fast as its fastest copy), ms."""
    t = np.asarray(table)
    _matrix(latency_ms, len(latency_ms) - 1, t)
    return float(round_trips(latency_ms)[t].min(axis=1).max())


def deploy(latency_ms: Matrix, partitions: int, replicas: int,
           exchanges: int, domains: Mapping[int, Domain] | None = None,
           dmin_ms: float = DMIN_MS) -> np.ndarray:
    """Algorithm 5 (module docstring): ``[partitions, replicas]`` site slots, column r the
    copy placed in phase r + 1.

    No site takes more than ``ceil(P * K / N)`` copies, chained declustering's most, and
    each phase places ``ceil(P / N)`` at most on a site, the partitions with the worst round
    trip so far first; either limit gives way only where no site within it can take the copy
    (every such site holds one already). A copy goes where, in this order: the site is
    within both limits, no failure domain
    is shared with the partition's other copies, the partition's round trip through its
    nearest copy is least (the latency bound), the site is ``dmin_ms`` from the other
    copies, the network cost added is least, then the least loaded and lowest slot.
    Deterministic."""
    sites = len(latency_ms) - 1
    m = _matrix(latency_ms, sites)
    if replicas > sites:
        raise PlanError(f"{replicas} copies of a partition need {replicas} sites "
                        f"(the matrix has {sites})")
    per_phase = math.ceil(partitions / sites)
    cap = math.ceil(partitions * replicas / sites)  # chained declustering's most per site
    rt = np.round(round_trips(latency_ms), 9)
    load = np.zeros(sites, dtype=np.int64)
    # incoming plus outgoing latency to every copy placed so far, per candidate site
    pull = np.zeros(sites, dtype=np.float64)
    sym = m[1:, 1:] + m[1:, 1:].T
    edge = rt / partitions  # the ingress's and the egress's streams of a copy
    table = np.full((partitions, replicas), -1, dtype=np.int32)
    reach = np.full(partitions, math.inf)
    domains = domains or {}
    for r in range(replicas):
        phase = np.zeros(sites, dtype=np.int64)
        for q in sorted(range(partitions), key=lambda q: (-reach[q], q)):
            peers = [int(s) for s in table[q, :r]]
            cost = edge + pull * exchanges / partitions ** 2
            best: tuple[object, ...] | None = None
            pick = -1
            for s in range(sites):
                if s in peers:
                    continue
                near = min((min(m[s + 1, p + 1], m[p + 1, s + 1]) for p in peers),
                           default=math.inf)
                key = (bool(load[s] >= cap), bool(phase[s] >= per_phase),
                       clash(s, peers, domains),
                       float(min(reach[q], rt[s])), bool(near < dmin_ms),
                       round(float(cost[s]), 9), int(load[s]), s)
                if best is None or key < best:
                    best, pick = key, s
            table[q, r] = pick
            load[pick] += 1
            phase[pick] += 1
            pull += sym[:, pick]
            reach[q] = min(reach[q], rt[pick])
    _within(table, cap, sites)
    # the nearest copy first in every row: column 0 is the copy Flux-HA's egress reads and
    # whose pairs carry the data (the others hold), so it should be the fastest one too
    order = np.argsort(rt[table], axis=1, kind="stable")
    return np.take_along_axis(table, order, axis=1)


def _within(table: np.ndarray, cap: int, sites: int) -> None:
    """Where the greedy phases had to put a copy over a site's limit, move copies
    (``_move_one``) until no site holds more than ``cap``. In place; copies of a partition
    stay on distinct sites."""
    for _ in range(table.size):
        n = np.bincount(table.ravel(), minlength=sites)
        over, under = np.flatnonzero(n > cap), [int(x) for x in np.flatnonzero(n < cap)]
        if not over.size or not under or not _move_one(table, int(over[0]), under):
            return


def _move_one(table: np.ndarray, s: int, under: list[int]) -> bool:
    """One copy off site ``s``: to a site under the limit that holds no copy of its
    partition, or, where none does, through a third site t (the copy goes to t, and t's copy
    of another partition that the site under the limit lacks goes there). False: none can."""
    for q, c in zip(*np.nonzero(table == s), strict=True):
        u = next((u for u in under if u not in table[q]), None)
        if u is not None:
            table[q, c] = u
            return True
        for u in under:
            for q2, c2 in zip(*np.nonzero(table != s), strict=True):
                t = int(table[q2, c2])
                if t != u and t not in table[q] and u not in table[q2]:
                    table[q, c], table[q2, c2] = t, u
                    return True
    return False


__all__ = ["DMIN_MS", "deploy", "latency_bound", "network_cost", "round_trips"]
