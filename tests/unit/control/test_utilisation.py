"""The cost model of a collection phase (``control/utilisation.py``): U_j as demand over
capacity, each site's own cost per row, and the fitted fixed cost (thesis §4.4)."""

from __future__ import annotations

import numpy as np

from sparkflux.control.events import Stats
from sparkflux.dataflow.placement import Layout

P = 8


def table() -> np.ndarray:
    return Layout(4, P, 2).table().copy()


def test_utilisation_is_demand_over_capacity_even_for_a_lagging_site() -> None:
    """A slowed site processes less than its share; its load is its partitions' demand (what
    their other copies processed), so it still shows as the most utilised."""
    from sparkflux.control.utilisation import utilisation

    t = table()
    def sample(j: int, rows_per_partition: int, cap: float, busy: float) -> Stats:
        counts = tuple(rows_per_partition if (t[q] == j).any() else 0 for q in range(P))
        return Stats(site=j, attempt=0, round=2, busy_s=busy, capacity_s=cap, counts=counts,
                     now=1.0)
    zero = {j: Stats(site=j, attempt=0, round=1, busy_s=0.0, capacity_s=0.0,
                     counts=(0,) * P, now=0.0) for j in range(4)}
    end = {0: sample(0, 1000, 0.4, 0.2), 1: sample(1, 1000, 0.4, 0.2),
           2: sample(2, 500, 0.2, 0.2), 3: sample(3, 1000, 0.4, 0.2)}
    u = utilisation(zero, end, t)
    util, load, busy = u.util, u.load, u.busy
    assert util[2] > 1.5 * max(util[0], util[1], util[3])
    assert load[2].sum() == 4 * 1000  # the demand of its four partitions, not the 500 it did
    assert busy[2] == 1.0 and busy[0] == 0.5


def test_utilisation_charges_each_site_its_own_cost_per_row() -> None:
    """Same demand, same capacity, but site 2 spends twice the CPU time per row: its U is
    twice its peers' (with the average cost it would look as idle as they are). A site with
    too few rows to measure is charged the average."""
    from sparkflux.control.utilisation import MIN_COST_ROWS, utilisation

    t = table()
    def sample(j: int, rows_per_partition: int, busy: float) -> Stats:
        counts = tuple(rows_per_partition if (t[q] == j).any() else 0 for q in range(P))
        return Stats(site=j, attempt=0, round=2, busy_s=busy, capacity_s=0.4, counts=counts,
                     now=1.0)
    zero = {j: Stats(site=j, attempt=0, round=1, busy_s=0.0, capacity_s=0.0,
                     counts=(0,) * P, now=0.0) for j in range(4)}
    end = {0: sample(0, 1000, 0.15), 1: sample(1, 1000, 0.15), 2: sample(2, 1000, 0.3),
           3: sample(3, 1000, 0.15)}
    util = utilisation(zero, end, t).util
    assert abs(util[2] / util[0] - 2.0) < 1e-9 and util[0] == util[1] == util[3]
    few = MIN_COST_ROWS // (2 * P) - 1  # site 3 processed too few rows to measure its cost
    end[3] = sample(3, few, 0.3)
    util = utilisation(zero, end, t).util
    assert util[3] < util[2]  # not 0.3 s over a handful of rows


def test_a_fixed_cost_is_fitted_and_does_not_move_with_partitions() -> None:
    """Sites whose row rates differ (after moves) show busy = F + c * rows: the fit recovers
    F and c, U_j counts the fixed part, and moving rows changes U by c only."""
    from sparkflux.control.utilisation import utilisation

    t = Layout(4, 64, 2).table().copy()
    f, c = 0.02, 1e-6  # 20 ms of CPU per second, 1 us per row
    hosted = {j: int((t == j).any(axis=1).sum()) for j in range(4)}
    per_part = {0: 4000, 1: 4000, 2: 1000, 3: 4000}  # rows per hosted partition, per second
    def sample(j: int) -> Stats:
        counts = tuple(per_part[j] if (t[q] == j).any() else 0 for q in range(64))
        cap = 0.05 if j == 2 else 0.1
        return Stats(site=j, attempt=0, round=2, busy_s=f + c * sum(counts), capacity_s=cap,
                     counts=counts, now=1.0)
    zero = {j: Stats(site=j, attempt=0, round=1, busy_s=0.0, capacity_s=0.0,
                     counts=(0,) * 64, now=0.0) for j in range(4)}
    u = utilisation(zero, {j: sample(j) for j in range(4)}, t)
    assert abs(u.fixed - f) < 1e-9
    assert abs(u.per_row[0] - c / 0.1) < 1e-12 and abs(u.per_row[2] - c / 0.05) < 1e-12
    assert hosted[0] == 32
    # its demand is its partitions' (their other copies ran 4000 a second)
    assert abs(u.util[2] - (f + c * 4000 * 32) / 0.05) < 1e-9
