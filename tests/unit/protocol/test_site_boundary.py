"""The site's own life, driven through ``SiteBoundary`` with no I/O: the exact actions.

Four sites of ``tiny_plan``: view 1 makes every site dial the higher slots and say ``ready``
once every live member is linked; a standby adopts a failed slot and waits for the members'
links; ``fail``, ``move`` and ``avail`` arriving before the view wait for it; an excluded site
stops; stale links are rejected; an impossible transition names site, state and event.
"""

from __future__ import annotations

import numpy as np
import pytest

from sparkflux.dataflow.placement import DRIVER, Layout
from sparkflux.model.progress import NO_WATERMARK
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.channels import Channel
from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.messages import CuDone, Echo, Keepalive, Outgoing, Probe, PSync
from sparkflux.protocol.site_boundary import (
    PROBES,
    STATE_EVERY,
    Beat,
    Close,
    Crash,
    Dial,
    DialFailed,
    DriverLost,
    Echoed,
    Frames,
    FromDriver,
    Life,
    LinkCheck,
    PeerLinked,
    PeerLost,
    Probed,
    Reject,
    Scale,
    Send,
    SiteBoundary,
    SiteLifeError,
    StateSent,
    Stop,
    Verdict,
    from_link,
)
from sparkflux.sim.workload import tiny_plan

N = 4


def members(n: int = N) -> dict[int, cm.Member]:
    return {j: cm.Member(host="h", port=100 + j, attempt=0, registered=j) for j in range(n)}


def site(k: int, probe_every: float | None = None) -> SiteBoundary:
    """Site ``k``; latency probes only with ``probe_every`` (they have a test of their own)."""
    plan = tiny_plan()[0]
    assert plan.sites == N
    return SiteBoundary(k, 0, plan, Layout(plan.sites, plan.partitions, 2),
                        probe_every=probe_every)


def view() -> FromDriver:
    return FromDriver(message=cm.View(number=1, members=members()))


def linked(j: int, dialed: bool = False, attempt: int = 0, registered: int | None = None
           ) -> PeerLinked:
    return PeerLinked(site=j, process=(j if registered is None else registered, attempt),
                      dialed=dialed)


def ready(k: int, attempt: int = 0) -> Send:
    return Send(dest=DRIVER, message=cm.Ready(site=k, attempt=attempt), channel=Channel.LINK)


def test_view_one_dials_the_higher_slots_and_is_ready_once_all_are_linked() -> None:
    b = site(1)
    assert b.handle(view()) == [Dial(site=j, host="h", port=100 + j, process=(j, 0))
                                for j in (2, 3)]
    assert b.life is Life.CONNECTING
    assert b.handle(linked(0)) == []  # slot 0 dialled us
    assert b.handle(linked(2, dialed=True)) == []
    assert b.handle(linked(3, dialed=True)) == [ready(1)]
    assert b.life is Life.READY
    assert b.handle(linked(3, dialed=True)) == []  # ready is said once


def test_a_fail_while_connecting_shrinks_what_it_waits_for() -> None:
    b = site(0)
    b.handle(view(), linked(1, dialed=True), linked(2, dialed=True))
    acts = b.handle(FromDriver(message=cm.Fail(dead=(3,))))
    assert acts[0] == Close(site=3)
    assert acts[-1] == ready(0)
    assert b.life is Life.READY


def test_control_frames_before_the_view_wait_for_it() -> None:
    b = site(2)
    move = cm.Move(q=0, r=0, dst=2, epoch=1)
    assert b.handle(FromDriver(message=move)) == []  # no core yet: kept
    assert b.life is Life.REGISTERING
    acts = b.handle(view())
    assert acts[:1] == [Dial(site=3, host="h", port=103, process=(3, 0))]
    assert Send(dest=DRIVER, message=cm.Moved(epoch=1), channel=Channel.CONTROL) in acts
    assert b.core is not None and b.core.layout.site_of(0, 0) == 2


def test_a_standby_adopts_a_slot_and_is_ready_when_every_live_member_dialled_it() -> None:
    plan = tiny_plan()[0]
    layout = Layout(plan.sites, plan.partitions, 2)
    b = SiteBoundary(5, 1, plan, layout)  # a spare registered past the sites
    assert b.handle(FromDriver(message=cm.Standby())) == []
    assert b.life is Life.STANDBY and b.role == "standby"
    assert b.handle(Frames([])) == []  # nothing to process before adoption
    adopt = cm.Adopt(slot=2, members=members(), dead=(2, 3),
                     epochs=np.zeros((plan.partitions, 2), dtype=np.int64),
                     table=layout.table())
    assert b.handle(FromDriver(message=adopt)) == []  # it dials nobody
    assert (b.site, b.role, b.life) == (2, "adopted", Life.CONNECTING)
    assert b.handle(linked(0)) == []
    assert b.handle(linked(1)) == [ready(2, attempt=1)]  # slot 3 is dead: not waited for


def test_avail_drops_the_old_incarnation_and_dials_the_new_one() -> None:
    b = site(0)
    b.handle(view(), *(linked(j, dialed=True) for j in (1, 2, 3)))
    b.handle(FromDriver(message=cm.Fail(dead=(3,))))
    avail = cm.Avail(slot=3, epoch=1, host="h2", port=7, attempt=1, registered=5)
    assert b.handle(FromDriver(message=avail)) == [
        Close(site=3), Dial(site=3, host="h2", port=7, process=(5, 1))]
    # the old incarnation's link is stale; the new one is kept
    assert b.handle(linked(3, dialed=True)) == [Reject(site=3)]
    assert b.handle(linked(3, dialed=True, attempt=1, registered=5)) == []
    assert 3 in b.linked


def test_a_dial_that_fails_is_reported_only_for_the_current_incarnation() -> None:
    b = site(0)
    b.handle(view())
    assert b.handle(DialFailed(site=2, process=(2, 0), reason="refused")) == [
        Send(dest=DRIVER, channel=Channel.CONTROL,
             message=cm.Unreachable(site=0, peer=2, peer_attempt=0, reason="refused",
                                    peer_registered=2))]
    b.handle(FromDriver(message=cm.Fail(dead=(2,))))
    assert b.handle(DialFailed(site=2, process=(2, 0), reason="refused")) == []


def test_a_fail_that_names_this_site_stops_it_excluded() -> None:
    b = site(1)
    b.handle(view(), linked(0), linked(2, dialed=True), linked(3, dialed=True))
    acts = b.handle(FromDriver(message=cm.Fail(dead=(1,))))
    assert acts == [Stop(reason="excluded from the view", how="excluded")]
    assert b.life is Life.STOPPING and b.excluded
    assert b.handle(Frames([]), linked(0), FromDriver(message=cm.Fail(dead=(2,)))) == []


def test_stop_slow_kill_and_a_lost_driver() -> None:
    b = site(0)
    assert b.handle(FromDriver(message=cm.Slow(factor=0.5))) == [Scale(factor=0.5)]
    assert b.handle(FromDriver(message=cm.Kill())) == [Crash()]
    assert b.handle(DriverLost(reason="eof")) == [
        Stop(reason="lost the driver (eof); stopping (fail-stop)", how="error")]
    c = site(0)
    assert c.handle(FromDriver(message=cm.Stop(reason="over", excluded=True))) == [
        Stop(reason="over", how="excluded")]


def test_admission_of_incoming_links() -> None:
    b = site(1)
    assert b.admissible(0, (0, 0), peer=True) is Verdict.WAIT  # no view yet
    b.handle(view())
    assert b.admissible(0, (0, 0), peer=True) is Verdict.ADMIT
    assert b.admissible(0, (0, 7), peer=True) is Verdict.WAIT  # an incarnation not heard of
    b.handle(linked(0))
    assert b.admissible(0, (0, 0), peer=True)[0] == "claimed a linked site"  # type: ignore[index]
    assert b.admissible(0, (0, 0), peer=False) is Verdict.ADMIT  # its StateMover
    b.handle(PeerLost(site=0))
    assert b.admissible(0, (0, 0), peer=True) is Verdict.ADMIT
    b.handle(FromDriver(message=cm.Fail(dead=(0,))))
    assert b.admissible(0, (0, 0), peer=True)[0] == "claimed a dead site"  # type: ignore[index]


def test_impossible_transitions_and_protocol_errors_name_what_happened() -> None:
    b = site(0)
    with pytest.raises(SiteLifeError, match="site 0 .*from registering on linked"):
        b.handle(linked(1))
    with pytest.raises(ProtocolError, match="site 2 sent a control message"):
        from_link(2, cm.Fail(dead=()))
    with pytest.raises(ProtocolError, match="StateMover sent a PSync"):
        from_link(2, PSync(1, 0, 0), state_link=True)
    assert from_link(DRIVER, cm.Fail(dead=())) == FromDriver(message=cm.Fail(dead=()))
    assert from_link(2, PSync(1, 0, 0)) == (2, PSync(1, 0, 0))


def test_a_silent_link_is_reported_once_a_timeout_until_heard_again() -> None:
    b = site(0)
    b.handle(view(), *(linked(j, dialed=True) for j in (1, 2, 3)))
    report = Send(dest=DRIVER, channel=Channel.CONTROL, message=cm.Unreachable(
        site=0, peer=2, peer_attempt=0, reason="the link was silent for 1.2 s",
        peer_registered=2))
    assert b.handle(LinkCheck(silent={1: 0.5, 2: 1.2})) == [report]
    assert b.handle(LinkCheck(silent={1: 0.6, 2: 2.0})) == []  # once per timeout of silence
    [again] = b.handle(LinkCheck(silent={2: 2.3}))  # (the controller may have set it aside)
    assert isinstance(again, Send) and "2.3 s" in again.message.reason  # type: ignore[attr-defined]
    assert b.handle(LinkCheck(silent={2: 0.0})) == []  # heard again: re-armed
    assert b.handle(LinkCheck(silent={2: 1.2}, lag=0.5)) == []  # its own loop stalled
    assert b.handle(LinkCheck(silent={2: 1.2})) == [report]
    b.handle(FromDriver(message=cm.Fail(dead=(3,))))
    assert b.handle(LinkCheck(silent={3: 9.0})) == []  # dead: nothing to report


# -- the host's clocks and the StateMover: the decisions are the core's -------------------------
def test_keepalives_go_to_the_idle_linked_live_peers_only() -> None:
    b = site(0)
    b.handle(view(), *(linked(j, dialed=True) for j in (1, 2)))  # slot 3 not linked yet
    keep = [Send(dest=j, message=Keepalive(), channel=Channel.LINK) for j in (1, 2)]
    assert b.handle(LinkCheck(silent={}, idle=frozenset({3, 2, 1}))) == keep
    assert b.handle(LinkCheck(silent={}, idle=frozenset({2}), lag=0.9)) == keep[1:]  # late too
    b.handle(FromDriver(message=cm.Fail(dead=(2,))))
    assert b.handle(LinkCheck(silent={}, idle=frozenset({1, 2}))) == keep[:1]  # 2 is dead
    b.handle(DriverLost(reason="eof"))
    assert b.handle(LinkCheck(silent={}, idle=frozenset({1}))) == []  # stopping


def test_probes_time_every_live_link_and_the_heartbeat_carries_them() -> None:
    """Rule 6's latency probes: every ``probe_every`` seconds of link checks a ``Probe`` to
    the driver and every linked live peer instead of keepalives; a probe read is echoed at
    once; a link's measure is half the least of its last ``PROBES`` round trips, in ms."""
    b = site(0, probe_every=1.0)
    assert b.handle(LinkCheck(silent={}, now=0.5)) == []  # no core yet: nothing to time
    b.handle(view(), *(linked(j, dialed=True) for j in (1, 2)))  # slot 3 not linked yet
    probes = [Send(dest=j, message=Probe(10.0), channel=Channel.LINK) for j in (DRIVER, 1, 2)]
    assert b.handle(LinkCheck(silent={}, idle=frozenset({1, 2}), now=10.0)) == probes
    keep = [Send(dest=1, message=Keepalive(), channel=Channel.LINK)]
    assert b.handle(LinkCheck(silent={}, idle=frozenset({1}), now=10.5)) == keep
    assert b.handle(Probed(peer=2, sent=3.25)) == [
        Send(dest=2, message=Echo(3.25), channel=Channel.LINK)]
    b.handle(Echoed(peer=DRIVER, sent=10.0, now=10.004), Echoed(peer=1, sent=10.0, now=10.1))
    b.handle(Echoed(peer=1, sent=11.0, now=11.06))  # the least round trip counts: 60 ms
    assert b.link_ms() == (2.0, -1.0, 30.0, -1.0, -1.0)
    for k in range(PROBES):  # slower for PROBES probes in a row: the link got slower
        b.handle(Echoed(peer=1, sent=20.0 + k, now=20.2 + k))
    assert b.link_ms()[2] == 100.0
    [hb] = b.handle(Beat(pid=7))
    assert hb.message.link_ms == b.link_ms()  # type: ignore[union-attr]
    b.handle(FromDriver(message=cm.Fail(dead=(2,))))
    assert b.handle(Probed(peer=2, sent=1.0)) == []  # dead
    assert b.handle(LinkCheck(silent={}, now=11.0)) == [  # not to a dead peer
        Send(dest=j, message=Probe(11.0), channel=Channel.LINK) for j in (DRIVER, 1)]
    b.handle(DriverLost(reason="eof"))
    assert b.handle(Probed(peer=1, sent=1.0)) == []  # stopping


def test_the_heartbeat_is_the_cores_until_the_site_stops() -> None:
    b = site(2)
    [hb] = b.handle(Beat(pid=7, busy_s=1.5, slept_s=0.5, passes=3, cpu_s=2.0, capacity_s=4.0,
                         at=9.0, refused=1, held=5))
    assert isinstance(hb, Send) and (hb.dest, hb.channel) == (DRIVER, Channel.CONTROL)
    m = hb.message
    assert isinstance(m, cm.Heartbeat)  # a process without a core: its liveness alone
    assert (m.site, m.attempt, m.pid, m.busy_s, m.slept_s, m.passes, m.cpu_s, m.capacity_s,
            m.at, m.refused, m.held, m.buffered, m.pending) == (
        2, 0, 7, 1.5, 0.5, 3, 2.0, 4.0, 9.0, 1, 5, 0, 0)
    assert m.counts.size == 0 and m.in_sn.size == 0
    b.handle(view())
    [hb] = b.handle(Beat(pid=7))
    m = hb.message  # type: ignore[union-attr]
    assert b.core is not None
    assert np.array_equal(m.counts, b.core.processed)
    assert m.in_sn.size == len(tiny_plan()[0].stages)  # where its progress stands
    b.handle(FromDriver(message=cm.Stop(reason="over")))
    assert b.handle(Beat(pid=7)) == []


def test_a_report_that_cannot_reach_the_driver_stops_the_site_once() -> None:
    b = site(0)
    assert b.handle(DriverLost(reason="the control connection closed")) == [Stop(
        reason="lost the driver (the control connection closed); stopping (fail-stop)",
        how="error")]
    assert b.handle(DriverLost(reason="eof")) == []  # stopping already


def test_a_cu_done_reports_what_the_state_mover_sent_for_its_catch_up() -> None:
    b = site(1)
    b.handle(view(), linked(0), linked(2, dialed=True), linked(3, dialed=True))
    assert b.handle(StateSent(stage=1, q=5, nbytes=4096, move_s=0.25)) == []
    # the core's cu-done (it leaves the sizes to the boundary)
    done = b._sends([Outgoing(DRIVER, CuDone(1, 5, 0, 0))])
    assert done == [Send(dest=DRIVER, message=CuDone(1, 5, 0, 4096, 0.25),
                         channel=Channel.LINK)]
    assert b._sends([Outgoing(DRIVER, CuDone(1, 5, 0, 0))]) == [
        Send(dest=DRIVER, message=CuDone(1, 5, 0, 0, 0.0), channel=Channel.LINK)]  # once


def test_a_link_claiming_an_unknown_incarnation_is_refused_once_it_has_waited() -> None:
    b = SiteBoundary(1, 0, tiny_plan()[0], Layout(N, 8, 2), claim_wait=2.0)
    assert b.admissible(0, (0, 0), peer=True, waited=1.9) is Verdict.WAIT
    assert b.admissible(0, (0, 0), peer=True, waited=2.0) == (
        "claimed an unknown incarnation", "site 0 attempt 0 is not a member this site knows")
    b.handle(view())
    assert b.admissible(0, (0, 0), peer=True, waited=5.0) is Verdict.ADMIT
    assert b.admissible(0, (0, 0), peer=False, waited=5.0) is Verdict.ADMIT


def test_the_state_goes_with_one_heartbeat_in_state_every() -> None:
    b = site(1)
    b.handle(view())
    beats = [b.handle(Beat(pid=7))[0].message for _ in range(2 * STATE_EVERY + 1)]
    assert all(isinstance(m, cm.Heartbeat) for m in beats)
    with_state = [k for k, m in enumerate(beats) if m.has_state]  # type: ignore[union-attr]
    assert with_state == [0, STATE_EVERY, 2 * STATE_EVERY]
    for m in beats:
        if not m.has_state:  # type: ignore[union-attr]
            assert m.state_op.size == m.wm.size == 0  # type: ignore[union-attr]
    # every installed consumer replica's watermark: nothing processed yet, so at the start;
    # and the state holds no key
    first = beats[0]
    assert isinstance(first, cm.Heartbeat) and b.core is not None
    installed = sum(int(c.installed.sum()) for c in b.core.cons)
    assert first.wm.size == first.wm_part.size == first.wm_stage.size == installed > 0
    assert (first.wm == NO_WATERMARK).all() and first.state_keys.sum() == 0
