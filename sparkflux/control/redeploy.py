"""Re-deploying copies when the measured latencies change (``--placement latency``): the
racing-replicas paper's adaptation to changes (Section V-C), over the latency-aware
deployment of view 1 (``dataflow/deployment.py``, Algorithm 5).

The deployment at view 1 places by the matrix the user gave (``--latencies`` or ``--wan``).
Links change: a route fails over, a region gets congested. Every site measures its links
(latency probes, ``protocol/site_boundary.py`` rule 6) and reports them with its heartbeats;
each balancing round's statistics carry the latest (``Stats.link_ms``). The rules, applied
when a round's samples are all in (``Balancing._movement_phase``), before the load policy:

1. The *measured matrix* (``measured``): a link's one-way latency is the mean of what its two
   ends measured (half a round trip each); a link neither end measured keeps the matrix the
   copies were last placed by. Round trips are symmetric, so the measured matrix is too.
2. Re-deploy only with racing copies (under Flux-HA the egress reads column 0's copy, and
   a move builds its new copy in the free column: the far copy would stay the one read),
   with every slot live and the table complete (no recovery, no move in flight: the round
   runs only then), and only when the deployment over the measured matrix
   (Algorithm 5 again, the same load limits and failure domains) lowers the latency bound
   (the worst partition's round trip through its nearest copy) by at least ``GAIN`` of the
   current table's bound under the same matrix *and* by ``MIN_GAIN_MS``: measuring noise,
   or a change that placement cannot help, moves nothing.
3. The moves (``align``): per partition, the copies on sites the new deployment keeps stay
   where they are; each other copy moves to a site the new one adds, the farthest copy (by
   its site's round trip from the driver) to the nearest site. Each is an ordinary move,
   make before break: a new copy caught up from a live one in the partition's free column,
   the old one retired after it (with racing replicas, raced from its fold-in on).
4. Every round for ``settle`` seconds (``ControlOptions.redeploy_settle``: longer than the
   sites' probe window, ``PROBES`` probes) must find a re-deployment worth it (rule 2)
   before the last round's plan is carried out: a measure taken in the middle of a change
   (a link that got faster shows at once, one that got slower only once its older round
   trips have left the window) or in a burst of queueing must last to count. The plans of
   those rounds may differ: with the sites' loops adding a few milliseconds at random, many
   tables are about as good.
5. After a re-deployment the measured matrix is the one the copies were placed by (rule 1's
   fall-back) until the next.

The round's record says which policy ran (``latency``) and why (the two bounds); the run's
metrics list every re-deployment (``placement.redeploys``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sparkflux.dataflow.deployment import deploy, latency_bound, round_trips
from sparkflux.dataflow.placement import Domain

GAIN = 0.3  # the bound must fall by at least this fraction of the current one ...
# ... and by at least this much: more than the round trip a busy site's event loop adds to
# a probe (a pass of tens of milliseconds), which no placement can take away
MIN_GAIN_MS = 20.0
SETTLE_S = 3.0  # rule 4's default


@dataclass(frozen=True, slots=True)
class Redeploy:
    """A re-deployment: the moves ``(q, r, receiver)`` and the latency bounds (ms) of the
    current table and of the new one, both under ``matrix`` (the measured one)."""

    moves: tuple[tuple[int, int, int], ...]
    bound_ms: float
    new_bound_ms: float
    matrix: np.ndarray
    table: tuple[tuple[int, ...], ...]  # the new deployment, [P][K] site slots


def measured(link_ms: Mapping[int, Sequence[float]], base: np.ndarray) -> np.ndarray:
    """Rule 1: the matrix ``base`` ([N + 1, N + 1], the driver first) with every link some
    site measured (``link_ms[slot]``: index 0 the driver, i + 1 slot i, -1 unmeasured)
    replaced by the mean of its ends' measures, both directions alike."""
    m = np.array(base, dtype=np.float64, copy=True)
    n = m.shape[0]
    sums = np.zeros_like(m)
    counts = np.zeros_like(m)
    for slot, row in link_ms.items():
        a = slot + 1
        if not 0 < a < n:
            continue
        for b, x in enumerate(row[:n]):
            if x < 0 or b == a:
                continue
            for i, j in ((a, b), (b, a)):
                sums[i, j] += x
                counts[i, j] += 1
    seen = counts > 0
    m[seen] = sums[seen] / counts[seen]
    return m


def current_copies(table: np.ndarray) -> np.ndarray:
    """[P, K]: each partition's live copies' sites (a table's free column, ``NOWHERE``,
    left out), in column order. Every row must hold K copies."""
    t = np.asarray(table)
    return np.stack([row[row >= 0] for row in t])


def align(table: np.ndarray, new: np.ndarray, rt: np.ndarray
          ) -> list[tuple[int, int, int]]:
    """Rule 3: the moves ``(q, r, receiver)`` that turn ``table`` ([P, K + 1] with a free
    column) into ``new``'s sites ([P, K]), column by column of ``table``; ``rt[s]``: site
    s's round trip from the driver (the copies that gain most go first)."""
    out: list[tuple[int, int, int]] = []
    for q in range(new.shape[0]):
        row = [int(s) for s in table[q]]
        want = [int(s) for s in new[q]]
        leave = [r for r, s in enumerate(row) if s >= 0 and s not in want]
        take = sorted((s for s in want if s not in row), key=lambda s: (rt[s], s))
        leave.sort(key=lambda r: (-rt[row[r]], r))
        out += [(q, r, s) for r, s in zip(leave, take, strict=True)]
    return out


def plan(table: np.ndarray, matrix: np.ndarray, replicas: int, exchanges: int,
         domains: Mapping[int, Domain] | None = None) -> Redeploy | None:
    """Rules 2 and 3 for the current ``table`` ([P, K + 1]) under the measured ``matrix``:
    the re-deployment, or None when it would not gain enough."""
    copies = current_copies(table)
    bound = latency_bound(copies, matrix)
    new = deploy(matrix, copies.shape[0], replicas, exchanges, domains)
    new_bound = latency_bound(new, matrix)
    if bound - new_bound < max(GAIN * bound, MIN_GAIN_MS):
        return None
    moves = align(table, new, round_trips(matrix))
    if not moves:
        return None
    return Redeploy(tuple(moves), round(bound, 3), round(new_bound, 3), matrix,
                    tuple(tuple(int(s) for s in row) for row in new))


__all__ = ["GAIN", "MIN_GAIN_MS", "SETTLE_S", "Redeploy", "align", "current_copies", "measured",
           "plan"]
