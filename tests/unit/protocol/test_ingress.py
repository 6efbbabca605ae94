"""The ingress (``protocol/ingress.py``) driven by hand: dense ISNs, each record to every
replica of its first-stage partition with the progress of every stream, kept until every
replica acknowledged it (``ack_all`` on a failure), a move's ``retaining``, the end of input.

The tiny workload: 4 sites, 8 partitions, 2 replicas; replica r of partition q on site
(q + r) % 4; the plan drops records with ``dst == 3`` before the first exchange."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.dataflow.placement import NOWHERE, Layout
from sparkflux.dataflow.ports import encode_source, source_rows_schema
from sparkflux.model.progress import END_OF_STREAM, NO_WATERMARK
from sparkflux.model.schema import PART, SN
from sparkflux.protocol.ingress import Ingress
from sparkflux.protocol.messages import Ack, Data, Outgoing, Retaining
from sparkflux.sim.workload import tiny_plan

SITES, PARTITIONS = 4, 8


def ten_records() -> tuple[Ingress, pa.RecordBatch]:
    plan, batches = tiny_plan()
    ports = plan.ingress.in_ports
    rows = encode_source(ports, source_rows_schema(ports), ports[0], batches[0].slice(0, 10))
    return Ingress(plan, Layout(SITES, PARTITIONS, 2)), rows


def sent(outs: list[Outgoing]) -> dict[int, list[tuple[int, int]]]:
    """site -> the (SN, partition) of every row sent to it."""
    got: dict[int, list[tuple[int, int]]] = {}
    for o in outs:
        assert isinstance(o.message, Data) and o.message.stage == 0
        b = o.message.batch
        got[o.site] = [] if b is None else list(zip(b.column(SN).to_pylist(),
                                                    b.column(PART).to_pylist(), strict=True))
    return got


def ack(q: int, c: int, upto: int) -> Ack:
    return Ack(0, p=np.array([0], np.int32), q=np.array([q], np.int32),
               c=np.array([c], np.int8), upto=np.array([upto]))


def test_records_are_numbered_densely_and_sent_to_both_replicas_of_their_partition() -> None:
    ing, rows = ten_records()
    assert rows.column("dst").to_pylist() == [2, 3, 0, 3, 1, 2, 2, 0, 2, 3]
    outs = ing.admit(rows, now=1.0, watermark=5)
    assert (ing.next_isn, ing.records, ing.watermark) == (10, 10, 5)
    # ISNs 1, 3 and 9 (dst 3) are dropped by the plan's filter, but they were numbered
    assert sent(outs) == {0: [(2, 0), (5, 3), (6, 3)], 1: [(2, 0), (4, 1)],
                          2: [(0, 2), (4, 1), (7, 2), (8, 6)],
                          3: [(0, 2), (5, 3), (6, 3), (7, 2), (8, 6)]}
    for o in outs:  # progress on every stream the site hosts, rows or not
        st = o.message.streams
        hosted = sorted(q for q in range(PARTITIONS) if o.site in (q % 4, (q + 1) % 4))
        assert sorted(st.q.tolist()) == hosted
        assert st.p.tolist() == [0] * 4 and st.r.tolist() == [0] * 4
        assert st.sn.tolist() == [9] * 4 and st.wm.tolist() == [5] * 4
    assert ing.buffered() == 7
    assert ing.unacknowledged() == 10 and ing.slowest() == (-1, 0, 0)


def test_rows_are_kept_until_every_replica_has_acknowledged_them() -> None:
    ing, rows = ten_records()
    ing.admit(rows, now=1.0, watermark=5)
    for q in range(PARTITIONS):
        ing.on_ack(ack(q, 0, 9))
    assert ing.buffered() == 7 and ing.unacknowledged() == 10
    assert ing.slowest() == (-1, 0, 1)  # the first replica 1 that has acknowledged nothing
    for q in range(PARTITIONS):
        ing.on_ack(ack(q, 1, 9))
    assert ing.buffered() == 0 and ing.unacknowledged() == 0 and ing.slowest() == (9, 0, 0)


def test_a_failed_site_no_longer_holds_the_buffer_back() -> None:
    ing, rows = ten_records()
    ing.admit(rows, now=1.0, watermark=5)
    ing.on_fail({1})  # replica 0 of q = 1, 5 and replica 1 of q = 0, 4
    for q in range(PARTITIONS):
        for c in (0, 1):
            if (q + c) % SITES != 1:
                ing.on_ack(ack(q, c, 9))
    assert ing.buffered() == 0 and ing.unacknowledged() == 0


def test_a_move_retains_for_the_new_copy_and_tells_the_survivor() -> None:
    ing, rows = ten_records()
    ing.admit(rows, now=1.0, watermark=5)
    assert ing.on_move(2, 1, 0, epoch=3) == [Outgoing(2, Retaining(0, 2, 1, 3))]
    assert ing.layout.site_of(2, 1) == 0 and ing.epochs[2, 1] == 3
    # survivor: the column copied from (default: the next copy, column 0 on site 1)
    assert ing.on_move(5, 2, 3, epoch=4, survivor=1) == [Outgoing(2, Retaining(0, 5, 2, 4))]
    assert ing.on_move(5, 0, NOWHERE, epoch=5) == []  # a retired copy builds nothing


def test_a_move_with_one_replica_retains_nothing() -> None:
    plan, _ = tiny_plan()
    ing = Ingress(plan, Layout(SITES, PARTITIONS, 1))
    assert ing.on_move(2, 0, 0, epoch=1) == []


def test_the_end_of_input_reaches_every_replica_as_end_of_stream() -> None:
    ing, _ = ten_records()
    assert ing.watermark == NO_WATERMARK
    outs = ing.finish()
    assert ing.ended and sorted(o.site for o in outs) == list(range(SITES))
    for o in outs:
        assert o.message.batch is None
        assert o.message.streams.sn.tolist() == o.message.streams.wm.tolist() == [
            END_OF_STREAM] * 4


def test_a_chunk_takes_as_many_isns_as_its_span() -> None:
    ing, rows = ten_records()
    ing.plan = type("P", (), {"isn_span": "app", "partitions": PARTITIONS})()
    with pytest.raises(ValueError, match="at least one each"):
        ing.admit(rows.set_column(rows.schema.get_field_index("app"), "app",
                                  pa.array(np.zeros(10, np.int32))), 1.0, 0)
