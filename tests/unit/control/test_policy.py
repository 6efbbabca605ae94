"""The hill-climbing load-balancing policy and its rounds in the controller (thesis §4.4, ch. 5)."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import numpy as np

from sparkflux.control.controller import Controller
from sparkflux.control.events import (
    CatchUp,
    CatchUpDone,
    Collect,
    ConnectionClosed,
    Folded,
    Move,
    Moved,
    Registered,
    SiteAddress,
    SiteReady,
    Stats,
    Tick,
)
from sparkflux.control.policy import PolicyConfig, plan_moves, recovery_site
from sparkflux.dataflow.placement import DRIVER, NOWHERE, Layout
from sparkflux.runtime.reports import move_report
from tests.support.control_helpers import finish

P = 8


def table() -> np.ndarray:
    return Layout(4, P, 2).table().copy()


def counts_for(t: np.ndarray, per_partition: np.ndarray) -> dict[int, np.ndarray]:
    """Rows each site processed: every replica does its partition's work."""
    out = {}
    for j in range(4):
        c = np.zeros(P, dtype=np.int64)
        hosted = np.nonzero((t == j).any(axis=1))[0]
        c[hosted] = per_partition[hosted]
        out[j] = c
    return out


def test_the_busiest_site_gives_its_heaviest_movable_partition_to_the_idlest() -> None:
    t = table()
    n = np.array([100, 400, 100, 100, 100, 300, 100, 100])
    util = {0: 0.5, 1: 1.0, 2: 0.55, 3: 0.3}
    moves = plan_moves(util, counts_for(t, n), t)
    assert len(moves) == 1  # the second pair (2, 0) is below the mean: the round stops
    m = moves[0]
    # site 1 holds partitions 0 (replica 1), 1 (replica 0), 4 (replica 1), 5 (replica 0);
    # partition 1 (N_p = 400) has its other copy on site 2, not on receiver 3: it goes
    assert (m.q, m.r, m.donor, m.receiver) == (1, 0, 1, 3)


def test_a_partition_whose_other_copy_is_on_the_receiver_is_skipped() -> None:
    t = table()
    n = np.array([100, 400, 100, 100, 100, 300, 100, 100])
    util = {0: 0.5, 1: 1.0, 2: 0.2, 3: 0.55}
    m = plan_moves(util, counts_for(t, n), t)[0]
    # receiver 2 holds partitions 1 and 5's other copies: the first candidate is partition 0
    assert m.receiver == 2 and m.q in (0, 4) and t[m.q, 1 - m.r] != 2


def test_no_move_when_balanced_idle_or_the_receiver_is_busy() -> None:
    t = table()
    n = np.full(P, 100)
    c = counts_for(t, n)
    assert plan_moves({0: 0.9, 1: 0.85, 2: 0.88, 3: 0.86}, c, t) == []  # within th_imb
    assert plan_moves({0: 0.5, 1: 0.2, 2: 0.25, 3: 0.3}, c, t) == []  # nobody is busy
    assert plan_moves({0: 1.0, 1: 0.95, 2: 0.96, 3: 0.94}, c, t) == []  # no room anywhere


def test_a_move_must_lower_the_pair_maximum() -> None:
    t = table()
    n = np.zeros(P, dtype=np.int64)
    n[[0, 3]] = 1000  # site 0 does all its work in two partitions
    util = {0: 1.0, 1: 0.4, 2: 0.4, 3: 0.3}
    c = counts_for(t, n)
    c[3][:] = 0
    c[3][2] = 100  # site 3 is cheap per tuple... (U 0.3 for 100 rows)
    # moving 1000 rows there would cost it 3.0: rejected (U'_r > 1); the next least
    # utilised site takes it instead
    moves = plan_moves(util, c, t, PolicyConfig())
    assert [(m.donor, m.receiver) for m in moves] == [(0, 1)]


def test_an_empty_site_receives_at_the_average_cost() -> None:
    t = table()
    t[t == 3] = 0  # pretend site 3 holds nothing (its replicas elsewhere: not realistic,
    t[P - 1, 1] = 1  # ...but never two copies on one site)
    n = np.full(P, 100)
    util = {0: 1.0, 1: 0.6, 2: 0.6, 3: 0.0}
    moves = plan_moves(util, counts_for(t, n), t)
    assert moves and moves[0].receiver == 3 and moves[0].donor == 0


def test_recovery_site_takes_the_least_loaded_site_without_the_other_copy() -> None:
    t = table()
    # partition 2: replicas on sites 2 and 3; site 3 failed; site 2 holds the other copy
    dst = recovery_site(2, 1, t, [0, 1, 2])
    assert dst in (0, 1) and dst != 2
    t[0, 0] = 1  # make site 0 hold fewer replicas than site 1... (moved away)
    assert recovery_site(2, 1, t, [0, 1, 2]) == 0


def started(balance: bool = True, window_s: float = 4.0) -> Controller:
    c = Controller(4, ha=True, layout=Layout(4, P, 2), stages=2, balance=balance,
                   policy=PolicyConfig(delta_start=1.0, delta_min=0.25, window_s=window_s))
    for s in range(4):
        c.handle(Registered(address=SiteAddress(site=s, attempt=0, host="h", port=s, pid=s),
                            now=0.0))
    for s in range(4):
        c.handle(SiteReady(site=s, attempt=0))
    return c


def stats(c: Controller, rnd: int, now: float, caps: list[float]) -> list:
    """Every site processed its partitions' rows at the same rate; ``caps`` are their
    capacities (a site with half the capacity is twice as utilised)."""
    t = c.layout.table()
    out = []
    for j in range(4):
        counts = tuple(int(100 * now) if (t[q] == j).any() else 0 for q in range(P))
        out += c.handle(Stats(site=j, attempt=0, round=rnd, busy_s=0.3 * now,
                              capacity_s=caps[j] * now, counts=counts, now=now))
    return out


def test_rounds_collect_then_move_and_ignore_stale_statistics() -> None:
    c = started(window_s=2.0)
    acts = c.handle(Tick(now=1.0))
    assert [type(a) for a in acts] == [Collect] and acts[0].round == 1
    assert stats(c, 1, 1.0, [1.0, 0.35, 1.0, 1.0]) == []  # the baseline
    assert c.handle(Tick(now=1.5)) == []  # the collection phase lasts delta = 1 s
    end = c.handle(Tick(now=2.0))
    assert [type(a) for a in end] == [Collect] and end[0].round == 2
    assert stats(c, 1, 2.0, [1.0, 0.35, 1.0, 1.0]) == []  # a stale round: ignored
    # the first round moves nothing (hysteresis: no earlier round shows the same imbalance)
    assert not [a for a in stats(c, 2, 2.0, [1.0, 0.35, 1.0, 1.0]) if isinstance(a, Move)]
    assert c.rounds[-1]["moves"] == [] and c.delta == 0.5  # halved: nothing moved
    acts = c.handle(Tick(now=2.0))
    assert [type(a) for a in acts] == [Collect] and acts[0].round == 3
    stats(c, 3, 2.0, [1.0, 0.35, 1.0, 1.0])
    assert [type(a) for a in c.handle(Tick(now=2.5))] == [Collect]
    # nothing moves before the statistics have run window_s (2 s) from the first baseline
    assert not [a for a in stats(c, 4, 2.5, [1.0, 0.35, 1.0, 1.0]) if isinstance(a, Move)]
    rnd, now = 4, 2.5
    while now < 3.0:
        assert [type(a) for a in c.handle(Tick(now=now))] == [Collect]
        stats(c, rnd + 1, now, [1.0, 0.35, 1.0, 1.0])
        now += c.delta
        assert [type(a) for a in c.handle(Tick(now=now))] == [Collect]
        rnd += 2
        acts = stats(c, rnd, now, [1.0, 0.35, 1.0, 1.0])
        assert now >= 3.0 or not [a for a in acts if isinstance(a, Move)]
    moves = [a for a in acts if isinstance(a, Move)]
    assert moves and {c.moving[m.epoch].src for m in moves} == {1}
    assert {m.src for m in moves} == {NOWHERE} and {m.reason for m in moves} == {"balance"}
    assert max(Counter(m.dst for m in moves).values()) <= 2  # moves_per_receiver
    # the group waits for every live site to confirm every move, then catches up bottom-up
    cu: list = []
    for m in moves:
        for j in range(4):
            cu += c.handle(Moved(site=j, epoch=m.epoch, now=2.6))
    assert {(a.stage, a.q) for a in cu} == {(0, m.q) for m in moves}


def test_a_failure_stops_load_balancing_at_once() -> None:
    c = started()
    c.handle(Tick(now=1.0))
    stats(c, 1, 1.0, [1.0, 0.35, 1.0, 1.0])
    c.handle(Tick(now=2.0))
    c.handle(ConnectionClosed(site=2, attempt=0, reason="killed", now=2.05))
    # the end-of-phase statistics of the abandoned round plan nothing
    assert not [a for a in stats(c, 2, 2.1, [1.0, 0.35, 1.0, 1.0]) if isinstance(a, Move)]
    assert c.incomplete and not c._balancing()
    assert c.handle(Tick(now=5.0)) == []  # recovery mode: no rounds while replicas are missing


def test_policy_off_never_collects() -> None:
    c = started(balance=False)
    assert c.handle(Tick(now=10.0)) == []


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


def test_no_standby_in_time_means_recovery_onto_the_survivors() -> None:
    c = started(balance=False)
    c.standby_wait = 2.0
    c.handle(Tick(now=1.0))
    c.handle(ConnectionClosed(site=1, attempt=0, reason="killed", now=1.0))
    assert c.awaiting == [1] and c.handle(Tick(now=2.5)) == []
    acts = c.handle(Tick(now=3.5))
    moves = [a for a in acts if isinstance(a, Move)]
    # one group: every replica of site 1 re-placed at once (up to MOVE_GROUP)
    assert len(moves) == 2 * P // 4 and {m.src for m in moves} == {1}
    assert {m.reason for m in moves} == {"recovery"} and 1 not in {m.dst for m in moves}
    assert c.awaiting == [] and c.pending_moves == []


def test_a_site_without_idle_time_receives_nothing() -> None:
    """Site 3's estimated U (0.45) makes it the first receiver, but it was measured busy 97%
    of its capacity: saturated, it can take no more; site 1 (busy 0.5) receives instead."""
    t = table()
    n = np.full(P, 100)
    util = {0: 1.2, 1: 0.5, 2: 1.0, 3: 0.45}
    moves = plan_moves(util, counts_for(t, n), t, busy={0: 1.0, 1: 0.5, 2: 1.0, 3: 0.97})
    assert moves and {m.receiver for m in moves} == {1}
    assert plan_moves(util, counts_for(t, n), t, busy={j: 1.0 for j in range(4)}) == []


def test_a_recent_donor_receives_nothing() -> None:
    """Site 3 gave copies away in the last rounds: though it now looks the idlest (a relieved
    site can, for a phase), nothing moves back onto it; site 1 receives instead."""
    t = table()
    n = np.full(P, 100)
    util = {0: 1.2, 1: 0.5, 2: 1.0, 3: 0.45}
    assert {m.receiver for m in plan_moves(util, counts_for(t, n), t)} >= {3}
    moves = plan_moves(util, counts_for(t, n), t, gave=frozenset({3}))
    assert moves and 3 not in {m.receiver for m in moves} and 1 in {m.receiver for m in moves}


def test_a_receiver_takes_up_to_moves_per_receiver_partitions() -> None:
    """Site 1 is far above the others and only site 3 has idle time: with the default of two
    moves per receiver it takes two of site 1's partitions in one round, with one only one."""
    t = table()
    n = np.full(P, 100)
    util = {0: 0.95, 1: 2.0, 2: 0.95, 3: 0.3}
    busy = {0: 1.0, 1: 1.0, 2: 1.0, 3: 0.3}
    two = plan_moves(util, counts_for(t, n), t, busy=busy)
    assert [(m.donor, m.receiver) for m in two] == [(1, 3), (1, 3)]
    assert two[0].q != two[1].q
    one = plan_moves(util, counts_for(t, n), t, PolicyConfig(moves_per_receiver=1), busy=busy)
    assert [(m.donor, m.receiver) for m in one] == [(1, 3)]


def test_one_noisy_phase_moves_nothing() -> None:
    """Hysteresis: the same imbalance plans moves when the previous round showed the donor
    loaded and the receiver idle too, and none when it did not (the round after a start or
    a failure has no previous round: nothing moves)."""
    t = table()
    n = np.full(P, 100)
    util = {0: 1.2, 1: 0.5, 2: 1.0, 3: 0.45}
    busy = {0: 1.0, 1: 0.5, 2: 1.0, 3: 0.45}
    assert plan_moves(util, counts_for(t, n), t, busy=busy, previous=(util, busy))
    assert plan_moves(util, counts_for(t, n), t, busy=busy, previous=({}, {})) == []
    calm = {0: 0.6, 1: 0.5, 2: 0.6, 3: 0.45}  # site 0 was not loaded a round ago
    assert plan_moves(util, counts_for(t, n), t, busy=busy, previous=(calm, busy)) == []
    # a round ago every site was as loaded: site 0 was not the busiest by th_imb
    even = {0: 1.0, 1: 1.0, 2: 0.98, 3: 0.99}
    assert plan_moves(util, counts_for(t, n), t, busy=busy, previous=(even, busy)) == []
    was_busy = {**busy, 1: 1.0, 3: 1.0}  # neither receiver had idle time a round ago
    assert plan_moves(util, counts_for(t, n), t, busy=busy, previous=(util, was_busy)) == []
    only_3 = {**busy, 1: 1.0}
    moves = plan_moves(util, counts_for(t, n), t, busy=busy, previous=(util, only_3))
    assert moves and {m.receiver for m in moves} == {3}


def test_a_site_that_spiked_once_does_not_stop_the_round() -> None:
    """Hysteresis skips a donor that was not loaded a round ago, and the round goes on with
    the next one (site 2, loaded in both rounds); a receiver gives nothing in that round."""
    t = table()
    n = np.full(P, 100)
    util = {0: 1.3, 1: 0.4, 2: 1.2, 3: 0.45}
    busy = {0: 1.0, 1: 0.4, 2: 1.0, 3: 0.45}
    before = {0: 0.5, 1: 0.4, 2: 1.2, 3: 0.45}
    moves = plan_moves(util, counts_for(t, n), t, busy=busy, previous=(before, busy))
    assert moves and {m.donor for m in moves} == {2}
    assert not {m.donor for m in moves} & {m.receiver for m in moves}


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


class Cumulative:
    """Sites' cumulative counters as heartbeats carry them: ``advance`` runs a phase in
    which site j had ``caps[j]`` of capacity and processed 100 rows per hosted partition
    per second, busy ``busy`` of each second."""

    def __init__(self, c: Controller, busy: float = 0.6) -> None:
        self.c, self.now, self.busy = c, 0.0, busy
        self.cap = [0.0] * 4
        self.rows = np.zeros((4, P), dtype=np.int64)

    def advance(self, to: float, caps: list[float]) -> None:
        t = self.c.layout.table()
        for j in range(4):
            self.cap[j] += caps[j] * (to - self.now)
            self.rows[j] += np.where((t == j).any(axis=1), int(100 * (to - self.now)), 0)
        self.now = to

    def report(self, rnd: int) -> list:
        out = []
        for j in range(4):
            out += self.c.handle(Stats(site=j, attempt=0, round=rnd,
                                       busy_s=self.busy * self.now, capacity_s=self.cap[j],
                                       counts=tuple(int(x) for x in self.rows[j]),
                                       now=self.now))
        return out


def _phase(c: Controller, s: Cumulative, rnd: int, caps: list[float]) -> tuple[int, list]:
    """One collection phase (``c.delta`` long) from now; (its round, the actions at its end)."""
    assert [type(a) for a in c.handle(Tick(now=s.now))] == [Collect]
    s.report(rnd + 1)
    s.advance(s.now + c.delta, caps)
    c.handle(Tick(now=s.now))
    return rnd + 2, s.report(rnd + 2)


def _moves(acts: list) -> list[Move]:
    return [a for a in acts if isinstance(a, Move)]


def test_rounds_pool_their_statistics_while_the_placement_is_unchanged() -> None:
    """A round's statistics start from the oldest baseline of the last ``window_s`` seconds
    taken with the same placement: two noisy phases in a row are diluted, not acted on
    (each phase alone, they move partitions)."""
    even, noisy = [1.0, 1.0, 1.0, 1.0], [1.0, 1 / 3, 1.0, 1.0]
    for window, moved in ((4.0, False), (0.0, True)):
        c = started(window_s=window)
        s = Cumulative(c)
        s.advance(1.0, even)
        rnd = 0
        for _ in range(12):  # balanced phases: 1 s, then halved to delta_min (0.25 s)
            rnd, acts = _phase(c, s, rnd, even)
            assert not _moves(acts)
        if window:
            assert [r["window_s"] for r in c.rounds[:4]] == [1.0, 1.5, 1.75, 2.0]
        # site 1 had a third of its capacity for two phases: each alone makes it three times
        # as utilised as its peers, pooled with 3.5 s of balanced phases about 1.1 times
        rnd, acts = _phase(c, s, rnd, noisy)
        assert not _moves(acts)  # one round is never enough (hysteresis)
        rnd, acts = _phase(c, s, rnd, noisy)
        assert bool(_moves(acts)) is moved
        ratio = c.rounds[-1]["utilisation"][1] / c.rounds[-1]["utilisation"][0]
        assert (1.05 < ratio < 1.15) if window else abs(ratio - 3.0) < 1e-6, ratio
    # baselines older than window_s drop out
    c = started()
    s = Cumulative(c)
    s.advance(1.0, even)
    rnd = 0
    for _ in range(30):
        rnd, acts = _phase(c, s, rnd, even)
    assert c.rounds[-1]["window_s"] <= c.policy.window_s + c.delta


def test_a_move_starts_the_statistics_pool_afresh() -> None:
    """After a move the placement differs: older baselines describe other partitions."""
    slow = [1.0, 0.35, 1.0, 1.0]
    c = started(window_s=2.0)
    s = Cumulative(c)
    s.advance(1.0, slow)
    rnd, acts = _phase(c, s, 0, slow)
    while not _moves(acts):  # none before the statistics have run 2 s (hysteresis)
        rnd, acts = _phase(c, s, rnd, slow)
    assert s.now >= 3.0
    # pooled: the round's statistics reach back past its own phase
    assert c.rounds[-1]["window_s"] > c.rounds[-1]["delta_s"]
    moves = _moves(acts)
    work: list = []
    for m in moves:
        for j in range(4):
            work += c.handle(Moved(site=j, epoch=m.epoch, now=s.now))
    while work:  # the catch-ups, stage by stage, until the group is done
        cu = work.pop(0)
        if isinstance(cu, CatchUp):
            work += finish(c, cu, now=s.now, nbytes=1)
    assert not c.moving and c._balancing()
    s.advance(max(s.now, c.lb_at), slow)
    rnd, acts = _phase(c, s, rnd, slow)
    assert c.rounds[-1]["window_s"] == round(c.delta, 3)  # the new placement's phase alone


def test_a_finished_move_is_recorded_and_reported() -> None:
    """A move's record fills in as the sites confirm it and its stages are caught up; the
    run's report lists it with these keys and values (the JSON of ``move_report``). Made
    before it breaks: the new copy is built in the free column (2) from the other copy (1),
    and the old one (0) retired once every party has folded the new one in."""
    c = started(balance=False)
    c.handle(Tick(now=1.0))
    (move,) = _moves(c.request_moves([(1, 0, 3)], reason="recovery"))  # site 1 -> 3
    assert (move.r, move.src, move.dst) == (2, NOWHERE, 3)
    rec = c.moving[move.epoch]
    assert (rec.q, rec.r, rec.c, rec.src, rec.dst, rec.reason, rec.start, rec.left) == \
        (1, 0, 2, 1, 3, "recovery", 1.0, 2)
    assert rec.survivor == 1 and rec.confirmed is None and rec.end is None
    cu: list = []
    for j in range(4):
        cu += c.handle(Moved(site=j, epoch=move.epoch, now=1.25))
    assert rec.confirmed == 1.25 and [(a.stage, a.q, a.r) for a in cu] == [(0, 1, 2)]
    cu = finish(c, cu[0], now=1.5, nbytes=100)
    assert [(a.stage, a.q, a.r) for a in cu if isinstance(a, CatchUp)] == [(1, 1, 2)]
    assert (rec.nbytes, rec.left, rec.end, c.moves) == (100, 1, None, [])
    c.handle(CatchUpDone(stage=1, q=1, r=2, nbytes=23, now=2.0))
    assert rec.end == 2.0 and rec.retired is None  # the egress has not folded it in yet
    assert c.handle(Folded(site=DRIVER, stage=2, q=1, c=2, epoch=move.epoch, now=2.1)) == [
        Move(q=1, r=0, src=1, dst=NOWHERE, epoch=move.epoch + 1, reason="retire")]
    assert c.moves == [rec] and not c.moving
    assert (rec.nbytes, rec.left, rec.end, rec.retired, rec.short_s) == (123, 0, 2.0, 2.1, 0.0)
    assert c.layout is not None and c.layout.table()[1].tolist() == [NOWHERE, 2, 3]
    host = SimpleNamespace(move_started={move.epoch: 105.25}, metrics=SimpleNamespace(start=100.0))
    assert json.dumps(move_report(host, rec)) == json.dumps(  # type: ignore[arg-type]
        {"partition": 1, "replica": 0, "from": 1, "to": 3, "reason": "recovery",
         "bytes": 123, "started_at_s": 5.25, "duration": 1.0, "confirmed_s": 0.25,
         "built_in": 2, "short_of_copies_s": 0.0, "old_copy_retired_s": 1.1})
