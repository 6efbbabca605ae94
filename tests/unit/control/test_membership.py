"""Membership, views and recovery as tables (``control/membership.py``): every rule of the
three tables, the impossible transitions, and the controller driven by hand with the exact
actions it returns.

Four sites, 8 partitions, two replicas (chained declustering: replica r of partition q on
site (q + r) mod 4), two stages: site 1 hosts copy 0 of partitions 1 and 5 and copy 1 of
partitions 0 and 4."""

from __future__ import annotations

import dataclasses
import re

import pytest

from sparkflux.control.controller import Controller, ControlOptions
from sparkflux.control.events import (
    Abort,
    Adopt,
    CatchUp,
    CatchUpDone,
    ConnectionClosed,
    FailSites,
    InstallView,
    Move,
    Recovered,
    Registered,
    SiteAddress,
    SiteReady,
    Standby,
    StartIngress,
    StopSite,
    Tick,
    View,
)
from sparkflux.control.membership import (
    RECOVERY_TRANSITIONS,
    SLOT_TRANSITIONS,
    STANDBY_TRANSITIONS,
    Mode,
    Recovery,
    RecoveryError,
    RecoveryEv,
    Slot,
    SlotError,
    SlotEv,
    StandbyError,
    StandbyEv,
    recovery_step,
    slot_step,
    standby_step,
)
from sparkflux.control.membership import Standby as Sb
from sparkflux.dataflow.placement import NOWHERE, Layout
from sparkflux.protocol.errors import ProtocolError

S, SE, R, RE = Slot, SlotEv, Recovery, RecoveryEv
SITES = 4


def walk(mode: Mode, state: Slot, *events: SlotEv) -> list[tuple[Slot, tuple[str, ...]]]:
    out = []
    for ev in events:
        state, actions = slot_step(1, mode, state, ev)
        out.append((state, actions))
    return out


# -- the tables -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", list(Mode))
def test_a_slot_joins_view_1_in_every_mode(mode: Mode) -> None:
    assert walk(mode, S.OPEN, SE.REGISTERED, SE.RETRIED, SE.DUPLICATE, SE.LOST, SE.REGISTERED,
                SE.VIEW, SE.READY) == [
        (S.REGISTERED, ("admit",)), (S.REGISTERED, ("replace", "admit")),
        (S.REGISTERED, ("stop",)), (S.OPEN, ("forget",)), (S.REGISTERED, ("admit",)),
        (S.MEMBER, ()), (S.MEMBER, ("count-ready",))]


def test_with_ha_none_a_failure_aborts() -> None:
    assert slot_step(1, Mode.NONE, S.MEMBER, SE.FAILED) == (S.FAILED, ("abort",))
    assert slot_step(1, Mode.NONE, S.FAILED, SE.READY) == (S.FAILED, ("count-ready",))
    for ev in (SE.LAST_FAILED, SE.ADOPT, SE.WAITED, SE.RECOVERED):
        with pytest.raises(SlotError):
            slot_step(1, Mode.NONE, S.MEMBER, ev)


@pytest.mark.parametrize("mode", [Mode.STANDBY, Mode.SURVIVORS])
def test_the_last_member_failing_aborts(mode: Mode) -> None:
    assert slot_step(1, mode, S.MEMBER, SE.LAST_FAILED) == (S.FAILED, ("abort",))


def test_a_standby_adopts_the_slot_and_its_failure_queues_it_again_at_the_head() -> None:
    m = Mode.STANDBY
    assert walk(m, S.MEMBER, SE.FAILED, SE.ADOPT, SE.READY, SE.RECOVERED) == [
        (S.AWAITING, ("fail", "await")), (S.ADOPTED, ("adopt",)),
        (S.ADOPTED, ("count-ready",)), (S.MEMBER, ("relayout",))]
    assert walk(m, S.ADOPTED, SE.FAILED, SE.ADOPT) == [
        (S.AWAITING, ("fail", "await-first")), (S.ADOPTED, ("adopt",))]
    assert slot_step(1, m, S.ADOPTED, SE.LAST_FAILED) == (S.FAILED, ("abort",))
    assert slot_step(1, m, S.AWAITING, SE.WAITED) == (S.ON_SURVIVORS, ("dequeue", "re-place"))


def test_with_recovery_onto_the_survivors_a_slot_is_never_adopted() -> None:
    m = Mode.SURVIVORS
    assert slot_step(1, m, S.MEMBER, SE.FAILED) == (S.ON_SURVIVORS, ("fail", "re-place"))
    for ev in SlotEv:
        with pytest.raises(SlotError):
            slot_step(1, m, S.ON_SURVIVORS, ev)
    assert not any(s in (S.AWAITING, S.ADOPTED) for s, _ in SLOT_TRANSITIONS[m])


def test_a_standby_process_is_idle_then_adopting_or_stopped() -> None:
    assert standby_step("5/0", Mode.STANDBY, Sb.NEW, StandbyEv.REGISTERED) == (
        Sb.IDLE, ("standby", "next-task"))
    assert standby_step("5/0", Mode.STANDBY, Sb.IDLE, StandbyEv.CHOSEN) == (
        Sb.ADOPTING, ("take-over",))
    for m in (Mode.NONE, Mode.SURVIVORS):
        assert standby_step("5/0", m, Sb.NEW, StandbyEv.REGISTERED) == (Sb.STOPPED, ("stop",))
        assert (Sb.IDLE, StandbyEv.CHOSEN) not in STANDBY_TRANSITIONS[m]


def test_the_recovery_task_adopts_catches_up_and_ends() -> None:
    p = R.IDLE
    out = []
    for ev in (RE.ADOPT, RE.READY, RE.CAUGHT_UP):
        p, actions = recovery_step(1, p, ev)
        out.append((p, actions))
    assert out == [(R.ADOPTING, ("adopt",)), (R.CATCHING_UP, ("catch-up",)),
                   (R.IDLE, ("recovered", "next-task"))]
    for p in (R.ADOPTING, R.CATCHING_UP):
        assert recovery_step(1, p, RE.ADOPTEE_FAILED) == (R.IDLE, ("start-over",))


def test_impossible_transitions_name_the_role_the_state_and_the_event() -> None:
    for mode, rules in SLOT_TRANSITIONS.items():
        for st in Slot:
            for ev in SlotEv:
                if (st, ev) in rules:
                    continue
                with pytest.raises(SlotError, match=re.escape(
                        f"site slot 3 ({mode.value}): no transition from {st.value} on "
                        f"{ev.value}")):
                    slot_step(3, mode, st, ev)
    for mode, srules in STANDBY_TRANSITIONS.items():
        for sb in Sb:
            for sev in StandbyEv:
                if (sb, sev) not in srules:
                    with pytest.raises(StandbyError, match=re.escape(
                            f"standby 5/1 ({mode.value}): no transition from {sb.value} on "
                            f"{sev.value}")):
                        standby_step("5/1", mode, sb, sev)
    impossible = [(p, e) for p in R for e in RE if (p, e) not in RECOVERY_TRANSITIONS]
    assert (R.ADOPTING, RE.ADOPT) in impossible and (R.CATCHING_UP, RE.ADOPT) in impossible
    for p, e in impossible:
        with pytest.raises(RecoveryError, match=re.escape(
                f"recovery (site slot 2): no transition from {p.value} on {e.value}")):
            recovery_step(2, p, e)
    assert issubclass(SlotError, ProtocolError) and issubclass(RecoveryError, ProtocolError)


# -- the controller, driven by hand --------------------------------------------------------
def addr(site: int, attempt: int = 0, pid: int | None = None) -> SiteAddress:
    return SiteAddress(site=site, attempt=attempt, host="h", port=1000 + site,
                       pid=100 * attempt + site if pid is None else pid)


def view(number: int, *members: SiteAddress) -> View:
    return View(number=number, members={m.site: m for m in members})


def controller(ha: bool = True, recovery: str = "standby", standby_wait: float = 5.0
               ) -> Controller:
    return Controller(SITES, ha=ha, layout=Layout(SITES, 8, 2),
                      stages=2, standby_wait=standby_wait,
                      options=ControlOptions(heartbeat_timeout=1e9, recovery=recovery))


def started(**kw: object) -> Controller:
    c = controller(**kw)  # type: ignore[arg-type]
    for s in range(SITES):
        c.handle(Registered(address=addr(s), now=0.0))
    for s in range(SITES):
        c.handle(SiteReady(site=s, attempt=0))
    assert c.started
    return c


def test_registration_to_view_1() -> None:
    c = controller()
    assert c.handle(*[Registered(address=addr(s), now=0.0) for s in range(3)]) == []
    assert c.slot_state == {0: S.REGISTERED, 1: S.REGISTERED, 2: S.REGISTERED, 3: S.OPEN}
    # a second registration for a slot with a live one; a newer attempt replaces the old
    assert c.handle(Registered(address=addr(2), now=0.1)) == [
        StopSite(site=2, attempt=0, reason="the slot already has a live site")]
    assert c.handle(Registered(address=addr(2, attempt=1), now=0.1)) == []
    assert c.handle(ConnectionClosed(site=0, attempt=0, reason="gone", now=0.2)) == []
    assert c.slot_state[0] is S.OPEN and c.registered == 2
    assert c.handle(Registered(address=addr(0, attempt=1), now=0.3)) == []
    assert c.handle(Registered(address=addr(3), now=0.4)) == [InstallView(
        view=view(1, addr(0, 1), addr(1), addr(2, 1), addr(3)), ring=(0, 1, 2, 3))]
    assert set(c.slot_state.values()) == {S.MEMBER}
    assert c.handle(*[SiteReady(site=s, attempt=0) for s in (1, 3)]) == []
    assert c.handle(SiteReady(site=0, attempt=1), SiteReady(site=2, attempt=1)) == [
        StartIngress()]


def test_a_failure_installs_the_next_view_and_awaits_a_standby() -> None:
    c = started()
    assert c.handle(ConnectionClosed(site=1, attempt=0, reason="gone", now=1.0)) == [
        FailSites(view=view(2, addr(0), addr(2), addr(3)), dead=(1,))]
    assert c.slot_state[1] is S.AWAITING and c.awaiting == [1] and c.dead == {1}
    assert c.recovery_phase is R.IDLE


def adopted() -> tuple[Controller, SiteAddress]:
    c = started()
    c.handle(ConnectionClosed(site=1, attempt=0, reason="gone", now=1.0))
    new = addr(1, attempt=1)
    assert c.handle(Registered(address=new, now=1.5)) == [
        Standby(site=1, attempt=1),
        Adopt(slot=1, address=new, view=view(3, addr(0), new, addr(2), addr(3)), registered=1)]
    assert c.slot_state[1] is S.ADOPTED and c.recovery_phase is R.ADOPTING
    assert c.recovering == 1 and c.standbys == [] and not c.dead
    return c, new


def test_a_standby_registers_adopts_and_its_replicas_are_caught_up() -> None:
    c, _ = adopted()
    # copies on site 1: copy 1 of partitions 0 and 4, copy 0 of 1 and 5; bottom-up
    assert c.handle(SiteReady(site=1, attempt=1)) == [
        CatchUp(stage=0, q=0, r=1, survivor=0, epoch=1),
        CatchUp(stage=0, q=1, r=0, survivor=2, epoch=1),
        CatchUp(stage=0, q=4, r=1, survivor=0, epoch=1),
        CatchUp(stage=0, q=5, r=0, survivor=2, epoch=1)]
    assert c.recovery_phase is R.CATCHING_UP
    assert c.handle(SiteReady(site=1, attempt=1)) == []  # only the first one starts them
    out = []
    for q in (0, 1, 4):
        out += c.handle(CatchUpDone(stage=0, q=q, r=1 if q % 4 == 0 else 0, nbytes=0, now=2.0))
    assert out == []  # stage 1 waits for the last of stage 0
    assert c.handle(CatchUpDone(stage=0, q=5, r=0, nbytes=0, now=2.0)) == [
        CatchUp(stage=1, q=0, r=1, survivor=0, epoch=1),
        CatchUp(stage=1, q=1, r=0, survivor=2, epoch=1),
        CatchUp(stage=1, q=4, r=1, survivor=0, epoch=1),
        CatchUp(stage=1, q=5, r=0, survivor=2, epoch=1)]
    for q in (0, 1, 4):
        c.handle(CatchUpDone(stage=1, q=q, r=1 if q % 4 == 0 else 0, nbytes=0, now=2.1))
    assert c.handle(CatchUpDone(stage=1, q=5, r=0, nbytes=0, now=2.1)) == [Recovered(slot=1)]
    assert c.slot_state[1] is S.MEMBER and c.recovery_phase is R.IDLE and c.recovering is None


def test_the_standby_dying_mid_recovery_puts_the_slot_back_at_the_head() -> None:
    c = started()
    c.handle(ConnectionClosed(site=1, attempt=0, reason="gone", now=1.0))
    assert c.handle(ConnectionClosed(site=3, attempt=0, reason="gone", now=1.1)) == [
        FailSites(view=view(3, addr(0), addr(2)), dead=(1, 3))]
    assert c.awaiting == [1, 3]
    new = addr(1, attempt=1)
    c.handle(Registered(address=new, now=1.5))
    assert c.awaiting == [3] and c.recovering == 1
    assert len(c.handle(SiteReady(site=1, attempt=1))) == 4
    assert c.handle(ConnectionClosed(site=1, attempt=1, reason="gone", now=2.0)) == [
        FailSites(view=view(5, addr(0), addr(2)), dead=(1, 3))]
    assert c.slot_state[1] is S.AWAITING and c.awaiting == [1, 3]
    assert c.recovery_phase is R.IDLE and c.recovering is None and not c.in_flight
    assert c.handle(CatchUpDone(stage=0, q=0, r=1, nbytes=0, now=2.1)) == []  # stale
    spare = addr(3, attempt=1)  # the next standby adopts slot 1 first, the head
    as_1 = dataclasses.replace(spare, site=1)
    assert c.handle(Registered(address=spare, now=2.2)) == [
        Standby(site=3, attempt=1),
        Adopt(slot=1, address=as_1, view=view(6, addr(0), as_1, addr(2)), registered=3)]
    assert c.awaiting == [3] and c.slot_state[3] is S.AWAITING


def test_with_no_standby_the_slot_is_recovered_onto_the_survivors() -> None:
    c = started(standby_wait=5.0)
    c.handle(ConnectionClosed(site=1, attempt=0, reason="gone", now=1.0))
    assert c.handle(Tick(now=6.0)) == []  # not yet: 5 s since the failure
    out = c.handle(Tick(now=6.1))
    assert c.slot_state[1] is S.ON_SURVIVORS and c.awaiting == []
    assert out and all(isinstance(a, Move) and a.reason == "recovery" and a.src == 1
                       and a.dst != NOWHERE for a in out)
    assert sorted((a.q, a.r) for a in out if isinstance(a, Move)) == [(0, 1), (1, 0), (4, 1),
                                                                      (5, 0)]
    # a standby that registers now has no slot to adopt
    assert c.handle(Registered(address=addr(1, attempt=1), now=6.2)) == [
        Standby(site=1, attempt=1)]


def test_with_recovery_survivors_a_failure_re_places_and_a_standby_is_stopped() -> None:
    c = started(recovery="survivors")
    out = c.handle(ConnectionClosed(site=1, attempt=0, reason="gone", now=1.0))
    assert out[0] == FailSites(view=view(2, addr(0), addr(2), addr(3)), dead=(1,))
    assert [type(a) for a in out[1:]] == [Move] * 4
    assert c.slot_state[1] is S.ON_SURVIVORS and c.awaiting == []
    assert c.handle(Registered(address=addr(1, attempt=1), now=1.1)) == [StopSite(
        site=1, attempt=1, reason="--recovery survivors: failed replicas are recovered onto "
        "the surviving sites; no standby is needed")]


def test_with_ha_none_a_failure_aborts_and_a_restarted_site_is_stopped() -> None:
    c = started(ha=False)
    reason = ("site 2 failed (gone); with --ha none a failed site stops the job. Run with "
              "--ha flux to keep running through site failures.")
    assert c.handle(ConnectionClosed(site=2, attempt=0, reason="gone", now=1.0)) == [
        Abort(reason=reason)]
    assert c.slot_state[2] is S.FAILED and c.aborted == reason and not c.dead
    assert c.handle(Registered(address=addr(2, attempt=1), now=1.1)) == [StopSite(
        site=2, attempt=1, reason="the job no longer accepts sites (with --ha none a "
        "restarted site has no role)")]


def test_adopting_while_another_recovery_runs_is_impossible() -> None:
    c, _ = adopted()
    with pytest.raises(RecoveryError, match=re.escape(
            "recovery (site slot 1): no transition from adopting on adopt")):
        c._recovery_step(RE.ADOPT)
