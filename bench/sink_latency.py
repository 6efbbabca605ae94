"""How soon a closed window is readable from a table: sparkflux's ``TableSink`` beside Spark
Structured Streaming's file sink, on the same files, in the same run.

Click files land in an inbox every ``--every`` seconds, each holding the next second of event
time (``ts``, int64 microseconds); both engines count clicks per page in tumbling 10-second
event-time windows and write a Parquet table. A window ``[w, w + 10 s)`` can close once event
time passes its end, that is when the first file with an event at or after ``w + 10 s`` lands
(its *closing file*). For each window this measures the time from its closing file's landing
to the moment its rows are readable, two ways:

- *committed*: a thread watches both directories every 10 ms for what makes rows readable:
  a new part file in sparkflux's table (written hidden and renamed into place), a new entry
  of Spark's ``_spark_metadata`` log (Spark reads the files its log names), and reads the
  windows in what was added; resolution 10 ms plus the read.
- *read*: ``spark.read.parquet`` of each table, in turn, every ``--poll`` seconds, until it
  returns the window's rows; each figure is late by up to a poll and two such reads (the
  median read's time is printed).

    sparkflux:  FileStreamSource -> exchange(page) -> TimeWindowAggregate(count) -> TableSink
    Spark SSS:  readStream.parquet -> withWatermark(0 s) -> groupBy(window, page).count()
                -> writeStream.parquet, append mode, a micro-batch every ``--trigger`` s

Prints one row per window and the medians of each measure, and their ratios (sparkflux /
Spark: below 0.5 is the goal). Run: ``.venv/bin/python bench/sink_latency.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sparkflux
from sparkflux.dataflow.api import Dataflow
from sparkflux.io import TableSink
from sparkflux.io.files import FileStreamSource
from sparkflux.operators.time_window import TimeWindowAggregate
from sparkflux.spark.launcher import spark_session

WINDOW_S = 10
FLUSH_INTERVAL = 0.2  # TableSink's: a closed window's rows are published within it
PAGES = 20
SCHEMA = pa.schema([pa.field("page", pa.int32(), nullable=False),
                    pa.field("user", pa.int32(), nullable=False),
                    pa.field("ts", pa.int64(), nullable=False)])


def clicks(second: int, per_second: int, rng: np.random.Generator) -> pa.Table:
    """One second of clicks, in event-time order."""
    ts = second * 1_000_000 + np.sort(rng.integers(0, 1_000_000, per_second))
    return pa.table({"page": rng.integers(0, PAGES, per_second).astype(np.int32),
                     "user": rng.integers(0, 10_000, per_second).astype(np.int32),
                     "ts": ts.astype(np.int64)}, schema=SCHEMA)


def land(inboxes: list[Path], second: int, table: pa.Table) -> float:
    """Write the file under a hidden name and rename it into every inbox; the landing time."""
    for inbox in inboxes:
        tmp = inbox / f".part-{second:05d}.parquet.tmp"
        pq.write_table(table, tmp)
        tmp.rename(inbox / f"part-{second:05d}.parquet")
    return time.time()


def sparkflux_flow(inbox: Path, table: Path) -> Dataflow:
    df = Dataflow("sink_latency")
    (df.source(FileStreamSource(inbox, SCHEMA, event_time="ts", end_marker="_DONE",
                                poll_interval=0.05), name="clicks")
       .exchange(by=["page"])
       .apply(TimeWindowAggregate(by=["page"], time="ts", size=WINDOW_S * 10**6,
                                  aggs={"clicks": "count"}), name="per_page")
       .sink(TableSink(table, flush_interval=FLUSH_INTERVAL), name="out"))
    return df


def start_spark_query(spark: Any, inbox: Path, table: Path, trigger: float) -> Any:
    from pyspark.sql import functions as F

    stream = (spark.readStream.schema("page INT, user INT, ts BIGINT")
              .parquet(str(inbox))
              .withColumn("t", F.timestamp_micros("ts"))
              .withWatermark("t", "0 seconds")
              .groupBy(F.window("t", f"{WINDOW_S} seconds"), "page").count()
              .select(F.unix_micros(F.col("window.start")).alias("window_start"), "page",
                      "count"))
    return (stream.writeStream.format("parquet").outputMode("append")
            .option("checkpointLocation", str(table.parent / "spark-checkpoint"))
            .trigger(processingTime=f"{int(trigger * 1000)} milliseconds")
            .start(str(table)))


def seen_windows(spark: Any, table: Path) -> set[int]:
    """The window starts (microseconds) ``spark.read.parquet`` returns rows of now."""
    try:
        df = spark.read.parquet(str(table))
        return {r[0] for r in df.select("window_start").distinct().collect()}
    except Exception:  # noqa: BLE001 - no file yet: nothing readable
        return set()


def committed_windows(table: Path, seen: set[str]) -> set[int]:
    """The window starts in what was committed to ``table`` since the names in ``seen``
    (which this adds to): sparkflux's new part files, Spark's new log entries' files."""
    found: set[int] = set()
    log = table / "_spark_metadata"
    if log.is_dir():  # Spark's file sink: an entry commits the files it names
        for entry in sorted(log.iterdir()):
            if entry.name.startswith(".") or entry.name in seen:
                continue
            seen.add(entry.name)
            for line in entry.read_text().splitlines()[1:]:
                file = unquote(urlparse(json.loads(line)["path"]).path)
                found |= set(pq.read_table(file, columns=["window_start"])
                             .column(0).to_pylist())
    elif table.is_dir():  # sparkflux's append table: a part file is readable once renamed
        for file in table.glob("part-*.parquet"):
            if file.name not in seen:
                seen.add(file.name)
                found |= set(pq.read_table(file, columns=["window_start"])
                             .column(0).to_pylist())
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=int, default=45, help="seconds of input (files)")
    p.add_argument("--every", type=float, default=1.0, help="a file lands every this often")
    p.add_argument("--per-second", type=int, default=2_000, help="clicks per file")
    p.add_argument("--poll", type=float, default=0.1, help="how often both tables are read")
    p.add_argument("--trigger", type=float, default=0.5, help="Spark's micro-batch interval")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sink-latency-"))
    inbox_f, inbox_s = work / "in-sparkflux", work / "in-spark"
    inbox_f.mkdir()
    inbox_s.mkdir()
    table_f, table_s = work / "sparkflux-table", work / "spark-table"
    spark = spark_session("local[8]")
    spark.sparkContext.setLogLevel("ERROR")
    query = sparkflux.start(sparkflux_flow(inbox_f, table_f), spark=spark, sites=2,
                            partitions=8, announce=None)
    spark_query = start_spark_query(spark, inbox_s, table_s, args.trigger)
    landed: dict[int, float] = {}  # second -> when its file landed
    first_seen: dict[str, dict[int, float]] = {"sparkflux": {}, "spark": {}}
    first_committed: dict[str, dict[int, float]] = {"sparkflux": {}, "spark": {}}
    stop = threading.Event()

    def watch() -> None:
        names: dict[str, set[str]] = {"sparkflux": set(), "spark": set()}
        while not stop.is_set():
            for name, table in (("sparkflux", table_f), ("spark", table_s)):
                now = time.time()
                for w in committed_windows(table, names[name]):
                    first_committed[name].setdefault(w, now)
            stop.wait(0.01)
    looks: list[float] = []  # how long each look at a table took: the real resolution

    def poll() -> None:
        while not stop.is_set():
            for name, table in (("sparkflux", table_f), ("spark", table_s)):
                now = time.time()
                for w in seen_windows(spark, table) - first_seen[name].keys():
                    first_seen[name][w] = now
                looks.append(time.time() - now)
            stop.wait(args.poll)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    rng = np.random.default_rng(7)
    # Both queries listening before the first file: sparkflux's sites connected and its
    # source read, Spark's first trigger waiting for data.
    ready = time.monotonic() + 120
    while not (query.status["message"] in ("running", "waiting for the source")
               and spark_query.status["message"] in ("Waiting for data to arrive",
                                                     "Waiting for next trigger")):
        if time.monotonic() > ready:
            sys.exit(f"not ready after 120 s: {query.status}, {spark_query.status}")
        time.sleep(0.1)
    for second in range(args.seconds):
        landed[second] = land([inbox_f, inbox_s], second, clicks(second, args.per_second, rng))
        print(f"\rfile {second + 1}/{args.seconds}", end="", file=sys.stderr, flush=True)
        time.sleep(args.every)  # the input's pace
    measured = {w * 1_000_000 for w in range(0, args.seconds - WINDOW_S, WINDOW_S)}
    deadline = time.monotonic() + 30  # then a window not seen is reported "never"
    while time.monotonic() < deadline and not all(
            measured <= seen.keys()
            for seen in (*first_seen.values(), *first_committed.values())):
        time.sleep(args.poll)
    stop.set()
    poller.join(30)
    watcher.join(30)
    print(file=sys.stderr)
    (inbox_f / "_DONE").touch()
    query.await_termination(60)
    spark.sparkContext.setLogLevel("OFF")  # stopping interrupts a micro-batch: its errors
    spark_query.stop()
    names = ("sparkflux", "spark")
    rows = []
    for w in range(0, args.seconds - WINDOW_S, WINDOW_S):
        at = landed[w + WINDOW_S]  # the closing file: the first second past the window's end
        start = w * 1_000_000
        rows.append((w, *(_after(first_committed[n].get(start), at) for n in names),
                     *(_after(first_seen[n].get(start), at) for n in names)))
    print(f"{'':>10} {'committed, s':^25} {'read by Spark, s':^25}")
    print(f"{'window':>10} {'sparkflux':>12} {'Spark SSS':>12} {'sparkflux':>12} "
          f"{'Spark SSS':>12}")
    for w, *xs in rows:
        print(f"{f'{w}-{w + WINDOW_S}':>10} " + " ".join(f"{_s(x):>12}" for x in xs))
    for label, col in (("committed", 1), ("read by Spark", 3)):
        mine = [r[col] for r in rows if r[col] is not None]
        theirs = [r[col + 1] for r in rows if r[col + 1] is not None]
        if mine and theirs:
            m, t = statistics.median(mine), statistics.median(theirs)
            print(f"median {label}: sparkflux {m:.2f} s, Spark Structured Streaming {t:.2f} s, "
                  f"ratio {m / t:.2f}")
    print(f"(poll {args.poll} s, trigger {args.trigger} s, TableSink flush_interval "
          f"{FLUSH_INTERVAL} s)")
    if looks:
        print(f"a read of one table by Spark (spark.read.parquet, distinct windows) took "
              f"{statistics.median(looks):.2f} s in the median, {max(looks):.2f} s at most")
    shutil.rmtree(work, ignore_errors=True)


def _after(t: float | None, since: float) -> float | None:
    return None if t is None else t - since


def _s(x: float | None) -> str:
    return "never" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    main()
