"""A checkpoint's cut in a site's core (``protocol/site.py``, docs/design.md §9): told in-band
after the input at or below it, every partition of every stage writes its part once, at
exactly the cut, in the pass where its frontier reaches it; the output is the same as
without the cut, and a first-stage part is the state of a core that never saw the input
above the cut."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.placement import DRIVER, STORE, Layout
from sparkflux.protocol.ingress import Ingress
from sparkflux.protocol.messages import Cut, Data, StoredPartition
from sparkflux.protocol.site import Received, SiteCore
from sparkflux.runtime.codec import decode_message, encode_message
from sparkflux.sim.workload import tiny_plan

PARTS = 4
CUT_AFTER = 4  # the cut comes after the fifth batch of ten


def fed(cut: bool, upto: int | None = None) -> tuple[SiteCore, list[Any], int]:
    """One site holding every partition, fed the tiny workload in one pass (with the cut
    after batch ``CUT_AFTER``, or only the batches up to ``upto``)."""
    plan, batches = tiny_plan(events=400, batch=40, sites=1, partitions=PARTS)
    layout = Layout(1, PARTS, 1)
    ingress, core = Ingress(plan, layout), SiteCore(0, plan, layout)
    items: list[tuple[int, Any]] = []
    at = -1
    for k, b in enumerate(batches[:upto]):
        rows = b.append_column("_port", pa.array(np.zeros(b.num_rows, np.int16)))
        items += [(DRIVER, o.message) for o in ingress.admit(
            rows, 0.0, int(b.column("ts").to_numpy().max()))]
        if k == CUT_AFTER:
            at = ingress.next_isn - 1
            if cut:
                items.append((DRIVER, Cut(0, 7, at)))
    if upto is None:
        items += [(DRIVER, o.message) for o in ingress.finish()]
    return core, core.handle(Received(items=items)), at


def output(outs: list[Any]) -> list[tuple[int, int]]:
    rows = [o.message.batch for o in outs if o.site == DRIVER and isinstance(o.message, Data)
            and o.message.batch is not None]
    table = pa.Table.from_batches(rows)
    return list(zip(table.column("_sn").to_pylist(), table.column("_snm").to_pylist(),
                    strict=True))


def test_every_partition_writes_its_part_once_at_the_cut() -> None:
    core, outs, at = fed(cut=True)
    parts = [o.message for o in outs if isinstance(o.message, StoredPartition)]
    assert all(o.site == STORE for o in outs if isinstance(o.message, StoredPartition))
    stages = len(core.plan.stages)
    assert sorted((p.stage, p.q) for p in parts) == [(s, q) for s in range(stages)
                                                     for q in range(PARTS)]
    for p in parts:
        assert p.checkpoint == 7 and p.cut == at
        cons = p.snapshot.cons
        assert cons.released_sn == at and cons.pending is None and (cons.progress_sn == at).all()
        assert p.snapshot.held is None
        assert p.snapshot.out_sn <= at  # an operator holding rows claims less
    assert core.cuts == [None] * stages  # every partition cut: nothing held back any more


def test_the_cut_changes_no_output() -> None:
    _, with_cut, _ = fed(cut=True)
    _, without, _ = fed(cut=False)
    assert output(with_cut) == output(without) and len(output(without)) > 0


def test_a_first_stage_part_is_the_state_of_the_input_at_or_below_the_cut() -> None:
    _, outs, at = fed(cut=True)
    parts = {p.q: p for o in outs if isinstance(p := o.message, StoredPartition)
             and p.stage == 0}
    twin, _, twin_at = fed(cut=False, upto=CUT_AFTER + 1)  # never saw the rest
    assert twin_at == at
    cons = twin.cons[0]
    for q in range(PARTS):
        i = int(cons.index[q])
        assert int(cons.released_sn[i]) == at
        expected = StoredPartition(7, 0, q, at, twin._cut_snapshot(0, q, i, at))
        got = b"".join(bytes(x) for x in encode_message(parts[q]))
        assert got == b"".join(bytes(x) for x in encode_message(expected)), q


def test_a_second_copy_of_the_cut_and_an_older_one_are_ignored() -> None:
    core, _, _ = fed(cut=True)
    assert core.handle(Received(items=[(DRIVER, Cut(0, 7, 10)), (DRIVER, Cut(0, 6, 10))])) \
        == []
    assert core.last_cut[0] == 7


def test_a_core_restored_from_the_parts_goes_on_with_the_same_output() -> None:
    """A restart: a new core installs the parts (after a round trip through the store's
    encoding), a new ingress numbers on after the cut, and the input after it gives the
    rows above the cut that the uncut run gave, each once; what it produces again at or
    below the cut (an operator's held rows) are rows that run gave too, which the restored
    egress drops."""
    _, outs, at = fed(cut=True)
    parts = {(p.stage, p.q): decode_message(memoryview(b"".join(
        bytes(x) for x in encode_message(p)))) for o in outs
        if isinstance(p := o.message, StoredPartition)}
    plan, batches = tiny_plan(events=400, batch=40, sites=1, partitions=PARTS)
    layout = Layout(1, PARTS, 1)
    core, ingress = SiteCore(0, plan, layout), Ingress(plan, layout)
    core.restore(parts)
    assert core.last_cut == [7] * len(plan.stages)
    wm = max(int(b.column("ts").to_numpy().max()) for b in batches[:CUT_AFTER + 1])
    ingress.restore(at + 1, at + 1, wm)
    items: list[tuple[int, Any]] = []
    for b in batches[CUT_AFTER + 1:]:
        rows = b.append_column("_port", pa.array(np.zeros(b.num_rows, np.int16)))
        items += [(DRIVER, o.message) for o in ingress.admit(
            rows, 0.0, int(b.column("ts").to_numpy().max()))]
    items += [(DRIVER, o.message) for o in ingress.finish()]
    again = output(core.handle(Received(items=items)))
    whole = output(outs)
    assert [r for r in again if r[0] > at] == [r for r in whole if r[0] > at]
    assert len([r for r in whole if r[0] > at]) > 0
    assert set(r for r in again if r[0] <= at) <= set(whole)
