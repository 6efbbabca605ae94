"""The load-balancing policy: hill climbing over mini-partitions (thesis §4.4;
unified Flux, ch. 5).

After a collection phase every live site j reports its utilisation U_j (busy time over the
capacity it had) and T_j, the tuples it processed, with N_p per mini-partition. Sites are
sorted by U descending and paired most with least utilised, working inward. A pair (d, r) is
skipped, and the round stops, when U_d is below the mean (or below ``th_busy``: our addition),
when U_d / U_r < ``th_imb`` or when U_r > ``th_util``. Otherwise the first of d's partitions
(by N_p descending) whose move lowers the pair's maximum (by ``th_gain`` of U_d at least: our
addition) is moved: U'_d = U_d (1 - N_p / T_d), U'_r = U_r (1 + N_p / T_r) (the digest's
reading of the thesis' typo), or, given the controller's cost model with a fixed part, U
changed by N_p times each site's cost per row; rejected when U'_r > 1. At most
``moves_per_receiver`` moves per receiver and round (the thesis: one per pair); a donor may
give to several receivers, its U updated after each (our generalisation of the pairing). A
donor must have been over ``th_busy`` and above the mean by ``th_imb`` in the previous round
too, and a receiver idle then too (our hysteresis: one noisy phase moves nothing). In unified
Flux a partition has two copies that never share a site, and the copy on the donor is the one
failed (the receiver is caught up from the other copy), so a partition whose other copy is on
the receiver is not a candidate. Nor is one whose copy would share a failure domain (an
executor, or a host) with another copy of it on the receiver more than on the donor (ours:
placement over failure domains, ``dataflow/placement.py``): a move never makes a partition
easier to lose. Pure: no clocks, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparkflux.dataflow.placement import Domain, clash


@dataclass(frozen=True)
class PolicyConfig:
    # The thesis' ch. 5 value is 1.15, which lets a bottleneck stay 15% above its peers;
    # utilisation from demand is steady enough for 1.05 (and recently moved partitions stay
    # put, so noise does not make them oscillate). docs/availability.md: "Hill climbing".
    # which policy the balancing rounds run (``memory_policy.py``): "cpu", "memory" or
    # "hybrid" (the memory policy while a site is short of memory, else the CPU one)
    mode: str = "hybrid"
    th_imb: float = 1.05
    th_util: float = 0.925
    # Not in the thesis: a donor below this utilisation needs no relief. A move briefly
    # leaves its partition with one copy, so moving on noise alone is a risk with no gain;
    # and a site's scheduler passes have a fixed cost that does not leave with a partition,
    # so a lower threshold moves copies that relieve nothing. docs/availability.md: "Hill climbing".
    th_busy: float = 0.7
    # Not in the thesis: a move must lower the pair's maximum by at least this fraction of
    # the donor's U. With a fixed cost per site, moving partitions off a site that is busy
    # mostly with that fixed part gains next to nothing, and each move costs a catch-up and a
    # single-copy window.
    th_gain: float = 0.01
    # Not in the thesis (one move per pair and round): a receiver may take this many
    # partitions in one round, each planned with the estimates the earlier ones left. A
    # slowed site that must shed a third of its copies then does so in two or three rounds,
    # not six; every move must still lower the pair's maximum, so a receiver stops short.
    moves_per_receiver: int = 2
    # Not in the thesis: a donor must have been loaded, and a receiver idle, in the previous
    # round too (see ``plan_moves``), and nothing moves in the first ``window_s`` seconds of
    # statistics after a start or a failure (the controller): at saturation the sites ramp
    # up unevenly, and a decision on a ramp-up alone moves copies that must be moved back.
    # Off, the first round after a start may move.
    hysteresis: bool = True
    # Not in the thesis: while the placement stays the same, a round's statistics run from
    # the oldest baseline of the last ``window_s`` seconds, not from its own (the phases
    # since the last move pooled): one short phase of a saturated site is too noisy to
    # decide on, even twice in a row. docs/availability.md: "Statistics in rounds".
    window_s: float = 2.0
    delta_min: float = 0.25  # seconds: the shortest collection phase
    delta_start: float = 1.0  # the first collection phase


@dataclass(frozen=True)
class PlannedMove:
    q: int
    r: int  # the replica on the donor: the copy that is failed
    donor: int
    receiver: int
    n_p: int
    u_donor: float
    u_receiver: float


def plan_moves(util: dict[int, float], counts: dict[int, np.ndarray], table: np.ndarray,
               cfg: PolicyConfig | None = None, recent: frozenset[int] = frozenset(),
               busy: dict[int, float] | None = None,
               per_row: dict[int, float] | None = None,
               gave: frozenset[int] = frozenset(),
               previous: tuple[dict[int, float], dict[int, float]] | None = None,
               domains: dict[int, Domain] | None = None) -> list[PlannedMove]:
    """One movement phase: at most ``moves_per_receiver`` moves per receiver (the thesis: one
    per pair). Partitions in ``recent`` (moved in the last rounds) stay put: measurements are
    noisy, and moving a partition back and forth only costs (our addition to the thesis'
    policy). ``busy`` is
    each site's measured busy fraction of its capacity: a site without idle time (busy above
    ``th_util``) receives nothing whatever its estimated U (our addition: when every site is
    saturated the placement is as good as it gets, and moving on noise there only opens
    single-copy windows). ``per_row``: what one row of demand moved changes each site's U by
    (the controller's cost model, with its fixed part); without it the thesis' estimates,
    U proportional to the rows a site processes. A site in ``gave`` (a donor in the last
    rounds) receives nothing (ours: right after a move a relieved site can look idle for a
    phase, and moving copies back onto it costs a slow catch-up there and a round of undoing).
    ``previous``: the last round's U and busy fractions (empty after a start or a failure);
    a donor must have had U above ``th_busy`` and ``th_imb`` times that round's mean then too,
    and a receiver idle time (busy at most ``th_util``), so one noisy phase (the start-up, a
    receiver waiting a moment for its input, a saturated dataflow whose sites take turns
    looking the busiest) moves nothing (ours: hysteresis). None: no such test.
    ``domains``: every live site's failure domain; a copy never moves to a receiver where it
    would share one with another copy of its partition more than it does on the donor."""
    cfg = cfg or PolicyConfig()
    if len(util) < 2:
        return []
    mean = float(np.mean(list(util.values())))
    total = {j: int(counts[j].sum()) for j in util}
    # Receivers that processed nothing (an empty site) cost what the average site does.
    per_tuple = [util[j] / total[j] for j in util if total[j] > 0]
    avg_cost = float(np.mean(per_tuple)) if per_tuple else 0.0
    out: list[PlannedMove] = []
    u = dict(util)
    load = {j: counts[j].copy() for j in util}
    placed = table.copy()
    received: dict[int, int] = {}
    if not cfg.hysteresis:
        previous = None
    if previous is not None:  # hysteresis: only sites that were donors / receivers before too
        before_u, before_busy = previous
        before_mean = float(np.mean(list(before_u.values()))) if before_u else 0.0
        steady_donor = {j for j in util if j in before_u and before_u[j] >= cfg.th_busy
                        and before_u[j] >= cfg.th_imb * before_mean}
        steady_receiver = {j for j in util if j in before_busy
                           and before_busy[j] <= cfg.th_util}
    gave_now: set[int] = set()
    while True:
        # The most utilised site (as the moves planned so far leave it) gives to the least
        # utilised site that has not received yet this round: with one overloaded site this
        # is the thesis' pairing generalised, so that it can shed load to every peer at once.
        # A site that received this round gives nothing in it, and a giver receives nothing.
        donors = [j for j in u if j not in received
                  and (previous is None or j in steady_donor)]
        if not donors:
            break
        d = min(donors, key=lambda j: (-u[j], j))
        left = [j for j in u if received.get(j, 0) < cfg.moves_per_receiver and j != d
                and j not in gave and j not in gave_now
                and (busy is None or busy.get(j, 0.0) <= cfg.th_util)
                and (previous is None or j in steady_receiver)]
        if not left:
            break
        r = min(left, key=lambda j: (u[j], j))
        ud, ur = u[d], u[r]
        if (ud < mean or ud < cfg.th_busy or ur > cfg.th_util
                or (ur > 0 and ud / ur < cfg.th_imb)):
            break
        received[r] = received.get(r, 0) + 1
        moved = recent | {m.q for m in out}
        m_d = _marginal(d, ud, total, avg_cost, per_row)
        m_r = _marginal(r, ur, total, avg_cost, per_row)
        move = _first_reducing(d, r, ud, ur, load[d], m_d, m_r, placed, moved, cfg.th_gain,
                               domains or {})
        if move is None:  # nothing of d's lowers the pair's maximum: r takes no more
            received[r] = cfg.moves_per_receiver
            continue
        gave_now.add(d)
        out.append(move)
        u[d] = ud - move.n_p * m_d
        u[r] = ur + move.n_p * m_r
        total[d] -= move.n_p
        total[r] += move.n_p
        load[d][move.q], load[r][move.q] = 0, move.n_p
        placed[move.q, move.r] = r
    return out


def _marginal(j: int, u: float, total: dict[int, int], avg_cost: float,
              per_row: dict[int, float] | None) -> float:
    """What one row of demand changes site j's U by."""
    if per_row is not None and j in per_row:
        return per_row[j]
    return u / total[j] if total[j] > 0 else avg_cost


def _first_reducing(d: int, r: int, ud: float, ur: float, n: np.ndarray, m_d: float,
                    m_r: float, table: np.ndarray, recent: frozenset[int], th_gain: float = 0.0,
                    domains: dict[int, Domain] | None = None) -> PlannedMove | None:
    if m_d <= 0:
        return None
    qs, reps = np.nonzero(table == d)
    for idx in np.argsort(-n[qs], kind="stable"):
        q, rep = int(qs[idx]), int(reps[idx])
        n_p = int(n[q])
        if n_p <= 0:
            break
        if (np.delete(table[q], rep) == r).any():
            continue  # two copies of a partition never share a site
        if q in recent:
            continue
        others = [int(s) for s in np.delete(table[q], rep)]
        if domains and clash(r, others, domains) > clash(d, others, domains):
            continue  # the copy would share a failure domain with another one
        ud_new = ud - n_p * m_d
        ur_new = ur + n_p * m_r
        if ur_new > 1.0 or max(ud_new, ur_new) > ud * (1 - th_gain):
            continue
        return PlannedMove(q, rep, d, r, n_p, ud, ur)
    return None


def recovery_site(q: int, r: int, table: np.ndarray, live: list[int],
                  domains: dict[int, Domain] | None = None) -> int | None:
    """Where to recover replica r of q without a standby (thesis Table 5.2): the live site
    holding the fewest replicas that holds none of q's other copies; with ``domains`` (the
    live sites' failure domains), first one whose host and executor no other copy shares
    (fewest shared, hosts first: ``placement.clash``)."""
    others = {int(s) for s in np.delete(table[q], r)}
    load = {j: int((table == j).sum()) for j in live if j not in others}
    if not load:
        return None
    return min(load, key=lambda j: (clash(j, others, domains or {}), load[j], j))
