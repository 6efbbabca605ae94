"""Nexmark queries Q0-Q8 as sparkflux dataflows, each with its Spark SQL reference.

Every query reads the three streams it needs (``generator.py``) as sources with
``date_time`` as their event time; the reference reads the same records as Spark tables
``person``, ``auction`` and ``bid`` and says in SQL what the dataflow computes.

- Q0 pass-through: every bid, through one exchange.
- Q1 currency conversion: every bid with its price in euro (``price * 0.908``).
- Q2 selection: the bids on auctions whose id is a multiple of 123.
- Q3 local item suggestion: persons in OR, ID or CA joined with their auctions in category
  10 (``person.id = auction.seller``), within ``--retention`` ms of each other (the join's
  state bound; the generator's sellers are recent persons, so none is missed).
- Q4 average price per category: each auction's winning bid (its highest bid between its
  opening and its expiry), averaged per category over tumbling windows of the auctions'
  expiry times.
- Q5 hot items: the auctions with the most bids per sliding window (10 s, every 2 s): one
  window aggregate (a count per auction and window), then a top-1 of every window with its
  ties kept (``WindowTopK(by=[], ties=True)`` after an exchange on the window's start).
- Q7 highest bid: the bids with the highest price per tumbling 10 s window, ties all kept: a
  top-1 with ties over all the bids (``exchange(by=[])``: one partition, a global top).
- Q8 monitor new users: persons who opened an auction in the 10 s tumbling window they
  registered in (a join on ``id = seller`` and the window).
- ``bidders`` (not one of Nexmark's numbered queries) running statistics per bidder: on
  every tenth bid of a bidder, their bids, total spent and highest bid so far. The state is
  one row per bidder who ever bid: it grows with the number of persons (one event in 50),
  never shrinks, and outgrows any fixed memory budget; the memory test of the docs.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from generator import KINDS, SCHEMAS, batches, kind_of, table  # a module beside this one

from sparkflux.dataflow.api import Dataflow, Source
from sparkflux.operators.group import GroupAggregate
from sparkflux.operators.stateless import Filter, Map, Project
from sparkflux.operators.time_window import TimeWindowAggregate
from sparkflux.operators.topk import KeyedTopK, WindowTopK

WINDOW, SLIDE = 10_000, 2_000  # ms of event time
MAX_DURATION = 10_000  # ms: the longest an auction is open (generator.py)
QUERIES: tuple[int | str, ...] = (0, 1, 2, 3, 4, 5, 7, 8, "bidders")
EVERY = 10  # bidders: the running statistics of every EVERY-th bid of a bidder


@dataclass(frozen=True)
class NexmarkOptions:
    query: int | str = 0
    events: int = 1_000_000
    seed: int = 7
    rate: int = 10_000  # events per second of event time
    retention: int = 60_000  # ms: Q3's join state bound
    batch: int = 8192


class NexmarkStream(Source):
    """One of the three streams (``kind``) of the first ``events`` events."""

    event_time = "date_time"

    def __init__(self, kind: str, o: NexmarkOptions) -> None:
        self.kind, self.o = kind, o
        self.schema = SCHEMAS[kind]

    def batches(self) -> Iterator[pa.RecordBatch]:
        o = self.o
        yield from batches(self.kind, o.events, o.seed, o.rate, o.batch)


def _window_of(col: str, size: int) -> Map:
    """``w``: the start of the tumbling window of ``size`` ms that ``col`` falls in."""
    return Map(lambda b: {"w": pc.multiply(pc.divide(b.column(col), size), size)},
               [pa.field("w", pa.int64())])


def q0(df: Dataflow, o: NexmarkOptions) -> None:
    df.source(NexmarkStream("bid", o), name="bids").exchange(by=["auction"]).sink(name="out")


def q1(df: Dataflow, o: NexmarkOptions) -> None:
    (df.source(NexmarkStream("bid", o), name="bids")
       .apply(Map(lambda b: {"price": pc.multiply(b.column("price"), 0.908)},
                  [pa.field("price", pa.float64())]), name="euro")
       .exchange(by=["auction"]).sink(name="out"))


def q2(df: Dataflow, o: NexmarkOptions) -> None:
    (df.source(NexmarkStream("bid", o), name="bids")
       .apply(Filter(pc.equal(pc.subtract(pc.field("auction"), pc.multiply(
           pc.divide(pc.field("auction"), 123), 123)), 0)), name="select")
       .apply(Project(["auction", "price"]), name="columns")
       .exchange(by=["auction"]).sink(name="out"))


def q3(df: Dataflow, o: NexmarkOptions) -> None:
    persons = (df.source(NexmarkStream("person", o), name="persons")
                 .apply(Filter(pc.field("state").isin(["OR", "ID", "CA"])), name="west"))
    auctions = (df.source(NexmarkStream("auction", o), name="auctions")
                  .apply(Filter(pc.field("category") == 10), name="category10"))
    (persons.join(auctions, left_on=["id"], right_on=["seller"], time="date_time",
                  window=o.retention, name="sellers")
            .apply(Project(["name", "city", "state", "id_right"]), name="columns")
            .sink(name="out"))


def q5(df: Dataflow, o: NexmarkOptions) -> None:
    # The second step ranks the counts of every window_start: its windows, SLIDE long over
    # window_start (a multiple of SLIDE), each hold one window_start, and the exchange puts
    # all the counts of one window_start in one partition, so by=[] is the whole window.
    (df.source(NexmarkStream("bid", o), name="bids").exchange(by=["auction"])
       .apply(TimeWindowAggregate(by=["auction"], time="date_time", size=WINDOW, slide=SLIDE,
                                  aggs={"num": "count"}), name="bids_per_auction")
       .exchange(by=["window_start"])
       .apply(WindowTopK(by=[], time="window_start", size=SLIDE, order=[("num", "desc")],
                         ties=True, names=("w_start", "w_end")), name="hot")
       .apply(Project(["auction", "num", "window_start", "window_end"]), name="columns")
       .sink(name="out"))


def q7(df: Dataflow, o: NexmarkOptions) -> None:
    (df.source(NexmarkStream("bid", o), name="bids")
       .exchange(by=[])
       .apply(WindowTopK(by=[], time="date_time", size=WINDOW, order=[("price", "desc")],
                         ties=True, names=("w", "w_end")), name="highest")
       .apply(Project(["auction", "bidder", "price", "date_time", "w"]), name="columns")
       .sink(name="out"))


def q8(df: Dataflow, o: NexmarkOptions) -> None:
    persons = (df.source(NexmarkStream("person", o), name="persons")
                 .apply(_window_of("date_time", WINDOW), name="person_window"))
    auctions = (df.source(NexmarkStream("auction", o), name="auctions")
                  .apply(_window_of("date_time", WINDOW), name="auction_window"))
    (persons.join(auctions, left_on=["id", "w"], right_on=["seller", "w"], time="date_time",
                  window=WINDOW, name="new_sellers")
            .apply(Project(["id", "name", "w", "reserve"]), name="columns")
            .sink(name="out"))


def bidders(df: Dataflow, o: NexmarkOptions) -> None:
    n = pc.field("bids")
    (df.source(NexmarkStream("bid", o), name="bids").exchange(by=["bidder"])
       .apply(GroupAggregate(by=["bidder"], aggs={"bids": "count", "spent": ("sum", "price"),
                                                  "top": ("max", "price")},
                             carry=["date_time"]), name="per_bidder")
       .apply(Filter(pc.equal(pc.subtract(n, pc.multiply(pc.divide(n, EVERY), EVERY)), 0)),
              name="every_tenth")
       .sink(name="out"))


def q4(df: Dataflow, o: NexmarkOptions) -> None:
    auctions = df.source(NexmarkStream("auction", o), name="auctions")
    bids = df.source(NexmarkStream("bid", o), name="bids")
    in_time = ((pc.field("date_time_right") >= pc.field("date_time"))
               & (pc.field("date_time_right") <= pc.field("expires")))
    (auctions.join(bids, left_on=["id"], right_on=["auction"], time="date_time",
                   window=MAX_DURATION, name="auction_bids")
             .apply(Filter(in_time), name="before_expiry")
             .apply(KeyedTopK(by=["id"], order=[("price", "desc"), ("date_time_right", "asc")],
                              until="expires"), name="winning_bid")
             .exchange(by=["category"])
             .apply(TimeWindowAggregate(by=["category"], time="expires", size=WINDOW,
                                        aggs={"avg_price": ("avg", "price"),
                                              "auctions": "count"}),
                    name="avg_per_category")
             .sink(name="out"))


BUILDERS: dict[int | str, Callable[[Dataflow, NexmarkOptions], None]] = {
    0: q0, 1: q1, 2: q2, 3: q3, 4: q4, 5: q5, 7: q7, 8: q8, "bidders": bidders}

# -- references ------------------------------------------------------------------------------
SQL: dict[int | str, str] = {
    0: "SELECT auction, bidder, price, channel, date_time FROM bid",
    1: "SELECT auction, bidder, price * 0.908 AS price, channel, date_time FROM bid",
    2: "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    3: """SELECT p.name, p.city, p.state, a.id AS id_right
          FROM person p JOIN auction a ON p.id = a.seller
          WHERE p.state IN ('OR', 'ID', 'CA') AND a.category = 10
            AND abs(p.date_time - a.date_time) <= {retention}""",
    4: """WITH winning AS (
            SELECT a.id, a.category, a.expires, max(b.price) AS price
            FROM auction a JOIN bid b ON a.id = b.auction
            WHERE b.date_time >= a.date_time AND b.date_time <= a.expires
            GROUP BY a.id, a.category, a.expires)
          SELECT category, CAST(floor(expires / {size}) * {size} AS BIGINT) AS window_start,
                 CAST(floor(expires / {size}) * {size} AS BIGINT) + {size} AS window_end,
                 avg(price) AS avg_price, count(*) AS auctions
          FROM winning GROUP BY category, floor(expires / {size})""",
    5: """WITH windows AS (
            SELECT auction, w AS window_start FROM bid
            LATERAL VIEW explode(sequence(
                CAST(floor(date_time / {slide}) * {slide} AS BIGINT) - {size} + {slide},
                CAST(floor(date_time / {slide}) * {slide} AS BIGINT), {slide})) t AS w),
          counts AS (SELECT auction, window_start, count(*) AS num
                     FROM windows GROUP BY auction, window_start),
          tops AS (SELECT window_start, max(num) AS top FROM counts GROUP BY window_start)
          SELECT c.auction, c.num, c.window_start, c.window_start + {size} AS window_end
          FROM counts c JOIN tops t ON c.window_start = t.window_start AND c.num = t.top""",
    7: """WITH b AS (SELECT *, CAST(floor(date_time / {size}) * {size} AS BIGINT) AS w FROM bid),
          tops AS (SELECT w, max(price) AS top FROM b GROUP BY w)
          SELECT b.auction, b.bidder, b.price, b.date_time, b.w
          FROM b JOIN tops t ON b.w = t.w AND b.price = t.top""",
    8: """WITH p AS (SELECT *, CAST(floor(date_time / {size}) * {size} AS BIGINT) AS w
                   FROM person),
          a AS (SELECT *, CAST(floor(date_time / {size}) * {size} AS BIGINT) AS w
                FROM auction)
          SELECT p.id, p.name, p.w, a.reserve FROM p JOIN a ON p.id = a.seller AND p.w = a.w""",
    # n: the bid's event number, the order the dataflow's single source delivers bids in
    "bidders": """SELECT * FROM (
            SELECT bidder, count(*) OVER w AS bids, sum(price) OVER w AS spent,
                   max(price) OVER w AS top, date_time FROM bid
            WINDOW w AS (PARTITION BY bidder ORDER BY n
                         ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
          WHERE bids % {every} = 0""",
}


def reference(spark: Any, o: NexmarkOptions) -> Any:
    """The query's expected rows as a Spark DataFrame (no sequence numbers). The streams go
    to Spark as Parquet files (read by its tasks, not held in the driver's heap: 20M events
    are over a GB), in a directory removed when this process ends."""
    where = tempfile.mkdtemp(prefix="sparkflux-nexmark-")
    atexit.register(shutil.rmtree, where, True)
    for kind in ("person", "auction", "bid"):
        t = table(kind, o.events, o.seed, o.rate)
        if kind == "bid":
            n = np.arange(o.events, dtype=np.int64)
            t = t.append_column("n", pa.array(n[kind_of(n) == KINDS.index("bid")]))
        pq.write_table(t, f"{where}/{kind}.parquet")
        spark.read.parquet(f"{where}/{kind}.parquet").createOrReplaceTempView(kind)
    return spark.sql(SQL[o.query].format(retention=o.retention, size=WINDOW, slide=SLIDE,
                                         every=EVERY))
