"""The controller core on the recovery path (sans-I/O, exact actions): a standby's liveness is
its own from its adoption on; a site lost before the view forms is waited for, not a failure of
the run; a peer's report that it cannot reach a site is that site's failure only while the
report concerns its live incarnation; and a lost partition is reported by its sites and
partitions, before the view change that revealed it."""

from __future__ import annotations

import pytest

from sparkflux.control.controller import Controller
from sparkflux.control.events import (
    Abort,
    Adopt,
    ConnectionClosed,
    FailSites,
    Heartbeat,
    InstallView,
    Registered,
    SiteAddress,
    SiteReady,
    Standby,
    StartIngress,
    Suspected,
    Tick,
)
from sparkflux.dataflow.placement import Layout

SITES = 4


def addr(site: int, attempt: int = 0) -> SiteAddress:
    return SiteAddress(site=site, attempt=attempt, host="h", port=1000 + site, pid=100 * attempt
                       + site)


def flux(timeout: float = 2.0) -> Controller:
    c = Controller(SITES, heartbeat_timeout=timeout, ha=True,
                   layout=Layout(SITES, 16, 2), stages=2)
    for s in range(SITES):
        c.handle(Registered(address=addr(s), now=0.0))
    for s in range(SITES):
        c.handle(SiteReady(site=s, attempt=0))
    return c


def beat(c: Controller, now: float, *sites: int, attempt: int = 0) -> None:
    c.handle(*[Heartbeat(site=s, attempt=attempt, now=now) for s in sites])


def test_an_adopted_standby_is_judged_by_its_own_heartbeats() -> None:
    c = flux()
    beat(c, 0.5, 0, 1, 2, 3)
    beat(c, 2.0, 0, 2, 3)  # site 1 hangs after 0.5
    [fail] = c.handle(Tick(now=2.6))
    assert isinstance(fail, FailSites) and fail.dead == (1,)
    beat(c, 2.6, 0, 2, 3)
    [standby, adopt] = c.handle(Registered(address=addr(1, attempt=1), now=2.65))
    assert isinstance(standby, Standby) and isinstance(adopt, Adopt) and adopt.slot == 1
    for t in (2.8, 3.4, 4.0, 4.5):  # the new process beats; the old one's 0.5 is history
        beat(c, t, 0, 1, 2, 3, attempt=0)
        c.handle(Heartbeat(site=1, attempt=1, now=t))
        assert c.handle(Tick(now=t + 0.05)) == []
    c2 = flux()  # the same, but the new process never beats
    beat(c2, 2.0, 0, 2, 3)
    c2.handle(Tick(now=2.6))
    c2.handle(Tick(now=3.0))
    c2.handle(Registered(address=addr(1, attempt=1), now=3.0))
    beat(c2, 4.9, 0, 2, 3)
    assert c2.handle(Tick(now=4.9)) == []  # 1.9 s after its adoption, no heartbeat yet
    beat(c2, 5.1, 0, 2, 3)
    [again] = c2.handle(Tick(now=5.1))  # 2.1 s after it: now it is hung too
    assert isinstance(again, FailSites) and again.dead == (1,)
    assert "no heartbeat for 2.1s" in c2.failures[-1][2]


def test_the_old_process_heartbeat_does_not_count_for_the_new_one() -> None:
    c = flux()
    beat(c, 2.0, 0, 2, 3)
    c.handle(Tick(now=2.6))
    c.handle(Tick(now=2.7))
    c.handle(Registered(address=addr(1, attempt=1), now=2.7))
    beat(c, 4.0, 0, 2, 3)
    c.handle(Heartbeat(site=1, attempt=0, now=4.0))  # the zombie woke up: not a member
    beat(c, 4.8, 0, 2, 3)
    [fail] = c.handle(Tick(now=4.8))
    assert isinstance(fail, FailSites) and fail.dead == (1,)


@pytest.mark.parametrize("ha", [True, False])
def test_a_site_lost_before_the_view_is_waited_for(ha: bool) -> None:
    c = Controller(3, ha=ha, layout=Layout(3, 6, 2 if ha else 1), stages=1)
    assert c.handle(Registered(address=addr(0), now=0.0)) == []
    assert c.handle(Registered(address=addr(1), now=0.1)) == []
    assert c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=0.2)) == []
    assert c.failures == [] and c.aborted is None
    assert c.handle(Registered(address=addr(2), now=0.3)) == []  # slot 1 still missing
    [view] = c.handle(Registered(address=addr(1, attempt=1), now=0.5))  # Spark's retry
    assert isinstance(view, InstallView) and view.view.members[1].attempt == 1
    c.handle(*[SiteReady(site=s, attempt=0) for s in (0, 2)])
    assert c.handle(SiteReady(site=1, attempt=1)) == [StartIngress()]


def test_a_report_that_a_peer_is_unreachable_fails_its_live_incarnation_only() -> None:
    c = flux()
    # about an older incarnation of site 2, or from a reporter that is not a member: nothing
    assert c.handle(Suspected(site=2, attempt=5, by=0, reason="timed out", now=1.0)) == []
    assert c.handle(Suspected(site=2, attempt=0, by=9, reason="timed out", now=1.0)) == []
    [fail] = c.handle(Suspected(site=2, attempt=0, by=0, reason="timed out", now=1.0))
    assert isinstance(fail, FailSites) and fail.dead == (2,)
    assert c.failures[-1][1:] == (2, "site 0 could not reach it: timed out")
    # again, or from the dead site itself: nothing more
    assert c.handle(Suspected(site=2, attempt=0, by=1, reason="x", now=1.1)) == []
    assert c.handle(Suspected(site=3, attempt=0, by=2, reason="x", now=1.1)) == []


def test_losing_a_partition_names_the_sites_and_partitions_first() -> None:
    c = flux()
    [fail] = c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=1.0))
    assert isinstance(fail, FailSites)
    abort, fail2 = c.handle(ConnectionClosed(site=2, attempt=0, reason="EOF", now=1.1))
    assert isinstance(abort, Abort) and isinstance(fail2, FailSites)
    assert abort.reason.startswith("sites 1 and 2 failed before the partitions they shared "
                                   "could be recovered (the last failure: site 2)")
    assert "stage 0: partitions 1, 5, 9, 13; stage 1: partitions 1, 5, 9, 13" in abort.reason
    assert "stage 2" not in abort.reason
