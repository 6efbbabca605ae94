"""The driver side's core (``control.boundary.Boundary``): controller, ingress and egress
behind one ``handle(*events)``, driven directly with the exact actions asserted; then two
deliberately broken driver paths that the simulator, which runs this very object, must catch.

The tiny workload: 4 sites, 8 mini-partitions, 2 stages; replica r of partition q on site
(q + r) % 4. The egress reads partition q from replica 0 (site q % 4) and acknowledges to
replica 1 (site (q + 1) % 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.control.boundary import (
    AdoptProcess,
    Answer,
    Boundary,
    CaughtUp,
    Deliver,
    FromSite,
    HeartbeatFrom,
    Input,
    InputEnd,
    OutputEnded,
    Rejects,
    SendView,
    StartTimes,
    Tell,
    boundary_for,
)
from sparkflux.control.controller import ControlOptions
from sparkflux.control.events import (
    Abort,
    Adopt,
    CatchUp,
    ConnectionClosed,
    FailSites,
    InstallView,
    Recovered,
    Registered,
    SiteAddress,
    SiteReady,
    StartIngress,
    View,
)
from sparkflux.model.progress import END_OF_STREAM, NO_PROGRESS
from sparkflux.model.schema import PART, SN
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.egress import Egress
from sparkflux.protocol.ingress import Ingress
from sparkflux.protocol.messages import (
    SRC,
    Ack,
    CuDone,
    CuStart,
    Data,
    Echo,
    Outgoing,
    Probe,
    PSync,
    Rejoin,
    Retain,
    Retaining,
    Reverse,
    Streams,
)
from sparkflux.sim.run import FailurePlan, Violation, check
from sparkflux.sim.workload import tiny_plan
from tests.support.seeds import hunt_order

SITES, PARTITIONS, STAGES = 4, 8, 2


def addr(site: int, attempt: int = 0, pid: int | None = None) -> SiteAddress:
    return SiteAddress(site=site, attempt=attempt, host="h", port=100 + site,
                       pid=site if pid is None else pid)


def started(replicas: int = 2) -> Boundary:
    """A boundary whose view 1 is installed and whose sites are all ready."""
    b = boundary_for(tiny_plan()[0], replicas)
    members = {s: cm.Member(host="h", port=100 + s, attempt=0, registered=s)
               for s in range(SITES)}
    acts = b.handle(*[Registered(address=addr(s), now=0.0) for s in range(SITES)])
    ring = tuple(range(SITES))  # every site in one domain (unknown): the identity
    assert acts == [*[Answer(site=s, attempt=0, role="member") for s in range(SITES)],
                    InstallView(view=View(number=1, members={s: addr(s) for s in range(SITES)}),
                                ring=ring),
                    *[SendView(site=s, view=cm.View(number=1, members=members, ring=ring))
                      for s in range(SITES)]]
    assert b.handle(*[SiteReady(site=s, attempt=0) for s in range(SITES)]) == [StartIngress()]
    return b


def first_batch() -> pa.RecordBatch:
    return tiny_plan()[1][0]


def egress_data(b: Boundary, q: int, r: int, sns: list[int], progress: int) -> Data:
    """What replica r of last-stage partition q sends the egress: rows with these SNs."""
    schema = b.egress.cons.schema
    n = len(sns)
    cols = []
    for f in schema:
        if f.name == SN:
            cols.append(pa.array(sns, type=f.type))
        elif f.name == PART:
            cols.append(pa.array([0] * n, type=f.type))
        elif f.name == SRC:
            cols.append(pa.array([q] * n, type=f.type))
        else:
            cols.append(pa.array(np.zeros(n), type=pa.float64()).cast(f.type)
                        if pa.types.is_floating(f.type) or pa.types.is_integer(f.type)
                        else pa.array([None] * n, type=f.type))
    batch = pa.RecordBatch.from_arrays(cols, schema=schema)
    return Data(STAGES, Streams(p=np.array([q], np.int32), r=np.array([r], np.int8),
                                q=np.array([0], np.int32), sn=np.array([progress]),
                                wm=np.array([0])), batch)


def arrays_equal(a: Any, b: Any) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)


# -- input: numbered, sent to every replica of its first-stage partition -----------------------
def test_input_goes_to_every_replica_of_its_partition_and_bad_records_to_dead_letters() -> None:
    b = started()
    batch = first_batch()
    bad = pa.RecordBatch.from_pylist([{**batch.slice(0, 1).to_pylist()[0], "src": None}],
                                     schema=batch.schema)
    acts = b.handle(Input(batch=pa.concat_batches([batch, bad]), now=1.0))
    assert isinstance(acts[0], Rejects) and len(acts[0].rejected) == 1
    assert "src" in acts[0].rejected[0].reason
    sends = acts[1:]
    assert [type(a) for a in sends] == [Outgoing] * SITES
    assert sorted(a.site for a in sends) == list(range(SITES))
    for o in sends:
        assert isinstance(o.message, Data) and o.message.stage == 0
        parts = set(o.message.batch.column(PART).to_pylist())
        assert parts <= {q for q in range(PARTITIONS) if o.site in (q % SITES, (q + 1) % SITES)}
    rows = sum(o.message.batch.num_rows for o in sends)
    kept = sum(1 for d in batch.column("dst").to_pylist() if d != 3)  # the plan's filter
    assert rows == 2 * kept  # every row to both replicas
    assert b.ingress.next_isn == batch.num_rows
    assert b.in_flight() == batch.num_rows  # nothing has passed the egress yet


# -- take-over: fail to every live site, ack_all at the ingress, reverse from the egress -------
def test_a_failure_is_a_fail_to_the_live_sites_an_ack_all_and_the_egress_reverse() -> None:
    b = started()
    sends = b.handle(Input(batch=first_batch(), now=1.0))
    acts = b.handle(ConnectionClosed(site=1, attempt=0, reason="crash", now=2.0))
    view2 = View(number=2, members={s: addr(s) for s in (0, 2, 3)})
    assert acts[:4] == [FailSites(view=view2, dead=(1,)),
                        *[Tell(site=s, message=cm.Fail(dead=(1,))) for s in (0, 2, 3)]]
    # the egress read partitions 1 and 5 from site 1: it reverses to replica 1 on site 2
    (rev,) = acts[4:]
    assert isinstance(rev, Outgoing) and rev.site == 2
    assert arrays_equal(rev.message, Reverse(
        STAGES, p=np.array([1, 5], np.int32), r=np.array([1, 1], np.int8),
        q=np.array([0, 0], np.int32), c=np.array([0, 0], np.int8),
        floor=np.array([NO_PROGRESS] * 2)))
    # ack_all: the live replicas' acknowledgements alone drain the ingress's buffer
    upto = b.ingress.next_isn - 1
    for o in sends:
        if o.site != 1:
            d = o.message
            qs = np.unique(d.batch.column(PART).to_numpy())
            c = np.array([0 if o.site == q % SITES else 1 for q in qs], np.int8)
            assert b.handle(FromSite(slot=o.site, message=Ack(
                0, p=np.zeros(qs.size, np.int32), q=qs.astype(np.int32), c=c,
                upto=np.full(qs.size, upto)))) == []
    assert b.ingress.buffered() == 0
    # late traffic of the failed process is dropped, never handled
    assert b.handle(FromSite(slot=1, message=PSync(STAGES, 1, 0))) == []


# -- adoption: avail to the members, the standby's core, the ingress's version numbers --------
def test_a_standby_adopts_the_failed_slot_and_every_member_is_told() -> None:
    b = started()
    b.handle(ConnectionClosed(site=1, attempt=0, reason="crash", now=2.0))
    new = addr(1, attempt=1, pid=41)
    acts = b.handle(Registered(address=new, now=3.0))
    view3 = View(number=3, members={0: addr(0), 1: new, 2: addr(2), 3: addr(3)})
    assert acts[:2] == [Answer(site=1, attempt=1, role="standby", message=cm.Standby()),
                        Adopt(slot=1, address=new, view=view3, registered=1)]
    adopt = acts[2]
    assert isinstance(adopt, AdoptProcess)
    assert (adopt.slot, adopt.pid, adopt.attempt, adopt.registered) == (1, 41, 1, 1)
    m = adopt.message
    assert m.slot == 1 and m.dead == ()
    assert m.members == {s: cm.Member(host="h", port=100 + s, attempt=1 if s == 1 else 0,
                                      registered=s) for s in range(SITES)}
    epoch = b.controller.epoch
    assert epoch == 1
    want = np.zeros((PARTITIONS, 3), np.int64)  # two copies and the free column
    want[b.controller.layout.table() == 1] = epoch  # slot 1's replicas: the new incarnation
    assert np.array_equal(m.epochs, want)
    assert np.array_equal(m.table, b.controller.layout.table())
    assert acts[3:] == [Tell(site=s, message=cm.Avail(slot=1, epoch=epoch, host="h", port=101,
                                                      attempt=1, registered=1))
                        for s in (0, 2, 3)]
    # ready: catch-ups start bottom-up, four at a time (slot 1 holds 4 replicas a stage),
    # each a cu-start on the survivor's control connection
    hosted = sorted(b.controller.layout.hosted(1).items())
    survivor = {q: b.controller.layout.site_of(q, 1 - r) for q, r in hosted}
    for stage in range(STAGES):
        acts = b.handle(SiteReady(site=1, attempt=1)) if stage == 0 else acts[4:]
        assert acts == [x for q, r in hosted for x in (
            CatchUp(stage=stage, q=q, r=r, survivor=survivor[q], epoch=epoch),
            Tell(site=survivor[q], message=CuStart(stage, q, r, epoch, False)))]
        q, r = hosted[0]
        if stage == 0:  # a first-stage survivor asks the ingress to retain: answered at once
            assert b.handle(FromSite(slot=survivor[q], message=Retain(0, q, r, epoch))) == [
                Outgoing(survivor[q], Retaining(0, q, r, epoch))]
        # cu-done: a report for the metrics; the last of a stage starts the next stage
        acts = []
        for q, r in hosted:
            acts += b.handle(FromSite(slot=survivor[q], message=CuDone(stage, q, r, 1234, 0.5),
                                      now=4.0))
        assert acts[0] == CaughtUp(stage=stage, q=hosted[0][0], r=hosted[0][1], site=1,
                                   nbytes=1234, move_s=0.5)
        assert [type(a) for a in acts[:4]] == [CaughtUp] * 4
    assert any(isinstance(a, Recovered) for a in acts)


def test_a_spare_that_adopts_a_slot_is_named_by_the_slot_it_registered_for() -> None:
    b = started()
    spare = addr(SITES, pid=77)
    assert b.handle(Registered(address=spare, now=0.5)) == [
        Answer(site=SITES, attempt=0, role="standby", message=cm.Standby())]
    acts = b.handle(ConnectionClosed(site=2, attempt=0, reason="crash", now=2.0))
    adopt = next(a for a in acts if isinstance(a, AdoptProcess))
    assert (adopt.slot, adopt.registered) == (2, SITES)
    avails = [a for a in acts if isinstance(a, Tell) and isinstance(a.message, cm.Avail)]
    assert [a.site for a in avails] == [0, 1, 3]
    assert all(a.message.registered == SITES for a in avails)
    assert adopt.message.members[2].registered == SITES


# -- registration: the core's answer, first, for the very process that registered -------------
def test_a_registration_before_the_view_is_answered_member_and_nothing_else() -> None:
    b = boundary_for(tiny_plan()[0], 2)
    assert b.handle(Registered(address=addr(2), now=0.0)) == [
        Answer(site=2, attempt=0, role="member")]


def test_a_restarted_site_without_ha_is_refused_with_the_controllers_reason() -> None:
    b = started(replicas=1)
    acts = b.handle(Registered(address=addr(1, attempt=1, pid=41), now=3.0))
    reason = ("the job no longer accepts sites (with --ha none a restarted site has no "
              "role)")
    # only the registering attempt is stopped: the slot's member (attempt 0) is not named
    assert acts == [Answer(site=1, attempt=1, role="refused",
                           message=cm.Stop(excluded=True, reason=reason))]


def test_a_second_process_for_a_slot_before_the_view_is_refused() -> None:
    b = boundary_for(tiny_plan()[0], 2)
    b.handle(Registered(address=addr(0, attempt=1), now=0.0))
    assert b.handle(Registered(address=addr(0, attempt=0), now=0.1)) == [
        Answer(site=0, attempt=0, role="refused",
               message=cm.Stop(excluded=True, reason="the slot already has a live site"))]


def test_a_standby_under_recovery_survivors_is_refused() -> None:
    b = boundary_for(tiny_plan()[0], 2, ControlOptions(recovery="survivors"))
    b.handle(*[Registered(address=addr(s), now=0.0) for s in range(SITES)])
    (answer,) = b.handle(Registered(address=addr(SITES), now=0.5))
    assert isinstance(answer, Answer) and answer.role == "refused"
    assert answer.message == cm.Stop(excluded=True, reason=(
        "--recovery survivors: failed replicas are recovered onto the surviving sites; no "
        "standby is needed"))


# -- admission and the watchdog's marks: the core's ----------------------------------------------
def test_admission_is_held_back_by_the_window_then_by_the_pool() -> None:
    b = started()
    assert b.held_back(window=10, pool_full=False) == ""
    assert b.held_back(window=10, pool_full=True) == "pool"
    b.handle(Input(batch=first_batch(), now=1.0))
    n = b.unacknowledged()
    assert n == first_batch().num_rows  # nobody has acknowledged yet
    assert b.held_back(window=n, pool_full=False) == ""  # at the window: may go
    assert b.held_back(window=n - 1, pool_full=False) == "window"
    assert b.held_back(window=n - 1, pool_full=True) == "window"  # the window first


def test_the_watchdog_marks_and_whether_output_is_owed() -> None:
    b = started()
    assert b.marks("idle") == ((0, -1, 0), False)  # nothing admitted: nothing owed
    b.handle(Input(batch=first_batch(), now=1.0))
    n = first_batch().num_rows
    assert b.marks("idle") == ((n, -1, 0), True)  # admitted, not yet out
    assert b.marks("admitting") == ((n, -1, 0), True)


# -- the standby wait: set from what the run's starts took, through an event ------------------
def test_start_times_set_the_standby_wait_by_the_measured_rule() -> None:
    b = started()
    assert b.handle(StartTimes(fixed=None)) == []
    assert b.controller.standby_wait == 5.0  # the floor
    assert b.handle(StartTimes(start_s=4.0, adoptions_s=(3.0, 7.0))) == []
    assert b.controller.standby_wait == 10.5  # 1.5 x the slowest adoption
    assert b.handle(StartTimes(fixed=2.0, start_s=40.0)) == []
    assert b.controller.standby_wait == 2.0  # --standby-wait: fixed


# -- output: delivered in order, acknowledged to the other replica -----------------------------
def test_output_is_delivered_in_order_and_acknowledged_to_the_other_replica() -> None:
    b = started()
    acts: list[Any] = []
    for q in range(PARTITIONS):  # every partition's replica 0 sends progress, q=3 some rows
        sns = [5, 9] if q == 3 else []
        acts += b.handle(FromSite(slot=q % SITES, message=egress_data(b, q, 0, sns, 10)))
    acks = [a for a in acts if isinstance(a, Outgoing)]
    assert all(isinstance(a.message, Ack) for a in acks)
    # each ack goes to replica 1 of its partition
    for a in acks:
        assert all(a.site == (int(p) + 1) % SITES for p in a.message.p)
    (deliver,) = [a for a in acts if isinstance(a, Deliver)]
    assert deliver.batch.column(SN).to_pylist() == [5, 9] and deliver.progress.sn == 10
    assert b.in_flight() == -1 - 10
    # the end of the stream: the output ends, and the controller knows the run finished
    acts = []
    for q in range(PARTITIONS):
        acts += b.handle(FromSite(slot=q % SITES,
                                  message=egress_data(b, q, 0, [], END_OF_STREAM)))
    assert acts[-1] == OutputEnded() and b.controller.finished


def test_a_duplicate_at_the_egress_and_an_unexpected_message_abort_the_run() -> None:
    b = started()
    b.handle(FromSite(slot=3, message=egress_data(b, 3, 0, [5], 6)))
    acts = b.handle(FromSite(slot=3, message=egress_data(b, 3, 0, [5], 7)))
    assert len(acts) == 1 and isinstance(acts[0], Abort)
    assert acts[0].reason.startswith("egress invariant violated: FH-Cons of the output "
                                     "(egress): duplicate input")
    b = started()
    (abort,) = b.handle(FromSite(slot=0, message=Retaining(1, 0, 0, 0)))
    assert abort == Abort(reason="the driver got an unexpected Retaining message from site 0")


def test_losing_both_replicas_aborts_with_the_lost_partitions_named_first() -> None:
    b = started()
    b.handle(ConnectionClosed(site=1, attempt=0, reason="crash", now=1.0))
    acts = b.handle(ConnectionClosed(site=2, attempt=0, reason="crash", now=1.1))
    assert isinstance(acts[0], Abort)
    assert "stage 0: partitions 1, 5" in acts[0].reason
    assert b.failed == acts[0].reason


# -- balance rounds read their statistics from heartbeats --------------------------------------
def test_a_round_takes_its_statistics_from_each_sites_next_heartbeat() -> None:
    plan = tiny_plan()[0]
    b = boundary_for(plan, 2, ControlOptions(balance=True))
    b.handle(*[Registered(address=addr(s), now=0.0) for s in range(SITES)])
    b.handle(*[SiteReady(site=s, attempt=0) for s in range(SITES)])

    def beat(s: int, t: float, member: bool = True) -> HeartbeatFrom:
        return HeartbeatFrom(slot=s, attempt=0, now=t, member=member, beat=cm.Heartbeat(
            site=s, attempt=0, pid=s, busy_s=t, slept_s=0.0, passes=1, cpu_s=t, buffered=0,
            capacity_s=t, at=t, counts=np.full(PARTITIONS, int(t * 100), np.int64)))

    from sparkflux.control.events import Tick

    t = 0.0
    while b.controller.lb_state in ("wait",) and t < 5:
        t += 0.25
        b.handle(Tick(now=t))
    assert b.controller.lb_state == "baseline"
    # a standby's heartbeat is liveness only; the members' next ones are the round's samples
    b.handle(beat(0, t, member=False))
    assert b.controller._samples == {}
    for s in range(SITES):
        b.handle(beat(s, t))
    assert b.controller.lb_state != "baseline"


def test_a_sites_latency_probe_is_echoed_and_its_measures_reach_the_round() -> None:
    b = started()
    assert b.handle(FromSite(slot=2, message=Probe(4.5))) == [Outgoing(2, Echo(4.5))]
    b.handle(ConnectionClosed(site=2, attempt=0, reason="eof", now=1.0))
    assert b.handle(FromSite(slot=2, message=Probe(5.0))) == []  # dead: nobody to echo to
    plan = tiny_plan()[0]
    b = boundary_for(plan, 2, ControlOptions(balance=True))
    b.handle(*[Registered(address=addr(s), now=0.0) for s in range(SITES)])
    b.handle(*[SiteReady(site=s, attempt=0) for s in range(SITES)])
    from sparkflux.control.events import Tick

    t = 0.0
    while b.controller.lb_state == "wait" and t < 5:
        t += 0.25
        b.handle(Tick(now=t))
    link = (1.5, -1.0, 30.0, 60.0, 90.0)
    b.handle(HeartbeatFrom(slot=0, attempt=0, now=t, beat=cm.Heartbeat(
        site=0, attempt=0, pid=0, busy_s=t, slept_s=0.0, passes=1, cpu_s=t, buffered=0,
        capacity_s=t, at=t, counts=np.full(PARTITIONS, 100, np.int64), link_ms=link)))
    assert b.controller._samples[0].link_ms == link


# -- the simulator runs this core: a broken driver path is caught -------------------------------
def _hunt(plans: Any, batches: Any, expected: Any, symptoms: tuple[str, ...],
          seeds: Sequence[int]) -> tuple[int, FailurePlan]:
    for seed in seeds:
        fp = plans(seed)
        try:
            check(lambda: tiny_plan()[0], batches, seed, fp, expected=expected)
        except Violation as e:
            if any(s in str(e) for s in symptoms):
                assert str(e).startswith(f"seed {seed}:")
                return seed, fp
    raise AssertionError(f"the mutation survived seeds {seeds}")


def test_mutation_ingress_keeps_waiting_for_a_dead_replica(
        monkeypatch: pytest.MonkeyPatch, tiny_baseline: Any) -> None:
    """The driver's take-over forgets the ingress (no ``ack_all``): its buffer waits for the
    dead replica's acknowledgements forever."""
    batches, expected, steps = tiny_baseline
    monkeypatch.setattr(Ingress, "on_fail", lambda self, dead: None)

    def plans(seed: int) -> FailurePlan:
        rng = np.random.default_rng((seed, 11))
        return FailurePlan(((int(rng.integers(SITES)), int(rng.integers(1, steps))),))

    seed, fp = _hunt(plans, batches, expected, ("buffers did not drain",), range(50))
    monkeypatch.undo()  # control: the very same seed passes with the real driver path
    check(lambda: tiny_plan()[0], batches, seed, fp, expected=expected)


def test_mutation_egress_ignores_psync(
        monkeypatch: pytest.MonkeyPatch, tiny_baseline: Any) -> None:
    """After a last-stage catch-up the egress never acknowledges to the new replica (its
    ``psync`` is dropped): the new replica holds its output forever."""
    batches, expected, steps = tiny_baseline
    monkeypatch.setattr(Egress, "on_psync", lambda self, msg: [])

    def plans(seed: int) -> FailurePlan:
        rng = np.random.default_rng((seed, 12))
        crash = int(rng.integers(1, steps // 2))
        return FailurePlan(((int(rng.integers(SITES)), crash),), standbys=(crash + 20,))

    seed, fp = _hunt(plans, batches, expected, ("buffers did not drain",), hunt_order(200, 55))
    monkeypatch.undo()
    check(lambda: tiny_plan()[0], batches, seed, fp, expected=expected)


def test_the_end_of_input_reaches_every_first_stage_replica() -> None:
    b = started()
    acts = b.handle(InputEnd())
    assert sorted(a.site for a in acts) == list(range(SITES))
    for a in acts:
        assert isinstance(a.message, Data) and a.message.batch is None
        assert set(a.message.streams.sn.tolist()) == {END_OF_STREAM}
    # a rejoin from a first-stage replica is the ingress's (fold-in of its catch-up)
    rejoin = Rejoin(0, p=np.array([0], np.int32), r=np.array([0], np.int8),
                    q=np.array([1], np.int32), c=np.array([0], np.int8),
                    floor=np.array([-1]), send=np.array([True]), wait=np.array([True]))
    out = b.handle(FromSite(slot=1, message=rejoin))
    assert out and all(isinstance(o, Outgoing) and o.site == 1 for o in out)
