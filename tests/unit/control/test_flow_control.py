"""Flow control and the watchdog, without Spark.

- Admission counts what the first-stage replicas have acknowledged (``Boundary.unacknowledged``),
  one replica or two; a failed replica drops out, a replica being caught up is left out
  until it rejoins. Consumers acknowledge on receipt, so a window that holds the output
  back holds no acknowledgement: the driver's core and a site's core, driven by hand over
  two chained time windows, finish their input under a window that the output's lag
  exceeds, where admission by the output's progress stops for good.
- The watchdog warns once per stall, stops after ``STOP_AFTER`` times as long unless the
  input is idle, and its report names what holds the run (exact texts).
- Heartbeats carry each stage's lowest progress, and the boundary's ``standing`` reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.control.boundary import (
    Boundary,
    Deliver,
    FromSite,
    HeartbeatFrom,
    Input,
    InputEnd,
    boundary_for,
)
from sparkflux.control.events import ConnectionClosed, Registered, SiteAddress, SiteReady
from sparkflux.control.watchdog import (
    STOP_AFTER,
    Resumed,
    StageLow,
    Stall,
    Standing,
    Watchdog,
    describe,
    pool_reason,
    window_reason,
)
from sparkflux.dataflow.placement import DRIVER, Layout
from sparkflux.model.progress import END_OF_STREAM, NO_PROGRESS
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.messages import Ack, Data, Outgoing
from sparkflux.protocol.site import Received, SiteCore
from sparkflux.sim.workload import tiny_plan, tiny_windows_model, tiny_windows_plan

SITES = 4


def addr(site: int) -> SiteAddress:
    return SiteAddress(site=site, attempt=0, host="h", port=100 + site, pid=site)


def started(plan: Any, replicas: int) -> Boundary:
    b = boundary_for(plan, replicas, {"heartbeat_timeout": 10.0})
    b.handle(*[Registered(address=addr(s), now=0.0) for s in range(plan.sites)])
    b.handle(*[SiteReady(site=s, attempt=0) for s in range(plan.sites)])
    return b


def ack_for(o: Outgoing, upto: int, replicas: int) -> Ack:
    """The acknowledgement the site ``o`` went to sends for every partition in it."""
    assert isinstance(o.message, Data)
    qs = np.unique(o.message.streams.q)
    c = np.array([next(r for r in range(replicas) if (q + r) % SITES == o.site) for q in qs],
                 np.int8)
    return Ack(0, p=np.zeros(qs.size, np.int32), q=qs.astype(np.int32), c=c,
               upto=np.full(qs.size, upto))


# -- admission by the first stage's acknowledgements --------------------------------------------
@pytest.mark.parametrize("replicas", [1, 2])
def test_admission_counts_what_every_first_stage_replica_has_acknowledged(replicas: int
                                                                         ) -> None:
    plan, batches = tiny_plan()
    b = started(plan, replicas)
    sends = [a for a in b.handle(Input(batch=batches[0], now=1.0)) if isinstance(a, Outgoing)]
    admitted = b.ingress.next_isn
    assert b.unacknowledged() == admitted and b.slowest_first()[:3] == (NO_PROGRESS, 0, 0)
    # every site but site 2 acknowledges all of it: site 2's replicas are the slowest
    for o in sends:
        if o.site != 2:
            b.handle(FromSite(slot=o.site, message=ack_for(o, admitted - 1, replicas)))
    assert b.unacknowledged() == admitted
    sn, q, c, site = b.slowest_first()
    assert (sn, site) == (NO_PROGRESS, 2) and (q + c) % SITES == 2
    (late,) = [o for o in sends if o.site == 2]
    b.handle(FromSite(slot=2, message=ack_for(late, admitted - 11, replicas)))
    assert b.unacknowledged() == 10
    b.handle(FromSite(slot=2, message=ack_for(late, admitted - 1, replicas)))
    assert b.unacknowledged() == 0


def test_a_failed_replica_drops_out_and_a_replica_being_caught_up_is_left_out() -> None:
    plan, batches = tiny_plan()
    b = started(plan, 2)
    sends = [a for a in b.handle(Input(batch=batches[0], now=1.0)) if isinstance(a, Outgoing)]
    admitted = b.ingress.next_isn
    for o in sends:
        if o.site != 1:
            b.handle(FromSite(slot=o.site, message=ack_for(o, admitted - 1, 2)))
    assert b.unacknowledged() == admitted  # site 1 has acknowledged nothing
    b.handle(ConnectionClosed(site=1, attempt=0, reason="crash", now=2.0))
    assert b.unacknowledged() == 0  # ack_all: the ingress feeds site 1's replicas no more
    # a standby adopts slot 1: its replicas are retained for, not fed, until they rejoin
    b.handle(Registered(address=SiteAddress(site=1, attempt=1, host="h", port=9, pid=9),
                        now=3.0))
    b.ingress.on_retain(1, 0, b.controller.epoch)
    b.handle(Input(batch=batches[1], now=4.0))
    more = b.ingress.next_isn - admitted
    assert b.unacknowledged() == more and b.slowest_first()[3] != 1


def drive(plan: Any, batches: list[pa.RecordBatch], admit: Callable[[Boundary], bool]
          ) -> tuple[Boundary, pa.Table | None, int]:
    """The driver's core and one site's core, by hand: admit the next batch whenever
    ``admit`` allows, else let the site take everything sent to it in one pass. Returns the
    boundary, the output (None: it never ended) and the largest lag of the output's progress
    behind the input seen."""
    b = started(plan, 1)
    site = SiteCore(0, plan, Layout(1, plan.partitions, 1))
    to_site: list[tuple[int, Any]] = []
    out: list[pa.RecordBatch] = []
    lag = 0
    nxt = 0

    def carry(actions: list[Any]) -> None:
        for a in actions:
            if isinstance(a, Outgoing):
                to_site.append((DRIVER, a.message))
            elif isinstance(a, Deliver) and a.batch.num_rows:
                out.append(a.batch)

    while True:
        if nxt < len(batches) and admit(b):
            carry(b.handle(Input(batch=batches[nxt], now=0.0)))
            nxt += 1
        elif nxt == len(batches) and not b.ingress.ended:
            carry(b.handle(InputEnd()))
        elif to_site:
            items, to_site[:] = list(to_site), []
            for o in site.handle(Received(items)):
                assert o.site == DRIVER
                carry(b.handle(FromSite(slot=0, message=o.message)))
        else:
            break
        lag = max(lag, b.in_flight())
    ended = b.egress.ended
    return b, pa.Table.from_batches(out) if ended else None, lag


def test_a_window_that_holds_the_output_holds_no_acknowledgement() -> None:
    plan, batches = tiny_windows_plan(sites=1, partitions=4)
    window = 10  # records: the open windows hold the output's progress further back
    b, table, lag = drive(plan, batches, lambda b: b.unacknowledged() <= window)
    assert table is not None and lag > 5 * window
    rows = sorted(zip(*[table.column(c).to_pylist() for c in
                        ("app", "top_start", "top_end", "top", "windows")], strict=True))
    assert rows == tiny_windows_model(batches)
    # admission by the output's progress (before): it stops for good, the output never ends
    b, table, _ = drive(plan, batches, lambda b: b.in_flight() <= window)
    assert table is None and b.in_flight() > window and b.unacknowledged() == 0


# -- heartbeats: each stage's lowest progress ----------------------------------------------------
def test_a_sites_lowest_progress_per_stage_and_the_boundarys_standing() -> None:
    plan, batches = tiny_windows_plan(sites=1, partitions=4)
    b = started(plan, 1)
    site = SiteCore(0, plan, Layout(1, plan.partitions, 1))
    sends = [a for a in b.handle(*[Input(batch=x, now=0.0) for x in batches[:3]])
             if isinstance(a, Outgoing)]
    site.handle(Received([(DRIVER, o.message) for o in sends]))
    in_sn, in_part, out_sn, out_part = site.lowest()
    top = b.ingress.next_isn - 1
    assert in_sn[0] == top and in_part[0] == 0  # every partition has all of the input
    cons1, prod0 = site.cons[1], site.prods[0]
    assert out_sn[0] == prod0.progress_sn.min() < top  # the open windows hold it back
    assert out_part[0] == prod0.parts[np.argmin(prod0.progress_sn)]
    assert in_sn[1] == cons1.frontier()[0].min() and out_sn[1] <= in_sn[1]
    beat = cm.Heartbeat(site=0, attempt=0, pid=1, busy_s=0.0, slept_s=0.0, passes=1,
                        cpu_s=0.0, buffered=0, capacity_s=1.0, at=0.0, in_sn=in_sn,
                        in_part=in_part, out_sn=out_sn, out_part=out_part)
    b.handle(HeartbeatFrom(slot=0, attempt=0, beat=beat, now=1.0))
    assert b.standing("blocked", "why", now=1.5).silent == ()
    assert b.standing("blocked", "why", now=2.0).silent == ((0, 1.0),)
    st = b.standing("blocked", "why")
    assert st.admitted == top + 1 and st.output_sn == NO_PROGRESS and st.input == "blocked"
    assert st.stages[0] == StageLow(0, plan.stages[0].name, top, 0, 0, int(out_sn[0]),
                                    int(out_part[0]), 0)
    assert st.stages[1].out_sn == out_sn[1] and st.admission == "why"


def test_a_failed_sites_heartbeat_no_longer_counts() -> None:
    plan, _ = tiny_plan()
    b = started(plan, 2)
    n = len(plan.stages)
    for s in range(SITES):
        beat = cm.Heartbeat(site=s, attempt=0, pid=s, busy_s=0.0, slept_s=0.0, passes=1,
                            cpu_s=0.0, buffered=0, capacity_s=1.0, at=0.0,
                            in_sn=np.full(n, 10 * (s + 1)), in_part=np.full(n, s),
                            out_sn=np.full(n, 10 * (s + 1)), out_part=np.full(n, s))
        b.handle(HeartbeatFrom(slot=s, attempt=0, beat=beat, now=1.0))
    assert b.standing("admitting").stages[0].in_site == 0
    b.handle(ConnectionClosed(site=0, attempt=0, reason="crash", now=2.0))
    low = b.standing("admitting").stages[0]
    assert (low.in_sn, low.in_part, low.in_site) == (20, 1, 1)


# -- the watchdog ----------------------------------------------------------------------------
def test_the_watchdog_warns_once_per_stall_then_stops_unless_the_input_is_idle() -> None:
    w = Watchdog(timeout=10.0)
    assert w.observe(0.0, (5, 1, 0), "blocked") is None
    assert w.observe(9.9, (5, 1, 0), "blocked") is None
    assert w.observe(10.0, (5, 1, 0), "blocked") == Stall(10.0, stop=False)
    assert w.observe(20.0, (5, 1, 0), "blocked") is None  # once per stall
    assert w.observe(40.5, (5, 1, 0), "blocked") == Stall(40.5, stop=True)
    assert w.observe(50.0, (5, 1, 0), "blocked") is None
    # progress ends the stall, and starts the clock of the next
    assert w.observe(51.0, (6, 1, 0), "admitting") == Resumed(51.0)
    assert w.observe(52.0, (7, 1, 0), "admitting") is None  # reported once
    assert w.observe(53.0, (6, 1, 0), "admitting") is None
    assert w.observe(63.0, (6, 1, 0), "idle") == Stall(10.0, stop=False)
    assert w.observe(200.0, (6, 1, 0), "idle") is None  # an idle source never stops the run
    assert w.observe(203.0, (6, 1, 0), "ended") == Stall(150.0, stop=True)
    # nothing owed (an idle source, everything out) is no stall
    assert w.observe(300.0, (7, 6, 3), "idle", owed=False) == Resumed(247.0)
    assert w.observe(400.0, (7, 6, 3), "idle", owed=False) is None
    assert Watchdog(timeout=0.0).observe(1e9, (0,), "ended") is None  # off
    assert STOP_AFTER == 4


def standing(**kw: Any) -> Standing:
    hot = StageLow(0, "TimeWindowAggregate", 59_999, 1, 0, 35_121, 5, 1)
    top = StageLow(1, "TimeWindowAggregate", 35_121, 2, 1, 35_121, 3, 0)
    base = dict(admitted=60_000, output_sn=35_121, egress_sn=35_121, egress_part=3,
                stages=(hot, top), input="blocked",
                admission=window_reason(20_001, 20_000, 39_998, 3, 1, 0))
    return Standing(**{**base, **kw})


def test_the_report_names_the_operator_that_holds_the_output() -> None:
    text = describe(Stall(30.2, stop=False), standing(), 30.0)
    assert text == (
        "no progress for 30 s: the output is at SN 35,121, 60,000 records admitted; the "
        "ingress is blocked by admission: 20,001 records admitted are not yet acknowledged by "
        "every first-stage replica (--window 20,000); the slowest is stage 0 partition 3 "
        "replica 1 on site 0, at SN 39,998. It waits for stage 0 (TimeWindowAggregate) "
        "partition 5 on site 1, which holds its output at SN 35,121 while its input is at "
        "SN 59,999 or more: its operator keeps an open window, or other state that waits for "
        "more input. (--stall-timeout 30: the run stops if this lasts 120 s)")
    stop = describe(Stall(120.0, stop=True), standing(input="ended", admission=""), 30.0)
    assert stop == (
        "no progress for 120 s: the output is at SN 35,121, 60,000 records admitted; all "
        "input is admitted. It waits for stage 0 (TimeWindowAggregate) partition 5 on site 1, "
        "which holds its output at SN 35,121 while its input is at SN 59,999 or more: its "
        "operator keeps an open window, or other state that waits for more input. The run "
        "stops rather than hang; if the stall is expected, raise --stall-timeout (0 turns "
        "the watchdog off).")


def test_the_report_names_input_that_has_not_arrived() -> None:
    hot = StageLow(0, "Session", 59_999, 1, 0, 59_999, 5, 1)
    top = StageLow(1, "CountWindow", 40_000, 6, 2, 40_000, 6, 2)
    text = describe(Stall(31.0, stop=False),
                    standing(stages=(hot, top), output_sn=40_000, egress_sn=40_000,
                             input="idle", admission=""), 30.0)
    assert text == (
        "no progress for 31 s: the output is at SN 40,000, 60,000 records admitted; the "
        "source has nothing to admit. It waits for the input of stage 1 (CountWindow) "
        "partition 6 on site 2: it has SN 40,000 while stage 0 claims at least SN 59,999 "
        "(not read yet: a slow or stalled site, or connection between sites).")
    first = StageLow(0, "Session", 50_000, 7, 3, 50_000, 7, 3)
    end = StageLow(1, "CountWindow", 50_000, 6, 2, 50_000, 6, 2)
    text = describe(Stall(30.0, stop=False),
                    standing(stages=(first, end), output_sn=50_000, egress_sn=50_000,
                             input="admitting", admission=""), 30.0)
    assert text.endswith(
        "It waits for the input of stage 0 (Session) partition 7 on site 3: it has input up "
        "to SN 50,000 of the 60,000 records admitted. (--stall-timeout 30: the run stops if "
        "this lasts 120 s)")


def test_the_report_names_output_that_has_not_reached_the_driver_and_unknown_stages() -> None:
    end = StageLow(1, "CountWindow", 59_999, 6, 2, 59_999, 6, 2)
    first = StageLow(0, "Session", 59_999, 7, 3, 59_999, 7, 3)
    text = describe(Stall(30.0, stop=False),
                    standing(stages=(first, end), output_sn=NO_PROGRESS, egress_sn=NO_PROGRESS,
                             egress_part=4, input="ended", admission=""), 30.0)
    assert text.startswith(
        "no progress for 30 s: no output yet, 60,000 records admitted; all input is "
        "admitted. It waits for the output of stage 1 (CountWindow) partition 4 to reach the "
        "driver: the egress has it up to no SN yet while every copy of the stage claims at "
        "least SN 59,999 (a connection to the driver that is slow or stalled).")
    text = describe(Stall(30.0, stop=False), standing(stages=(first, None),
                                                     silent=((1, 30.25), (3, 2.0))), 30.0)
    assert "It waits for sites 1, 3, which have sent no heartbeat for 30.2 s and 2.0 s " \
           "(hung, or too busy to send one); by the sites' last heartbeats, for stage 1, which " \
           "no live site has reported on yet. (--stall-timeout" in text
    text = describe(Stall(30.0, stop=False), standing(silent=((1, 1.06),)), 30.0)
    assert "It waits for site 1, which has sent no heartbeat for 1.1 s (hung, or too busy to " \
           "send one); by the sites' last heartbeats, for stage 0 (TimeWindowAggregate) " \
           "partition 5 on site 1, which holds" in text
    done = StageLow(1, "CountWindow", END_OF_STREAM, 6, 2, END_OF_STREAM, 6, 2)
    text = describe(Stall(30.0, stop=False), standing(stages=(first, done), egress_sn=0,
                                                     input="ended", admission=""), 30.0)
    assert "the egress has it up to SN 0 while every copy of the stage claims at least " \
           "the end of the stream" in text


def test_the_skew_buffers_reason() -> None:
    assert pool_reason(100_000, [2]) == (
        "the ingress's skew buffer holds 100,000 rows for site 2, whose connection cannot "
        "take more")
    assert pool_reason(120_000, [1, 3]) == (
        "the ingress's skew buffer holds 120,000 rows for sites 1, 3, whose connections "
        "cannot take more")

