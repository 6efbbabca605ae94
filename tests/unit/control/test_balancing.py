"""The balancing rounds as the controller runs them (``control/balancing.py``, over the
round's table in ``control/rounds.py``): collection phases from the sites' counters, stale
statistics ignored, a failure stopping the round, the statistics pool (thesis §4.4, ch. 5)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from sparkflux.control.controller import Controller
from sparkflux.control.events import (
    CatchUp,
    Collect,
    ConnectionClosed,
    Move,
    Moved,
    Stats,
    Tick,
)
from sparkflux.dataflow.placement import NOWHERE
from tests.support.control_helpers import finish, moves_of, started

P = 8


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
            assert not moves_of(acts)
        if window:
            assert [r["window_s"] for r in c.rounds[:4]] == [1.0, 1.5, 1.75, 2.0]
        # site 1 had a third of its capacity for two phases: each alone makes it three times
        # as utilised as its peers, pooled with 3.5 s of balanced phases about 1.1 times
        rnd, acts = _phase(c, s, rnd, noisy)
        assert not moves_of(acts)  # one round is never enough (hysteresis)
        rnd, acts = _phase(c, s, rnd, noisy)
        assert bool(moves_of(acts)) is moved
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
    while not moves_of(acts):  # none before the statistics have run 2 s (hysteresis)
        rnd, acts = _phase(c, s, rnd, slow)
    assert s.now >= 3.0
    # pooled: the round's statistics reach back past its own phase
    assert c.rounds[-1]["window_s"] > c.rounds[-1]["delta_s"]
    moves = moves_of(acts)
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
