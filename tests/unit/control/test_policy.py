"""The hill-climbing load-balancing policy and its rounds in the controller (thesis §4.4, ch. 5)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np

from sparkflux.control.events import (
    CatchUp,
    CatchUpDone,
    ConnectionClosed,
    Folded,
    Move,
    Moved,
    Tick,
)
from sparkflux.control.policy import PolicyConfig, plan_moves, recovery_site
from sparkflux.dataflow.placement import DRIVER, NOWHERE, Layout
from sparkflux.runtime.reports import move_report
from tests.support.control_helpers import finish, moves_of, started

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














def test_a_finished_move_is_recorded_and_reported() -> None:
    """A move's record fills in as the sites confirm it and its stages are caught up; the
    run's report lists it with these keys and values (the JSON of ``move_report``). Made
    before it breaks: the new copy is built in the free column (2) from the other copy (1),
    and the old one (0) retired once every party has folded the new one in."""
    c = started(balance=False)
    c.handle(Tick(now=1.0))
    (move,) = moves_of(c.request_moves([(1, 0, 3)], reason="recovery"))  # site 1 -> 3
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
