"""Racing replicas (``--ha race``) in the cores, driven by hand: the roles every party gets
from a racing ``Layout``, a consumer copy taking each stream from both producer copies and
passing the first copy of each row, a failure struck off without ``reverse``, a rebuilt copy
raced again from its ``psync``, the ingress admitting at the fastest copy's pace, and the
garbage collection of stream replicas (``keep``) and their revival.

Consumer partitions 0 and 1, copy 0 of each; producer partitions p = 0, 1 (copy 0 on site 1,
copy 1 on site 3) and p = 2 (site 2, site 4)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.dataflow.placement import Layout
from sparkflux.model.schema import PART, SN
from sparkflux.protocol.consumer import GC_CLAIMS, ConsumerSet, PartitionLost
from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.ingress import RACE_LAG
from sparkflux.protocol.messages import SRC, Ack, Data, PSync, Rejoin, Rejoined, Streams
from sparkflux.protocol.producer import ProducerBuffer
from sparkflux.protocol.roles import (
    RACE,
    consumer_roles,
    egress_roles,
    ingress_roles,
    producer_roles,
)

from .test_consumer import SCHEMA, acks

SITES = np.array([[1, 3], [1, 3], [2, 4]], np.int32)  # [p, r] -> site


def consumers() -> ConsumerSet:
    return ConsumerSet(1, {0: 0, 1: 0}, SITES, np.full((2, 3), RACE, np.int8),
                       np.ones((2, 3, 2), bool), SCHEMA)


def frame(p: int, r: int, upto: int, rows: list[tuple[int, int]] = ()) -> Data:
    """Copy r of producer p: its claim ``upto`` on its streams to q = 0, 1; ``rows`` as
    (q, sn)."""
    st = Streams(p=np.array([p, p], np.int32), r=np.full(2, r, np.int8),
                 q=np.array([0, 1], np.int32), sn=np.full(2, upto, np.int64),
                 wm=np.full(2, upto, np.int64))
    batch = None
    if rows:
        batch = pa.record_batch([pa.array([x[1] for x in rows], pa.int64()),
                                 pa.array([0] * len(rows), pa.int64()),
                                 pa.array([x[0] for x in rows], pa.int32()),
                                 pa.array([p] * len(rows), pa.int32())], schema=SCHEMA)
    return Data(1, st, batch)


def pending(c: ConsumerSet) -> list[tuple[int, int, int]]:
    """(q, p, sn) of every row the merge holds."""
    return sorted((int(q), int(p), int(s)) for b in c.pending for q, p, s in zip(
        b.column(PART).to_pylist(), b.column(SRC).to_pylist(), b.column(SN).to_pylist(),
        strict=True))


def test_a_racing_layout_gives_every_party_the_racing_roles() -> None:
    lay = Layout(4, 4, 2, race=True)  # a spare column too: NOWHERE, dead from the start
    site, send, wait = producer_roles(lay, {0: 0, 3: 1}, to_egress=False)
    there = lay.table() >= 0
    assert (send == there).all() and (wait == there).all() and there.sum() == 8
    _, send, wait = producer_roles(lay, {0: 0, 3: 1}, to_egress=True)
    assert send.all() and wait.all()  # every last-stage copy sends to the egress
    _, sender, ack_to = consumer_roles(lay, {1: 0, 2: 1}, first_stage=False)
    assert (sender == RACE).all() and (ack_to == there).all()
    _, sender, ack_to = consumer_roles(lay, {1: 0}, first_stage=True)
    assert (sender == 0).all()  # the ingress is one producer: nothing to race
    site, sender, ack_to = egress_roles(lay)
    assert (sender == RACE).all() and (ack_to[0] == there).all()
    site, send, wait = ingress_roles(lay)
    assert (send[0] == there).all() and (wait[0] == there).all()
    assert not Layout(4, 4, 2).race and lay.copy().race


def test_both_copies_feed_the_consumer_and_the_first_copy_of_each_row_passes() -> None:
    c = consumers()
    assert c.race
    # copy 1 of p = 0 runs ahead: its rows pass, and the progress goes to both copies
    out = c.on_data(frame(0, 1, 6, [(0, 2), (1, 4), (0, 6)]), 3)
    assert acks(out) == [(1, 0, 0, 0, 6), (1, 0, 1, 0, 6), (3, 0, 0, 0, 6), (3, 0, 1, 0, 6)]
    # copy 0 catches up: rows at or below 6 came already, 8 is new
    c.on_data(frame(0, 0, 8, [(0, 2), (1, 4), (0, 6), (1, 8)]), 1)
    assert pending(c) == [(0, 0, 2), (0, 0, 6), (1, 0, 4), (1, 0, 8)]
    assert c.duplicates == 3 and c.rows_in == 4
    assert c.progress_sn[:, 0].tolist() == [8, 8]


def test_a_copy_that_is_not_where_the_layout_says_is_not_raced() -> None:
    c = consumers()
    c.on_data(frame(0, 1, 6, [(0, 2)]), 2)  # copy 1 of p = 0 lives on site 3, not 2
    assert pending(c) == [] and c.progress_sn[0, 0] < 0


def test_a_row_above_its_frames_claim_stops_the_consumer() -> None:
    with pytest.raises(ProtocolError, match=r"racing copies need every row covered by its "
                                            r"frame's claim; rows of streams \(p, q\) "
                                            r"\[\(0, 1\)\] came above it \(SNs \[9\]\)"):
        consumers().on_data(frame(0, 0, 6, [(0, 2), (1, 9)]), 1)


def answer(rj: Rejoin) -> Rejoined:
    """The producer site's ``Rejoined`` for a ``Rejoin``, ahead of the rows it resends."""
    return Rejoined(rj.stage, p=rj.p, r=rj.r, q=rj.q, c=rj.c)


def test_a_failure_is_struck_off_without_reverse_and_the_last_copy_lost_is_named() -> None:
    c = consumers()
    dead = np.zeros((3, 2), bool)
    dead[0, 1] = dead[1, 1] = True  # site 3
    assert c.on_fail(dead) == []
    assert not c.ack_to[:, :2, 1].any() and c.ack_to[:, 2, 1].all()
    assert acks(c.on_data(frame(0, 0, 5), 1)) == [(1, 0, 0, 0, 5), (1, 0, 1, 0, 5)]
    c.on_data(frame(0, 1, 9, [(0, 7)]), 3)  # a frame the dead copy sent before it died
    assert pending(c) == []
    dead[0, 0] = dead[1, 0] = True  # site 1 too: p = 0 and 1 have no copy left
    with pytest.raises(PartitionLost, match="every replica of partitions 0, 1 of stage 0"):
        c.on_fail(dead)


def test_a_rebuilt_copy_is_raced_from_its_psync_on() -> None:
    c = consumers()
    dead = np.zeros((3, 2), bool)
    dead[2, 1] = True  # site 4 fails: copy 1 of p = 2
    c.on_fail(dead)
    c.rebuilding(dead)  # a standby adopts site 4: the copy starts over empty
    c.on_data(frame(2, 0, 7, [(0, 5)]), 2)
    c.on_data(frame(2, 1, 9, [(0, 8)]), 4)  # not raced before its psync: ignored
    assert pending(c) == [(0, 2, 5)]
    out = c.on_psync(PSync(1, 2, 1, 1))
    assert [o.site for o in out] == [4]
    rj = out[0].message
    assert isinstance(rj, Rejoin)
    assert list(zip(rj.p.tolist(), rj.r.tolist(), rj.q.tolist(), rj.floor.tolist(),
                    rj.send.tolist(), rj.wait.tolist(), strict=True)) == [
        (2, 1, 0, 7, True, True), (2, 1, 1, 7, True, True)]
    c.on_data(frame(2, 1, 9, [(0, 8)]), 4)  # ahead of its ``Rejoined``: not for this copy
    assert pending(c) == [(0, 2, 5)]
    c.on_rejoined(answer(rj), 4)
    c.on_data(frame(2, 1, 9, [(0, 8)]), 4)
    assert pending(c) == [(0, 2, 5), (0, 2, 8)]


def test_a_new_consumer_copy_rejoins_every_complete_producer_copy_to_send_and_wait() -> None:
    c = ConsumerSet(1, {0: 1}, SITES, np.full((1, 3), RACE, np.int8), np.ones((1, 3, 2), bool),
                    SCHEMA, installed=False)
    dead = np.zeros((3, 2), bool)
    dead[1, 0] = True
    c.rebuilding(np.eye(3, 2, k=-2, dtype=bool))  # copy 0 of p = 2 is being rebuilt
    snap = c.snapshot(0)
    snap.progress_sn[:] = [4, 5, 6]
    out = c.install(0, snap, dead)
    got = sorted((o.site, int(p), int(r), int(f), bool(s), bool(w)) for o in out
                 for p, r, f, s, w in zip(o.message.p, o.message.r, o.message.floor,
                                          o.message.send, o.message.wait, strict=True))
    assert got == [(1, 0, 0, 4, True, True), (3, 0, 1, 4, True, True),
                   (3, 1, 1, 5, True, True), (4, 2, 1, 6, True, True)]


def test_the_ingress_admits_at_the_fastest_copys_pace_within_the_lag_bound() -> None:
    from sparkflux.protocol.ingress import Ingress
    from sparkflux.sim.workload import tiny_plan

    plan = tiny_plan(sites=4, partitions=4)[0]
    ing = Ingress(plan, Layout(4, 4, 2, race=True))
    ing.next_isn = 1001  # SNs up to 1000 admitted
    acked = ing.buffer.acked[0]
    acked[:, :2] = 100  # both copies of every partition have 100
    assert ing.unacknowledged() == 900
    acked[:, 0] = 990  # copy 0 of every partition runs ahead
    assert ing.unacknowledged() == max(10, -(-900 // RACE_LAG))
    acked[3, 0] = 400  # partition 3's fastest copy is behind: it sets the pace
    assert ing.unacknowledged() == 600
    flux = Ingress(plan, Layout(4, 4, 2))
    flux.next_isn = 1001
    flux.buffer.acked[0][:, :2] = 990
    flux.buffer.acked[0][2, 1] = 100
    assert flux.unacknowledged() == 900  # Flux-HA waits for its slowest copy


# -- streams out of SN order (an order-insensitive producer stage run in arrival order) -----
def kept(c: ConsumerSet) -> np.ndarray:
    """The keys the filter keeps above the progress (the covered ones dropped)."""
    return c.seen.array(c.progress_sn)


def unordered() -> ConsumerSet:
    return ConsumerSet(1, {0: 0, 1: 0}, SITES, np.full((2, 3), RACE, np.int8),
                       np.ones((2, 3, 2), bool), SCHEMA, unordered=True)


def test_out_of_order_rows_above_the_claim_pass_once_and_are_forgotten_when_covered() -> None:
    c = unordered()
    # copy 1 of p = 0 claims 2 and already sends 7 and 5 (its input ran ahead elsewhere)
    c.on_data(frame(0, 1, 2, [(0, 7), (0, 2), (1, 5)]), 3)
    assert pending(c) == [(0, 0, 2), (0, 0, 7), (1, 0, 5)]
    assert sorted(map(tuple, kept(c)[:, :2].tolist())) == [(0, 7), (3, 5)]  # (qi*P + p, sn)
    # copy 0 brings 5 and 7 again, and 6, with a claim of 6: 5 and 7 came already
    c.on_data(frame(0, 0, 6, [(1, 5), (0, 6), (0, 7)]), 1)
    assert pending(c) == [(0, 0, 2), (0, 0, 6), (0, 0, 7), (1, 0, 5)]
    assert c.duplicates == 2
    # the claim of 6 covers 5 (and 6): only 7 is kept
    assert kept(c)[:, 1].tolist() == [7]
    # copy 1 claims 9 with 6 and 9: 6 is at or below the progress (6), 9 new; 7 forgotten
    c.on_data(frame(0, 1, 9, [(0, 6), (0, 9)]), 3)
    assert pending(c)[-2:] == [(0, 0, 9), (1, 0, 5)] and c.duplicates == 3
    assert kept(c).shape[0] == 0


def test_an_order_insensitive_stage_takes_every_row_with_the_frontier() -> None:
    c = unordered()
    c.on_data(frame(0, 0, 4, [(0, 9), (0, 3)]), 1)
    c.on_data(frame(1, 0, 2, [(1, 2)]), 1)
    c.on_data(frame(2, 0, 7, [(0, 7)]), 2)
    rows, f_sn, _ = c.release_arrived()
    # in arrival order; 9, 3 and 7 above partition 0's frontier (2, p = 1's claim)
    assert rows.column(SN).to_pylist() == [9, 3, 2, 7]
    assert f_sn.tolist() == [2, 2] and c.early == 3
    assert c.pending == [] and c.release_arrived() is None  # nothing new, nothing moved
    c.on_data(frame(1, 0, 5), 1)
    rows, f_sn, _ = c.release_arrived()
    assert rows.num_rows == 0 and f_sn.tolist() == [4, 4]


def test_a_snapshot_carries_the_keys_passed_and_the_new_copy_drops_them_again() -> None:
    c = unordered()
    c.on_data(frame(0, 1, 2, [(0, 7), (1, 5)]), 3)
    c.release_arrived()  # the stage ran 7 and 5 at once: no pending rows move, their keys do
    snap = c.snapshot(0)
    assert snap.pending is None
    assert snap.seen.tolist() == [[0, 7, 0, 0]]  # (p, SN, SNM, port) of partition 0's keys
    new = ConsumerSet(1, {0: 1}, SITES, np.full((1, 3), RACE, np.int8),
                      np.ones((1, 3, 2), bool), SCHEMA, installed=False, unordered=True)
    out = new.install(0, snap, np.zeros((3, 2), bool))
    rejoin = [(m.site, m.message) for m in out if isinstance(m.message, Rejoin)]
    assert all(r.floor[r.p == 0].tolist() == [2] for _, r in rejoin if (r.p == 0).any())
    for site, r in rejoin:
        new.on_rejoined(answer(r), site)
    # copy 0 of p = 0 resends from above the floor: 7 ran on the survivor already
    new.on_data(frame(0, 0, 8, [(0, 7), (0, 8)]), 1)
    assert pending(new) == [(0, 0, 8)] and new.duplicates == 1


def test_a_capped_partition_keeps_its_rows_above_the_cap() -> None:
    """A partition on disk (or short of a cut) stops the stage where it stands: its rows
    above the cap stay, the others run."""
    c = unordered()
    c.on_data(frame(0, 0, 6, [(0, 5), (1, 6), (0, 3)]), 1)
    c.on_data(frame(1, 0, 6), 1)
    c.on_data(frame(2, 0, 6), 2)
    rows, f_sn, _ = c.release_arrived(np.array([4, 9], np.int64))
    assert sorted(rows.column(SN).to_pylist()) == [3, 6] and f_sn.tolist() == [4, 6]
    assert pending(c) == [(0, 0, 5)]
    rows, f_sn, _ = c.release_arrived()
    assert rows.column(SN).to_pylist() == [5] and f_sn.tolist() == [6, 6]


# -- garbage collection of stream replicas (--stream-replicas, Section V-B) and revival (V-C) --
def rejoins(out: list) -> list[tuple[int, int, int, int, int, int, bool, bool]]:
    """(site, p, r, q, c, floor, send, wait) of every ``Rejoin`` among ``out``."""
    return sorted((o.site, *map(int, e[:5]), *map(bool, e[5:]))
                  for o in out if isinstance(o.message, Rejoin)
                  for e in zip(o.message.p, o.message.r, o.message.q, o.message.c,
                               o.message.floor, o.message.send, o.message.wait, strict=True))


def collecting() -> ConsumerSet:
    """``consumers()`` keeping one copy of each stream."""
    return ConsumerSet(1, {0: 0, 1: 0}, SITES, np.full((2, 3), RACE, np.int8),
                       np.ones((2, 3, 2), bool), SCHEMA, keep=1)


def test_the_copy_whose_claims_come_first_is_kept_and_the_other_stops_sending() -> None:
    c = collecting()
    for k in range(1, GC_CLAIMS - 1):  # copy 1 of p = 0 claims first 14 times, copy 0 later
        assert rejoins(c.on_data(frame(0, 1, 2 * k), 3)) == []
        assert rejoins(c.on_data(frame(0, 0, 2 * k), 1)) == []
    c.on_data(frame(0, 0, 2 * GC_CLAIMS + 1), 1)  # copy 0 comes first once
    assert c.wins[:, 0].tolist() == [[1, 14], [1, 14]]
    # the 16th first claim: copy 0 stops sending both streams, acknowledged all the same
    out = c.on_data(frame(0, 1, 2 * GC_CLAIMS + 2), 3)
    assert rejoins(out) == [(1, 0, 0, 0, 0, 34, False, True), (1, 0, 0, 1, 0, 34, False, True)]
    assert acks(a for a in out if isinstance(a.message, Ack)) == [
        (1, 0, 0, 0, 34), (1, 0, 1, 0, 34), (3, 0, 0, 0, 34), (3, 0, 1, 0, 34)]
    assert c.pruned[:, 0].tolist() == [[True, False], [True, False]] and c.collected == 2
    assert not c.wins[:, 0].any()  # the next window starts
    # its frames still on their way are raced as before; p = 1 and 2 were not judged yet
    c.on_data(frame(0, 0, 40, [(0, 39)]), 1)
    assert pending(c) == [(0, 0, 39)] and not c.pruned[:, 1:].any()


def test_a_stream_is_revived_from_a_collected_copy_when_its_sender_fails() -> None:
    c = collecting()
    for k in range(1, GC_CLAIMS + 1):
        c.on_data(frame(0, 1, k), 3)
    assert c.pruned[:, 0, 0].all()
    c.on_data(frame(2, 0, 5), 2)
    dead = np.zeros((3, 2), bool)
    dead[0, 1] = dead[1, 1] = True  # site 3 fails: p = 0 has its collected copy 0 left
    out = c.on_fail(dead)
    assert rejoins(out) == [(1, 0, 0, 0, 0, 16, True, True), (1, 0, 0, 1, 0, 16, True, True)]
    assert not c.pruned.any() and c.revived == 2
    assert (c.rejoining[:, 0, 0] == 1).all()  # its frames count from its ``Rejoined`` on
    c.on_data(frame(0, 0, 18, [(0, 17)]), 1)  # sent before it stopped: not for this rejoin
    assert pending(c) == []
    c.on_rejoined(answer(out[0].message), 1)
    c.on_data(frame(0, 0, 18, [(0, 17)]), 1)
    assert pending(c) == [(0, 0, 17)]


def test_a_stream_with_a_copy_still_rejoining_is_not_judged() -> None:
    c = collecting()
    c.rebuilding(np.eye(3, 2, k=-2, dtype=bool))  # copy 0 of p = 2: rebuilt, not raced yet
    c.on_psync(PSync(1, 2, 0, 0))  # complete again: rejoined to send
    for k in range(1, GC_CLAIMS + 1):
        assert rejoins(c.on_data(frame(2, 1, k), 4)) == []
    assert not c.pruned.any() and not c.wins[:, 2].any()  # judged next window


def test_a_producer_told_to_stop_holds_its_rows_and_resends_them_when_revived() -> None:
    send = np.ones((1, 1, 2), bool)
    buf = ProducerBuffer(1, {0: 1}, np.array([[5, 6]], np.int32), send, send.copy(), SCHEMA)
    stop = Rejoin(1, p=np.array([0], np.int32), r=np.array([1], np.int8),
                  q=np.array([0], np.int32), c=np.array([0], np.int8),
                  floor=np.array([2], np.int64), send=np.array([False]), wait=np.array([True]))
    assert buf.on_rejoin(stop) == []  # no ``Rejoined``: nothing changes for its frames
    rows = pa.record_batch([pa.array([3, 4], pa.int64()), pa.array([0, 0], pa.int64()),
                            pa.array([0, 0], pa.int32()), pa.array([0, 0], pa.int32())],
                           schema=SCHEMA)
    out = buf.produce(rows, np.array([4]), np.array([4]))
    assert [(o.site, o.message.batch.num_rows) for o in out] == [(6, 2)]  # copy 1 only
    buf.on_ack(Ack(1, p=np.array([0], np.int32), q=np.array([0], np.int32),
                   c=np.array([1], np.int8), upto=np.array([4], np.int64)))
    assert buf.buffered_rows() == 2  # held for copy 0, which got them from another copy
    buf.on_ack(Ack(1, p=np.array([0], np.int32), q=np.array([0], np.int32),
                   c=np.array([0], np.int8), upto=np.array([3], np.int64)))
    revive = Rejoin(1, p=stop.p, r=stop.r, q=stop.q, c=stop.c, floor=np.array([3], np.int64),
                    send=np.array([True]), wait=np.array([True]))
    out = buf.on_rejoin(revive)
    assert [type(o.message).__name__ for o in out] == ["Rejoined", "Data"]
    assert out[1].site == 5 and out[1].message.batch.column(SN).to_pylist() == [4]
    assert buf.send[0, 0].tolist() == [True, True] and buf.wait[0, 0].tolist() == [True, True]
    # a row resent to a copy waits for it no more (the fold-in's rule: it is on its way)
    assert buf.buffered_rows() == 0


def test_a_collection_for_a_copy_that_left_the_site_is_stale() -> None:
    send = np.ones((1, 1, 2), bool)
    buf = ProducerBuffer(1, {0: 1}, np.array([[5, 6]], np.int32), send, send.copy(), SCHEMA)
    stale = Rejoin(1, p=np.array([0], np.int32), r=np.array([0], np.int8),  # copy 0, not 1
                   q=np.array([0], np.int32), c=np.array([0], np.int8),
                   floor=np.array([2], np.int64), send=np.array([False]), wait=np.array([True]))
    assert buf.on_rejoin(stale) == [] and buf.send.all()


def test_a_collected_stream_standing_still_while_the_others_move_is_revived() -> None:
    """Copy 1 of p = 0 (site 3) is kept, copy 0 (site 1) collected; then site 3 hangs: the
    other streams of both consumer copies move and p = 0 stands still. A tick finds it
    ``stall`` behind and takes the collected copy back, before any failure is known."""
    c = ConsumerSet(1, {0: 0, 1: 0}, SITES, np.full((2, 3), RACE, np.int8),
                    np.ones((2, 3, 2), bool), SCHEMA, keep=1, stall=0.3)
    for k in range(1, GC_CLAIMS + 1):
        c.on_data(frame(0, 1, k), 3)
    assert c.pruned[:, 0, 0].all() and c.collected == 2
    assert c.on_tick(0.0) == []  # every stream seen for the first time
    c.on_data(frame(2, 0, 30), 2)  # p = 2 moves; p = 0 (hung sender) and p = 1 do not
    assert c.on_tick(0.2) == []  # not stall long yet
    c.on_data(frame(2, 0, 40), 2)
    out = c.on_tick(0.35)
    # p = 0 and p = 1 stood still 0.35 s while p = 2 moved; only p = 0 has a collected copy
    assert rejoins(out) == [(1, 0, 0, 0, 0, 16, True, True), (1, 0, 0, 1, 0, 16, True, True)]
    assert not c.pruned.any() and c.revived == 2 and c.on_tick(0.5) == []


def test_streams_that_all_stand_still_revive_nothing() -> None:
    """A pause of the input stops every stream at once: nothing is behind the others."""
    c = ConsumerSet(1, {0: 0, 1: 0}, SITES, np.full((2, 3), RACE, np.int8),
                    np.ones((2, 3, 2), bool), SCHEMA, keep=1, stall=0.3)
    for k in range(1, GC_CLAIMS + 1):
        c.on_data(frame(0, 1, k), 3)
    c.on_tick(0.0)
    assert c.on_tick(5.0) == [] and c.pruned[:, 0, 0].all()


def test_a_copy_struck_off_while_rejoining_does_not_stop_the_judging() -> None:
    """Found in review: a copy revived (``Rejoin`` with send) whose site fails before its
    ``Rejoined`` keeps its ``rejoining`` mark; the stream's other copies are judged all
    the same."""
    sites = np.array([[1, 3, 5], [1, 3, 5], [2, 4, 5]], np.int32)
    c = ConsumerSet(1, {0: 0, 1: 0}, sites, np.full((2, 3), RACE, np.int8),
                    np.ones((2, 3, 3), bool), SCHEMA, keep=1)
    c.rejoining[:, 0, 2] = 5  # copy 2 of p = 0 was asked to send; site 5 then fails
    dead = np.zeros((3, 3), bool)
    dead[:, 2] = True
    c.on_fail(dead)
    for k in range(1, GC_CLAIMS + 1):
        c.on_data(frame(0, 1, k), 3)
    assert c.pruned[:, 0].tolist() == [[True, False, False], [True, False, False]]
