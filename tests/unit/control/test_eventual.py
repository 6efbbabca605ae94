"""The driver's part of eventual consistency (``control/eventual.py``), driven through the
``Boundary`` with exact actions: ``tiny_union_plan`` (views and clicks, 8 partitions on 4
sites, two copies each), a delay bound of 1 s.

Views speak at 0 s and then fall silent; clicks go on. On the tick at 1.2 s views have been
silent for the bound and clicks' records have waited it: the episode opens at the last
stable SN, the clicks' records that are certain among the sources still speaking go
tentatively (numbered from ``TENTATIVE_BASE``) to the first copy of each partition, every
site holding one told the claim, and the records stay held for their stable release. Views
come back: the stable release passes everything sent tentatively (stabilization; the heal
point is the last stable SN). The egress hands tentative rows on while the episode is open,
holds the stable rows above its base, and once the stable output passes the heal point
delivers ``undo``, the held rows and ``rec_done``, and tells every site ``Reconciled``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.control.boundary import Boundary, Deliver, FromSite, Input, boundary_for
from sparkflux.control.events import SiteAddress, Tick, View
from sparkflux.control.eventual import CONVERGED, ROUNDS
from sparkflux.dataflow.placement import Layout
from sparkflux.model.schema import SN, SNM, SRC, T0
from sparkflux.protocol.consistency import TENTATIVE_BASE, Eventual, Mode, State
from sparkflux.protocol.messages import Data, Outgoing, Reconciled, Tentative
from sparkflux.sim.workload import tiny_union_plan, tiny_union_records

VIEWS, CLICKS = 0, 1


@pytest.fixture
def records() -> tuple[pa.Table, pa.Table]:
    return tiny_union_records()


def tentative(actions: list) -> list[Outgoing]:
    return [a for a in actions if isinstance(a, Outgoing) and isinstance(a.message, Tentative)]


def opened(records: tuple[pa.Table, pa.Table], mode: Mode = "process"
           ) -> tuple[Boundary, list]:
    views, clicks = records
    b = boundary_for(tiny_union_plan(), 2, eventual=Eventual(1.0, mode))
    b.handle(Input(batch=views.slice(0, 10).to_batches()[0], now=0.0, stream=VIEWS),
             Input(batch=clicks.slice(0, 10).to_batches()[0], now=0.0, stream=CLICKS),
             Input(batch=clicks.slice(10, 10).to_batches()[0], now=0.5, stream=CLICKS))
    return b, b.handle(Tick(now=1.2))


def test_a_silent_source_opens_an_episode_and_the_others_go_on_tentatively(
        records: tuple[pa.Table, pa.Table]) -> None:
    b, out = opened(records)
    held = b.sequencer.held_total()
    ep = b.episodes.episode if b.episodes else None
    assert ep is not None and ep.state is State.UPSTREAM_FAILURE and ep.epoch == 1
    assert ep.base == b.ingress.next_isn - 1 and b.egress.holding == ep.base
    assert ep.failed == frozenset({VIEWS})
    sends = tentative(out)
    layout = Layout(4, 8, 2)
    assert [o.site for o in sends] == sorted({layout.site_of(q, 0) for q in range(8)})
    msgs = [o.message for o in sends]
    assert {(m.stage, m.epoch, m.sn, m.wm) for m in msgs} == {
        (0, 1, TENTATIVE_BASE + 1, ep.sent_to[0])}
    rows = pa.Table.from_batches([m.rows for m in msgs if m.rows is not None])
    assert sorted(rows.column(SN).to_pylist()) == [TENTATIVE_BASE, TENTATIVE_BASE + 1]
    assert set(rows.column(T0).to_pylist()) <= {0.0, 0.5}  # each record's arrival
    # every row to the first copy of its partition
    for o in sends:
        if o.message.rows is not None:
            parts = o.message.rows.column("_part").to_numpy()
            assert all(layout.site_of(int(q), 0) == o.site for q in parts)
    assert b.sequencer.held_total() == held  # still held for the stable release
    assert tentative(b.handle(Tick(now=1.3))) == []  # nothing new: nothing sent


def test_the_source_back_heals_and_the_egress_reconciles(records: tuple[pa.Table, pa.Table]
                                                         ) -> None:
    views, clicks = records
    b, _ = opened(records)
    assert b.episodes is not None
    ep = b.episodes.episode
    base = ep.base
    out = b.handle(Input(batch=views.slice(10, 40).to_batches()[0], now=1.4, stream=VIEWS))
    assert ep.state is State.STABILIZATION
    assert ep.heal == b.ingress.next_isn - 1 > base
    assert any(isinstance(a, Outgoing) and isinstance(a.message, Data) for a in out)
    # tentative rows from a last-stage site reach the sink while the episode is open
    schema = b.plan.output_schema.append(pa.field(SRC, pa.int32(), nullable=False))
    row = {f.name: 0 for f in schema}
    row.update({SN: TENTATIVE_BASE, SNM: 0, T0: 1.0})
    rows = pa.RecordBatch.from_pylist([row], schema=schema)
    n = len(b.plan.stages)
    got = b.handle(FromSite(slot=0, message=Tentative(n, 1, rows, TENTATIVE_BASE, 0), now=1.6))
    assert [(d.op, d.batch.num_rows) for d in got if isinstance(d, Deliver)] == [
        ("tentative", 1)]
    assert b.handle(FromSite(slot=0, message=Tentative(n, 0, rows, 0, 0), now=1.6)) == []
    # the stable output passes the heal point: undo, the corrections, rec_done, Reconciled
    b.egress.corrections.append(pa.RecordBatch.from_pylist(  # input of 0.2 s: lag 1.8 s
        [{**row, SN: base + 1, T0: 0.2}], schema=schema).drop_columns([SRC]))
    b.egress.progress = type(b.egress.progress)(ep.heal, 0)
    b.controller.view = View(number=1, members={s: SiteAddress(site=s, attempt=0, host="h", port=1,
                                                   pid=1)
                                 for s in range(4)})
    b.dead = {3}
    # past the heal point, new input still goes tentatively: the stable output must also be
    # current, or the undo would void rows whose stable ones are still a backlog behind.
    # A round of catching up begins: its target is the input admitted by now.
    assert b._reconcile(b.egress.progress, 2.0) == []
    target = b.ingress.next_isn - 1
    b.egress.progress = type(b.egress.progress)(target - 1, 0)
    assert b._reconcile(b.egress.progress, 2.1) == []  # not there yet
    # reached within k X (one stage, X = 1 s): as current as the bound allows
    b.egress.progress = type(b.egress.progress)(target, 0)
    done = b._reconcile(b.egress.progress, 2.5)
    assert [(d.op, d.correction, d.batch.num_rows) for d in done if isinstance(d, Deliver)] == [
        ("undo", False, 0), ("insert", True, 1), ("rec_done", False, 0)]
    tells = [a for a in done if isinstance(a, Outgoing)]
    assert [(a.site, a.message) for a in tells] == [(s, Reconciled(1)) for s in (0, 1, 2)]
    assert ep.state is State.STABLE and b.egress.holding is None
    assert b.handle(FromSite(slot=0, message=Tentative(n, 1, rows, 0, 0), now=2.6)) == []
    assert np.isclose(ep.time_in(2.5)["stabilization"], 1.1)


def in_stabilization(records: tuple[pa.Table, pa.Table]) -> tuple[Boundary, float]:
    """A boundary whose cut source is back, its stable output at the heal point; k X."""
    views, _ = records
    b, _ = opened(records)
    assert b.episodes is not None
    ep = b.episodes.episode
    b.handle(Input(batch=views.slice(10, 40).to_batches()[0], now=1.4, stream=VIEWS))
    assert ep.state is State.STABILIZATION and ep.heal is not None
    b.egress.progress = type(b.egress.progress)(ep.heal, 0)
    return b, len(b.plan.stages) * ep.config.max_delay


@pytest.mark.parametrize(("stable_t0", "tentative_t0", "ends"), [
    (1.5, 2.8, False),  # lag 1.5 s: above k X (1 s) and the tentative output's 0.2 s
    (2.2, 2.8, True),   # 0.8 s: within k X
    (0.5, 0.5, True),   # 2.5 s, as far behind as the tentative output (2.5 s): current
    (0.4, 0.5, False),  # 2.6 s against 2.5 s and k X 1 s: a round begins
])
def test_the_stable_output_is_current_once_its_lag_is_the_tentative_outputs(
        records: tuple[pa.Table, pa.Table], stable_t0: float, tentative_t0: float,
        ends: bool) -> None:
    """No round needed: at 3.0 s the stable output held for the episode answers input of
    ``stable_t0``; the newest tentative row delivered answered input of ``tentative_t0``.
    It reconciles when the stable lag is no more than k X or the tentative output's lag."""
    b, k_x = in_stabilization(records)
    assert b.episodes is not None and k_x == 1.0
    schema = b.plan.output_schema.append(pa.field(SRC, pa.int32(), nullable=False))
    row = {f.name: 0 for f in schema}
    row.update({SN: TENTATIVE_BASE, SNM: 0, T0: tentative_t0})
    n = len(b.plan.stages)
    b.clock = 3.0  # (the input's clock, which the T0s are on: its latest reading)
    b.handle(FromSite(slot=0, message=Tentative(n, 1, pa.RecordBatch.from_pylist(
        [row], schema=schema), TENTATIVE_BASE, 0), now=3.0))
    assert np.isclose(b.episodes.tentative_lag, 3.0 - tentative_t0)
    b.egress.corrections.append(pa.RecordBatch.from_pylist(
        [{**row, SN: b.episodes.episode.base + 1, T0: stable_t0}],
        schema=schema).drop_columns([SRC]))
    assert (b.episodes.caught_up(3.0, []) is not None) == ends
    assert (b.episodes._round is None) == ends


def test_catching_up_takes_rounds_while_they_shorten(records: tuple[pa.Table, pa.Table]
                                                     ) -> None:
    """A round that took longer than k X, and clearly shorter than the one before, begins
    another, with the input admitted by then as its target; after ``ROUNDS`` rounds the
    episode reconciles whatever the lag."""
    b, k_x = in_stabilization(records)
    assert b.episodes is not None
    now = 2.0
    assert b.episodes.caught_up(now, []) is None  # round 1 begins
    took = 100 * k_x
    for r in range(2, ROUNDS + 1):
        took *= CONVERGED - 0.05  # shorter each time, still slower than the bound
        now += took
        b.egress.progress = type(b.egress.progress)(b.ingress.next_isn - 1, 0)
        assert b.episodes.caught_up(now, []) is None, f"round {r - 1} ended it"
        assert b.episodes._round is not None and b.episodes._round[2] == r
    now += took * (CONVERGED - 0.05)
    assert b.episodes.caught_up(now, []) is not None  # the last round: reconciled anyway
    assert b.episodes.episode.state is State.STABLE


@pytest.mark.parametrize("ends", [True, False])
def test_a_round_no_shorter_than_the_one_before_ends_the_episode(
        records: tuple[pa.Table, pa.Table], ends: bool) -> None:
    """The stable output no longer catches up (its lag under the episode's load is above
    the bound): a round that took ``CONVERGED`` of the one before or more ends it; one
    clearly shorter does not."""
    b, k_x = in_stabilization(records)
    assert b.episodes is not None
    first = 10 * k_x
    now = 2.0
    assert b.episodes.caught_up(now, []) is None  # round 1 begins
    now += first
    b.egress.progress = type(b.egress.progress)(b.ingress.next_isn - 1, 0)
    assert b.episodes.caught_up(now, []) is None  # round 2 begins
    now += first * (CONVERGED + (0.01 if ends else -0.01))
    assert (b.episodes.caught_up(now, []) is not None) == ends


def test_a_sites_merge_opens_an_episode_that_heals_when_the_stable_output_moves(
        records: tuple[pa.Table, pa.Table]) -> None:
    """Both sources speak (no input episode); a last-stage site's merge released rows by the
    delay bound (``merge_waits.py``): its first tentative rows, of the episode after the last
    reconciled, open the episode at the stable output's progress. The ingress sends nothing
    for it. The stable output moving on heals it (the heal point: the last SN handed out),
    and once the output passes that point the egress reconciles as for a cut source."""
    views, clicks = records
    b = boundary_for(tiny_union_plan(), 2, eventual=Eventual(1.0))
    b.handle(Input(batch=views.slice(0, 10).to_batches()[0], now=0.0, stream=VIEWS),
             Input(batch=clicks.slice(0, 10).to_batches()[0], now=0.0, stream=CLICKS))
    assert b.episodes is not None
    ep = b.episodes.episode
    schema = b.plan.output_schema.append(pa.field(SRC, pa.int32(), nullable=False))
    row = {f.name: 0 for f in schema}
    row.update({SN: 7, SNM: 0, T0: 0.0})
    rows = pa.RecordBatch.from_pylist([row], schema=schema)
    n = len(b.plan.stages)
    assert b.handle(FromSite(slot=1, message=Tentative(n, 2, rows, 7, 0), now=0.5)) == []
    got = b.handle(FromSite(slot=1, message=Tentative(n, 1, rows, 7, 0), now=0.5))
    assert [(d.op, d.batch.num_rows) for d in got if isinstance(d, Deliver)] == [
        ("tentative", 1)]
    assert ep.state is State.UPSTREAM_FAILURE and ep.epoch == 1
    assert not b.episodes.input_failed
    assert ep.base == b.egress.progress.sn and b.egress.holding == ep.base
    assert tentative(b.handle(Tick(now=0.8))) == []  # the input is whole: nothing from it
    assert ep.state is State.UPSTREAM_FAILURE
    b.controller.view = View(number=1, members={s: SiteAddress(site=s, attempt=0, host="h",
                                                               port=1, pid=1)
                                                for s in range(4)})
    b.egress.progress = type(b.egress.progress)(ep.base + 5, 0)  # the stable output moved
    done = b._reconcile(b.egress.progress, 0.9)
    assert ep.heal == b.ingress.next_isn - 1
    assert [(d.op, d.batch.num_rows) for d in done if isinstance(d, Deliver)] == [
        ("undo", 0), ("rec_done", 0)]
    assert [(a.site, a.message) for a in done if isinstance(a, Outgoing)] == [
        (s, Reconciled(1)) for s in range(4)]
    assert ep.state is State.STABLE and b.egress.holding is None


@pytest.mark.parametrize("mode", ["process", "suspend"])
def test_input_that_came_while_suspended_is_first_output_by_its_correction(
        records: tuple[pa.Table, pa.Table], mode: Mode) -> None:
    """``suspend`` sends nothing new during stabilization: the clicks that come then go out
    only stably, held as corrections, so the reconciliation's delivery marks them as a
    first output (the availability bound counts them); ``process`` sends them
    tentatively, and a correction replaces a tentative row where one of its partition
    reached the output, and is the first output where none did (a stalled stage)."""
    views, clicks = records
    b, _ = opened(records, mode)
    assert b.episodes is not None
    ep = b.episodes.episode
    b.handle(Input(batch=views.slice(10, 40).to_batches()[0], now=1.4, stream=VIEWS))
    assert ep.state is State.STABILIZATION and ep.heal is not None
    heal = ep.heal
    out = b.handle(Input(batch=clicks.slice(20, 10).to_batches()[0], now=1.5, stream=CLICKS),
                   Input(batch=views.slice(50, 10).to_batches()[0], now=1.5, stream=VIEWS))
    assert b.ingress.next_isn - 1 > heal  # new input released stably
    assert bool(tentative(out)) == (mode == "process")
    b.egress.progress = type(b.egress.progress)(b.ingress.next_isn - 1, 0)
    b.controller.view = View(number=1, members={s: SiteAddress(site=s, attempt=0, host="h",
                                                                port=1, pid=1)
                                                 for s in range(4)})
    schema = b.plan.output_schema.append(pa.field(SRC, pa.int32(), nullable=False))
    zero = {f.name: 0 for f in schema}
    if mode == "process":  # the tentative rows of partition 2's share reach the output
        row = pa.RecordBatch.from_pylist([zero | {SN: TENTATIVE_BASE, T0: 1.5, SRC: 2}],
                                         schema=schema)
        b.handle(FromSite(slot=0, message=Tentative(len(b.plan.stages), ep.epoch, row,
                                                    TENTATIVE_BASE, 0), now=1.8))
    b.egress.corrections.append(pa.RecordBatch.from_pylist(
        [zero | {SN: heal + 1, T0: 1.5, SRC: 2}, zero | {SN: heal + 2, T0: 1.5, SRC: 5}],
        schema=schema))
    # (the stable output's lag, 0.5 s, is within k X: ``process`` reconciles at once too)
    done = [d for d in b._reconcile(b.egress.progress, 2.0) if isinstance(d, Deliver)]
    (fix,) = [d for d in done if d.correction]
    assert SRC not in fix.batch.schema.names
    # suspend: all came after the heal point, unsent; process: partition 5's rows reached
    # the output tentatively in no row, partition 2's did
    assert fix.first is not None
    assert fix.first.tolist() == ([True, True] if mode == "suspend" else [False, True])


def test_the_egress_merge_adds_nothing_to_an_episode_of_the_input(
        records: tuple[pa.Table, pa.Table], monkeypatch: pytest.MonkeyPatch) -> None:
    """While the input's episode is open, the egress's merge releases nothing by the delay
    bound: every record went tentatively already, and the rows it holds are the stable
    redo (corrections); its released rows would reach the output a second time, as late
    as the cut was long. A merge's own episode (the input whole) releases them."""
    b, _ = opened(records)
    eps = b.episodes
    assert eps is not None and eps.input_failed
    rows = pa.RecordBatch.from_pylist([{f.name: 0 for f in b.plan.output_schema}],
                                      schema=b.plan.output_schema)
    all_due = np.ones(b.plan.partitions, dtype=bool)
    monkeypatch.setattr(eps.waits, "look", lambda now: all_due)
    monkeypatch.setattr(eps.waits, "feed", lambda go, now: (rows, 0, 0))
    assert eps.merge_due(5.0) is None
    eps.input_failed = False  # a merge's episode: the egress's merge releases
    got = eps.merge_due(5.0)
    assert got is not None and got.num_rows == 1


def test_the_host_ticks_when_the_delay_bound_falls_due(
        records: tuple[pa.Table, pa.Table]) -> None:
    """Views and clicks heard at 0 s, clicks again at 0.5 s, X = 1 s: the next judgment
    that can change anything without input is at 1.0 s (views silent for X, the oldest held
    record X old). A tick then opens the episode, not one a period later; after it, what
    falls due next is clicks' silence at 1.5 s. Strict runs never ask for an early tick."""
    views, clicks = records
    b = boundary_for(tiny_union_plan(), 2, eventual=Eventual(1.0))
    assert b.next_due() is None  # no input yet: nothing can fall due
    b.handle(Input(batch=views.slice(0, 10).to_batches()[0], now=0.0, stream=VIEWS),
             Input(batch=clicks.slice(0, 10).to_batches()[0], now=0.0, stream=CLICKS),
             Input(batch=clicks.slice(10, 10).to_batches()[0], now=0.5, stream=CLICKS))
    assert b.next_due() == 1.0
    out = b.handle(Tick(now=1.0))
    assert b.episodes is not None and b.episodes.episode.state is State.UPSTREAM_FAILURE
    assert tentative(out)
    assert b.next_due() == 1.5
    strict = boundary_for(tiny_union_plan(), 2)
    strict.handle(Input(batch=views.slice(0, 10).to_batches()[0], now=0.0, stream=VIEWS))
    assert strict.next_due() is None


def test_a_record_held_for_the_bound_opens_the_episode_though_its_source_spoke_since(
        records: tuple[pa.Table, pa.Table]) -> None:
    """SUnion's rule: clicks' last records (at 0.3 s) do not pass the views that came at
    0 s, and then clicks stop. Those views have waited X at 1.0 s: the episode opens then,
    with clicks failed, and they go tentatively; clicks counting as silent only X after
    they last spoke (1.3 s) would have held them 0.3 s past the bound."""
    views, clicks = records
    b = boundary_for(tiny_union_plan(), 2, eventual=Eventual(1.0, "process"))
    b.handle(Input(batch=views.slice(0, 10).to_batches()[0], now=0.0, stream=VIEWS),
             Input(batch=clicks.slice(0, 3).to_batches()[0], now=0.0, stream=CLICKS),
             Input(batch=clicks.slice(3, 1).to_batches()[0], now=0.3, stream=CLICKS))
    for k, t in enumerate((0.3, 0.6, 0.9)):
        b.handle(Input(batch=views.slice(10 + 5 * k, 5).to_batches()[0], now=t, stream=VIEWS))
    assert b.episodes is not None and b.next_due() == 1.0
    assert tentative(b.handle(Tick(now=0.99))) == []
    assert b.episodes.episode.state is State.STABLE
    held = b.sequencer.held_total()
    out = tentative(b.handle(Tick(now=1.0)))
    ep = b.episodes.episode
    assert ep.state is State.UPSTREAM_FAILURE and ep.failed == frozenset({CLICKS})
    rows = pa.Table.from_batches([o.message.rows for o in out if o.message.rows is not None])
    assert rows.num_rows == held == 29
    assert set(rows.column(T0).to_pylist()) == {0.0, 0.3, 0.6, 0.9}


def test_delay_ticks_when_its_next_record_has_waited_the_bound(
        records: tuple[pa.Table, pa.Table]) -> None:
    """``delay`` holds each record of an open episode until it has waited X: clicks at
    1.1 s fall due at 2.1 s, before clicks' silence (2.3 s), and a tick then sends them
    (with the periodic tick alone they could wait up to a period longer); then the clicks
    of 1.3 s are due at 2.3 s."""
    views, clicks = records
    b = boundary_for(tiny_union_plan(), 2, eventual=Eventual(1.0, "delay"))
    b.handle(Input(batch=views.slice(0, 10).to_batches()[0], now=0.0, stream=VIEWS),
             Input(batch=clicks.slice(0, 10).to_batches()[0], now=0.0, stream=CLICKS))
    b.handle(Tick(now=1.0))
    assert b.episodes is not None and b.episodes.episode.state is State.UPSTREAM_FAILURE
    early = tentative(b.handle(
        Input(batch=clicks.slice(10, 10).to_batches()[0], now=1.1, stream=CLICKS)))
    # (only records of 0 s, which the clicks of 1.1 s made certain: they waited X already)
    assert {t for o in early if o.message.rows is not None
            for t in o.message.rows.column(T0).to_pylist()} <= {0.0}
    b.handle(Input(batch=clicks.slice(20, 10).to_batches()[0], now=1.3, stream=CLICKS))
    assert b.next_due() == pytest.approx(2.1)
    out = tentative(b.handle(Tick(now=2.1)))
    rows = pa.Table.from_batches([o.message.rows for o in out if o.message.rows is not None])
    assert set(rows.column(T0).to_pylist()) == {1.1}
    assert b.next_due() == pytest.approx(2.3)


def test_the_heal_sends_what_delay_held_ahead_of_the_stable_backlog(
        records: tuple[pa.Table, pa.Table]) -> None:
    """At the heal the stable release is the whole backlog of the episode, and ``delay``
    still holds the records that have not waited X (clicks of 0.5 s, at 1.4 s): they go
    tentatively at once (stabilization does not delay), and ahead of the stable frames
    released in the same step, so that no site reads them after the backlog."""
    views, _ = records
    b, _ = opened(records, "delay")
    out = b.handle(Input(batch=views.slice(10, 40).to_batches()[0], now=1.4, stream=VIEWS))
    assert b.episodes is not None and b.episodes.episode.state is State.STABILIZATION
    kinds = [type(a.message) for a in out if isinstance(a, Outgoing)]
    assert Data in kinds and Tentative in kinds
    assert kinds == sorted(kinds, key=lambda k: k is not Tentative)  # every Tentative first
    sent = [t for o in tentative(out) if o.message.rows is not None
            for t in o.message.rows.column(T0).to_pylist()]
    assert sorted(sent) == [0.5, 1.4]  # held by delay, and new input of the stabilization
