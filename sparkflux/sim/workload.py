"""A small, output-rich workload for the simulator: sessions over a tiny key space.

The network-monitoring shape (exchange(src,dst) -> sessions -> exchange(app,src) -> count
window, plus a filter in the ingress) with few keys and a short session lag, so that a few
hundred events exercise every operator, every exchange and every survival case, and one seed
runs in a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.dataflow.api import Dataflow, Source
from sparkflux.dataflow.compiler import compile_plan
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.random import counter_random
from sparkflux.operators.count_window import CountWindowAggregate
from sparkflux.operators.session import SessionReconstruction
from sparkflux.operators.stateless import Filter, Map
from sparkflux.operators.time_window import TimeWindowAggregate

SCHEMA = pa.schema([pa.field("src", pa.int32(), nullable=False),
                    pa.field("dst", pa.int32(), nullable=False),
                    pa.field("kind", pa.int8(), nullable=False),
                    pa.field("ts", pa.int64(), nullable=False),
                    pa.field("app", pa.int32(), nullable=False)])


class TinySessions(Source):
    schema = SCHEMA
    event_time = "ts"

    def __init__(self, events: int, batch: int, seed: int = 1, lag: int = 6) -> None:
        self.events, self.batch, self.seed, self.lag = events, batch, seed, lag

    def batches(self) -> Iterator[pa.RecordBatch]:
        for start in range(0, self.events, self.batch):
            yield self.generate(start, min(self.batch, self.events - start))

    def generate(self, start: int, count: int) -> pa.RecordBatch:
        n = np.arange(start, start + count, dtype=np.int64)
        end = (n & 1).astype(bool)
        session = np.where(end, (n - 1) // 2 - self.lag, n // 2)
        pair = counter_random(self.seed, 1, session) % np.uint64(24)
        app = counter_random(self.seed, 2, n) % np.uint64(3)
        return pa.RecordBatch.from_arrays([
            pa.array((pair // np.uint64(4)).astype(np.int32)),
            pa.array((pair % np.uint64(4)).astype(np.int32)),
            pa.array(end.astype(np.int8)),
            pa.array(n * 5),
            pa.array(app.astype(np.int32)),
        ], schema=SCHEMA)


def _same() -> Map:
    """The identity map on ``app`` (a stage of its own after an exchange)."""
    return Map(lambda b: {"app": b.column("app")}, [pa.field("app", pa.int32())])


def _bump() -> Map:
    return Map(lambda b: {"app": pc.add(b.column("app"), 1)}, [pa.field("app", pa.int32())])


def _sessions() -> SessionReconstruction:
    return SessionReconstruction(key=["src", "dst"], kind="kind", start=0, end=1, time="ts",
                                 carry=["app", "src"])


def _stats() -> CountWindowAggregate:
    return CountWindowAggregate(by=["app", "src"], value="dur", history=3, slide=1, every=2,
                                aggs={"mx": "max", "n": "count", "avg": "avg"})


def tiny_plan(events: int = 400, batch: int = 40, sites: int = 4, partitions: int = 8,
              seed: int = 1) -> tuple[PhysicalPlan, list[pa.RecordBatch]]:
    src = TinySessions(events, batch, seed)
    df = Dataflow("tiny")
    (df.source(src, name="events")
       .apply(Filter(pc.field("dst") != 3), name="drop_dst3")
       .exchange(by=["src", "dst"])
       .apply(_bump(), name="bump")
       .apply(_sessions(), name="sessions")
       .exchange(by=["app", "src"])
       .apply(_stats(), name="stats")
       .sink())
    return compile_plan(df, partitions, sites), list(src.batches())


def tiny_chain_plan(events: int = 400, batch: int = 40, sites: int = 4, partitions: int = 8,
                    seed: int = 1) -> tuple[PhysicalPlan, list[pa.RecordBatch]]:
    """``tiny_plan`` with one more exchange in front (by ``ts``, through an identity map):
    three stages in a chain, so a middle stage both takes rows from sites and sends rows to
    sites, and a producer and its consumer of one exchange share a site on both sides of it.
    Its output is ``tiny_plan``'s, row for row and SN for SN (a map keeps the SN)."""
    src = TinySessions(events, batch, seed)
    df = Dataflow("tiny_chain")
    (df.source(src, name="events")
       .apply(Filter(pc.field("dst") != 3), name="drop_dst3")
       .exchange(by=["ts"])
       .apply(_same(), name="same")
       .exchange(by=["src", "dst"])
       .apply(_bump(), name="bump")
       .apply(_sessions(), name="sessions")
       .exchange(by=["app", "src"])
       .apply(_stats(), name="stats")
       .sink())
    return compile_plan(df, partitions, sites), list(src.batches())


def tiny_relay_plan(events: int = 400, batch: int = 40, sites: int = 4, partitions: int = 8,
                    seed: int = 1, arrival_order: bool = True
                    ) -> tuple[PhysicalPlan, list[pa.RecordBatch]]:
    """``tiny_chain_plan`` with order-insensitive stages between its stateful ones: an
    identity map after an exchange by ``ts``; the sessions; a map after an exchange by
    ``app`` (its input from every partition of the sessions' stage); the count windows; a
    filter after an exchange by ``app``, which the egress reads. Racing copies run the maps
    and the filter in arrival order (``PhysicalPlan.arrival``): the count windows' stage and
    the egress take streams out of SN order, and the count windows count every row they
    get, so a duplicate let through changes the output. ``arrival_order`` (on here, as
    ``--arrival-order``): off, every stage merges in SN order."""
    src = TinySessions(events, batch, seed)
    df = Dataflow("tiny_relay")
    (df.source(src, name="events")
       .apply(Filter(pc.field("dst") != 3), name="drop_dst3")
       .exchange(by=["ts"])
       .apply(_same(), name="same")
       .exchange(by=["src", "dst"])
       .apply(_sessions(), name="sessions")
       .exchange(by=["app"])
       .apply(_bump(), name="bump")
       .exchange(by=["app", "src"])
       .apply(_stats(), name="stats")
       .exchange(by=["app"])
       .apply(Filter(pc.field("n") >= 1), name="kept")
       .sink())
    plan = compile_plan(df, partitions, sites)
    return replace(plan, arrival_order=arrival_order), list(src.batches())


# The two chained windows of ``tiny_windows_plan`` (event time ``ts`` = 5 x event index).
HOT_SIZE, HOT_SLIDE, TOP_SIZE = 60, 20, 40


def tiny_windows_plan(events: int = 400, batch: int = 40, sites: int = 4, partitions: int = 8,
                      seed: int = 1) -> tuple[PhysicalPlan, list[pa.RecordBatch]]:
    """Two windowed aggregates in a row (the "hot items" shape): a count per (src, app) over
    sliding windows, then per app the largest of those counts over tumbling windows of the
    first one's ``window_start``. A window of the second closes only once every window of the
    first that starts in it has been released, on every site (per-partition progress and an
    output watermark held back with the open windows)."""
    src = TinySessions(events, batch, seed)
    df = Dataflow("tiny_windows")
    (df.source(src, name="events")
       .exchange(by=["src"])
       .apply(TimeWindowAggregate(by=["src", "app"], time="ts", value="dst", size=HOT_SIZE,
                                  slide=HOT_SLIDE, aggs={"n": "count"}), name="hot")
       .exchange(by=["app"])
       .apply(TimeWindowAggregate(by=["app"], time="window_start", value="n", size=TOP_SIZE,
                                  aggs={"top": "max", "windows": "count"},
                                  names=("top_start", "top_end")), name="top")
       .sink())
    return compile_plan(df, partitions, sites), list(src.batches())


def tiny_arrival_windows_plan(events: int = 400, batch: int = 40, sites: int = 4,
                              partitions: int = 8, seed: int = 1, arrival_order: bool = True
                              ) -> tuple[PhysicalPlan, list[pa.RecordBatch]]:
    """``tiny_windows_plan`` after an identity map of its own (an exchange by ``ts``), with a
    sum beside the first window's count. Racing copies run the map in arrival order and its
    stream comes out of SN order; both windows take their input in arrival order too (the
    racing-replicas paper's Algorithm 3): they fold rows above their frontier, and count every
    row they get, so a row folded twice changes the output. ``arrival_order`` off: every
    stage merges in SN order."""
    src = TinySessions(events, batch, seed)
    df = Dataflow("tiny_arrival_windows")
    (df.source(src, name="events")
       .exchange(by=["ts"])
       .apply(_same(), name="same")
       .exchange(by=["src"])
       .apply(TimeWindowAggregate(by=["src", "app"], time="ts", size=HOT_SIZE, slide=HOT_SLIDE,
                                  aggs={"n": "count", "dsts": ("sum", "dst")}), name="hot")
       .exchange(by=["app"])
       .apply(TimeWindowAggregate(by=["app"], time="window_start", size=TOP_SIZE,
                                  aggs={"top": ("max", "n"), "windows": "count"},
                                  names=("top_start", "top_end")), name="top")
       .sink())
    plan = compile_plan(df, partitions, sites)
    return replace(plan, arrival_order=arrival_order), list(src.batches())


def tiny_windows_model(batches: list[pa.RecordBatch]) -> list[tuple[int, int, int, float, int]]:
    """The expected rows of ``tiny_windows_plan`` computed directly (no engine, no SNs):
    ``(app, top_start, top_end, top, windows)``, sorted."""
    rows = pa.Table.from_batches(batches).to_pylist()
    counts: dict[tuple[int, int, int], int] = {}
    for r in rows:
        start = r["ts"] // HOT_SLIDE * HOT_SLIDE
        while start > r["ts"] - HOT_SIZE:
            key = (r["src"], r["app"], start)
            counts[key] = counts.get(key, 0) + 1
            start -= HOT_SLIDE
    top: dict[tuple[int, int], list[int]] = {}
    for (_, app, start), n in counts.items():
        top.setdefault((app, start // TOP_SIZE * TOP_SIZE), []).append(n)
    return sorted((app, s, s + TOP_SIZE, float(max(ns)), len(ns))
                  for (app, s), ns in top.items())


# ``tiny_union_plan``: two sources with different columns, one shuffled within its lateness.
VIEWS = pa.schema([pa.field("page", pa.int32(), nullable=False),
                   pa.field("user", pa.int32(), nullable=False),
                   pa.field("ts", pa.int64(), nullable=False)])
CLICKS = pa.schema([pa.field("page", pa.int32(), nullable=False),
                    pa.field("user", pa.int64(), nullable=False),
                    pa.field("button", pa.string(), nullable=False),
                    pa.field("ts", pa.int64(), nullable=False)])
CLICK_LATENESS, UNION_WINDOW = 30, 50


class _Fixed(Source):
    """A source that yields given batches (the simulator feeds them itself)."""

    def __init__(self, schema: pa.Schema, lateness: int) -> None:
        self.schema, self.event_time, self.lateness = schema, "ts", lateness

    def batches(self) -> Iterator[pa.RecordBatch]:
        yield from ()


def tiny_union_records(events: int = 300, seed: int = 1) -> tuple[pa.Table, pa.Table]:
    """Views (in time order) and clicks (each displaced by less than ``CLICK_LATENESS``)
    with interleaved event times."""
    n = np.arange(events, dtype=np.int64)
    views = pa.table([pa.array((counter_random(seed, 11, n) % np.uint64(6)).astype(np.int32)),
                      pa.array((counter_random(seed, 12, n) % np.uint64(50)).astype(np.int32)),
                      pa.array(n * 3)], schema=VIEWS)
    ts = n * 3 + 1
    shuffled = np.argsort(ts + (counter_random(seed, 13, n) % np.uint64(CLICK_LATENESS)
                                ).astype(np.int64), kind="stable")
    clicks = pa.table([
        pa.array((counter_random(seed, 14, n) % np.uint64(6)).astype(np.int32)),
        pa.array((counter_random(seed, 15, n) % np.uint64(50)).astype(np.int64)),
        pa.array([f"b{int(x)}" for x in counter_random(seed, 16, n) % np.uint64(3)]),
        pa.array(ts)], schema=CLICKS).take(pa.array(shuffled))
    return views, clicks


def tiny_union_plan(sites: int = 4, partitions: int = 8) -> PhysicalPlan:
    """views | clicks -> exchange(page) -> per page and tumbling window: count, max user."""
    df = Dataflow("tiny_union")
    views = df.source(_Fixed(VIEWS, 0), name="views")
    clicks = df.source(_Fixed(CLICKS, CLICK_LATENESS), name="clicks")
    (views.union(clicks)
          .exchange(by=["page"])
          .apply(TimeWindowAggregate(by=["page"], time="ts", value="user", size=UNION_WINDOW,
                                     aggs={"events": "count", "top_user": "max"}), name="w")
          .sink())
    return compile_plan(df, partitions, sites)


def tiny_union_arrivals(views: pa.Table, clicks: pa.Table, order_seed: int
                        ) -> list[tuple[int, pa.RecordBatch]]:
    """Both sources cut into random batches, interleaved in a random order (each source's
    own order kept): one of the many orders in which they could reach the driver."""
    rng = np.random.default_rng(order_seed)
    pending = [views.to_batches(max_chunksize=17), clicks.to_batches(max_chunksize=23)]
    out: list[tuple[int, pa.RecordBatch]] = []
    pos = [0, 0]
    while any(p < len(b) for p, b in zip(pos, pending, strict=True)):
        k = int(rng.choice([i for i in range(2) if pos[i] < len(pending[i])]))
        out.append((k, pending[k][pos[k]]))
        pos[k] += 1
    return out


def tiny_union_model(views: pa.Table, clicks: pa.Table) -> list[tuple[int, int, int, int, int]]:
    """``(page, window_start, window_end, events, top_user)`` computed directly, sorted."""
    agg: dict[tuple[int, int], list[int]] = {}
    for t in (views, clicks):
        for r in t.to_pylist():
            agg.setdefault((r["page"], r["ts"] // UNION_WINDOW * UNION_WINDOW), []).append(
                r["user"])
    return sorted((p, s, s + UNION_WINDOW, len(u), max(u)) for (p, s), u in agg.items())


# ``tiny_dag_plan``: fan-out, three sinks, a join of two sources, a join of an aggregate with
# a source (which crosses two exchanges).
JOIN_WINDOW = 20


def tiny_dag_plan(sites: int = 4, partitions: int = 8) -> PhysicalPlan:
    """views -> exchange(page) -> count per page and window      -> sink "counts"
    views ⋈ clicks on (page, user) within JOIN_WINDOW             -> sink "pairs"
    counts ⋈ clicks on page, window_start vs ts within UNION_WINDOW -> sink "hot"."""
    df = Dataflow("tiny_dag")
    views = df.source(_Fixed(VIEWS, 0), name="views")
    clicks = df.source(_Fixed(CLICKS, CLICK_LATENESS), name="clicks")
    counts = (views.exchange(by=["page"])
                   .apply(TimeWindowAggregate(by=["page"], time="ts", value="user",
                                              size=UNION_WINDOW, aggs={"views": "count"}),
                          name="per_page"))
    counts.sink(name="counts")
    views.join(clicks, on=["page", "user"], time="ts", window=JOIN_WINDOW,
               name="pairs").sink(name="pairs_out")
    counts.join(clicks, on=["page"], time=("window_start", "ts"), window=UNION_WINDOW,
                name="hot").sink(name="hot_out")
    return compile_plan(df, partitions, sites)


def tiny_dag_model(views: pa.Table, clicks: pa.Table) -> dict[str, list[tuple[Any, ...]]]:
    """Each sink's rows computed directly (sorted, no sequence numbers)."""
    v, c = views.to_pylist(), clicks.to_pylist()
    per: dict[tuple[int, int], int] = {}
    for r in v:
        k = (r["page"], r["ts"] // UNION_WINDOW * UNION_WINDOW)
        per[k] = per.get(k, 0) + 1
    counts = sorted((p, s, s + UNION_WINDOW, n) for (p, s), n in per.items())
    pairs = sorted((a["page"], a["user"], a["ts"], b["button"], b["ts"])
                   for a in v for b in c
                   if (a["page"], a["user"]) == (b["page"], b["user"])
                   and abs(a["ts"] - b["ts"]) <= JOIN_WINDOW)
    hot = sorted((p, s, s + UNION_WINDOW, n, b["user"], b["button"], b["ts"])
                 for (p, s, _, n) in counts for b in c
                 if b["page"] == p and abs(s - b["ts"]) <= UNION_WINDOW)
    return {"counts": counts, "pairs_out": pairs, "hot_out": hot}


# ``tiny_files_plan``: ``tiny_plan``'s dataflow over Parquet files, read on the driver or on
# the sites.
def write_tiny_files(directory: str, events: int = 400, per_file: int = 70, seed: int = 1,
                     bad_every: int = 0, late_every: int = 0) -> None:
    """``TinySessions``' events as Parquet files ``part-0000.parquet``, ... in name order
    (row groups of 10 rows), and the end marker ``_DONE``. ``bad_every``: every so
    many events a null ``app`` (invalid: ``app`` is required), which makes the file
    irregular; ``late_every``: every so many events one whose time is 40 behind (late under a
    lateness below 40)."""
    from pathlib import Path

    import pyarrow.parquet as pq

    src = TinySessions(events, events, seed)
    table = pa.Table.from_batches([src.generate(0, events)])
    if late_every:
        ts = table.column("ts").to_numpy().copy()
        ts[late_every - 1::late_every] -= 40
        table = table.set_column(3, SCHEMA.field("ts"), pa.array(ts))
    if bad_every:
        apps = table.column("app").to_pylist()
        apps = [None if i % bad_every == bad_every - 1 else a for i, a in enumerate(apps)]
        loose = pa.schema([f.with_nullable(True) for f in SCHEMA])
        table = table.cast(loose).set_column(4, loose.field("app"), pa.array(apps, pa.int32()))
    for i, start in enumerate(range(0, events, per_file)):
        pq.write_table(table.slice(start, per_file), Path(directory) / f"part-{i:04d}.parquet",
                       row_group_size=10)
    (Path(directory) / "_DONE").touch()


def tiny_files_plan(directory: str, sites: int = 4, partitions: int = 8, chunk_rows: int = 16,
                    read_on: str = "sites", lateness: int = 0, deal: bool = True
                    ) -> tuple[PhysicalPlan, list[pa.RecordBatch | list[Any]]]:
    """``tiny_plan``'s dataflow over ``write_tiny_files``' files, read on the sites (its
    input: the chunk records the driver admits, and lists of the dead letters the driver
    writes for them) or on the driver (the files' batches). Read through once: the plan's
    source is spent (a file source's iterator lists the directory as it goes).
    ``deal=False``: the plan alone (the simulator feeds it the items it was given)."""
    from sparkflux.io.files import FileStreamSource

    src = FileStreamSource(directory, SCHEMA, event_time="ts", lateness=lateness,
                           end_marker="_DONE", batch_size=32, read_on=read_on,
                           chunk_rows=chunk_rows, poll_interval=0.0)
    df = Dataflow("tiny_files")
    (df.source(src, name="events")
       .apply(Filter(pc.field("dst") != 3), name="drop_dst3")
       .exchange(by=["src", "dst"])
       .apply(_bump(), name="bump")
       .apply(_sessions(), name="sessions")
       .exchange(by=["app", "src"])
       .apply(_stats(), name="stats")
       .sink())
    plan = compile_plan(df, partitions, sites)
    if not deal:
        return plan, []
    return plan, [b for b in plan.sources[0].batches() if b is not None]
