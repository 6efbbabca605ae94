"""The ingress sequencer: several streams, out of order within their lateness, one order.

Driven directly (no engine): what it releases, in what order, what it rejects, and what
watermark it claims, for hand-made inputs and for random arrival interleavings.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.dataflow.plan import StreamSpec
from sparkflux.model.progress import END_OF_STREAM, NO_WATERMARK
from sparkflux.protocol.sequencer import Sequencer


def batch(ts: list[int], tag: str = "x") -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"ts": pa.array(ts, pa.int64()),
                                       "tag": [f"{tag}{i}" for i in range(len(ts))]})


def released(seq: Sequencer) -> list[tuple[int, int, str]]:
    """``(stream, ts, tag)`` of everything released now, in order."""
    out = seq.release()
    if out is None:
        return []
    b, streams = out
    return list(zip(streams.tolist(), b.column("ts").to_pylist(), b.column("tag").to_pylist(),
                    strict=True))


def test_one_in_order_stream_passes_at_once() -> None:
    seq = Sequencer([StreamSpec("a", "ts")])
    assert seq.offer(0, batch([1, 2, 2, 5])) == []
    assert [t for _, t, _ in released(seq)] == [1, 2, 2, 5]
    assert seq.watermark() == 5 and seq.held_total() == 0


def test_lateness_holds_and_sorts_and_rejects_only_behind_it() -> None:
    seq = Sequencer([StreamSpec("a", "ts", lateness=10)])
    assert seq.offer(0, batch([20, 12, 25, 17])) == []
    # wm = 25 - 10 = 15: 12 goes, 17, 20 and 25 wait
    assert released(seq) == [(0, 12, "x1")]
    late = seq.offer(0, batch([14, 16, 30]))
    assert [r.record["ts"] for r in late] == [14]
    assert "behind its watermark 15 (allowed lateness 10)" in late[0].reason
    assert "source 'a'" in late[0].reason
    assert [t for _, t, _ in released(seq)] == [16, 17, 20]  # wm = 20: 20 itself may go
    assert seq.watermark() == 20
    seq.end(0)
    assert [t for _, t, _ in released(seq)] == [25, 30]
    assert seq.watermark() == END_OF_STREAM


def test_two_streams_merge_by_time_then_stream() -> None:
    seq = Sequencer([StreamSpec("a", "ts"), StreamSpec("b", "ts")])
    seq.offer(1, batch([1, 4, 6], "b"))
    assert released(seq) == []  # stream a has said nothing: it may still bring time 0
    assert seq.next_stream() == 0 and seq.watermark() == NO_WATERMARK
    seq.offer(0, batch([2, 4, 5], "a"))
    # bound: the lowest (wm, stream) = (5, a); b's 4 goes before a's 5? (4, b) <= (5, a)
    assert released(seq) == [(1, 1, "b0"), (0, 2, "a0"), (0, 4, "a1"), (1, 4, "b1"),
                             (0, 5, "a2")]
    assert seq.next_stream() == 0  # a (wm 5) is behind b (wm 6)
    seq.end(0)
    assert released(seq) == [(1, 6, "b2")]


@pytest.mark.parametrize("seed", range(20))
def test_any_arrival_interleaving_gives_one_order(seed: int) -> None:
    """Three streams, each shuffled within its lateness, fed in random interleavings and
    batch cuts: the released sequence is the same, nothing is rejected, and no record comes
    out below a watermark claimed before it."""
    rng = np.random.default_rng(seed)
    lateness = [0, 7, 30]
    streams = []
    for k, late in enumerate(lateness):
        ts = np.sort(rng.integers(0, 500, 120))
        if late:  # displace each record by less than the lateness: within the bound
            ts = ts[np.argsort(ts + rng.integers(0, late, ts.size), kind="stable")]
        streams.append(batch(ts.tolist(), "abc"[k]))

    def run(order_seed: int) -> list[tuple[int, int, str]]:
        r = np.random.default_rng(order_seed)
        seq = Sequencer([StreamSpec(n, "ts", late) for n, late in zip("abc", lateness,
                                                                      strict=True)])
        pos = [0, 0, 0]
        out: list[tuple[int, int, str]] = []
        claimed = NO_WATERMARK
        while any(p < b.num_rows for p, b in zip(pos, streams, strict=True)):
            k = int(r.choice([i for i in range(3) if pos[i] < streams[i].num_rows]))
            n = int(r.integers(1, 15))
            assert seq.offer(k, streams[k].slice(pos[k], n)) == []
            pos[k] += n
            if pos[k] >= streams[k].num_rows:
                seq.end(k)
            got = released(seq)
            assert all(t >= claimed for _, t, _ in got)
            claimed = max(claimed, seq.watermark())
            out += got
        return out

    first = run(seed * 100)
    assert len(first) == 360
    keys = [(t, s) for s, t, _ in first]
    assert keys == sorted(keys)
    for other in (seed * 100 + 1, seed * 100 + 2):
        assert run(other) == first


def test_a_stream_without_event_time_passes_through_alone() -> None:
    seq = Sequencer([StreamSpec("a", None)])
    seq.offer(0, batch([5, 1]))
    assert [t for _, t, _ in released(seq)] == [5, 1]
    assert seq.watermark() == NO_WATERMARK
    with pytest.raises(ValueError, match="each needs an event_time"):
        Sequencer([StreamSpec("a", None), StreamSpec("b", "ts")])


def test_a_peek_in_the_middle_of_held_records_copies_out_exactly_those() -> None:
    """``peek`` (what the tentative path reads) of a range neither at the start of what a
    stream holds nor contiguous in it (records within their lateness, out of order): the
    selected records in the merged order, across the held batches, and nothing released."""
    seq = Sequencer([StreamSpec("a", "ts", lateness=100), StreamSpec("b", "ts")])
    seq.offer(0, batch([10, 40, 20], "p"))
    seq.offer(0, batch([35, 50, 25], "q"))
    seq.offer(0, batch([60], "r"))
    held = seq.held_total()
    got = seq.peek((15, 1), (45, 0))
    assert got is not None
    rows, streams = got
    assert list(zip(rows.column("ts").to_pylist(), rows.column("tag").to_pylist(),
                    strict=True)) == [(20, "p2"), (25, "q2"), (35, "q0"), (40, "p1")]
    assert streams.tolist() == [0, 0, 0, 0] and seq.held_total() == held
    run = seq.peek((30, 1), (55, 0))  # a contiguous run across two batches: sliced
    assert run is not None and run[0].column("tag").to_pylist() == ["q0", "p1", "q1"]
