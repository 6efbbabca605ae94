"""FH-Cons (``protocol/consumer.py``) driven by hand: acknowledge on receipt to the other
replicas, release in SN order up to the lowest progress over the input streams, ignore a
sender that is not this replica's, and ``reverse`` to the survivor of a failed sender.

Consumer partitions 0 and 1, replica 0 of each; producers p = 0, 1 (replica 0 on site 1,
replica 1 on site 3) and p = 2 (site 2, site 4)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.model.progress import NO_PROGRESS
from sparkflux.model.schema import PART, SN, SNM
from sparkflux.protocol.consumer import ConsumerSet, PartitionLost
from sparkflux.protocol.messages import SRC, Ack, Data, Reverse, Streams

SCHEMA = pa.schema([pa.field(SN, pa.int64()), pa.field(SNM, pa.int64()),
                    pa.field(PART, pa.int32()), pa.field(SRC, pa.int32())])
SITE_OF = {0: 1, 1: 1, 2: 2}  # producer partition -> the site of its replica 0


def consumers() -> ConsumerSet:
    producer_site = np.array([[1, 3], [1, 3], [2, 4]], np.int32)
    return ConsumerSet(1, {0: 0, 1: 0}, producer_site, np.zeros((2, 3), np.int8),
                       np.ones((2, 3), np.int8), SCHEMA)


def frame(p: int, upto: int, rows: list[tuple[int, int]] = ()) -> Data:
    """Producer p's progress ``upto`` on its streams to q = 0, 1; ``rows`` as (q, sn)."""
    st = Streams(p=np.array([p, p], np.int32), r=np.zeros(2, np.int8),
                 q=np.array([0, 1], np.int32), sn=np.full(2, upto, np.int64),
                 wm=np.full(2, upto, np.int64))
    batch = None
    if rows:
        batch = pa.record_batch([pa.array([r[1] for r in rows], pa.int64()),
                                 pa.array([0] * len(rows), pa.int64()),
                                 pa.array([r[0] for r in rows], pa.int32()),
                                 pa.array([p] * len(rows), pa.int32())], schema=SCHEMA)
    return Data(1, st, batch)


def acks(outs: list) -> list[tuple[int, int, int, int, int]]:
    """(site, p, q, c, upto) of every acknowledgement."""
    got = []
    for o in outs:
        assert isinstance(o.message, Ack) and o.message.stage == 1
        m = o.message
        got += [(o.site, *map(int, e)) for e in zip(m.p, m.q, m.c, m.upto, strict=True)]
    return sorted(got)


def test_a_frame_is_acknowledged_at_once_to_the_other_replica_of_its_producer() -> None:
    c = consumers()
    assert acks(c.on_data(frame(2, 7, [(0, 4)]), 2)) == [(4, 2, 0, 0, 7), (4, 2, 1, 0, 7)]
    assert c.rows_in == 1 and c.progress_sn[:, 2].tolist() == [7, 7]


def test_rows_are_released_in_sn_order_up_to_the_lowest_progress() -> None:
    c = consumers()
    c.on_data(frame(0, 10, [(0, 9), (1, 3)]), 1)
    c.on_data(frame(2, 5, [(0, 4), (1, 12)]), 2)
    assert c.release() is None  # p = 1 has said nothing: no frontier yet
    c.on_data(frame(1, 8, [(0, 6)]), 1)
    rows, f_sn, _ = c.release()
    assert f_sn.tolist() == [5, 5]
    assert list(zip(rows.column(SN).to_pylist(), rows.column(PART).to_pylist(),
                    strict=True)) == [(3, 1), (4, 0)]
    assert c.release() is None  # nothing moved
    c.on_data(frame(2, 20), 2)
    rows, f_sn, _ = c.release()
    assert f_sn.tolist() == [8, 8] and rows.column(SN).to_pylist() == [6]
    assert c.released_sn.tolist() == [8, 8]


def test_a_limited_release_stops_at_the_limit_th_ready_row_and_says_more_is_ready() -> None:
    c = consumers()
    c.on_data(frame(0, 30, [(0, 2), (1, 5), (0, 9), (1, 11)]), 1)
    c.on_data(frame(1, 30, [(0, 3), (1, 7)]), 1)
    c.on_data(frame(2, 10, [(0, 20)]), 2)  # SN 20 is above p = 2's progress: not ready
    rows, f_sn, _ = c.release(limit=3)
    assert rows.column(SN).to_pylist() == [2, 3, 5] and f_sn.tolist() == [5, 5]
    assert c.backlog
    rows, f_sn, _ = c.release(limit=3)  # three ready rows left: no longer held back
    assert rows.column(SN).to_pylist() == [7, 9] and f_sn.tolist() == [10, 10]
    assert not c.backlog
    c.on_data(frame(2, 30), 2)
    rows, _, _ = c.release(limit=3)
    assert rows.column(SN).to_pylist() == [11, 20] and not c.backlog


def test_frames_from_a_site_that_is_not_the_sender_are_ignored() -> None:
    c = consumers()
    assert c.on_data(frame(2, 7, [(0, 4)]), 4) == []  # replica 1 of p = 2 is not read from
    assert c.rows_in == 0 and (c.progress_sn == NO_PROGRESS).all()


def test_a_failed_sender_is_reversed_to_its_survivor_from_what_was_received() -> None:
    c = consumers()
    c.on_data(frame(0, 10), 1)
    dead = np.zeros((3, 2), bool)
    dead[[0, 1], 0] = True  # site 1 failed: replica 0 of p = 0 and p = 1
    (rev,) = c.on_fail(dead)
    assert rev.site == 3 and isinstance(rev.message, Reverse)
    m = rev.message
    assert sorted(zip(m.p.tolist(), m.r.tolist(), m.q.tolist(), m.c.tolist(),
                      m.floor.tolist(), strict=True)) == [
        (0, 1, 0, 0, 10), (0, 1, 1, 0, 10), (1, 1, 0, 0, NO_PROGRESS),
        (1, 1, 1, 0, NO_PROGRESS)]
    assert c.sender[:, :2].tolist() == [[1, 1], [1, 1]]
    # from now on the survivor's frames are taken, and nothing is acknowledged to the dead
    survivor = Data(1, Streams(p=np.array([0, 0], np.int32), r=np.ones(2, np.int8),
                               q=np.array([0, 1], np.int32), sn=np.full(2, 12),
                               wm=np.full(2, 12)), None)
    assert c.on_data(survivor, 3) == []
    assert c.progress_sn[:, 0].tolist() == [12, 12]


def test_losing_every_replica_of_a_producer_is_an_error() -> None:
    c = consumers()
    dead = np.zeros((3, 2), bool)
    dead[2] = True
    with pytest.raises(PartitionLost, match="every replica of partition 2 of stage 0 failed"):
        c.on_fail(dead)


def test_a_cut_holds_the_release_there_and_the_rest_follows() -> None:
    def fed() -> ConsumerSet:
        c = consumers()
        c.on_data(frame(0, 4, [(0, 3)]), 1)
        c.on_data(frame(1, 6, [(0, 5)]), 1)
        c.on_data(frame(2, 6, [(1, 6)]), 2)
        c.on_data(frame(0, 10, [(0, 7), (1, 9)]), 1)
        c.on_data(frame(1, 12, [(1, 11)]), 1)
        c.on_data(frame(2, 10), 2)  # every frontier at 10 now
        return c

    c, twin = fed(), fed()
    cut = np.array([6, 6], np.int64)  # a checkpoint at input SN 6
    rows, f_sn, f_wm = c.release(cut)
    assert f_sn.tolist() == [6, 6] and rows.column(SN).to_pylist() == [3, 5, 6]
    # the watermark that holds up to the cut: p = 0's claim 4 is the latest at or below it
    assert f_wm.tolist() == [4, 4]
    assert c.released_sn.tolist() == [6, 6]
    assert c.release(cut) is None  # held at the cut: nothing more
    rows, f_sn, f_wm = c.release()  # the cut taken: the rest of the pass goes on
    assert f_sn.tolist() == [10, 10] and rows.column(SN).to_pylist() == [7, 9]
    assert c.release() is None
    # ... ending where a consumer that was never cut ends
    t_rows, t_sn, t_wm = twin.release()
    assert t_sn.tolist() == f_sn.tolist() and t_wm.tolist() == f_wm.tolist()
    assert t_rows.column(SN).to_pylist() == [3, 5, 6, 7, 9]


def test_a_spilled_partitions_pending_rows_are_taken_out_and_put_back() -> None:
    c = consumers()
    c.on_data(frame(0, 10, [(0, 9), (1, 3), (0, 4)]), 1)
    c.on_data(frame(1, 10, [(1, 7)]), 1)
    taken = c.take_pending({0})
    assert list(taken) == [0] and taken[0].column(SN).to_pylist() == [9, 4]
    assert c.progress_sn[0].tolist()[:2] == [10, 10]  # still received and acknowledged
    assert c.take_pending({0}) == {}
    c.on_data(frame(2, 10), 2)
    rows, _, _ = c.release(np.array([NO_PROGRESS, 10]))  # partition 0 held (on disk)
    assert rows.column(SN).to_pylist() == [3, 7]
    c.put_pending(taken[0])
    rows, _, _ = c.release()
    assert rows.column(SN).to_pylist() == [4, 9] and rows.column(PART).to_pylist() == [0, 0]
