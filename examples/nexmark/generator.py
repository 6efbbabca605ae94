"""The Nexmark online-auction workload: persons, auctions and bids, deterministic.

The standard model (the Nexmark benchmark as Beam, Flink and RisingWave generate it), drawn
from (seed, event number) with counter-based random numbers, so any range of events can be
made anywhere and a Spark reference sees exactly the engine's input:

- Event ``n`` of every 50 is a person when ``n % 50 == 0``, an auction when it is 1-3, a bid
  otherwise (proportions 1 : 3 : 46).
- Event time ``date_time = BASE_TIME + n * 1000 // rate`` ms (``rate`` events per second of
  event time, 10,000 by default): one global clock, so the three streams' event times
  interleave.
- A person's id is ``FIRST_PERSON + its number``; it lives in one of six states and ten cities.
- An auction's id is ``FIRST_AUCTION + its number``; its seller is a recent person (one in
  ``HOT_SELLER_RATIO`` auctions from the few hot sellers, the others from the last 100); its
  category is one of five; it expires 1 to 10 s of event time after it opens.
- A bid is for a recent auction (one in ``HOT_AUCTION_RATIO`` bids on the hot auctions, those
  whose number is a multiple of 50 among the last 1,000; the others from the last 1,000), by a
  recent person (hot bidders likewise), at a price of 1 to 10,000,000 cents (skewed low).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from sparkflux.model.random import counter_random

PROPORTION, PERSON_EVENTS, AUCTION_EVENTS = 50, 1, 3
BASE_TIME = 1_700_000_000_000  # ms
FIRST_PERSON, FIRST_AUCTION, FIRST_CATEGORY = 1000, 1000, 10
CATEGORIES = 5
HOT_SELLER_RATIO, HOT_AUCTION_RATIO, HOT_BIDDER_RATIO = 4, 2, 4
RECENT_PERSONS, RECENT_AUCTIONS = 100, 1000
STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
          "Seattle", "Kent", "Cheyenne")
NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter",
         "Walter")
CHANNELS = ("Google", "Facebook", "Baidu", "Apple")

PERSON = pa.schema([pa.field("id", pa.int64(), False), pa.field("name", pa.string(), False),
                    pa.field("city", pa.string(), False), pa.field("state", pa.string(), False),
                    pa.field("date_time", pa.int64(), False)])
AUCTION = pa.schema([pa.field("id", pa.int64(), False), pa.field("seller", pa.int64(), False),
                     pa.field("category", pa.int64(), False),
                     pa.field("initial_bid", pa.int64(), False),
                     pa.field("reserve", pa.int64(), False),
                     pa.field("date_time", pa.int64(), False),
                     pa.field("expires", pa.int64(), False)])
BID = pa.schema([pa.field("auction", pa.int64(), False), pa.field("bidder", pa.int64(), False),
                 pa.field("price", pa.int64(), False), pa.field("channel", pa.string(), False),
                 pa.field("date_time", pa.int64(), False)])
SCHEMAS = {"person": PERSON, "auction": AUCTION, "bid": BID}


def kind_of(n: np.ndarray) -> np.ndarray:
    """0 person, 1 auction, 2 bid."""
    rem = n % PROPORTION
    return np.where(rem < PERSON_EVENTS, 0, np.where(rem < PERSON_EVENTS + AUCTION_EVENTS, 1, 2))


def _persons_before(n: np.ndarray) -> np.ndarray:
    """How many persons events ``0 .. n-1`` hold."""
    return (n // PROPORTION) * PERSON_EVENTS + np.minimum(n % PROPORTION, PERSON_EVENTS)


def _auctions_before(n: np.ndarray) -> np.ndarray:
    rem = np.clip(n % PROPORTION - PERSON_EVENTS, 0, AUCTION_EVENTS)
    return (n // PROPORTION) * AUCTION_EVENTS + rem


def _time(n: np.ndarray, rate: int) -> np.ndarray:
    return BASE_TIME + n * 1000 // rate


def _pick(strings: tuple[str, ...], r: np.ndarray) -> pa.Array:
    return pa.array(np.array(strings, dtype=object)[(r % np.uint64(len(strings))).astype(np.int64)],
                    pa.string())


def _recent(count: np.ndarray, window: int, r: np.ndarray) -> np.ndarray:
    """A number among the last ``window`` of ``count`` made so far (>= 0)."""
    span = np.maximum(np.minimum(count, window), 1).astype(np.uint64)
    return np.maximum(count - 1 - (r % span).astype(np.int64), 0)


def persons(n: np.ndarray, seed: int, rate: int) -> pa.RecordBatch:
    number = _persons_before(n)
    return pa.RecordBatch.from_arrays([
        pa.array(FIRST_PERSON + number),
        _pick(NAMES, counter_random(seed, 1, n)),
        _pick(CITIES, counter_random(seed, 2, n)),
        _pick(STATES, counter_random(seed, 3, n)),
        pa.array(_time(n, rate))], schema=PERSON)


def auctions(n: np.ndarray, seed: int, rate: int) -> pa.RecordBatch:
    number = _auctions_before(n)
    made = _persons_before(n)  # persons that exist when the auction opens
    hot = counter_random(seed, 4, n) % np.uint64(HOT_SELLER_RATIO) == np.uint64(0)
    recent = _recent(made, RECENT_PERSONS, counter_random(seed, 5, n))
    hot_seller = (recent // HOT_SELLER_RATIO) * HOT_SELLER_RATIO
    seller = FIRST_PERSON + np.where(hot, hot_seller, recent)
    initial = (counter_random(seed, 6, n) % np.uint64(1000) + np.uint64(1)).astype(np.int64) * 100
    reserve = initial + (counter_random(seed, 7, n) % np.uint64(1000)).astype(np.int64) * 100
    t = _time(n, rate)
    duration = 1000 + (counter_random(seed, 8, n) % np.uint64(9001)).astype(np.int64)
    return pa.RecordBatch.from_arrays([
        pa.array(FIRST_AUCTION + number), pa.array(seller),
        pa.array(FIRST_CATEGORY + (counter_random(seed, 9, n) % np.uint64(CATEGORIES))
                 .astype(np.int64)),
        pa.array(initial), pa.array(reserve), pa.array(t), pa.array(t + duration)],
        schema=AUCTION)


def bids(n: np.ndarray, seed: int, rate: int) -> pa.RecordBatch:
    auctions_made = np.maximum(_auctions_before(n), 1)
    hot = counter_random(seed, 10, n) % np.uint64(HOT_AUCTION_RATIO) == np.uint64(0)
    recent = _recent(auctions_made, RECENT_AUCTIONS, counter_random(seed, 11, n))
    auction = FIRST_AUCTION + np.where(hot, (recent // 50) * 50, recent)
    persons_made = np.maximum(_persons_before(n), 1)
    hot_b = counter_random(seed, 12, n) % np.uint64(HOT_BIDDER_RATIO) == np.uint64(0)
    recent_p = _recent(persons_made, RECENT_PERSONS, counter_random(seed, 13, n))
    bidder = FIRST_PERSON + np.where(hot_b, (recent_p // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO,
                                     recent_p)
    # prices skewed low: 10^(uniform in [0, 7)) cents, from 1 cent to 100,000 dollars
    u = (counter_random(seed, 14, n) % np.uint64(7_000_000)).astype(np.float64) / 1_000_000
    price = np.maximum(np.floor(np.power(10.0, u)), 1).astype(np.int64)
    return pa.RecordBatch.from_arrays([
        pa.array(auction), pa.array(bidder), pa.array(price),
        _pick(CHANNELS, counter_random(seed, 15, n)), pa.array(_time(n, rate))], schema=BID)


MAKERS = {"person": persons, "auction": auctions, "bid": bids}
KINDS = ("person", "auction", "bid")


def events_of(kind: str, start: int, count: int, seed: int, rate: int) -> pa.RecordBatch:
    """The ``kind`` records among events ``start .. start + count - 1``, in event order."""
    n = np.arange(start, start + count, dtype=np.int64)
    mine = n[kind_of(n) == KINDS.index(kind)]
    return MAKERS[kind](mine, seed, rate)


def batches(kind: str, events: int, seed: int, rate: int, batch: int) -> Iterator[pa.RecordBatch]:
    """The ``kind`` stream of the first ``events`` events, in batches of about ``batch``
    events (each batch covers one range of event numbers)."""
    for start in range(0, events, batch):
        out = events_of(kind, start, min(batch, events - start), seed, rate)
        if out.num_rows:
            yield out


def table(kind: str, events: int, seed: int, rate: int) -> pa.Table:
    """The whole ``kind`` stream of the first ``events`` events."""
    return pa.Table.from_batches(list(batches(kind, events, seed, rate, 1 << 20)),
                                 schema=SCHEMAS[kind])
