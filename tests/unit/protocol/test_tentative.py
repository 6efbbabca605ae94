"""A site's tentative branches (``protocol/tentative.py``), driven exactly: the ingress's
tentative rows for ``tiny_union_plan`` (one stage: windows per page, to the egress) reach the
site holding the first copy of their partitions; the site forks those partitions into a
branch, closes the windows the tentative watermark passes there, and sends the result to
the egress marked with its episode; the stable state is untouched; ``Reconciled`` drops the
branch, and a later row of that episode is ignored."""

from __future__ import annotations

import copy

import pyarrow as pa

from sparkflux.control.boundary import Input, boundary_for
from sparkflux.control.events import Tick
from sparkflux.dataflow.placement import DRIVER, NOWHERE, Layout
from sparkflux.protocol.consistency import TENTATIVE_BASE, Eventual
from sparkflux.protocol.messages import Outgoing, Reconciled, Tentative
from sparkflux.protocol.site import Received, SiteCore
from sparkflux.protocol.tentative import MERGE, Branches, tentative_sends
from sparkflux.sim.workload import tiny_union_plan, tiny_union_records


def ingress_tentative() -> list[Outgoing]:
    """The tentative rows of an episode where views fell silent and clicks went on."""
    views, clicks = tiny_union_records()
    b = boundary_for(tiny_union_plan(), 2, eventual=Eventual(1.0))
    b.handle(Input(batch=views.slice(0, 5).to_batches()[0], now=0.0, stream=0),
             Input(batch=clicks.slice(0, 150).to_batches()[0], now=0.5, stream=1),
             Input(batch=clicks.slice(150).to_batches()[0], now=1.2, stream=1))
    return [o for o in b.handle(Tick(now=1.6))
            if isinstance(o, Outgoing) and isinstance(o.message, Tentative)]


def test_a_site_forks_its_partitions_and_sends_the_branch_output_to_the_egress() -> None:
    sends = ingress_tentative()
    assert sends, "the episode sent nothing"
    to0 = next(o.message for o in sends if o.site == 0)
    assert to0.rows is not None and to0.rows.num_rows
    plan = tiny_union_plan()
    core = SiteCore(0, plan, Layout(plan.sites, plan.partitions, 2))
    assert not core.tentative_open  # (the host's passes are long)
    program = plan.stages[0].program
    before = [copy.deepcopy(op.get_partition_state(q)) for op in program.operators
              for q in range(plan.partitions)]
    out = core.handle(Received([(DRIVER, to0)]))
    after = [op.get_partition_state(q) for op in program.operators
             for q in range(plan.partitions)]
    assert repr(before) == repr(after)  # no tentative row reached the stable state
    assert len(out) == 1 and out[0].site == DRIVER
    msg = out[0].message
    assert isinstance(msg, Tentative) and (msg.stage, msg.epoch) == (1, 1)
    assert msg.rows is not None and msg.rows.num_rows  # windows the claim closed
    assert (msg.rows.column("_sn").to_numpy() >= TENTATIVE_BASE).all()
    assert msg.wm <= to0.wm
    branches = core._branches
    assert branches is not None
    # forked: the partitions site 0 holds as their first copy (0 and 4 of 8 on 4 sites)
    assert branches.forked == {0: {0, 4}}
    assert branches.rows_in == to0.rows.num_rows
    assert core.tentative_open  # a branch runs: the host keeps its passes short
    core.handle(Received([(DRIVER, Reconciled(1))]))
    assert not branches.programs and not branches.forked
    assert not core.tentative_open
    assert core.handle(Received([(DRIVER, to0)])) == []  # the episode is over


def test_rows_go_to_the_first_live_copy_and_every_such_site_hears_the_claim() -> None:
    layout = Layout(4, 8, 2)
    first = layout.first_live({1})  # site 1 dead: its first copies' next copy is on site 2
    assert first.tolist() == [0, 2, 2, 3, 0, 2, 2, 3]
    schema = pa.schema([pa.field("_part", pa.int32()), pa.field("x", pa.int64())])
    rows = pa.RecordBatch.from_arrays([pa.array([1, 3, 5], pa.int32()),
                                       pa.array([10, 30, 50])], schema=schema)
    out = tentative_sends(rows, first, 2, 7, 99, 5)
    assert [(o.site, None if o.message.rows is None else o.message.rows.column("x").to_pylist())
            for o in out] == [(0, None), (2, [10, 50]), (3, [30])]
    assert {(o.message.stage, o.message.epoch, o.message.sn, o.message.wm)
            for o in out} == {(2, 7, 99, 5)}
    assert (layout.first_live(range(4)) == NOWHERE).all()  # no live copy: nowhere


def test_an_input_episode_leaves_the_merges_out_and_a_reconciled_one_is_counted() -> None:
    """Tentative rows numbered apart mark the episode as the input's: the site's merges add
    nothing to it (``SiteCore.clock``); ``Reconciled`` ends it, and a site that had no
    branch yet counts it too (its next episode is the one after)."""
    plan = tiny_union_plan()
    to0 = next(o.message for o in ingress_tentative() if o.site == 0)
    core = SiteCore(0, plan, Layout(plan.sites, plan.partitions, 2))
    core.handle(Received([(DRIVER, to0)]))
    assert core._branches is not None and core._branches.from_input
    core.handle(Received([(DRIVER, Reconciled(1))]))
    assert not core._branches.from_input and core._branches.closed == 1
    other = SiteCore(1, plan, Layout(plan.sites, plan.partitions, 2))
    other.handle(Received([(DRIVER, Reconciled(3))]))
    assert other._branches is not None and other._branches.closed == 3


def test_a_merges_claim_in_stable_sns_does_not_hold_back_the_inputs_tentative_rows() -> None:
    """A site's merge may release rows by the delay bound (stable SNs, claim in stable SNs)
    just before the input's tentative rows (numbered apart) reach the site: the episode is
    then the input's, and the branch's claim is the input's alone. Were the merge's claim
    kept, the lowest claim would stay in stable SNs, below every tentative row, and the
    branch would hold them all until the reconciliation (each new message sorting what it
    holds again)."""
    plan = tiny_union_plan()
    layout = Layout(plan.sites, plan.partitions, 2)
    to0 = next(o.message for o in ingress_tentative() if o.site == 0)
    want = SiteCore(0, plan, layout).handle(Received([(DRIVER, to0)]))
    core = SiteCore(0, plan, layout)
    core._branches = Branches()
    mine = layout.first_live(set()) == 0
    assert core._branches.feed(0, 1, None, 3, 0, MERGE, plan.stages[0].program, mine,
                               mine) is not None
    got = core.handle(Received([(DRIVER, to0)]))
    assert len(got) == len(want) == 1
    g, w = got[0].message, want[0].message
    assert isinstance(g, Tentative) and isinstance(w, Tentative)
    assert w.rows is not None and w.rows.num_rows
    assert g.rows is not None and g.rows.to_pylist() == w.rows.to_pylist()
    assert (g.sn, g.wm) == (w.sn, w.wm)
