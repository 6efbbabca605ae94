"""The cost model of a collection phase: each site's utilisation U_j, the load of each
partition it hosts and what moving a row of demand changes U_j by (thesis §4.4), from two
samples of the sites' counters (``Stats``). The balancing round (``Controller._movement_phase``)
hands the result to the policy (``policy.plan_moves``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparkflux.control.events import Stats

MIN_COST_ROWS = 200  # rows a site must process in a phase for its own cost per row to count
FIT_SPREAD = 0.5  # row rates must spread this much (of their mean) to fit a fixed cost


@dataclass(frozen=True)
class Utilisation:
    """One collection phase, as the policy sees it (see ``utilisation``)."""

    util: dict[int, float]  # U_j
    load: dict[int, np.ndarray]  # N_p: the demand of each partition site j hosts
    busy: dict[int, float]  # measured busy fraction of capacity
    per_row: dict[int, float]  # dU_j per row of demand moved to or from site j
    rows: dict[int, int]  # rows site j processed in the phase
    fixed: float  # the fitted fixed cost, CPU seconds per second (0: none fitted)


def utilisation(base: dict[int, Stats], end: dict[int, Stats], table: np.ndarray
                ) -> Utilisation:
    """Per site, the utilisation U_j the policy works with, the load per hosted partition
    N_p, the measured busy fraction of capacity and what moving one row of demand changes
    U_j by, from one collection phase.

    The thesis measures U_j = 1 - idle / delta. In a replicated pipeline that mostly measures
    waiting on the slowest site, and a lagging site processes *less* than its share, so here
    the load of a partition is its demand: the rows its faster copy processed (both copies do
    the same work). A site's busy time is a fixed part (its scheduler passes cost several
    milliseconds whatever they carry) plus a cost per row: fitted over the sites,
    busy_j / wall = F + c * rows_j / wall, when their row rates differ enough to tell the two
    apart (after moves; never below zero). Then U_j = (F * wall + c * demand_j) / capacity_j,
    and moving N_p rows of demand changes U_j by c * N_p / capacity_j: the fixed part does not
    move with a partition (a slowed site relieved of most of its partitions stays busy, and
    counting that part as movable would keep the policy moving copies off it). Otherwise U_j
    is the demand times the cost per row measured *on that site* (busy over rows), over its
    capacity: a saturated site spends more CPU per row than its peers (docs/availability.md:
    "Statistics in rounds"), and with the average cost it would look no busier than they
    while it holds the rate down. A site that processed fewer than ``MIN_COST_ROWS`` rows
    (a fresh standby) is charged the average cost."""
    rows: dict[int, np.ndarray] = {}
    cap: dict[int, float] = {}
    busy: dict[int, float] = {}
    wall: dict[int, float] = {}
    for j, e in end.items():
        b = base.get(j)
        if b is None or b.attempt != e.attempt or e.capacity_s - b.capacity_s <= 0:
            continue
        cap[j] = e.capacity_s - b.capacity_s
        busy[j] = max(0.0, e.busy_s - b.busy_s)
        wall[j] = _at(e) - _at(b)
        rows[j] = np.asarray(e.counts, dtype=np.int64) - np.asarray(b.counts, dtype=np.int64)
    if not rows:
        return Utilisation({}, {}, {}, {}, {}, 0.0)
    demand = np.max(np.stack(list(rows.values())), axis=0)  # per partition
    processed = sum(int(r.sum()) for r in rows.values())
    average = sum(busy.values()) / processed if processed else 0.0
    fixed, per_row_cost = _fit_fixed_cost(rows, busy, wall)
    util, load, per_row = {}, {}, {}
    for j in rows:
        mine = (table == j).any(axis=1)
        load[j] = np.where(mine, demand, 0)
        if per_row_cost is not None:
            util[j] = (fixed * wall[j] + per_row_cost * float(load[j].sum())) / cap[j]
            per_row[j] = per_row_cost / cap[j]
            continue
        done = int(rows[j].sum())
        cost = busy[j] / done if done >= MIN_COST_ROWS else average
        util[j] = float(load[j].sum()) * cost / cap[j]
        per_row[j] = cost / cap[j]
    return Utilisation(util, load, {j: min(1.0, busy[j] / cap[j]) for j in rows}, per_row,
                       {j: int(r.sum()) for j, r in rows.items()},
                       fixed if per_row_cost is not None else 0.0)


def _at(s: Stats) -> float:
    return s.now if s.at is None else s.at


def _fit_fixed_cost(rows: dict[int, np.ndarray], busy: dict[int, float],
                    wall: dict[int, float]) -> tuple[float, float | None]:
    """Least squares of CPU fraction on row rate over the sites: (F, c), or (0, None) when
    the sites' row rates are too alike to separate a fixed part (within ``FIT_SPREAD`` of
    their mean), there are fewer than three, or the fit is not physical (c <= 0, F < 0)."""
    js = [j for j in rows if wall[j] > 0]
    if len(js) < 3:
        return 0.0, None
    x = np.array([rows[j].sum() / wall[j] for j in js], dtype=np.float64)
    y = np.array([busy[j] / wall[j] for j in js], dtype=np.float64)
    if x.mean() <= 0 or (x.max() - x.min()) / x.mean() < FIT_SPREAD:
        return 0.0, None
    c, f = np.polyfit(x, y, 1)
    if c <= 0 or f < 0:
        return 0.0, None
    return float(f), float(c)
