"""The egress (``protocol/egress.py``) driven by hand: the last stage's output delivered once,
in SN order, up to the lowest progress; read from replica 0, acknowledged to replica 1;
``reverse`` to the survivor when the replica it reads from fails or moves.

The tiny workload: 4 sites, 8 partitions, 2 replicas; replica r of partition q on site
(q + r) % 4."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.placement import Layout
from sparkflux.model.progress import END_OF_STREAM, NO_PROGRESS
from sparkflux.model.schema import PART, SN
from sparkflux.protocol.egress import Egress
from sparkflux.protocol.messages import SRC, Ack, Data, Outgoing, Reverse, Streams
from sparkflux.sim.workload import tiny_plan

SITES, PARTITIONS, STAGES = 4, 8, 2


def egress(replicas: int = 2) -> Egress:
    return Egress(tiny_plan()[0], Layout(SITES, PARTITIONS, replicas))


def data(e: Egress, q: int, r: int, sns: list[int], progress: int) -> Data:
    """What replica r of last-stage partition q sends the egress: rows with these SNs."""
    n = len(sns)
    cols = []
    for f in e.cons.schema:
        if f.name == SN:
            cols.append(pa.array(sns, type=f.type))
        elif f.name == PART:
            cols.append(pa.array([0] * n, type=f.type))
        elif f.name == SRC:
            cols.append(pa.array([q] * n, type=f.type))
        elif pa.types.is_floating(f.type) or pa.types.is_integer(f.type):
            cols.append(pa.array(np.zeros(n)).cast(f.type))
        else:
            cols.append(pa.nulls(n, f.type))
    return Data(STAGES, Streams(p=np.array([q], np.int32), r=np.array([r], np.int8),
                                q=np.array([0], np.int32), sn=np.array([progress]),
                                wm=np.array([progress])), pa.RecordBatch.from_arrays(
                                    cols, schema=e.cons.schema))


def acked(outs: list[Outgoing]) -> list[tuple[int, int, int]]:
    """(site, producer partition, SN) of every acknowledgement."""
    got = []
    for o in outs:
        assert isinstance(o.message, Ack) and o.message.stage == STAGES
        got += [(o.site, int(p), int(u)) for p, u in zip(o.message.p, o.message.upto,
                                                         strict=True)]
    return sorted(got)


def test_nothing_is_delivered_until_every_partition_has_progressed() -> None:
    e = egress()
    delivery, outs = e.on_data(data(e, 3, 0, [5, 9], 10), src=3)
    assert delivery is None
    assert acked(outs) == [(0, 3, 10)]  # to replica 1 of partition 3, on site 0
    for q in range(PARTITIONS):
        if q != 3:
            delivery, _ = e.on_data(data(e, q, 0, [], 10), src=q % SITES)
    assert delivery is not None
    assert delivery.batch.column(SN).to_pylist() == [5, 9]
    assert SRC not in delivery.batch.schema.names
    assert delivery.batch.schema.names == e.schema.names
    assert (delivery.progress.sn, e.delivered, e.progress.sn) == (10, 2, 10)


def test_output_merges_in_sn_order_across_partitions() -> None:
    e = egress()
    out = []
    for q in range(PARTITIONS):
        sns = {1: [3, 12], 6: [7], 2: [20]}.get(q, [])
        d, _ = e.on_data(data(e, q, 0, sns, 15 if q != 2 else 25), src=q % SITES)
        out += [] if d is None else d.batch.column(SN).to_pylist()
    assert out == [3, 7, 12] and e.progress.sn == 15  # 20 waits for the others' progress


def test_with_one_replica_nothing_is_acknowledged() -> None:
    e = egress(replicas=1)
    _, outs = e.on_data(data(e, 3, 0, [5], 10), src=3)
    assert outs == []


def test_the_end_of_stream_ends_the_output() -> None:
    e = egress()
    for q in range(PARTITIONS):
        e.on_data(data(e, q, 0, [], END_OF_STREAM), src=q % SITES)
    assert e.ended and e.progress.sn == END_OF_STREAM


def test_a_failure_of_the_replica_read_from_reverses_to_the_survivor() -> None:
    e = egress()
    e.on_data(data(e, 1, 0, [4], 6), src=1)
    (rev,) = e.on_fail({1})  # site 1 held replica 0 of partitions 1 and 5
    assert rev.site == 2 and isinstance(rev.message, Reverse)
    m = rev.message
    assert (m.stage, m.p.tolist(), m.r.tolist(), m.q.tolist(), m.c.tolist(),
            m.floor.tolist()) == (STAGES, [1, 5], [1, 1], [0, 0], [0, 0], [6, NO_PROGRESS])
    # the survivor's rows are taken from now on; a late frame of the dead replica is not
    delivery, outs = e.on_data(data(e, 5, 0, [8], 9), src=1)
    assert outs == [] and delivery is None


def test_a_move_of_the_replica_read_from_reverses_to_the_other_copy() -> None:
    e = egress()
    (rev,) = e.on_move(2, 0, 0)
    assert rev.site == 3 and rev.message.p.tolist() == [2] and rev.message.r.tolist() == [1]
    assert e.layout.site_of(2, 0) == 0
    assert e.on_move(4, 1, 2) == []  # the copy acknowledged to: nothing to reverse


def test_a_stall_report_names_the_copy_read_and_the_copies_acknowledged() -> None:
    """``reads_from``: copy 0 read and copy 1 acknowledged at the start; after copy 0's site
    fails, copy 1 read and nothing acknowledged; a move of copy 0 to site 2 leaves it not
    yet folded in until its ``psync``."""
    e = egress()
    assert e.reads_from(3) == ("it reads it from copy 0 on site 3 and acknowledges to copy 1 "
                               "on site 0")
    e.on_move(3, 0, 2)
    assert e.reads_from(3) == "it reads it from copy 1 on site 0; copy 0 not yet folded in"
    e.on_fail({1})
    assert e.reads_from(5) == "it reads it from copy 1 on site 2"


def test_unordered_output_hands_rows_on_as_they_pass_the_filter() -> None:
    """``--unordered-output``: each partition's rows go at once, in arrival order, though the
    other partitions have not progressed; the progress handed with them stays the merge's
    frontier, which moves as before (with no rows left to release)."""
    e = Egress(tiny_plan()[0], Layout(SITES, PARTITIONS, 2), unordered=True)
    got: list[int] = []
    for q, sns in ((2, [20]), (1, [3, 12]), (6, [7])):
        d, outs = e.on_data(data(e, q, 0, sns, 25 if q == 2 else 15), src=q % SITES)
        assert d is not None and d.progress.sn == NO_PROGRESS
        assert acked(outs) == [((q + 1) % SITES, q, 25 if q == 2 else 15)]
        got += d.batch.column(SN).to_pylist()
    assert got == [20, 3, 12, 7] and e.delivered == 4
    for q in (0, 3, 4, 5, 7):
        d, _ = e.on_data(data(e, q, 0, [], 15), src=q % SITES)
    assert d is not None and d.batch.num_rows == 0 and d.progress.sn == 15
    assert e.delivered == 4
