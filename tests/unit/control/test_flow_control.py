"""Flow control and what the watchdog reads, without Spark (the watchdog itself:
``test_watchdog.py``).

- Admission counts what the first-stage replicas have acknowledged (``Boundary.unacknowledged``),
  one replica or two; a failed replica drops out, a replica being caught up is left out
  until it rejoins. Consumers acknowledge on receipt, so a window that holds the output
  back holds no acknowledgement: the driver's core and a site's core, driven by hand over
  two chained time windows, finish their input under a window that the output's lag
  exceeds, where admission by the output's progress stops for good.
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
    StageLow,
)
from sparkflux.dataflow.placement import DRIVER, Layout
from sparkflux.model.progress import NO_PROGRESS
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.messages import Ack, Data, Outgoing
from sparkflux.protocol.site import Received, SiteCore
from sparkflux.sim.workload import tiny_plan, tiny_windows_model, tiny_windows_plan

SITES = 4


def addr(site: int) -> SiteAddress:
    return SiteAddress(site=site, attempt=0, host="h", port=100 + site, pid=site)


def started(plan: Any, replicas: int) -> Boundary:
    b = boundary_for(plan, replicas)
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
