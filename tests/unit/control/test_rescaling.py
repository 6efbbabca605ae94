"""The controller's rescaling of a running query (``control/rescaling.py``): the exact actions
of a sans-I/O controller driven by hand, as the runtime and the sites would.

Four sites hold 8 partitions, two copies each, by chained declustering (partition q on sites
q mod 4 and q + 1 mod 4). Growing to 6 opens slots 4 and 5 and asks for two site tasks; each
new process adopts one, with nothing to catch up, and once both are in the copies move by
make-before-break moves to chained declustering over the 6 sites. Shrinking to 3 moves every
copy off site 3, then stops its process and installs a view without it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from sparkflux.control.controller import Controller
from sparkflux.control.events import (
    Action,
    Adopt,
    CatchUp,
    ConnectionClosed,
    FailSites,
    LaunchSites,
    Move,
    Moved,
    Recovered,
    Registered,
    Rescale,
    Rescaled,
    RescaleRefused,
    SiteAddress,
    SiteReady,
    Standby,
    StopSite,
    Tick,
)
from sparkflux.control.membership import Slot
from sparkflux.control.rescale import GROW_WAIT_S
from sparkflux.dataflow.placement import NOWHERE
from tests.support.control_helpers import finish, started


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def running() -> Controller:
    c = started(balance=False)
    c.heartbeat_timeout = 1e9  # no site is found silent: the ticks here are the grow wait's
    c.handle(Tick(now=1.0))
    return c


def standby(pid: int) -> Registered:
    return Registered(address=SiteAddress(site=pid, attempt=0, host="h", port=pid, pid=pid),
                      now=3.0)


def drive(c: Controller, actions: list[Action], now: float = 5.0) -> list[Action]:
    """Answer every move (every live site confirms it) and catch-up (done and folded in)
    until nothing more comes; every action, in order."""
    seen: list[Action] = []
    todo = list(actions)
    while todo:
        a = todo.pop(0)
        seen.append(a)
        if isinstance(a, Move):
            todo += c.handle(*[Moved(site=j, epoch=a.epoch, now=now)
                               for j in sorted(set(c.view.members) - c.dead)])
        elif isinstance(a, CatchUp):
            todo += finish(c, a, now=now)
    return seen


def test_a_grow_opens_slots_asks_for_tasks_and_refuses_another_meanwhile() -> None:
    c = running()
    assert c.handle(Rescale(sites=6, now=2.0)) == [LaunchSites(count=2)]
    assert c.awaiting == [4, 5] and c.sites == 6 and c.layout is not None
    assert c.layout.sites == 6 and {c.slot_state[4], c.slot_state[5]} == {Slot.AWAITING}
    assert c.handle(Rescale(sites=3, now=2.1)) == [
        RescaleRefused(sites=3, reason="a rescale to 6 sites is in progress")]


def test_new_processes_adopt_the_opened_slots_then_the_copies_move() -> None:
    c = running()
    c.handle(Rescale(sites=6, now=2.0))
    [sb, adopt] = c.handle(standby(10))
    assert sb == Standby(site=10, attempt=0)
    assert isinstance(adopt, Adopt) and adopt.slot == 4 and adopt.registered == 10
    assert c.handle(SiteReady(site=4, attempt=0)) == [Recovered(slot=4)]  # nothing to catch up
    c.handle(standby(11))
    recovered, *moves = c.handle(SiteReady(site=5, attempt=0))
    assert recovered == Recovered(slot=5)
    # every partition's first move as one group, each built in the free column (make before
    # break) on a site of its target: partition q on sites q + 2 and q + 3 (mod 6), the
    # rotation of the 6-site ring that keeps the most copies in place
    assert moves == [Move(q=0, r=2, src=NOWHERE, dst=2, epoch=3, reason="rescale", survivor=1),
                     Move(q=1, r=2, src=NOWHERE, dst=3, epoch=4, reason="rescale", survivor=1),
                     Move(q=2, r=2, src=NOWHERE, dst=4, epoch=5, reason="rescale", survivor=1),
                     Move(q=3, r=2, src=NOWHERE, dst=5, epoch=6, reason="rescale", survivor=1),
                     Move(q=7, r=2, src=NOWHERE, dst=4, epoch=7, reason="rescale", survivor=0)]
    assert c.pending_moves == [(0, 1, 3, "rescale"), (1, 1, 4, "rescale"),
                               (2, 1, 5, "rescale")]
    done = [a for a in drive(c, moves) if isinstance(a, Rescaled)]
    assert len(done) == 1 and done[0].record["moves"] == 8 and done[0].record["rounds"] == 1
    assert c.rescaling is None and c.layout is not None
    for q in range(8):
        assert sorted(s for s in c.layout.table()[q] if s != NOWHERE) == sorted(
            {(q + 2) % 6, (q + 3) % 6})


def test_a_shrink_moves_everything_off_the_highest_slot_then_retires_it() -> None:
    c = running()
    first = c.handle(Rescale(sites=3, now=2.0))
    assert all(isinstance(a, Move) and a.reason == "rescale" for a in first) and first
    seen = drive(c, first)
    stop = next(a for a in seen if isinstance(a, StopSite))
    fail = next(a for a in seen if isinstance(a, FailSites))
    assert stop == StopSite(site=3, attempt=0, reason="retired: the query was rescaled to 3 "
                                                     "sites")
    assert fail.retired == (3,) and 3 not in fail.view.members and fail.dead == (3,)
    assert seen.index(stop) < seen.index(fail)  # stopped before its connections close
    [done] = [a for a in seen if isinstance(a, Rescaled)]
    assert done.record["retired"] == [3] and done.record["sites"] == 3
    assert c.slot_state[3] is Slot.VACANT and c.failures == []
    assert c.layout is not None and 3 not in c.layout.table()
    # a later grow opens the vacant slot again first
    assert c.handle(Rescale(sites=4, now=9.0)) == [LaunchSites(count=1)]
    assert c.awaiting == [3] and c.sites == 4


def test_a_retiring_site_that_fails_is_not_adopted_again() -> None:
    c = running()
    first = c.handle(Rescale(sites=3, now=2.0))
    out = c.handle(ConnectionClosed(site=3, attempt=0, reason="crash", now=2.5))
    assert any(isinstance(a, FailSites) for a in out)
    assert c.awaiting == [] and c.handle(standby(10)) == [Standby(site=10, attempt=0)]
    seen = drive(c, first + out)
    [done] = [a for a in seen if isinstance(a, Rescaled)]
    assert done.record["retired"] == [3] and c.slot_state[3] is Slot.VACANT
    assert c.layout is not None and 3 not in c.layout.table()


def test_opened_slots_no_task_took_are_closed_after_the_grow_wait() -> None:
    c = running()
    c.handle(Rescale(sites=6, now=2.0))
    c.handle(standby(10))
    c.handle(SiteReady(site=4, attempt=0))
    assert [a for a in c.handle(Tick(now=2.0 + GROW_WAIT_S - 1)) if isinstance(a, Move)] == []
    moves = c.handle(Tick(now=2.0 + GROW_WAIT_S + 1))
    assert c.slot_state[5] is Slot.VACANT and c.awaiting == []
    assert moves and all(isinstance(a, Move) and a.dst != 5 for a in moves)
    [done] = [a for a in drive(c, moves) if isinstance(a, Rescaled)]
    assert done.record["unstarted"] == [5] and "no site task started" in str(
        done.record["note"])


@pytest.mark.parametrize(("sites", "why"), [
    (1, "rescale to at least 2 sites"),
    (9, "at most 8 sites with --partitions 8"),
])
def test_a_rescale_out_of_bounds_is_refused_with_what_to_change(sites: int, why: str) -> None:
    [refused] = running().handle(Rescale(sites=sites, now=2.0))
    assert isinstance(refused, RescaleRefused) and why in refused.reason


def test_rescaling_needs_replicas_and_a_started_query() -> None:
    one = Controller(2)
    [r] = one.handle(Rescale(sites=3, now=0.0))
    assert isinstance(r, RescaleRefused) and "--ha flux" in r.reason
    c = started(balance=False)
    c.started = False
    [r] = c.handle(Rescale(sites=5, now=0.0))
    assert isinstance(r, RescaleRefused) and "not started yet" in r.reason
