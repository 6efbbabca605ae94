"""Two input streams with different columns, one of them out of order: a union, windowed.

    views  (page, user, ts)           --+
                                        +-- union --exchange(page)--> per page and window:
    clicks (page, user, button, ts)  --+       events, distinct-free max user --> sink

Views come in event-time order; clicks come shuffled: each click is displaced by less than
``--shuffle`` ms from its place, and the clicks source declares ``--lateness`` ms of allowed
lateness (Spark's ``withWatermark``). With ``--lateness`` at least ``--shuffle`` nothing is
late: the ingress puts both streams in one event-time order (the same in every run), and the
output equals the reference. With less, the clicks behind their watermark go to the dead
letters, each with its reason.

The input is generated from (seed, event index): view ``n`` at ``ts = 10 n`` ms, click ``n``
at ``ts = 10 n + 5`` (their event times interleave), pages and users drawn from 20 and 1,000.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.api import Dataflow, Source
from sparkflux.model.random import counter_random
from sparkflux.operators.time_window import TimeWindowAggregate

PAGES, USERS, STEP_MS = 20, 1_000, 10

VIEWS = pa.schema([pa.field("page", pa.int32(), nullable=False),
                   pa.field("user", pa.int32(), nullable=False),
                   pa.field("ts", pa.int64(), nullable=False)])
CLICKS = pa.schema([pa.field("page", pa.int32(), nullable=False),
                    pa.field("user", pa.int64(), nullable=False),
                    pa.field("button", pa.string(), nullable=False),
                    pa.field("ts", pa.int64(), nullable=False)])


@dataclass(frozen=True)
class TwoSourcesOptions:
    events: int = 200_000  # per source
    seed: int = 7
    shuffle: int = 2_000
    lateness: int = 2_000
    window: int = 5_000
    batch: int = 8192


def views(start: int, count: int, seed: int) -> pa.RecordBatch:
    n = np.arange(start, start + count, dtype=np.int64)
    return pa.RecordBatch.from_arrays([
        pa.array((counter_random(seed, 1, n) % np.uint64(PAGES)).astype(np.int32)),
        pa.array((counter_random(seed, 2, n) % np.uint64(USERS)).astype(np.int32)),
        pa.array(n * STEP_MS)], schema=VIEWS)


def clicks(start: int, count: int, seed: int, shuffle: int) -> pa.RecordBatch:
    """Clicks ``start ..`` in the order they arrive: sorted by ``ts + jitter`` with a jitter
    below ``shuffle`` (so each comes less than ``shuffle`` ms behind the largest time before
    it). Arrival position depends on neighbours, so the whole stream is ordered at once."""
    n = np.arange(start, start + count, dtype=np.int64)
    ts = n * STEP_MS + STEP_MS // 2
    return pa.RecordBatch.from_arrays([
        pa.array((counter_random(seed, 3, n) % np.uint64(PAGES)).astype(np.int32)),
        pa.array((counter_random(seed, 4, n) % np.uint64(USERS)).astype(np.int64)),
        pa.array(np.char.add("b", (counter_random(seed, 5, n) % np.uint64(4)).astype(str))),
        pa.array(ts)], schema=CLICKS)


def arrival_order(events: int, seed: int, shuffle: int) -> np.ndarray:
    """The clicks' arrival order: index ``n`` arrives at rank of ``ts_n + jitter_n``."""
    n = np.arange(events, dtype=np.int64)
    if shuffle <= 0:
        return n
    jitter = (counter_random(seed, 6, n) % np.uint64(shuffle)).astype(np.int64)
    return np.argsort(n * STEP_MS + jitter, kind="stable")


class Views(Source):
    schema = VIEWS
    event_time = "ts"

    def __init__(self, o: TwoSourcesOptions) -> None:
        self.o = o

    def total(self) -> int:
        return self.o.events

    def batches(self) -> Iterator[pa.RecordBatch]:
        o = self.o
        for start in range(0, o.events, o.batch):
            yield views(start, min(o.batch, o.events - start), o.seed)


class Clicks(Source):
    schema = CLICKS
    event_time = "ts"

    def __init__(self, o: TwoSourcesOptions) -> None:
        self.o = o
        self.lateness = o.lateness

    def total(self) -> int:
        return self.o.events

    def batches(self) -> Iterator[pa.RecordBatch]:
        o = self.o
        every = clicks(0, o.events, o.seed, o.shuffle)
        order = arrival_order(o.events, o.seed, o.shuffle)
        for start in range(0, o.events, o.batch):
            yield every.take(pa.array(order[start:start + o.batch]))


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=7, help="workload seed")
    parser.add_argument("--shuffle", type=int, default=2_000,
                        help="clicks arrive up to this many ms out of event-time order")
    parser.add_argument("--lateness", type=int, default=2_000,
                        help="the clicks source's allowed lateness (ms)")
    parser.add_argument("--window-ms", type=int, default=5_000, help="tumbling window (ms)")


def options(args: argparse.Namespace) -> TwoSourcesOptions:
    return TwoSourcesOptions(events=args.events, seed=args.seed, shuffle=args.shuffle,
                             lateness=args.lateness, window=args.window_ms)


def build(o: TwoSourcesOptions) -> Dataflow:
    df = Dataflow("two_sources")
    v = df.source(Views(o), name="views")
    c = df.source(Clicks(o), name="clicks")
    (v.union(c)
      .exchange(by=["page"])
      .apply(TimeWindowAggregate(by=["page"], time="ts", value="user", size=o.window,
                                 aggs={"events": "count", "top_user": "max"}),
             name="per_page")
      .sink(name="out"))
    return df


def reference(spark, o: TwoSourcesOptions):  # noqa: ANN001, ANN201 (pyspark types optional)
    """The expected rows (no sequence numbers), in Spark SQL: the union of both inputs
    grouped by page and tumbling window."""
    from pyspark.sql import functions as F

    def frame(batch: pa.RecordBatch):  # noqa: ANN202
        return spark.createDataFrame(pa.Table.from_batches([batch]).to_pandas())

    v = frame(views(0, o.events, o.seed)).select("page", F.col("user").cast("long"), "ts")
    c = frame(clicks(0, o.events, o.seed, o.shuffle)).select("page", "user", "ts")
    both = v.unionByName(c).withColumn(
        "window_start", (F.floor(F.col("ts") / o.window) * o.window).cast("long"))
    return both.groupBy("page", "window_start").agg(
        F.count("*").alias("events"), F.max("user").alias("top_user")).select(
        "page", "window_start", (F.col("window_start") + o.window).alias("window_end"),
        "events", "top_user")
