"""The controller core (sans-I/O): registration, views, failure detection."""

from __future__ import annotations

from sparkflux.control.controller import Controller, ControlOptions
from sparkflux.control.events import (
    Abort,
    ConnectionClosed,
    Heartbeat,
    InstallView,
    Registered,
    SiteAddress,
    SiteReady,
    StartIngress,
    StopSite,
    Suspected,
    Tick,
)


def addr(site: int, attempt: int = 0) -> SiteAddress:
    return SiteAddress(site=site, attempt=attempt, host="h", port=1000 + site, pid=site)


def started(n: int = 3) -> Controller:
    c = Controller(n, options=ControlOptions(heartbeat_timeout=2.0))
    for s in range(n):
        c.handle(Registered(address=addr(s), now=0.0))
    for s in range(n):
        c.handle(SiteReady(site=s, attempt=0))
    return c


def test_view_installed_once_all_sites_register_then_ingress_starts() -> None:
    c = Controller(2)
    assert c.handle(Registered(address=addr(0), now=0.0)) == []
    [a] = c.handle(Registered(address=addr(1), now=0.0))
    assert isinstance(a, InstallView) and a.view.number == 1 and set(a.view.members) == {0, 1}
    assert c.handle(SiteReady(site=0, attempt=0)) == []
    assert c.handle(SiteReady(site=1, attempt=0)) == [StartIngress()]


def test_connection_loss_aborts_with_advice() -> None:
    c = started()
    [a] = c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=5.0))
    assert isinstance(a, Abort) and "site 1" in a.reason and "--ha flux" in a.reason


def test_heartbeat_timeout_detects_a_hung_site() -> None:
    c = started()
    c.handle(Heartbeat(site=0, attempt=0, now=1.5), Heartbeat(site=1, attempt=0, now=1.5))
    assert c.handle(Tick(now=1.9)) == []
    actions = c.handle(Tick(now=3.0))  # site 2 last seen at 0.0
    assert len(actions) == 1 and "site 2" in actions[0].reason and "heartbeat" in actions[0].reason


def test_retried_site_task_is_told_to_stop() -> None:
    c = started()
    [a] = c.handle(Registered(address=addr(1, attempt=1), now=4.0))
    assert isinstance(a, StopSite) and a.site == 1 and a.attempt == 1


def test_stale_attempt_loss_is_ignored() -> None:
    c = started()
    assert c.handle(ConnectionClosed(site=1, attempt=7, reason="EOF", now=1.0)) == []


def test_with_one_copy_a_report_that_a_peer_is_unreachable_excludes_nobody() -> None:
    """With nothing to fail over to, a silent or unreachable site is waited for (the
    watchdog names it): excluding it would only end the job."""
    c = started()
    assert c.handle(Suspected(site=2, attempt=0, by=0, reason="refused", now=1.0)) == []
    assert c.handle(Suspected(site=0, attempt=0, by=2, reason="refused", now=1.0)) == []
    assert c.handle(Tick(now=1.9)) == [] and c.failures == []


def test_every_member_is_timed_from_view_one_not_from_its_registration() -> None:
    """A site that registered long before the last one is not excluded as hung the moment the
    view forms: its heartbeats before the view counted for no member."""
    c = Controller(2, options=ControlOptions(heartbeat_timeout=2.0))
    c.handle(Registered(address=addr(0), now=0.0))
    c.handle(Registered(address=addr(1), now=5.0))  # view 1 at 5.0
    assert c.handle(Tick(now=6.0)) == []
    [lost] = c.handle(Tick(now=7.5))
    assert lost == Abort(reason=lost.reason) and "site 0 failed (no heartbeat for 2.5s" in \
        lost.reason
