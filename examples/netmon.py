"""The network-monitoring dataflow, the Flux papers' motivating example (thesis ch. 1).

    packets --exchange(src, dst)--> classify + session reconstruction (GB1)
            --exchange(app, src)--> count-window max/avg of session duration (GB2) --> sink

The workload (the SIGMOD paper's evaluation) is generated here, deterministically from
(seed, event index), so a run and its Spark SQL reference see the same input:

- Event ``n`` is a packet. Even ``n`` = 2s opens session ``s`` (kind 0, START); odd ``n``
  = 2(s + LAG) + 1 closes session ``s`` (kind 1, END), LAG sessions later. A session's
  ``(src, dst)`` is drawn from 10^5 pairs (1,000 sources x 100 destinations), its ``dport``
  from 1,000 ports; ``payload`` is 32 random letters; the event time ``ts`` (microseconds) is
  ``10 * n``, derived from the index, never from the wall clock.
- ``app`` is classified from the END packet: ``dport % 10`` (10^4 distinct (app, src)). With
  ``--cpu-work`` GB1 also substring-matches the payload against a dictionary of 40 random
  strings (the paper's CPU-bound variant); a hit on word ``m`` makes the app ``10 + m``.
- GB1 keeps one open session per (src, dst): START opens it (a second START restarts it), END
  emits ``(app, src, dur = ts_end - ts_start)`` and drops it; an END with no open session emits
  nothing. GB2 groups by (app, src) over a count window of history 2, slide 1, and emits
  ``(app, src, max_dur, avg_dur)`` on every other update.
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
from sparkflux.operators.count_window import CountWindowAggregate
from sparkflux.operators.session import SessionReconstruction
from sparkflux.operators.stateless import Map

LAG = 500
SOURCES = 1_000
DESTS = 100
PORTS = 1_000
PAYLOAD = 32
DICTIONARY_WORDS = 40
WORD_LEN = 3
TS_STEP_US = 10

SCHEMA = pa.schema(
    [
        pa.field("src", pa.int32(), nullable=False),
        pa.field("dst", pa.int32(), nullable=False),
        pa.field("sport", pa.int32(), nullable=False),
        pa.field("dport", pa.int32(), nullable=False),
        pa.field("kind", pa.int8(), nullable=False),
        pa.field("length", pa.int32(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("payload", pa.string(), nullable=False),
    ]
)


@dataclass(frozen=True)
class NetmonOptions:
    events: int = 1_000_000
    seed: int = 7
    cpu_work: bool = False
    batch: int = 8192
    bad_every: int = 0
    skew: bool = False
    input_dir: str | None = None  # read the packets from Parquet files there
    read_on: str = "driver"  # who reads those files: the driver or the sites


def generate(start: int, count: int, seed: int = 7, skew: bool = False) -> pa.RecordBatch:
    """Events ``start .. start+count-1`` of the workload, as one Arrow batch.

    With ``skew`` the sessions' (src, dst) pairs follow an 80/20 distribution: 80% of the
    sessions fall on 20% of the pairs (so on a fifth of the mini-partitions' keys)."""
    n = np.arange(start, start + count, dtype=np.int64)
    end = (n & 1).astype(bool)
    session = np.where(end, (n - 1) // 2 - LAG, n // 2)
    pairs = SOURCES * DESTS
    pair = counter_random(seed, 1, session) % np.uint64(pairs)
    if skew:
        hot = counter_random(seed, 8, session) % np.uint64(10) < np.uint64(8)
        hot_pairs = np.uint64(pairs // 5)
        pair = np.where(hot, pair % hot_pairs, hot_pairs + pair % np.uint64(pairs - pairs // 5))
    src = (pair // np.uint64(DESTS)).astype(np.int32)
    dst = (pair % np.uint64(DESTS)).astype(np.int32)
    dport = (counter_random(seed, 2, session) % np.uint64(PORTS)).astype(np.int32)
    sport = (counter_random(seed, 3, session) % np.uint64(64_512) + np.uint64(1024)).astype(
        np.int32
    )
    length = (counter_random(seed, 4, n) % np.uint64(1400) + np.uint64(64)).astype(np.int32)
    letters = counter_random(seed, 5, (n[:, None] * PAYLOAD + np.arange(PAYLOAD)).ravel())
    data = (letters % np.uint64(26) + np.uint64(ord("a"))).astype(np.uint8)
    offsets = np.arange(0, (count + 1) * PAYLOAD, PAYLOAD, dtype=np.int32)
    payload = pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(data))
    arrays = [
        pa.array(src),
        pa.array(dst),
        pa.array(sport),
        pa.array(dport),
        pa.array(end.astype(np.int8)),
        pa.array(length),
        pa.array(n * TS_STEP_US),
        payload,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def dictionary(seed: int = 7) -> list[str]:
    """The 40 random strings of the CPU-bound variant."""
    idx = np.arange(DICTIONARY_WORDS * WORD_LEN, dtype=np.int64)
    letters = (counter_random(seed, 6, idx) % np.uint64(26) + np.uint64(ord("a"))).astype(np.uint8)
    return [bytes(letters[i : i + WORD_LEN]).decode() for i in range(0, len(letters), WORD_LEN)]


def classify(batch: pa.RecordBatch, words: list[str] | None) -> pa.Array:
    """The app of each packet: ``dport % 10``, or ``10 + m`` for the first dictionary hit m."""
    app = pc.cast(pc.bit_wise_and(batch.column("dport"), 0x7FFFFFFF), pa.int32())
    app = pc.cast(pc.subtract(app, pc.multiply(pc.divide(app, 10), 10)), pa.int32())
    if not words:
        return app
    payload = batch.column("payload")
    hit = pa.array(np.full(len(batch), -1, dtype=np.int32))
    for m in range(len(words) - 1, -1, -1):
        found = pc.match_substring(payload, words[m])
        hit = pc.if_else(found, pa.scalar(m, pa.int32()), hit)
    return pc.if_else(pc.greater_equal(hit, 0), pc.add(hit, 10), app)


class NetmonSource(Source):
    """The packet generator as a bounded source; ``bad_every`` injects malformed records."""

    schema = SCHEMA
    event_time = "ts"

    def __init__(self, options: NetmonOptions) -> None:
        self.options = options

    def total(self) -> int:
        return self.options.events

    def batches(self) -> Iterator[pa.RecordBatch | list[dict]]:
        return self._from(0)

    def batches_from(self, records: int) -> Iterator[pa.RecordBatch | list[dict] | None]:
        """A restart: the generator starts at event ``records`` (with malformed records
        mixed in, a record is no event: the records are read again and dropped)."""
        if self.options.bad_every:
            return super().batches_from(records)
        return self._from(records)

    def _from(self, first: int) -> Iterator[pa.RecordBatch | list[dict]]:
        o = self.options
        for start in range(first, o.events, o.batch):
            batch = generate(start, min(o.batch, o.events - start), o.seed, o.skew)
            if o.bad_every and batch.num_rows:
                yield from _with_bad_records(batch, o.bad_every, start)
            else:
                yield batch


def _with_bad_records(batch: pa.RecordBatch, every: int, start: int) -> Iterator[list[dict]]:
    """The batch as plain records, with a malformed record after every ``every``-th event."""
    rows = batch.to_pylist()
    out: list[dict] = []
    for i, row in enumerate(rows):
        out.append(row)
        if (start + i + 1) % every == 0:
            bad = dict(row)
            if (start + i) // every % 2:
                del bad["dst"]  # a record missing a column
            else:
                bad["ts"] = "not-a-time"  # a wrong type
            out.append(bad)
    yield out


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=7, help="workload seed")
    parser.add_argument(
        "--cpu-work", action="store_true", help="CPU-bound variant: payload dictionary match"
    )
    parser.add_argument(
        "--bad-every", type=int, default=0, help="inject a malformed record every N events"
    )
    parser.add_argument("--skew", action="store_true",
                        help="80/20 keys: 80%% of sessions on 20%% of the (src, dst) pairs")
    parser.add_argument("--input-dir", default=None,
                        help="read the packets from the Parquet files landing in this "
                             "directory (the generator's events, written by another "
                             "process) until its _DONE marker, instead of generating them")
    parser.add_argument("--read-on", choices=["driver", "sites"], default="driver",
                        help="with --input-dir: the driver reads the files, or the sites "
                             "do (the rows never pass through the driver)")


def options(args: argparse.Namespace) -> NetmonOptions:
    return NetmonOptions(
        events=args.events,
        seed=args.seed,
        cpu_work=args.cpu_work,
        bad_every=args.bad_every,
        skew=getattr(args, "skew", False),
        input_dir=getattr(args, "input_dir", None),
        read_on=getattr(args, "read_on", "driver"),
    )


def build(opts: NetmonOptions, source: Source | None = None) -> Dataflow:
    """The dataflow: exchange(src,dst) -> GB1 -> exchange(app,src) -> GB2 -> sink. The
    packets come from the generator, or from ``source`` (e.g. files of its batches: its
    records in ``SCHEMA``, event time ``ts``)."""
    words = dictionary(opts.seed) if opts.cpu_work else None
    if source is None and opts.input_dir is not None:
        from sparkflux.io import FileStreamSource

        source = FileStreamSource(opts.input_dir, SCHEMA, event_time="ts", end_marker="_DONE",
                                  read_on=opts.read_on)
    df = Dataflow("netmon")
    sessions = (
        df.source(source or NetmonSource(opts), name="packets")
        .exchange(by=["src", "dst"])
        .apply(
            Map(lambda b: {"app": classify(b, words)}, [pa.field("app", pa.int32())]),
            name="classify",
        )
        .apply(
            SessionReconstruction(
                key=["src", "dst"], kind="kind", start=0, end=1, time="ts", carry=["app", "src"]
            ),
            name="sessions",
        )
    )
    stats = sessions.exchange(by=["app", "src"]).apply(
        CountWindowAggregate(
            by=["app", "src"],
            value="dur",
            history=2,
            slide=1,
            every=2,
            aggs={"max_dur": "max", "avg_dur": "avg"},
        ),
        name="stats",
    )
    stats.sink(name="out")
    return df


def reference(spark, opts: NetmonOptions):  # noqa: ANN001, ANN201 (pyspark types optional)
    """The expected output, computed by Spark SQL (see ``sparkflux.spark.reference``)."""
    from sparkflux.spark.reference import netmon_reference

    words = dictionary(opts.seed) if opts.cpu_work else None
    return netmon_reference(spark, NetmonSource(opts), words)
