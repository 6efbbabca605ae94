"""A click-stream dataflow: per user and page, clicks and dwell time in one-second windows.

    clicks -> page name (Map) -> drop bounces (Filter) --exchange(user, page)-->
           tumbling one-second event-time window: clicks, avg and max dwell --> sink

Its reference is plain Spark (a filter and a group-by) and does not number its rows as the
engine does: it is checked by the rows digest (``sparkflux run examples/clicks.py --check``).

The workload is generated deterministically from (seed, event index), so a run and its
reference see the same input: click ``n`` is by user ``r1 % USERS`` on page ``r2 % 8``
(``PAGES``), dwells ``r3 % 5000`` ms, at event time ``ts = 100 * n`` microseconds, where
``r1, r2, r3`` are counter-based random numbers of ``n``. Semantics:

- ``page`` is ``PAGES[page_id]``; a click with ``dwell_ms < BOUNCE_MS`` is a bounce, dropped;
- per ``(user, page)`` and window ``[w, w + WINDOW_US)`` with ``w`` a multiple of
  ``WINDOW_US``, one row once the window has closed: ``user, page, window_start = w,
  window_end = w + WINDOW_US, clicks`` (count), ``avg_dwell_ms``, ``max_dwell_ms``. Event
  times only grow, so no click is late and every window closes (the last ones at the end of
  the input).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.dataflow.api import Dataflow, Source
from sparkflux.model.random import counter_random
from sparkflux.operators.stateless import Filter, Map
from sparkflux.operators.time_window import TimeWindowAggregate

USERS = 200
PAGES = ("/", "/search", "/item", "/cart", "/checkout", "/help", "/account", "/päge")
MAX_DWELL_MS = 5_000
BOUNCE_MS = 200
TS_STEP_US = 100
WINDOW_US = 1_000_000

SCHEMA = pa.schema([
    pa.field("user", pa.int32(), nullable=False),
    pa.field("page_id", pa.int32(), nullable=False),
    pa.field("dwell_ms", pa.int32(), nullable=False),
    pa.field("ts", pa.int64(), nullable=False),
])


@dataclass(frozen=True)
class ClicksOptions:
    events: int = 200_000
    seed: int = 11
    batch: int = 8192


def generate(start: int, count: int, seed: int) -> pa.RecordBatch:
    """Clicks ``start .. start+count-1`` as one Arrow batch."""
    n = np.arange(start, start + count, dtype=np.int64)
    user = counter_random(seed, 1, n) % np.uint64(USERS)
    page = counter_random(seed, 2, n) % np.uint64(len(PAGES))
    dwell = counter_random(seed, 3, n) % np.uint64(MAX_DWELL_MS)
    return pa.RecordBatch.from_arrays(
        [pa.array(user.astype(np.int32)), pa.array(page.astype(np.int32)),
         pa.array(dwell.astype(np.int32)), pa.array(n * TS_STEP_US)], schema=SCHEMA)


class ClicksSource(Source):
    """The click generator as a bounded source."""

    schema = SCHEMA
    event_time = "ts"

    def __init__(self, options: ClicksOptions) -> None:
        self.options = options

    def total(self) -> int:
        return self.options.events

    def batches(self) -> Iterator[pa.RecordBatch]:
        o = self.options
        for start in range(0, o.events, o.batch):
            yield generate(start, min(o.batch, o.events - start), o.seed)


def page_name(batch: pa.RecordBatch) -> dict[str, pa.Array]:
    return {"page": pc.take(pa.array(PAGES), batch.column("page_id"))}


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=11, help="workload seed")


def options(args: argparse.Namespace) -> ClicksOptions:
    return ClicksOptions(events=args.events, seed=args.seed)


def build(opts: ClicksOptions) -> Dataflow:
    df = Dataflow("clicks")
    (
        df.source(ClicksSource(opts), name="clicks")
        .apply(Map(page_name, [pa.field("page", pa.string())]), name="page")
        .apply(Filter(pc.field("dwell_ms") >= BOUNCE_MS), name="no_bounces")
        .exchange(by=["user", "page"])
        .apply(TimeWindowAggregate(by=["user", "page"], time="ts", value="dwell_ms",
                                   size=WINDOW_US, aggs={"clicks": "count",
                                                         "avg_dwell_ms": "avg",
                                                         "max_dwell_ms": "max"}),
               name="per_second")
        .sink(name="out")
    )
    return df


def reference(spark, opts: ClicksOptions):  # noqa: ANN001, ANN201 (pyspark types optional)
    """The expected output as a Spark DataFrame, without ``_sn``/``_snm``."""
    from pyspark.sql import functions as F

    source = ClicksSource(opts)
    events = spark.createDataFrame(pa.Table.from_batches(list(source.batches()), SCHEMA))
    pages = F.array(*(F.lit(p) for p in PAGES))
    return (
        events.where(F.col("dwell_ms") >= BOUNCE_MS)
        .withColumn("page", F.element_at(pages, F.col("page_id") + 1))
        .withColumn("window_start", F.col("ts") - F.col("ts") % WINDOW_US)
        .groupBy("user", "page", "window_start")
        .agg(F.count("*").alias("clicks"), F.avg("dwell_ms").alias("avg_dwell_ms"),
             F.max("dwell_ms").alias("max_dwell_ms"))
        .withColumn("window_end", F.col("window_start") + WINDOW_US)
    )
