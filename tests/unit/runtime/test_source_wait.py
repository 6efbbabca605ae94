"""A source that has nothing yet yields ``None``: the driver's feed turns it into an idle wait
(``WAIT``), in the unpaced path (``SourceFeed``) and the paced one (``PacedBuffer``), and
never owes the records that were due while the source was idle."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace

import pyarrow as pa

from sparkflux.dataflow.api import Source
from sparkflux.runtime.pacing import WAIT, PacedBuffer, SourceFeed
from sparkflux.runtime.run_config import LiveStats

SCHEMA = pa.schema([pa.field("x", pa.int64())])


def batch(*xs: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"x": list(xs)}, schema=SCHEMA)


class Scripted(Source):
    schema = SCHEMA

    def __init__(self, items: list[pa.RecordBatch | None]) -> None:
        self.items = items

    def batches(self) -> Iterator[pa.RecordBatch | None]:
        yield from self.items


def feed(*sources: Source) -> SourceFeed:
    streams = [SimpleNamespace(event_time=None, lateness=0) for _ in sources]
    return SourceFeed(SimpleNamespace(sources=sources, streams=streams))  # type: ignore[arg-type]


def test_none_from_a_source_is_a_wait_and_reading_goes_on_after_it() -> None:
    f = feed(Scripted([None, batch(1), None, None, batch(2)]))
    got = [f.next() for _ in range(7)]
    assert got[0] is WAIT and got[2] is WAIT and got[3] is WAIT
    assert got[1][1].to_pydict() == {"x": [1]} and got[4][1].to_pydict() == {"x": [2]}
    assert got[5] == (0, None) and got[6] is None


def test_the_paced_buffer_waits_for_an_idle_source_without_a_burst_after_it() -> None:
    idle = 40
    items: list[pa.RecordBatch | None] = [None] * idle + [batch(*range(10))]
    stats = LiveStats(total=None)
    buf = PacedBuffer(feed(Scripted(items)), rate=1_000.0, capacity=1_000, stats=stats,
                      flush_rows=1, flush_s=0.0)
    assert buf.take() is WAIT  # nothing buffered, not exhausted

    async def go() -> list:
        task = asyncio.create_task(buf.produce())
        taken: list = []
        for _ in range(400):
            await asyncio.sleep(0.005)
            got = buf.take()
            if got is None:
                break
            if got is not WAIT:
                taken.extend(got)
        task.cancel()
        return taken

    taken = asyncio.run(go())
    rows = [x for _, b in taken if b is not None for x in b.column("x").to_pylist()]
    assert rows == list(range(10)) and taken[-1] == (0, None)
    assert stats.dropped == 0


def test_a_cut_source_is_a_wait_that_names_the_cut_and_its_records_come_after() -> None:
    f = feed(Scripted([batch(1), batch(2)]))
    f._streams[0].name = "clicks"  # type: ignore[misc]
    f.cut(0, 60.0)
    assert f.next() is WAIT and f.cut_off(0) > 59
    assert "source 'clicks' is cut off (--cut-source)" in (f.waiting_for() or "")
    f.cut(0, 0.0)  # healed: nothing of it was lost
    assert f.next()[1].to_pydict() == {"x": [1]} and f.next()[1].to_pydict() == {"x": [2]}


def test_a_cut_sources_peers_keep_coming_and_its_backlog_comes_at_once_after_the_heal() -> None:
    """While source 1 is cut the feed goes on reading in event-time turn: source 1's batches
    are produced in their turn and held on the far side of the cut, source 0's come; after
    the heal source 1's held batches come first, marked ``from_backlog`` (the paced buffer
    does not pace them again), then reading goes on in turn."""
    f = feed(Scripted([batch(1), batch(2), batch(3)]), Scripted([batch(10), batch(20)]))
    for spec in f._streams:
        spec.event_time = "x"  # type: ignore[misc]
    f.cut(1, 60.0)
    got = [f.next() for _ in range(3)]  # source 1's turn comes once: batch 10 held
    assert [(i, b.to_pydict()["x"]) for i, b in got] == [(0, [1]), (0, [2]), (0, [3])]
    f.cut(1, 0.0)
    i, b = f.next()
    assert (i, b.to_pydict()["x"], f.from_backlog) == (1, [10], True)
    assert f.next() == (0, None) and not f.from_backlog
    i, b = f.next()
    assert (i, b.to_pydict()["x"], f.from_backlog) == (1, [20], False)


def test_a_source_that_ends_behind_a_cut_is_delivered_whole_after_the_heal() -> None:
    """Every source has ended while records of the cut one are still held: the feed waits
    (naming the cut), never ends the input early, and after the heal gives them all and the
    source's end, then the end of the input."""
    f = feed(Scripted([batch(1)]), Scripted([batch(10), batch(20)]))
    for spec in f._streams:
        spec.event_time = "x"  # type: ignore[misc]
        spec.name = "s"  # type: ignore[misc]
    f.cut(1, 60.0)
    seen = [f.next() for _ in range(4)]
    assert seen[0][0] == 0 and (0, None) in seen and WAIT in seen
    assert f.next() is WAIT and "cut off (--cut-source)" in (f.waiting_for() or "")
    f.cut(1, 0.0)
    rest = [f.next() for _ in range(4)]
    assert [(i, None if b is None else b.to_pydict()["x"]) for i, b in rest[:3]] == [
        (1, [10]), (1, [20]), (1, None)]
    assert rest[3] is None


class Timed(Source):
    """One batch of event times ``times`` (column ``x``)."""

    schema = SCHEMA

    def __init__(self, times: list[int], batches: int = 1) -> None:
        self.times, self.n = times, batches

    def batches(self) -> Iterator[pa.RecordBatch]:
        step = len(self.times) // self.n
        for k in range(0, len(self.times), step):
            yield batch(*self.times[k:k + step])


def timed_feed(*sources: Source) -> SourceFeed:
    streams = [SimpleNamespace(event_time="x", lateness=0) for _ in sources]
    return SourceFeed(SimpleNamespace(sources=sources, streams=streams))  # type: ignore[arg-type]


def drain(f: SourceFeed) -> list[tuple[int, list[int]]]:
    out = []
    while (item := f.next()) is not None:
        assert item is not WAIT
        i, b = item
        out.append((i, [] if b is None else b.column("x").to_pylist()))
    return out


def test_slices_interleave_the_sources_in_event_time_and_hand_over_every_record() -> None:
    """A push source hands each source's batch over in slices, each judged by its own
    largest event time: two sources of one large batch each interleave, slice by slice,
    as two live streams would, instead of one whole batch after the other."""
    a, b = list(range(0, 40, 2)), list(range(1, 40, 2))  # 20 each, alternating in time
    whole = drain(timed_feed(Timed(a), Timed(b)))
    assert [i for i, _ in whole] == [0, 1, 0, 1]  # each batch at once, then the ends
    f = timed_feed(Timed(a, batches=2), Timed(b))
    f.slice_rows = 4
    sliced = drain(f)
    got = [(i, x) for i, x in sliced if x]
    assert all(len(x) <= 4 for _, x in got)
    # a's 2 batches of 10 in slices of 4, 4, 2; b's one of 20 in slices of 4; the lower
    # event time goes first, so neither gets a whole batch ahead of the other
    assert [i for i, _ in got] == [0, 1] * 5 + [0]
    assert [v for i, x in got if i == 0 for v in x] == a  # nothing lost, nothing reordered
    assert [v for i, x in got if i == 1 for v in x] == b
    assert sorted(i for i, x in sliced if not x) == [0, 1]  # each source's end, once


def test_slicing_holds_a_cut_sources_slices_back_until_the_heal() -> None:
    """A cut-off source's slices are held outside like its batches, as fast as the others'
    come (in event time, within a slice of theirs), and come after the heal in their order:
    its backlog is all there at the heal, not produced at its paced share after it."""
    a, b, c = (list(range(k, 90, 3)) for k in range(3))  # three streams, interleaved in time
    f = timed_feed(Timed(a), Timed(b), Timed(c))
    f.slice_rows = 3
    f.cut(2, 3600.0)
    first = [f.next() for _ in range(12)]
    got = [x for x in first if isinstance(x, tuple) and x[1] is not None]
    assert {i for i, _ in got} == {0, 1}
    out = max(v for _, x in got for v in x.column("x").to_pylist())
    held = max(v for it in f._held[2] if it is not None for v in it.column("x").to_pylist())
    assert held >= out - 3 * 3
    f._cut_until[2] = 0.0  # the heal
    rest = drain(f)
    assert [v for i, x in rest if i == 2 for v in x] == c


def test_a_cut_source_takes_its_share_of_the_rate_so_its_peers_keep_theirs() -> None:
    """A push source of two interleaved streams at 4,000 records/s, one of them cut the whole
    time: the cut one goes on producing on the far side of the cut and counts against the
    rate, so the other comes at its own share (about 2,000/s), not at the whole rate."""
    a, b = list(range(0, 40_000, 2)), list(range(1, 40_000, 2))
    f = timed_feed(Timed(a, batches=20), Timed(b, batches=20))
    f.cut(1, 3600.0)
    buf = PacedBuffer(f, rate=4_000.0, capacity=100_000, stats=LiveStats(total=None),
                      flush_rows=1, flush_s=0.0)

    async def go() -> list:
        task = asyncio.create_task(buf.produce())
        await asyncio.sleep(1.0)
        task.cancel()
        got = buf.take()
        return [] if got is None or got is WAIT else got

    taken = asyncio.run(go())
    came = sum(x.num_rows for i, x in taken if i == 0 and x is not None)
    assert {i for i, _ in taken} == {0}
    assert 1_200 <= came <= 2_800, came  # about its half of 4,000 in 1 s
    assert f.held_rows >= 1_200  # the cut one's half, held on the far side
