"""Black-box tests of the PySpark API (``sparkflux.start``), written from the README alone
("From PySpark: the API, spark-submit, a cluster" and "Sources and sinks") and the examples
(``examples/notebook.py``, ``examples/netmon_job.py``, ``examples/netmon.py``).

Every expected result is computed independently of sparkflux's output: in plain Python for a
small Map/Filter dataflow of our own, and with the netmon example's own Spark SQL
``reference`` (collected to Python rows and compared row by row) for netmon.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import sparkflux
from sparkflux import RunFailed
from sparkflux.dataflow.api import Dataflow, Source
from sparkflux.io import FileStreamSource, TableSink, foreach_batch
from sparkflux.operators.stateless import Filter, Map

pytestmark = pytest.mark.spark

# --------------------------------------------------------------------------- our dataflow

KVT = pa.schema([
    pa.field("k", pa.int32(), nullable=False),
    pa.field("v", pa.int64(), nullable=False),
    pa.field("ts", pa.int64(), nullable=False),
])
KEYS = 97


def kvt(start: int, count: int) -> pa.RecordBatch:
    """Records ``start .. start+count-1``: k = n % 97, v = n, ts = n."""
    n = pa.array(range(start, start + count), pa.int64())
    k = pa.array([i % KEYS for i in range(start, start + count)], pa.int32())
    return pa.record_batch([k, n, n], schema=KVT)


def add_y(batch: pa.RecordBatch) -> dict[str, Any]:
    return {"y": pc.add(pc.multiply(batch.column("v"), 3), pc.cast(batch.column("k"), pa.int64()))}


def not_multiple_of_4(batch: pa.RecordBatch) -> Any:
    return pc.not_equal(pc.bit_wise_and(batch.column("v"), 3), 0)


def kvt_flow(source: Source, name: str = "kvt") -> Dataflow:
    """in -> exchange(k) -> Map(y = 3v + k) -> Filter(v % 4 != 0) -> out."""
    df = Dataflow(name)
    (df.source(source, name="in").exchange(by=["k"])
       .apply(Map(add_y, [pa.field("y", pa.int64())]), name="add_y")
       .apply(Filter(not_multiple_of_4), name="keep")
       .sink(name="out"))
    return df


def kvt_expected(values: Any) -> Counter:
    """The plain-Python result of ``kvt_flow`` over the records with these ``v``."""
    return Counter((v % KEYS, v, v, 3 * v + v % KEYS) for v in values if v % 4 != 0)


def kvt_rows(rows: Any) -> Counter:
    return Counter((r["k"], r["v"], r["ts"], r["y"]) for r in rows)


class Bounded(Source):
    """``total`` records of ``kvt`` in batches of ``batch``."""

    schema = KVT
    event_time = "ts"

    def __init__(self, total: int, batch: int = 5000) -> None:
        self.n, self.batch = total, batch

    def total(self) -> int:
        return self.n

    def batches(self) -> Iterator[pa.RecordBatch]:
        for start in range(0, self.n, self.batch):
            yield kvt(start, min(self.batch, self.n - start))


class Endless(Source):
    """An unbounded source: ``batch`` records every ``every`` seconds, "nothing yet" (None)
    between, until ``close()``. Counts what it handed over."""

    schema = KVT
    event_time = "ts"

    def __init__(self, batch: int = 1000, every: float = 0.02) -> None:
        self.batch, self.every = batch, every
        self.closed = threading.Event()
        self.close_calls = 0
        self.handed = 0

    def batches(self) -> Iterator[pa.RecordBatch | None]:
        due = time.monotonic()
        while not self.closed.is_set():
            if time.monotonic() < due:
                yield None
                continue
            due += self.every
            b = kvt(self.handed, self.batch)
            self.handed += self.batch
            yield b

    def close(self) -> None:
        self.close_calls += 1
        self.closed.set()


def table_rows(spark: Any, path: Path) -> list[Any]:
    return spark.read.parquet(str(path)).collect()


def hidden_leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith("."))


# --------------------------------------------------------------------------- netmon helpers

def netmon_expected(netmon: Any, spark: Any, opts: Any) -> Counter:
    """netmon's Spark SQL reference, collected to plain rows (floats rounded)."""
    ref = netmon.reference(spark, opts)
    return Counter(_norm(r.asDict(), NETMON_COLUMNS) for r in ref.collect())


NETMON_COLUMNS = ("app", "src", "max_dur", "avg_dur", "_sn", "_snm")


def _norm(row: dict, columns: tuple[str, ...]) -> tuple:
    return tuple(round(float(row[c]), 6) if isinstance(row[c], float) else int(row[c])
                 for c in columns)


def netmon_table(spark: Any, path: Path) -> Counter:
    return Counter(_norm(r.asDict(), NETMON_COLUMNS) for r in table_rows(spark, path))


def land_parquet(netmon: Any, inbox: Path, events: int, per_file: int, pace: float,
                 source: FileStreamSource, first_only: bool = False) -> threading.Thread:
    """Land netmon's packets as Parquet files (hidden name, then renamed into place); the
    first file at once, the others ``pace`` apart once the source has read the first."""
    starts = list(range(0, events, per_file))

    def write(i: int, start: int) -> None:
        batch = netmon.generate(start, min(per_file, events - start))
        tmp = inbox / f".part-{i:05d}.parquet.tmp"
        pq.write_table(pa.Table.from_batches([batch]), tmp)
        os.replace(tmp, inbox / f"part-{i:05d}.parquet")

    write(0, starts[0])

    def rest() -> None:
        deadline = time.monotonic() + 60
        while not source.position().file and time.monotonic() < deadline:
            time.sleep(0.05)
        for i, start in enumerate(starts[1:], 1):
            time.sleep(pace)
            write(i, start)

    t = threading.Thread(target=rest, daemon=True)
    t.start()
    return t


# --------------------------------------------------------------------------- 1. start

def test_start_status_metrics_await_and_exception(spark: Any, tmp_path: Path) -> None:
    total = 100_000
    table = tmp_path / "table"
    query = sparkflux.start(kvt_flow(Bounded(total)), spark=spark, sink=TableSink(table),
                            sites=2, partitions=8, ha="none", rate=40_000, announce=None)
    running: list[dict] = []
    snapshot = None
    t0 = time.monotonic()
    early = query.await_termination(0.2)
    while not query.await_termination(timeout=0.3):
        s = query.status
        running.append(s)
        if snapshot is None and s.get("output_records", 0) > 0:
            snapshot = query.metrics
        assert time.monotonic() - t0 < 60, f"the run does not end: {s}"
    assert early is False, "await_termination(0.2) returned True before the run ended"
    assert running, "the run ended before its status could be read once"

    keys = {"message", "input", "input_records", "output_records", "sites", "failures"}
    assert keys <= set(running[-1]), f"status lacks {keys - set(running[-1])}: {running[-1]}"
    assert any(s["message"] == "running" for s in running), [s["message"] for s in running]
    ins = [s["input_records"] for s in running]
    outs = [s["output_records"] for s in running]
    assert ins == sorted(ins) and outs == sorted(outs), (ins, outs)
    assert all(0 <= s["input_records"] <= total for s in running)
    assert all(s["failures"] == 0 for s in running)
    assert any(0 < s["input_records"] < total for s in running), "no status mid-input"
    assert any(s["sites"] == 2 for s in running), [s["sites"] for s in running]

    assert snapshot is not None, "no metrics snapshot while the run was producing output"
    assert snapshot["output_tuples"] > 0 and snapshot["input_tuples"] <= total

    expected = kvt_expected(range(total))
    assert query.await_termination(0) is True and query.await_termination(5) is True
    assert query.exception() is None
    after = query.status
    assert after["message"] != "running", after
    assert after["input_records"] == total, after
    assert after["output_records"] == sum(expected.values()), after
    m = query.metrics
    assert m["input_tuples"] == total and m["output_tuples"] == sum(expected.values()), m
    assert m["dead_letters"] == 0 and m["kills"] == 0 and m["duration_s"] > 0
    assert m["output_tuples"] >= snapshot["output_tuples"]

    rows = table_rows(spark, table)
    assert kvt_rows(rows) == expected
    sns = [r["_sn"] for r in rows]
    assert len(set(zip(sns, (r["_snm"] for r in rows), strict=True))) == len(rows)


# --------------------------------------------------------------------------- 2. stop

def start_endless(spark: Any, table: Path, ha: str, until: int) -> tuple[Any, Any]:
    """(query, source): an unbounded source into a TableSink at ``table``, once at least
    ``until`` records are out (within 60 s; the run must not end by itself)."""
    source = Endless(batch=500, every=0.01)
    query = sparkflux.start(kvt_flow(source), spark=spark, sink=TableSink(table),
                            sites=2, partitions=8, ha=ha, announce=None)
    t0 = time.monotonic()
    while query.status.get("output_records", 0) < until:
        assert query.await_termination(0.2) is False, "an unbounded run ended by itself"
        assert time.monotonic() - t0 < 60, query.status
    return query, source


def test_stop_an_unbounded_source(spark: Any, tmp_path: Path) -> None:
    table = tmp_path / "table"
    query, source = start_endless(spark, table, "none", 20_000)
    stopped = query.stop()
    assert stopped is True
    assert query.await_termination(30) is True
    assert query.exception() is None
    assert source.close_calls >= 1

    m = query.metrics
    admitted = m["input_tuples"]
    assert admitted == source.handed, (admitted, source.handed)
    expected = kvt_expected(range(admitted))
    assert m["output_tuples"] == sum(expected.values())
    rows = table_rows(spark, table)
    got = kvt_rows(rows)
    assert sum(got.values()) == len(rows) and max(got.values()) == 1, "duplicates"
    assert got == expected
    assert (table / "_sparkflux_table.json").exists()
    assert hidden_leftovers(table) == []


# --------------------------------------------------------------------------- 3. abort

def test_abort_ends_the_run_as_a_failure(spark: Any) -> None:
    source = Endless(batch=500, every=0.01)
    seen: list[pa.RecordBatch] = []
    sink = foreach_batch(lambda b, lo, hi: seen.append(b))
    query = sparkflux.start(kvt_flow(source), spark=spark, sink=sink, sites=2, partitions=8,
                            ha="none", announce=None)
    t0 = time.monotonic()
    while query.status.get("output_records", 0) < 5_000:
        assert query.await_termination(0.2) is False
        assert time.monotonic() - t0 < 60, query.status
    query.abort()
    t1 = time.monotonic()
    with pytest.raises(RunFailed):
        query.await_termination(30)
    assert time.monotonic() - t1 < 15, "abort did not end the run at once"
    assert query.exception() is not None
    assert query.status["message"] != "running", query.status
    with pytest.raises(RunFailed):
        query.await_termination(0)


# --------------------------------------------------------------------------- 4. files

def test_parquet_files_landing_into_a_table_idle_timeout(netmon: Any, spark: Any,
                                                         tmp_path: Path) -> None:
    events, per_file = 100_000, 20_000
    inbox, table = tmp_path / "inbox", tmp_path / "table"
    inbox.mkdir()
    source = FileStreamSource(inbox, netmon.SCHEMA, event_time="ts", idle_timeout=3.0)
    opts = netmon.NetmonOptions(events=events)
    lander = land_parquet(netmon, inbox, events, per_file, 0.4, source)
    query = sparkflux.start(netmon.build(opts, source=source), spark=spark,
                            sink=TableSink(table), sites=2, partitions=8, ha="none",
                            dataflow_file=netmon.__file__, announce=None)
    assert query.await_termination(60) is True
    lander.join(5)
    assert query.exception() is None
    m = query.metrics
    assert m["input_tuples"] == events, m["input_tuples"]
    assert m["dead_letters"] == 0
    got = netmon_table(spark, table)
    expected = netmon_expected(netmon, spark, opts)
    assert sum(got.values()) == sum(expected.values())
    assert got == expected
    assert hidden_leftovers(table) == []


def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_json_lines_malformed_to_dead_letters_max_files(spark: Any, tmp_path: Path) -> None:
    inbox, table, dead = tmp_path / "inbox", tmp_path / "table", tmp_path / "dead.jsonl"
    inbox.mkdir()
    per_file = 2_000
    files = []
    for i in range(3):
        recs = [{"k": v % KEYS, "v": v, "ts": v, "extra": "ignored"}
                for v in range(i * per_file, (i + 1) * per_file)]
        files.append([_jsonl(recs[:1000]), _jsonl(recs[1000:])])
    broken = '{"k": 1, "v": 17, "ts": \n'   # does not parse
    files[1].insert(1, broken)
    text = ["".join(parts) for parts in files]
    broken_line = text[1][: text[1].index(broken)].count("\n") + 1

    source = FileStreamSource(inbox, KVT, format="json", event_time="ts", max_files=3)

    def land() -> None:
        for i, body in enumerate(text):
            tmp = inbox / f".in-{i:03d}.jsonl.tmp"
            tmp.write_text(body)
            os.replace(tmp, inbox / f"in-{i:03d}.jsonl")
            time.sleep(0.3)

    lander = threading.Thread(target=land, daemon=True)
    lander.start()
    query = sparkflux.start(kvt_flow(source), spark=spark, sink=TableSink(table),
                            dead_letter=dead, sites=2, partitions=8, ha="none",
                            announce=None)
    assert query.await_termination(60) is True
    lander.join(5)
    assert query.exception() is None
    m = query.metrics
    assert m["input_tuples"] == 3 * per_file, m["input_tuples"]
    assert m["dead_letters"] == 1
    letters = [json.loads(line) for line in dead.read_text().splitlines() if line.strip()]
    assert len(letters) == 1, letters
    blob = json.dumps(letters[0])
    assert "in-001.jsonl" in blob and str(broken_line) in blob and '\\"v\\": 17' in blob, blob
    assert kvt_rows(table_rows(spark, table)) == kvt_expected(range(3 * per_file))


def test_json_lines_mistyped_value_to_dead_letters(spark: Any, tmp_path: Path) -> None:
    """A line that parses but has a mistyped value: "a missing or mistyped value goes to
    the dead letters with its reason"; the other lines of the file are read."""
    inbox, table, dead = tmp_path / "inbox", tmp_path / "table", tmp_path / "dead.jsonl"
    inbox.mkdir()
    recs = [{"k": v % KEYS, "v": v, "ts": v} for v in range(1_000)]
    lines = [json.dumps(r) for r in recs]
    lines.insert(500, json.dumps({"k": 3, "v": "not-a-number", "ts": 499}))
    (inbox / "a.jsonl").write_text("\n".join(lines) + "\n")
    source = FileStreamSource(inbox, KVT, format="json", event_time="ts", max_files=1)
    query = sparkflux.start(kvt_flow(source), spark=spark, sink=TableSink(table),
                            dead_letter=dead, sites=2, partitions=8, ha="none",
                            announce=None)
    assert query.await_termination(60) is True
    assert query.exception() is None
    letters = [json.loads(line) for line in dead.read_text().splitlines() if line.strip()]
    assert len(letters) == 1 and "not-a-number" in json.dumps(letters[0]), letters
    assert kvt_rows(table_rows(spark, table)) == kvt_expected(range(1_000))


# --------------------------------------------------------------------------- 5. foreach

def test_foreach_batch_ranges(spark: Any) -> None:
    total = 60_000
    calls: list[tuple[int, int, pa.RecordBatch]] = []
    sink = foreach_batch(lambda b, lo, hi: calls.append((lo, hi, b)))
    query = sparkflux.start(kvt_flow(Bounded(total, batch=2000)), spark=spark, sink=sink,
                            sites=2, partitions=8, ha="none", rate=30_000, announce=None)
    assert query.await_termination(60) is True and query.exception() is None
    assert len(calls) > 1, "one call only: nothing to say about the ranges"
    rows = [r for _, _, b in calls for r in b.to_pylist()]
    assert kvt_rows(rows) == kvt_expected(range(total))
    for lo, hi, b in calls:
        sn = b.column("_sn").to_pylist()
        assert lo <= hi and all(lo <= s <= hi for s in sn), (lo, hi, min(sn), max(sn))
    # The calls' ranges follow each other in SN order, without overlap, and together they
    # cover the output: no output row lies between one call's range and the next (the SNs
    # skipped between two calls are input rows the Filter dropped).
    all_sn = [s for _, _, b in calls for s in b.column("_sn").to_pylist()]
    assert all_sn == sorted(all_sn) and len(set(all_sn)) == len(all_sn) == len(rows)
    for (_, hi, _), (lo, _, _) in zip(calls, calls[1:], strict=False):
        assert lo > hi, ("ranges overlap or go back", hi, lo)
    covered = [(lo, hi) for lo, hi, _ in calls]
    assert covered[0][0] == all_sn[0] and covered[-1][1] == all_sn[-1]


# --------------------------------------------------------------------------- 6. flux + kill

def test_flux_kill_through_start_into_a_table(netmon: Any, spark: Any, tmp_path: Path) -> None:
    events = 120_000
    table = tmp_path / "table"
    opts = netmon.NetmonOptions(events=events)
    query = sparkflux.start(netmon.build(opts), spark=spark, sink=TableSink(table),
                            sites=3, partitions=12, ha="flux", rate=40_000,
                            kill=["1@input+40000"],
                            dataflow_file=netmon.__file__, announce=None)
    assert query.await_termination(90) is True
    assert query.exception() is None
    m = query.metrics
    assert m["kills"] == 1 and m["input_tuples"] == events
    got = netmon_table(spark, table)
    expected = netmon_expected(netmon, spark, opts)
    assert sum(got.values()) == sum(expected.values())
    assert got == expected


# --------------------------------------------------------------------------- 7. bad config

def _fails_fast(spark: Any, words: tuple[str, ...], **options: Any) -> str:
    t0 = time.monotonic()
    with pytest.raises(Exception) as err:  # the type is not documented
        q = sparkflux.start(kvt_flow(Bounded(1000)), spark=spark, announce=None, **options)
        q.await_termination(60)
    assert time.monotonic() - t0 < 20, "the bad configuration was not refused at once"
    message = str(err.value)
    for w in words:
        assert w in message, f"{w!r} not in {message!r}"
    return message


def test_unknown_option_is_named(spark: Any) -> None:
    _fails_fast(spark, ("sitez",), sitez=2, partitions=8)


def test_more_sites_than_task_slots_is_refused(spark: Any) -> None:
    _fails_fast(spark, ("slot",), sites=12, partitions=16, ha="flux")  # the session has 8


def test_table_sink_reused_with_other_settings(spark: Any, tmp_path: Path) -> None:
    table = tmp_path / "table"
    q = sparkflux.start(kvt_flow(Bounded(20_000)), spark=spark, sink=TableSink(table),
                        sites=2, partitions=8, ha="none", announce=None)
    assert q.await_termination(60) is True
    before = {p.name: p.stat().st_mtime_ns for p in table.iterdir()}
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="sn_span") as err:  # at once, or at start
        sparkflux.start(kvt_flow(Bounded(20_000)), spark=spark,
                        sink=TableSink(table, sn_span=1024), sites=2, partitions=8,
                        ha="none", announce=None).await_termination(60)
    assert "same settings" in str(err.value) and time.monotonic() - t0 < 20
    assert {p.name: p.stat().st_mtime_ns for p in table.iterdir()} == before
    assert kvt_rows(table_rows(spark, table)) == kvt_expected(range(20_000))


# --------------------------------------------------------------------------- more probes

def test_table_sink_rerun_replaces_and_names_files_by_sn_range(spark: Any,
                                                                tmp_path: Path) -> None:
    """"files are named by fixed output SN ranges, part-<lo>-<hi>-<k>.parquet for the rows
    with lo <= _sn < hi (lo a multiple of sn_span), k counting every rows_per_file rows";
    a rerun over the same input writes the same names: nothing doubled."""
    total, span, per_file = 30_000, 8192, 1000
    table = tmp_path / "table"
    expected = kvt_expected(range(total))
    names = []
    for _ in range(2):
        sink = TableSink(table, sn_span=span, rows_per_file=per_file)
        q = sparkflux.start(kvt_flow(Bounded(total)), spark=spark, sink=sink,
                            sites=2, partitions=8, ha="none", announce=None)
        assert q.await_termination(60) is True and q.exception() is None
        assert kvt_rows(table_rows(spark, table)) == expected
        names.append(sorted(p.name for p in table.glob("part-*")))
    # the flush timer (flush_interval, 1 s by default) may cut a range into files otherwise
    # in either run: the rerun leaves the same ranges, and its own files only
    assert {n.rsplit("-", 1)[0] for n in names[0]} == {n.rsplit("-", 1)[0] for n in names[1]}
    assert len(names[1]) == sink.files_written
    assert hidden_leftovers(table) == []
    for name in names[1]:
        assert name.endswith(".parquet"), name
        lo, hi, k = (int(x) for x in name[len("part-"):-len(".parquet")].split("-"))
        assert lo % span == 0 and hi == lo + span, name
        sn = pq.read_table(table / name).column("_sn").to_pylist()
        assert all(lo <= s < hi for s in sn), (name, min(sn), max(sn))
        assert 0 < len(sn) <= per_file, (name, len(sn))
    for lo in {n.split("-")[1] for n in names[1]}:
        ks = sorted(int(n.split("-")[3][:-len(".parquet")]) for n in names[1]
                    if n.split("-")[1] == lo)
        assert ks == list(range(len(ks))), (lo, ks)


def test_file_source_skips_hidden_foreign_late_and_bad_files(netmon: Any, spark: Any,
                                                             tmp_path: Path) -> None:
    """Names starting with '.' or '_' and other suffixes are never read; a file that is not
    Parquet is one dead letter naming it; a file landing with a name that sorts before one
    already read is not read and is listed in late_files; end_marker ends the source."""
    inbox, table, dead = tmp_path / "inbox", tmp_path / "table", tmp_path / "dead.jsonl"
    inbox.mkdir()

    def put(name: str, start: int, count: int) -> None:
        tmp = inbox / f".{name}.tmp"
        pq.write_table(pa.Table.from_batches([kvt(start, count)]), tmp)
        os.replace(tmp, inbox / name)

    put("b-000.parquet", 0, 5_000)
    put("_b-001.parquet", 5_000, 5_000)      # never read: starts with '_'
    put("b-001.parquet.bak", 5_000, 5_000)   # never read: not the format's suffix
    (inbox / "b-002.parquet").write_text("this is not parquet\n")
    put("b-003.parquet", 10_000, 5_000)
    source = FileStreamSource(inbox, KVT, event_time="ts", end_marker="_DONE")

    def later() -> None:
        deadline = time.monotonic() + 60
        while source.position().file < "b-003" and time.monotonic() < deadline:
            time.sleep(0.05)
        put("a-late.parquet", 50_000, 1_000)  # sorts before what was read: not read
        time.sleep(0.3)
        put("c-004.parquet", 15_000, 5_000)
        time.sleep(0.3)
        (inbox / "_DONE").touch()

    t = threading.Thread(target=later, daemon=True)
    t.start()
    q = sparkflux.start(kvt_flow(source), spark=spark, sink=TableSink(table), dead_letter=dead,
                        sites=2, partitions=8, ha="none", announce=None)
    assert q.await_termination(60) is True
    t.join(5)
    assert q.exception() is None
    assert kvt_rows(table_rows(spark, table)) == kvt_expected(
        [*range(0, 5_000), *range(10_000, 20_000)])
    letters = [json.loads(line) for line in dead.read_text().splitlines() if line.strip()]
    assert len(letters) == 1 and "b-002.parquet" in json.dumps(letters[0]), letters
    assert any("a-late.parquet" in str(f) for f in source.late_files), source.late_files
    assert q.metrics["dead_letters"] == 1


def test_file_source_resumes_at_a_position(spark: Any, tmp_path: Path) -> None:
    """start=FilePosition(file, row): every file before `file` read, and `row` records of
    it (blank JSON lines not counted)."""
    inbox, table = tmp_path / "inbox", tmp_path / "table"
    inbox.mkdir()
    for i in range(3):
        recs = [{"k": v % KEYS, "v": v, "ts": v} for v in range(i * 1000, (i + 1) * 1000)]
        lines = [json.dumps(r) for r in recs]
        lines.insert(100, "")  # a blank line, not counted
        (inbox / f"r-{i}.jsonl").write_text("\n".join(lines) + "\n")
    source = FileStreamSource(inbox, KVT, format="json", event_time="ts", idle_timeout=1.0,
                              start=sparkflux.io.FilePosition("r-1.jsonl", 250))
    q = sparkflux.start(kvt_flow(source), spark=spark, sink=TableSink(table), sites=2,
                        partitions=8, ha="none", announce=None)
    assert q.await_termination(60) is True and q.exception() is None
    assert kvt_rows(table_rows(spark, table)) == kvt_expected(range(1250, 3000))
    assert q.metrics["input_tuples"] == 1750


def test_stop_under_flux(spark: Any, tmp_path: Path) -> None:
    table = tmp_path / "table"
    query, source = start_endless(spark, table, "flux", 10_000)
    assert query.stop() is True
    assert query.await_termination(30) is True and query.exception() is None
    admitted = query.metrics["input_tuples"]
    assert admitted == source.handed
    assert kvt_rows(table_rows(spark, table)) == kvt_expected(range(admitted))


def test_kill_without_ha_fails_with_advice(spark: Any) -> None:
    q = sparkflux.start(kvt_flow(Bounded(50_000)), spark=spark, sink=foreach_batch(
        lambda b, lo, hi: None), sites=2, partitions=8, ha="none", rate=10_000,
        kill=["1@input+10000"], announce=None)
    with pytest.raises(RunFailed, match="--ha flux"):
        q.await_termination(60)
    assert isinstance(q.exception(), RunFailed)


def test_table_readable_by_spark_while_the_run_writes(spark: Any, tmp_path: Path) -> None:
    table = tmp_path / "table"
    source = Endless(batch=200, every=0.02)
    query = sparkflux.start(kvt_flow(source), spark=spark,
                            sink=TableSink(table, flush_interval=0.05), sites=2,
                            partitions=8, ha="none", announce=None)
    errors: list[str] = []
    counts: list[int] = []
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 8 and not errors:
            if not any(table.glob("part-*")):
                time.sleep(0.05)
                continue
            try:
                counts.append(spark.read.parquet(str(table)).count())
            except Exception as e:  # noqa: BLE001 - any failure of the read is the finding
                errors.append(str(e)[:300])
    finally:
        assert query.stop() is True
        assert query.await_termination(30) is True
    admitted = query.metrics["input_tuples"]
    assert kvt_rows(table_rows(spark, table)) == kvt_expected(range(admitted))
    assert counts == sorted(counts)
    assert not errors, errors[0]


def test_foreach_batch_with_spark_gives_dataframes(spark: Any) -> None:
    got: list[tuple[Any, int, int]] = []
    sink = foreach_batch(lambda df, lo, hi: got.append((df.collect(), lo, hi)), spark=spark)
    q = sparkflux.start(kvt_flow(Bounded(20_000)), spark=spark, sink=sink, sites=2,
                        partitions=8, ha="none", announce=None)
    assert q.await_termination(60) is True and q.exception() is None
    rows = [r.asDict() for rs, _, _ in got for r in rs]
    assert kvt_rows(rows) == kvt_expected(range(20_000))
    for rs, lo, hi in got:
        assert all(lo <= r["_sn"] <= hi for r in rs)


def test_a_raising_sink_or_source_fails_the_run_with_its_traceback(spark: Any) -> None:
    def bad_sink(batch: Any, lo: int, hi: int) -> None:
        raise ValueError("sink exploded here")

    class BadSource(Bounded):
        def batches(self) -> Iterator[pa.RecordBatch]:
            yield kvt(0, 1000)
            raise RuntimeError("source exploded here")

    for flow, sink, words, frame in ((kvt_flow(Bounded(20_000)), foreach_batch(bad_sink),
                                      "sink exploded here", "in bad_sink"),
                                     (kvt_flow(BadSource(10)), foreach_batch(lambda *a: None),
                                      "source exploded here", "in batches")):
        q = sparkflux.start(flow, spark=spark, sink=sink, sites=2, partitions=8, ha="none",
                            announce=None)
        with pytest.raises(RunFailed, match=words):
            q.await_termination(60)
        # one line: the error, then where it was raised (the user's own function)
        assert frame in str(q.exception()) and q.status["message"] != "running"


def test_table_without_sequence_columns_and_stop_at_once(spark: Any, tmp_path: Path) -> None:
    table = tmp_path / "table"
    q = sparkflux.start(kvt_flow(Bounded(20_000)), spark=spark,
                        sink=TableSink(table, sequence_columns=False), sites=2, partitions=8,
                        ha="none", announce=None)
    assert q.await_termination(60) is True
    out = spark.read.parquet(str(table))
    assert sorted(out.columns) == ["k", "ts", "v", "y"]
    assert kvt_rows(out.collect()) == kvt_expected(range(20_000))

    source = Endless()
    q = sparkflux.start(kvt_flow(source), spark=spark, sink=foreach_batch(lambda *a: None),
                        sites=2, partitions=8, ha="none", announce=None)
    assert q.stop() is True   # before the sites are even up
    assert q.await_termination(30) is True and q.exception() is None
    assert q.metrics["input_tuples"] == source.handed and source.close_calls >= 1
