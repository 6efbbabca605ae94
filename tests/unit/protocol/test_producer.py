"""FH-Prod's buffer around moves: rows a producer replica left behind when it was moved away
must not be held again by a later consumer's catch-up (``retain``).

Found in a Spark run with the policy on: after the move of partition 6 off site 2, the
catch-up of its new consumer copy made site 2 hold p6's old rows for that copy, whose fold-in
goes to p6's new site. Eviction is from the front, so everything buffered after them stayed
too: 550K rows on three of four sites after 40 s.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparkflux.model.schema import PART, SN
from sparkflux.protocol.messages import SRC, Ack, Rejoin
from sparkflux.protocol.producer import ProducerBuffer

SCHEMA = pa.schema([pa.field(SN, pa.int64()), pa.field(PART, pa.int32()),
                    pa.field(SRC, pa.int32())])
P, Q, C = 2, 2, 2


def rows(p: int, q: int, sns: list[int]) -> pa.RecordBatch:
    n = len(sns)
    return pa.record_batch([pa.array(sns, pa.int64()), pa.array([q] * n, pa.int32()),
                            pa.array([p] * n, pa.int32())], schema=SCHEMA)


def buffer() -> ProducerBuffer:
    """Producers 0 and 1 (replica 0) hosted here; they send to consumer replica 0 and wait
    for replica 1 of both consumer partitions (sites 1 and 2)."""
    send = np.zeros((P, Q, C), dtype=bool)
    wait = np.zeros((P, Q, C), dtype=bool)
    send[:, :, 0] = True
    wait[:, :, 1] = True
    site = np.array([[1, 2], [1, 2]], dtype=np.int32)
    return ProducerBuffer(1, {0: 0, 1: 0}, site, send, wait, SCHEMA)


def progress(sn: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full(P, sn, dtype=np.int64), np.zeros(P, dtype=np.int64)


def ack(p: int, q: int, c: int, upto: int) -> Ack:
    return Ack(1, np.array([p], np.int32), np.array([q], np.int32), np.array([c], np.int8),
               np.array([upto], np.int64))


def test_rows_of_a_dropped_producer_are_not_held_for_a_later_catch_up() -> None:
    buf = buffer()
    buf.produce(rows(0, 0, [1, 2]), *progress(2))  # the head: held for (q0, c1)
    buf.produce(rows(1, 1, [3, 4]), *progress(4))  # behind it
    buf.drop(1)  # producer 1 moved away: its rows wait for nobody, but sit behind the head
    assert buf.buffered_rows() == 4
    buf.on_retain(1, 0)  # consumer replica (q1, c0) is caught up on another site
    buf.on_ack(ack(0, 0, 1, 2))  # the head is acknowledged
    assert buf.buffered_rows() == 0


def test_retain_holds_the_rows_of_hosted_producers() -> None:
    """The fix must not weaken catch-up: a hosted producer's rows for the new replica stay
    until it acknowledges them, even once the secondary has."""
    buf = buffer()
    buf.produce(rows(0, 1, [1, 2]), *progress(2))
    buf.on_retain(1, 0)
    buf.on_ack(ack(0, 1, 1, 2))
    assert buf.buffered_rows() == 2
    buf.on_ack(ack(0, 1, 0, 2))
    assert buf.buffered_rows() == 0


def test_a_reinstalled_producer_is_held_for_again() -> None:
    buf = buffer()
    buf.drop(1)
    buf.install(1, 0, 0, np.ones((Q, C), dtype=bool))
    buf.produce(rows(1, 1, [5]), *progress(5))
    buf.on_ack(ack(1, 1, 1, 5))
    buf.on_retain(1, 0)
    assert buf.buffered_rows() == 1  # waits for the new (q1, c0)
    buf.on_ack(ack(1, 1, 0, 5))
    assert buf.buffered_rows() == 0


def test_an_ack_for_a_producer_not_hosted_here_is_ignored_and_one_out_of_range_refused() -> None:
    import pytest

    from sparkflux.protocol.errors import ProtocolError

    b = buffer()
    b.drop(1)  # producer 1's copy moved away; a consumer that has not seen the move acks it
    b.on_ack(Ack(1, np.array([0, 1], np.int32), np.array([1, 1], np.int32),
                 np.array([1, 1], np.int8), np.array([7, 9], np.int64)), src=2)
    assert b.acked[b.pi(0), 1, 1] == 7
    assert b.acked[b.pi(1), 1, 1] == -1  # not counted for whatever is installed there later
    with pytest.raises(ProtocolError, match="outside 0..1"):
        b.on_ack(ack(5, 1, 1, 3), src=2)

def test_a_rejoin_for_a_producer_moved_away_is_stale() -> None:
    """Found by the simulator (a moves plan, FIFO links): replica 0 of a partition moves to
    a site and back; the egress's ``rejoin`` for the copy there (its fold-in, after the
    survivor's ``psync``) reaches that site after the second move. Applied, it made the site
    hold the rows that copy had left for an acknowledgement that now goes to its new site,
    and everything buffered behind them with it."""
    buf = buffer()
    buf.produce(rows(1, 0, [1, 2]), *progress(2))  # held for (q0, c1)
    buf.produce(rows(0, 1, [3]), *progress(3))  # behind them
    buf.drop(1)  # producer 1 moved away: its rows wait for nobody
    stale = Rejoin(1, p=np.array([1], np.int32), r=np.array([0], np.int8),
                   q=np.array([0], np.int32), c=np.array([1], np.int8),
                   floor=np.array([0], np.int64), send=np.array([False]),
                   wait=np.array([True]))
    assert buf.on_rejoin(stale) == []
    assert not buf.wait[buf.pi(1)].any()
    buf.on_ack(ack(0, 1, 1, 3))
    assert buf.buffered_rows() == 0
