"""The controller over failure domains (sans-I/O, exact actions): the ring it lays over the
domains the sites registered with at view 1, the standby it picks for a failed slot, the
re-layout moves once a standby in a shared domain has recovered, and recovery onto the
survivors that keeps copies apart.

Four sites, 8 partitions, two replicas, one stage unless said otherwise. Sites 0 and 1 share
executor ``a``, site 2 is in ``b``, site 3 in ``c``: the identity ring would put partitions 0
and 4 (sites 0, 1) in one executor, so view 1 comes with the ring 0, 2, 1, 3.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sparkflux.control.controller import Controller, ControlOptions
from sparkflux.control.events import (
    Action,
    Adopt,
    CatchUp,
    ConnectionClosed,
    InstallView,
    Move,
    Moved,
    Recovered,
    Registered,
    SiteAddress,
    SiteReady,
    Standby,
    StartIngress,
    Tick,
    View,
)
from sparkflux.dataflow.placement import NOWHERE, Domain, Layout, table_conflicts
from tests.support.control_helpers import finish

SITES = 4
EXECUTORS = ("a", "a", "b", "c")


def addr(site: int, executor: str, attempt: int = 0, host: str = "h") -> SiteAddress:
    return SiteAddress(site=site, attempt=attempt, host=host, port=1000 + site,
                       pid=100 * attempt + site, executor=executor)


def started(executors: tuple[str, ...] = EXECUTORS, recovery: str = "standby",
            hosts: tuple[str, ...] | None = None, **options: Any
            ) -> tuple[Controller, list[Action]]:
    c = Controller(len(executors), ha=True, layout=Layout(len(executors), 8, 2), stages=1,
                   options=ControlOptions(recovery=recovery, heartbeat_timeout=1e9, **options))
    install: list[Action] = []
    for s, e in enumerate(executors):
        install += c.handle(Registered(address=addr(s, e, host=hosts[s] if hosts else "h"),
                                       now=0.0))
    assert c.handle(*[SiteReady(site=s, attempt=0) for s in range(len(executors))]) == [
        StartIngress()]
    return c, install


def catch_up_all(c: Controller, actions: list[Action]) -> list[Action]:
    """Fold in every catch-up the actions start, and those they start in turn; the other
    actions, in order."""
    out: list[Action] = []
    while True:
        cus = [a for a in actions if isinstance(a, CatchUp)]
        out += [a for a in actions if not isinstance(a, CatchUp)]
        if not cus:
            return out
        actions = []
        for a in cus:
            actions += finish(c, a, now=3.0)


def test_view_1_carries_the_ring_over_the_domains() -> None:
    c, install = started()
    members = {s: addr(s, e) for s, e in enumerate(EXECUTORS)}
    assert install == [InstallView(view=View(number=1, members=members), ring=(0, 2, 1, 3))]
    assert c.layout is not None and c.layout.ring == (0, 2, 1, 3)
    assert c.layout.table()[:, :2].tolist() == [[0, 2], [2, 1], [1, 3], [3, 0]] * 2
    assert c.placement["host_conflicts"] == c.placement["executor_conflicts"] == 0
    assert c.placement["ring"] == [0, 2, 1, 3] and c.placement["executors"] == 3


def test_unknown_domains_keep_the_identity() -> None:
    c, install = started(("", "", "", ""))
    assert [a.ring for a in install if isinstance(a, InstallView)] == [(0, 1, 2, 3)]


def test_a_rule_that_cannot_hold_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sparkflux.control.controller"):
        c, install = started(("a", "a", "a", "b"))
    assert c.placement["executor_conflicts"] == 2  # a's three sites: two pairs at least
    assert "cannot keep every partition's 2 copies apart" in caplog.text
    assert "at most 2 sites of 4 in one" in caplog.text


def test_a_table_placed_by_latency_reports_its_own_conflicts(
        caplog: pytest.LogCaptureFixture) -> None:
    """``--placement latency``: the conflicts in the metrics (and the warning) are the
    table's, the ring's kept beside them as chained declustering's."""
    near, far = 1.0, 60.0
    m = tuple(tuple(0.0 if i == j else near if max(i, j) <= 2 else far for j in range(5))
              for i in range(5))  # the driver and sites 0, 1 near; sites 2, 3 far
    executors = ("a", "a", "a", "b")
    with caplog.at_level(logging.WARNING, logger="sparkflux.control.controller"):
        c, _ = started(executors, placement="latency", latencies=m)
    assert c.layout is not None
    table = c.layout.table()[:, :2]
    got = (c.placement["host_conflicts"], c.placement["executor_conflicts"])
    assert got == table_conflicts(table, [Domain("h", e) for e in executors])
    assert c.placement["chained_executor_conflicts"] == 2
    assert ("cannot keep every partition's 2 copies apart" in caplog.text) == any(got)


def test_one_jvm_is_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sparkflux.control.controller"):
        c, install = started(("jvm",) * 4)
    assert [a.ring for a in install if isinstance(a, InstallView)] == [(0, 1, 2, 3)]
    assert "cannot keep" not in caplog.text


def test_a_standby_in_a_shared_domain_is_moved_off_once_recovered() -> None:
    """Site 0 dies; Spark's retry lands in executor b, with site 2: partitions 0 and 4 (sites
    0 and 2) would die with b. Once its four replicas are folded in, they move to sites in
    other executors (1, then 3: the fewest replicas), as unified Flux's moves, made before
    they break: each new copy is built in the partition's free column (2) while the old one
    runs, and the old one is retired once the new one is folded in everywhere."""
    c, _ = started()
    c.handle(ConnectionClosed(site=0, attempt=0, reason="EOF", now=1.0))
    new = addr(0, "b", attempt=1)
    [standby, adopt] = c.handle(Registered(address=new, now=2.0))
    assert standby == Standby(site=0, attempt=1)
    assert isinstance(adopt, Adopt) and adopt.address == new and c.domains[0].executor == "b"
    first = c.handle(SiteReady(site=0, attempt=1))
    assert first == [CatchUp(stage=0, q=q, r=r, survivor=s, epoch=1)
                     for q, r, s in ((0, 0, 2), (3, 1, 3), (4, 0, 2), (7, 1, 3))]
    builds = [Move(q=0, r=2, src=NOWHERE, dst=1, epoch=2, reason="domain", survivor=1),
              Move(q=4, r=2, src=NOWHERE, dst=3, epoch=3, reason="domain", survivor=1)]
    assert catch_up_all(c, first) == [Recovered(slot=0), *builds]
    assert c.layout is not None
    assert c.layout.table()[[0, 4]].tolist() == [[0, 2, 1], [0, 2, 3]]  # three copies each
    cus = c.handle(*[Moved(site=j, epoch=e, now=3.0) for e in (2, 3) for j in range(4)])
    assert cus == [CatchUp(stage=0, q=q, r=2, survivor=2, epoch=e, retained=True)
                   for q, e in ((0, 2), (4, 3))]
    # the first build's fold-in retires its old copy; the group ends with the second's
    assert catch_up_all(c, cus) == [
        Move(q=0, r=0, src=0, dst=NOWHERE, epoch=4, reason="retire"),
        Move(q=4, r=0, src=0, dst=NOWHERE, epoch=5, reason="retire")]
    assert [m.short_s for m in c.moves] == [0.0, 0.0]  # never fewer than two complete copies
    for q in range(8):  # no partition has both copies in one executor any more
        a, b = (c.domains[s].executor for s in c.layout.table()[q] if s != NOWHERE)
        assert a != b, (q, c.layout.table()[q])


def test_a_standby_in_a_fresh_domain_moves_nothing() -> None:
    c, _ = started()
    c.handle(ConnectionClosed(site=0, attempt=0, reason="EOF", now=1.0))
    c.handle(Registered(address=addr(0, "d", attempt=1), now=2.0))
    assert catch_up_all(c, c.handle(SiteReady(site=0, attempt=1))) == [Recovered(slot=0)]


def test_the_standby_whose_domain_fits_the_slot_adopts_it() -> None:
    """Two spares wait: the first in b (with site 2, a partner of slot 0), the second in d.
    Slot 0 goes to the second; the first stays idle."""
    c, _ = started()
    in_b, in_d = addr(4, "b", attempt=0), addr(5, "d", attempt=0)
    assert c.handle(Registered(address=in_b, now=0.5)) == [Standby(site=4, attempt=0)]
    assert c.handle(Registered(address=in_d, now=0.6)) == [Standby(site=5, attempt=0)]
    acts = c.handle(ConnectionClosed(site=0, attempt=0, reason="EOF", now=1.0))
    [adopt] = [a for a in acts if isinstance(a, Adopt)]
    assert adopt.address == SiteAddress(site=0, attempt=0, host="h", port=1005, pid=5,
                                        executor="d") and adopt.registered == 5
    assert c.standbys == [in_b]


def test_recovery_onto_the_survivors_keeps_copies_apart() -> None:
    """Sites 0-3 in executors a, b, a, c with the identity ring 0, 1, 2, 3 (no neighbours
    share one). Site 1 dies: partitions 0 and 4 (copies on 0) cannot go to site 2 (a, with 0),
    which the fewest-replicas rule alone picks for partition 0; 1 and 5 (copies on 2) not to
    site 0, where it puts them: all four go to site 3."""
    c, install = started(("a", "b", "a", "c"), recovery="survivors")
    assert [a.ring for a in install if isinstance(a, InstallView)] == [(0, 1, 2, 3)]
    acts = c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=1.0))
    moves = [(a.q, a.r, a.dst) for a in acts if isinstance(a, Move)]
    assert moves == [(0, 1, 3), (1, 0, 3), (4, 1, 3), (5, 0, 3)]
    # without domains the survivors share them out by load alone
    plain, _ = started(("", "", "", ""), recovery="survivors")
    acts = plain.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=1.0))
    assert [(a.q, a.r, a.dst) for a in acts if isinstance(a, Move)] == [
        (0, 1, 2), (1, 0, 0), (4, 1, 3), (5, 0, 0)]


def test_after_standby_wait_the_survivors_keep_copies_apart() -> None:
    c, _ = started(("a", "b", "a", "c"))
    c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=1.0))
    acts = c.handle(Tick(now=7.0))  # no standby after 5 s
    assert [(a.q, a.r, a.dst) for a in acts if isinstance(a, Move)] == [
        (0, 1, 3), (1, 0, 3), (4, 1, 3), (5, 0, 3)]


def test_hosts_first() -> None:
    """Two hosts: sites 0, 1 on A, 2, 3 on B, each in an executor of its own: the ring
    alternates hosts."""
    c, install = started(("A:1", "A:2", "B:1", "B:2"), hosts=("A", "A", "B", "B"))
    [ring] = [a.ring for a in install if isinstance(a, InstallView)]
    assert ring == (0, 2, 1, 3)
