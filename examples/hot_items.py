"""Hot items: two sliding-window aggregates in a row.

    bids --exchange(item)--> count per (item, category) over sliding windows (hot)
         --exchange(category)--> per category and window: the largest count (top) --> sink

The first step counts each item's bids over windows of ``--size`` ms that start every
``--slide`` ms; the second takes, per category and first-level window, the largest of those
counts and how many items had bids. It is the shape of Nexmark's "hot items" query, and it
needs a window that closes only once the windows feeding it upstream, on every site, have
been released.

The input is generated deterministically from (seed, event index): bid ``n`` is for item
``hash(n) mod 1000``, four in five of them on the 50 hot items; its category is ``item mod
10``, its price ``1 + hash(n) mod 1000``, its event time ``ts = 2 n`` ms.
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

ITEMS, HOT_ITEMS, CATEGORIES, TS_STEP_MS = 1_000, 50, 10, 2

SCHEMA = pa.schema([pa.field("item", pa.int32(), nullable=False),
                    pa.field("category", pa.int32(), nullable=False),
                    pa.field("price", pa.int64(), nullable=False),
                    pa.field("ts", pa.int64(), nullable=False)])


@dataclass(frozen=True)
class HotItemsOptions:
    events: int = 200_000
    seed: int = 7
    size: int = 10_000
    slide: int = 2_000
    batch: int = 8192


def generate(start: int, count: int, seed: int) -> pa.RecordBatch:
    """Bids ``start .. start + count - 1``."""
    n = np.arange(start, start + count, dtype=np.int64)
    hot = counter_random(seed, 1, n) % np.uint64(5) != np.uint64(0)
    any_item = counter_random(seed, 2, n)
    item = np.where(hot, any_item % np.uint64(HOT_ITEMS), any_item % np.uint64(ITEMS))
    item = item.astype(np.int32)
    price = (counter_random(seed, 3, n) % np.uint64(1000) + np.uint64(1)).astype(np.int64)
    return pa.RecordBatch.from_arrays(
        [pa.array(item), pa.array(item % CATEGORIES), pa.array(price), pa.array(n * TS_STEP_MS)],
        schema=SCHEMA)


class Bids(Source):
    schema = SCHEMA
    event_time = "ts"

    def __init__(self, options: HotItemsOptions) -> None:
        self.options = options

    def total(self) -> int:
        return self.options.events

    def batches(self) -> Iterator[pa.RecordBatch]:
        o = self.options
        for start in range(0, o.events, o.batch):
            yield generate(start, min(o.batch, o.events - start), o.seed)


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=7, help="workload seed")
    parser.add_argument("--size", type=int, default=10_000, help="window size (ms)")
    parser.add_argument("--slide", type=int, default=2_000, help="window slide (ms)")


def options(args: argparse.Namespace) -> HotItemsOptions:
    return HotItemsOptions(events=args.events, seed=args.seed, size=args.size, slide=args.slide)


def build(opts: HotItemsOptions) -> Dataflow:
    df = Dataflow("hot_items")
    (df.source(Bids(opts), name="bids")
       .exchange(by=["item"])
       .apply(TimeWindowAggregate(by=["item", "category"], time="ts", value="price",
                                  size=opts.size, slide=opts.slide, aggs={"bids": "count"}),
              name="hot")
       .exchange(by=["category"])
       .apply(TimeWindowAggregate(by=["category"], time="window_start", value="bids",
                                  size=opts.slide, aggs={"top": "max", "items": "count"},
                                  names=("start", "end")),
              name="top")
       .sink(name="out"))
    return df


def reference(spark, opts: HotItemsOptions):  # noqa: ANN001, ANN201 (pyspark types optional)
    """The expected rows (no sequence numbers), in Spark SQL: each bid exploded into the
    ``size / slide`` windows it falls in, counted per item, then the largest count per
    category and window."""
    from pyspark.sql import functions as F

    rows = [generate(s, min(opts.batch, opts.events - s), opts.seed)
            for s in range(0, opts.events, opts.batch)]
    bids = spark.createDataFrame(pa.Table.from_batches(rows, SCHEMA).to_pandas())
    k = opts.size // opts.slide
    first = (F.floor(F.col("ts") / opts.slide) * opts.slide).cast("long")
    windows = bids.withColumn("window_start", F.explode(F.sequence(
        first - (k - 1) * opts.slide, first, F.lit(opts.slide).cast("long"))))
    hot = windows.groupBy("item", "category", "window_start").agg(F.count("*").alias("bids"))
    top = hot.groupBy("category", "window_start").agg(
        F.max("bids").cast("long").alias("top"), F.count("*").cast("long").alias("items"))
    return top.select("category", F.col("window_start").alias("start"),
                      (F.col("window_start") + opts.slide).alias("end"), "top", "items")
