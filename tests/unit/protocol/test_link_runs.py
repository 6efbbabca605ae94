"""A site's pass takes a link's consecutive frames together (``link_runs``, and FH-Cons'
``on_data`` with ``more``): the same rows, progress and acknowledgements as one at a time."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.model.schema import PART, SN, SNM
from sparkflux.protocol.consumer import ConsumerSet
from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.messages import SRC, Ack, Data, Message, PSync, Streams
from sparkflux.protocol.site import link_runs

SCHEMA = pa.schema([pa.field(SN, pa.int64()), pa.field(SNM, pa.int64()),
                    pa.field(PART, pa.int32()), pa.field(SRC, pa.int32())])
P = 3  # producer partitions 0..2, replica 0 of each on site 1 (p = 0, 1) or site 2 (p = 2)


def frame(stage: int, upto: int, rows: list[tuple[int, int, int]] | None = None) -> Data:
    """Progress ``upto`` on streams p -> q for every p of site 1 and q in {0, 1}; ``rows``
    as (p, q, sn)."""
    p = np.array([0, 0, 1, 1], np.int32)
    q = np.array([0, 1, 0, 1], np.int32)
    st = Streams(p=p, r=np.zeros(4, np.int8), q=q, sn=np.full(4, upto, np.int64),
                 wm=np.full(4, upto, np.int64))
    batch = None
    if rows:
        batch = pa.record_batch([pa.array([r[2] for r in rows], pa.int64()),
                                 pa.array([0] * len(rows), pa.int64()),
                                 pa.array([r[1] for r in rows], pa.int32()),
                                 pa.array([r[0] for r in rows], pa.int32())], schema=SCHEMA)
    return Data(stage, st, batch)


def consumers() -> ConsumerSet:
    """Replica 0 of consumer partitions 0 and 1; every stream from replica 0 of its producer,
    acknowledged to replica 1 (on site 3 for p = 0, 1 and site 4 for p = 2)."""
    producer_site = np.array([[1, 3], [1, 3], [2, 4]], np.int32)
    sender = np.zeros((2, P), np.int8)
    ack_to = np.ones((2, P), np.int8)
    return ConsumerSet(1, {0: 0, 1: 0}, producer_site, sender, ack_to, SCHEMA)


def ack_map(outs: list) -> dict[tuple[int, int, int], int]:
    """(site, p, q) -> the highest SN acknowledged."""
    got: dict[tuple[int, int, int], int] = {}
    for o in outs:
        a = o.message
        assert isinstance(a, Ack)
        for p, q, upto in zip(a.p.tolist(), a.q.tolist(), a.upto.tolist(), strict=True):
            got[(o.site, p, q)] = max(got.get((o.site, p, q), -1), upto)
    return got


def pending(c: ConsumerSet) -> list[tuple[int, int, int]]:
    return sorted((src, q, sn) for b in c.pending for src, q, sn in zip(
        b.column(SRC).to_pylist(), b.column(PART).to_pylist(), b.column(SN).to_pylist(),
        strict=True))


def test_a_links_frames_together_equal_one_at_a_time() -> None:
    frames = [frame(1, 4, [(0, 0, 2), (1, 1, 4)]), frame(1, 6), frame(1, 9, [(0, 1, 8)])]
    one, many = consumers(), consumers()
    acks_one: list = []
    for f in frames:
        acks_one += one.on_data(f, 1)
    acks_many = many.on_data(frames[0], 1, frames[1:])
    assert pending(one) == pending(many) == [(0, 0, 2), (0, 1, 8), (1, 1, 4)]
    assert (one.progress_sn == many.progress_sn).all()
    assert ack_map(acks_one) == ack_map(acks_many) == {
        (3, p, q): 9 for p in (0, 1) for q in (0, 1)}
    assert sum(a.message.p.size for a in acks_many) == 4  # one entry per stream


def test_frames_from_a_replica_that_moved_away_are_still_ignored() -> None:
    c = consumers()
    c.on_data(frame(1, 5, [(0, 0, 5)]), 2, [frame(1, 7, [(1, 0, 6)])])  # not from site 2
    assert pending(c) == [] and (c.progress_sn[:, :2] < 0).all()


def test_a_duplicate_of_earlier_progress_is_still_caught() -> None:
    c = consumers()
    c.on_data(frame(1, 5), 1)
    with pytest.raises(ProtocolError, match="duplicate input"):
        c.on_data(frame(1, 6), 1, [frame(1, 7, [(0, 0, 3)])])


def test_a_row_below_an_earlier_frames_claim_in_the_same_run_is_caught() -> None:
    """The second frame of a run repeats an SN the first one already claimed progress past:
    a duplicate, as it would be one frame at a time."""
    one = consumers()
    one.on_data(frame(1, 10, [(0, 0, 9)]), 1)
    with pytest.raises(ProtocolError, match="duplicate input"):
        one.on_data(frame(1, 11, [(0, 0, 7)]), 1)
    many = consumers()
    with pytest.raises(ProtocolError, match="duplicate input"):
        many.on_data(frame(1, 10, [(0, 0, 9)]), 1, [frame(1, 11, [(0, 0, 7)])])


def test_link_runs_keep_every_links_order() -> None:
    """Data and acks of a link gather by kind and stage until the link sends anything else;
    that message stays between what the link sent before and after it."""
    ps = PSync(1, 0, 0)
    a = Ack(1, np.array([0], np.int32), np.array([0], np.int32), np.array([0], np.int8),
            np.array([1], np.int64))
    items: list[tuple[int, Message]] = [
        (1, frame(1, 1)), (1, a), (2, frame(1, 1)), (1, frame(1, 2)), (1, frame(2, 2)),
        (1, a), (2, ps), (2, frame(1, 3)), (1, frame(2, 3)), (2, frame(1, 4))]
    runs = link_runs(items)
    shape = [(src, [type(m).__name__ + str(getattr(m, "stage", "")) for m in run])
             for src, run in runs]
    assert shape == [(1, ["Data1", "Data1"]), (1, ["Ack1", "Ack1"]), (2, ["Data1"]),
                     (1, ["Data2", "Data2"]), (2, ["PSync1"]), (2, ["Data1", "Data1"])]
    for src in (1, 2):  # each kind of a link's messages keeps its order
        for kind in (Data, Ack, PSync):
            assert [m for s, run in runs if s == src for m in run if isinstance(m, kind)] == \
                [m for s, m in items if s == src and isinstance(m, kind)]
    # the psync stays after the link's earlier frame and before its later ones
    link2 = [id(m) for s, run in runs if s == 2 for m in run]
    assert link2 == [id(m) for s, m in items if s == 2]
