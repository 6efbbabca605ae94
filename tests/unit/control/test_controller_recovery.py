"""The controller core on the recovery path (sans-I/O, exact actions): a standby's liveness is
its own from its adoption on; a site lost before the view forms is waited for, not a failure of
the run; a peer's report that it cannot reach a site is that site's failure only while the
report concerns its live incarnation and comes from a live member; and a lost partition is
reported by its sites and partitions, before the view change that revealed it.

Four sites, 16 partitions, two replicas (chained declustering: replica r of partition q on site
(q + r) mod 4), two stages; heartbeat timeout 2 s unless said otherwise."""

from __future__ import annotations

import numpy as np
import pytest

from sparkflux.control.controller import Controller, ControlOptions
from sparkflux.control.events import (
    Abort,
    Adopt,
    CatchUp,
    CatchUpDone,
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
    View,
)
from sparkflux.dataflow.placement import Layout
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.consumer import PartitionLost
from sparkflux.protocol.egress import Egress
from sparkflux.protocol.site import SiteCore
from sparkflux.sim.workload import tiny_plan

SITES = 4


def addr(site: int, attempt: int = 0, pid: int | None = None) -> SiteAddress:
    return SiteAddress(site=site, attempt=attempt, host="h", port=1000 + site,
                       pid=100 * attempt + site if pid is None else pid)


def view(number: int, *members: SiteAddress) -> View:
    return View(number=number, members={m.site: m for m in members})


def flux(timeout: float = 2.0, recovery: str = "standby") -> Controller:
    c = Controller(SITES, ha=True, layout=Layout(SITES, 16, 2),
                   stages=2, options=ControlOptions(heartbeat_timeout=timeout, recovery=recovery))
    for s in range(SITES):
        c.handle(Registered(address=addr(s), now=0.0))
    for s in range(SITES):
        c.handle(SiteReady(site=s, attempt=0))
    assert c.started
    return c


def beat(c: Controller, now: float, *sites: int, attempt: int = 0) -> None:
    assert c.handle(*[Heartbeat(site=s, attempt=attempt, now=now) for s in sites]) == []


def hung_and_adopted() -> tuple[Controller, SiteAddress]:
    """Site 1 never beats; it is failed at t=2.1 and Spark's retry adopts its slot at 2.2."""
    c = flux()
    for t in (0.5, 1.0, 1.5, 2.0):
        beat(c, t, 0, 2, 3)
    assert c.handle(Tick(now=2.0)) == []
    assert c.handle(Tick(now=2.1)) == [
        FailSites(view=view(2, addr(0), addr(2), addr(3)), dead=(1,))]
    assert c.failures == [(2.1, 1, "no heartbeat for 2.1s (hung?)")]
    new = addr(1, attempt=1)
    assert c.handle(Registered(address=new, now=2.2)) == [
        Standby(site=1, attempt=1),
        Adopt(slot=1, address=new, view=view(3, addr(0), new, addr(2), addr(3)), registered=1)]
    return c, new


# -- 1. adoption resets the slot's liveness clock ------------------------------------------------
def test_an_adopted_standby_that_beats_is_not_failed() -> None:
    c, _ = hung_and_adopted()
    for i in range(23, 41):  # t = 2.3 .. 4.0: the old process's last sign of life was at 0.0
        t = i / 10
        beat(c, t, 0, 2, 3)
        if i % 5 == 0:  # the new process beats every 0.5 s, its first time at 2.5
            beat(c, t, 1, attempt=1)
        assert c.handle(Tick(now=t)) == [], t
    assert c.view.number == 3 and len(c.failures) == 1


def test_an_adopted_standby_that_never_beats_fails_two_seconds_after_its_adoption() -> None:
    c, _ = hung_and_adopted()
    for i in range(23, 42):  # up to 4.1
        beat(c, i / 10, 0, 2, 3)
        assert c.handle(Tick(now=i / 10)) == []
    beat(c, 4.19, 0, 2, 3)
    assert c.handle(Tick(now=4.19)) == []  # 1.99 s after the adoption at 2.2
    beat(c, 4.3, 0, 2, 3)
    assert c.handle(Tick(now=4.3)) == [
        FailSites(view=view(4, addr(0), addr(2), addr(3)), dead=(1,))]
    assert c.failures[-1] == (4.3, 1, "no heartbeat for 2.1s (hung?)")


def test_the_old_process_heartbeat_does_not_count_for_the_new_one() -> None:
    c, _ = hung_and_adopted()
    beat(c, 3.0, 0, 2, 3)
    beat(c, 3.0, 1, attempt=0)  # the hung process woke up: no member any more, ignored
    beat(c, 4.3, 0, 2, 3)
    assert c.handle(Tick(now=4.3)) == [
        FailSites(view=view(4, addr(0), addr(2), addr(3)), dead=(1,))]


def test_a_spare_adopts_at_the_failure_and_its_clock_starts_there() -> None:
    c = Controller(SITES, ha=True, layout=Layout(SITES, 16, 2), stages=2,
                   options=ControlOptions(heartbeat_timeout=2.0))
    spare = addr(SITES)  # --spare-sites: slot 4, a standby from the start
    assert c.handle(Registered(address=spare, now=0.0)) == [Standby(site=SITES, attempt=0)]
    for s in range(SITES):
        c.handle(Registered(address=addr(s), now=0.0))
    c.handle(*[SiteReady(site=s, attempt=0) for s in range(SITES)])
    beat(c, 1.0, 0, 2, 3)
    beat(c, 2.0, 0, 2, 3)
    adopted = SiteAddress(site=1, attempt=0, host="h", port=spare.port, pid=spare.pid)
    assert c.handle(Tick(now=2.1)) == [
        FailSites(view=view(2, addr(0), addr(2), addr(3)), dead=(1,)),
        Adopt(slot=1, address=adopted, view=view(3, addr(0), adopted, addr(2), addr(3)),
              registered=SITES)]
    beat(c, 4.0, 0, 2, 3)
    assert c.handle(Tick(now=4.0)) == []  # 1.9 s after the adoption
    beat(c, 4.2, 0, 2, 3)
    assert c.handle(Tick(now=4.2)) == [
        FailSites(view=view(4, addr(0), addr(2), addr(3)), dead=(1,))]


# -- 2. a site lost before the view forms ---------------------------------------------------------
@pytest.mark.parametrize("ha", [True, False], ids=["flux", "none"])
def test_a_site_lost_before_the_view_is_waited_for(ha: bool) -> None:
    c = Controller(3, ha=ha, layout=Layout(3, 6, 2 if ha else 1),
                   stages=1, options=ControlOptions(heartbeat_timeout=2.0))
    assert c.handle(Registered(address=addr(0), now=0.0)) == []
    assert c.handle(Registered(address=addr(1), now=0.1)) == []
    assert c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=0.2)) == []
    assert c.failures == [] and c.aborted is None and c.view.number == 0
    assert c.handle(Registered(address=addr(2), now=0.3)) == []  # slot 1 is still missing
    assert c.handle(Tick(now=5.0)) == []  # nothing to time out before the view
    retry = addr(1, attempt=1)  # Spark's retry of the task
    assert c.handle(Registered(address=retry, now=5.1)) == [
        InstallView(view=view(1, addr(0), retry, addr(2)), ring=(0, 1, 2))]
    # the lost attempt's news is stale now
    assert c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=5.2)) == []
    assert c.handle(*[SiteReady(site=s, attempt=0) for s in (0, 2)]) == []
    assert c.handle(SiteReady(site=1, attempt=1)) == [StartIngress()]
    # its liveness is counted from its registration
    assert c.handle(Heartbeat(site=0, attempt=0, now=7.0), Heartbeat(site=2, attempt=0, now=7.0),
                    Tick(now=7.0)) == []
    [lost] = c.handle(Tick(now=7.2))
    assert isinstance(lost, FailSites if ha else Abort)


# -- 3. a suspected peer ---------------------------------------------------------------------------
def test_a_live_members_report_fails_the_slots_live_incarnation() -> None:
    c = flux(timeout=10.0)
    assert c.handle(Suspected(site=2, attempt=0, by=0, reason="timed out", now=1.0)) == []
    assert c.handle(Tick(now=1.3)) == []  # a lone link waits for more reports (patience)
    assert c.handle(Tick(now=2.0)) == [
        FailSites(view=view(2, addr(0), addr(1), addr(3)), dead=(2,))]
    assert c.failures == [(2.0, 2, "unreachable from site 0, cut off or hung "
                          "(site 0 cannot reach site 2: timed out)")]


def test_a_report_about_an_earlier_incarnation_is_ignored() -> None:
    c = flux(timeout=10.0)
    c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=1.0))
    new = addr(1, attempt=1)
    [_, adopt] = c.handle(Registered(address=new, now=1.5))
    assert isinstance(adopt, Adopt) and c.view.number == 3
    # site 0 still dialled the process slot 1 had before
    assert c.handle(Suspected(site=1, attempt=0, by=0, reason="refused", now=2.0)) == []
    assert c.view.number == 3 and len(c.failures) == 1
    # about the adopted one: it fails (mid-recovery), and the slot waits for a standby again
    assert c.handle(Suspected(site=1, attempt=1, by=3, reason="refused", now=2.1)) == []
    assert c.handle(Tick(now=3.1)) == [
        FailSites(view=view(4, addr(0), addr(2), addr(3)), dead=(1,))]
    assert c.failures[-1] == (3.1, 1, "unreachable from site 3, cut off or hung "
                                "(site 3 cannot reach site 1: refused)")
    assert c.awaiting == [1] and c.recovering is None


def test_a_report_about_a_site_already_failed_is_ignored() -> None:
    c = flux(timeout=10.0)
    [fail] = c.handle(ConnectionClosed(site=2, attempt=0, reason="EOF", now=1.0))
    assert isinstance(fail, FailSites)
    assert c.handle(Suspected(site=2, attempt=0, by=0, reason="timed out", now=1.1)) == []
    assert c.handle(Suspected(site=2, attempt=0, by=3, reason="timed out", now=1.2)) == []
    assert c.view.number == 2 and c.failures == [(1.0, 2, "EOF")]


def test_a_report_from_a_site_that_is_no_live_member_is_ignored() -> None:
    c = flux(timeout=10.0)
    c.handle(ConnectionClosed(site=2, attempt=0, reason="EOF", now=1.0))
    # the failed site 2 (it may be the one cut off) and a slot that does not exist
    assert c.handle(Suspected(site=3, attempt=0, by=2, reason="timed out", now=1.1)) == []
    assert c.handle(Suspected(site=1, attempt=0, by=7, reason="timed out", now=1.1)) == []
    assert c.view.number == 2 and c.failures == [(1.0, 2, "EOF")]


def test_a_report_before_the_view_is_ignored() -> None:
    c = Controller(2, ha=True, layout=Layout(2, 4, 2), stages=1)
    c.handle(Registered(address=addr(0), now=0.0))
    assert c.handle(Suspected(site=0, attempt=0, by=1, reason="timed out", now=0.1)) == []
    [install] = c.handle(Registered(address=addr(1), now=0.2))
    assert install == InstallView(view=view(1, addr(0), addr(1)), ring=(0, 1))


# -- 4. a lost partition is reported by sites and partitions, first ------------------------------
ADVICE = ("Their state is lost, so the run cannot go on. Each partition has 2 replicas (at the "
          "start, replica r of partition q on site (q + r) mod 4), so the run survives 2 sites "
          "that share a partition failing only if the first is recovered before the last "
          "fails. Have fewer sites fail at once, recover sooner: standbys launched up front "
          "(--spare-sites) start a recovery at once instead of after Spark restarts the failed "
          "task, or keep more replicas (--replicas 3 survives any 2 sites failing at once; it "
          "needs --sites >= 3).")


def test_two_neighbours_failing_name_the_sites_and_partitions_before_the_view_change() -> None:
    c = flux(timeout=10.0)
    assert c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=1.0)) == [
        FailSites(view=view(2, addr(0), addr(2), addr(3)), dead=(1,))]
    reason = ("sites 1 and 2 failed before either could be recovered; no complete replica is "
              "left of stage 0: partitions 1, 5, 9, 13; stage 1: partitions 1, 5, 9, 13. "
              + ADVICE)
    assert c.handle(ConnectionClosed(site=2, attempt=0, reason="EOF", now=1.1)) == [
        Abort(reason=reason),  # first: a runtime that carries them out in order says why
        FailSites(view=view(3, addr(0), addr(3)), dead=(1, 2))]
    assert c.aborted == reason
    assert c.handle(ConnectionClosed(site=3, attempt=0, reason="EOF", now=1.2)) == []


def test_a_failure_while_the_other_copy_is_caught_up_names_both_sites_per_stage() -> None:
    c = flux(timeout=10.0)
    c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=1.0))
    new = addr(1, attempt=1)
    c.handle(Registered(address=new, now=1.5))
    # stage 0 first, four at a time, in the order of the slot's replicas (q, r)
    assert c.handle(SiteReady(site=1, attempt=1)) == [
        CatchUp(stage=0, q=0, r=1, survivor=0, epoch=1),
        CatchUp(stage=0, q=1, r=0, survivor=2, epoch=1),
        CatchUp(stage=0, q=4, r=1, survivor=0, epoch=1),
        CatchUp(stage=0, q=5, r=0, survivor=2, epoch=1)]
    for q, r in ((1, 0), (5, 0)):
        c.handle(CatchUpDone(stage=0, q=q, r=r, nbytes=10, now=1.6))
    [abort, fail] = c.handle(ConnectionClosed(site=2, attempt=0, reason="EOF", now=1.7))
    assert abort == Abort(reason=(
        "site 2 failed while site 1 was still being caught up; no complete replica is left of "
        "stage 0: partitions 9, 13; stage 1: partitions 1, 5, 9, 13. " + ADVICE))
    assert fail == FailSites(view=view(4, addr(0), new, addr(3)), dead=(2,))


def test_the_egress_names_itself_and_the_partitions_never_a_stage() -> None:
    plan = tiny_plan()[0]
    layout = Layout(plan.sites, plan.partitions, 2)
    last = len(plan.stages) - 1
    egress = Egress(plan, layout)
    egress.on_fail({1})
    with pytest.raises(PartitionLost) as e:
        egress.on_fail({1, 2})
    assert str(e.value) == (f"every replica of partitions 1, 5 of stage {last} failed before "
                            f"they could be recovered; the output (egress) reads from them and "
                            f"cannot go on without losing their state")
    site = SiteCore(3, plan, layout)  # its stage 1 reads from stage 0
    with pytest.raises(PartitionLost, match=r"^every replica of partitions 1, 5 of stage 0 "
                                            r"failed before they could be recovered; stage 1 "
                                            r"reads from them "):
        site.handle(cm.Fail(dead=(1, 2)))
    assert np.array_equal(layout.table()[[1, 5], :2], [[1, 2], [1, 2]])


def test_a_retry_that_registers_before_the_old_attempts_loss_takes_the_slot() -> None:
    c = Controller(3, ha=True, layout=Layout(3, 6, 2), stages=1)
    assert c.handle(Registered(address=addr(0), now=0.0)) == []
    assert c.handle(Registered(address=addr(1), now=0.1)) == []
    # attempt 0 of slot 1 died; Spark's retry registers before its close is handled
    assert c.handle(Registered(address=addr(1, attempt=1), now=0.5)) == []
    [view] = c.handle(Registered(address=addr(2), now=0.55))
    assert isinstance(view, InstallView) and view.view.members[1].attempt == 1
    assert c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=0.6)) == []
    assert c.failures == [] and c.view.number == 1


def test_a_report_made_before_a_crash_is_noticed_does_not_exclude_the_slots_next_process(
        ) -> None:
    c = flux(timeout=10.0)
    # site 2's link to site 1 reset when site 1 crashed, before the driver noticed
    assert c.handle(Suspected(site=1, attempt=0, by=2, reason="the link closed", now=1.0)) == []
    c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=1.01))
    [_, adopt] = c.handle(Registered(address=addr(1, attempt=1), now=1.2))
    assert isinstance(adopt, Adopt)
    assert c.handle(Tick(now=3.0)) == [] and [f[1] for f in c.failures] == [1]


def test_a_late_report_about_a_slots_old_process_does_not_fail_the_spare_that_adopted_it(
        ) -> None:
    """A spare has Spark attempt 0 like the process it replaces: a peer's report about the
    old one (its link reset by the crash), read after the adoption, names it by the slot it
    registered for too, and is set aside."""
    c = flux(timeout=10.0)
    c.handle(Registered(address=addr(SITES), now=0.5))  # a spare, registered past the sites
    c.handle(ConnectionClosed(site=1, attempt=0, reason="EOF", now=1.0))  # adopted at once
    assert c.view.members[1].pid == addr(SITES).pid
    stale = Suspected(site=1, attempt=0, by=2, reason="the link closed", now=1.1, registered=1)
    assert c.handle(stale) == [] and c.handle(Tick(now=3.0)) == []
    assert [f[1] for f in c.failures] == [1]
    fresh = Suspected(site=1, attempt=0, by=2, reason="silent", now=4.0, registered=SITES)
    assert c.handle(fresh) == []
    [fail] = c.handle(Tick(now=5.1))
    assert isinstance(fail, FailSites) and fail.dead == (1,)
