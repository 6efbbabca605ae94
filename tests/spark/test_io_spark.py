"""Files in, a table out, on Spark with 4 sites: the netmon query reads a directory of Parquet
files that a thread keeps adding to while it runs (``FileStreamSource``, ended by a ``_DONE``
marker) and writes through ``TableSink``; ``spark.read.parquet`` of the table afterwards
equals netmon's Spark SQL reference, rows and sequence numbers, with ``--ha none`` (then once
more into the same table: the rewrite replaces, nothing doubles) and with ``--ha flux`` and a
site killed while files are still landing. A reader meanwhile sees the table grow. The same
two with the files read on the sites (``read_on="sites"``): the driver's ingress numbers one
record per chunk, never a row, and the table is the same."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sparkflux.io import FileStreamSource, TableSink
from sparkflux.io.sinks import DeadLetters
from sparkflux.model.digest import digest_of
from sparkflux.model.rows_digest import rows_digest_of
from sparkflux.runner import reference_result, run_example

from .test_netmon_spark import netmon_args

pytestmark = pytest.mark.spark

EVENTS = 60_000
PER_FILE = 4_000  # 15 files
CHUNK_ROWS = 1_000  # read on the sites: 4 chunks a file (row groups of as many rows)


def land_files(netmon: Any, d: Path, pause: float, seen: list[int], table: Path,
               source: FileStreamSource) -> None:
    """The writer: each file under a hidden name, renamed into place; then the marker. The
    files after the first land once the run has read it (the sites take seconds to start),
    and the writer reads the table between files, as a reader would (whole files only), unless
    it lands them without a pause."""
    for i in range(EVENTS // PER_FILE):
        tmp = d / f".part-{i:05d}.parquet.tmp"
        pq.write_table(pa.Table.from_batches([netmon.generate(i * PER_FILE, PER_FILE)]), tmp,
                       row_group_size=CHUNK_ROWS)  # read on the sites: a chunk a group
        os.replace(tmp, d / f"part-{i:05d}.parquet")
        deadline = time.monotonic() + 60
        while i == 0 and not source.position().file and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(pause)
        if table.exists() and pause:  # not while a rewrite replaces the parts under the reader
            seen.append(pq.read_table(table).num_rows)
    (d / "_DONE").touch()


def file_netmon(netmon: Any, source: FileStreamSource) -> Any:
    return SimpleNamespace(options=netmon.options, __file__=netmon.__file__,
                           build=lambda opts: netmon.build(opts, source=source))


@pytest.fixture(scope="module")
def expected(netmon: Any, spark: Any) -> Any:
    ref, _ = reference_result(netmon, netmon_args(events=EVENTS), spark)
    return ref


def run(netmon: Any, spark: Any, tmp: Path, table: Path, pause: float,
        read_on: str = "driver", **kw: Any) -> tuple[dict, list[int], TableSink]:
    inbox = tmp / "inbox"
    inbox.mkdir(exist_ok=True)
    seen: list[int] = []
    source = FileStreamSource(inbox, netmon.SCHEMA, event_time="ts", end_marker="_DONE",
                              batch_size=4096, poll_interval=0.05, read_on=read_on,
                              chunk_rows=CHUNK_ROWS)
    writer = threading.Thread(target=land_files,
                              args=(netmon, inbox, pause, seen, table, source))
    sink = TableSink(table, sn_span=8_192, flush_interval=0.2)
    writer.start()
    try:
        result = run_example(file_netmon(netmon, source), netmon_args(events=EVENTS, **kw),
                             sink=sink, dead=DeadLetters(), spark=spark)
    finally:
        writer.join()
    return result.metrics, seen, sink


def parts(table: Path) -> dict[str, list[int]]:
    """Each range's file numbers, by the range's name prefix."""
    ranges: dict[str, list[int]] = {}
    for p in table.glob("part-*.parquet"):
        prefix, number = p.stem.rsplit("-", 1)
        ranges.setdefault(prefix, []).append(int(number))
    return {k: sorted(v) for k, v in ranges.items()}


def check_table(spark: Any, table: Path, expected: Any) -> None:
    out = spark.read.parquet(str(table)).toArrow()
    assert out.num_rows == expected.rows > 10_000
    assert rows_digest_of(out) == expected.rows_digest
    ordered = out.sort_by([("_sn", "ascending"), ("_snm", "ascending")])
    assert digest_of(ordered.select(expected.table.column_names)) == expected.output_digest
    sn = ordered.column("_sn")
    assert pc.all(pc.greater_equal(sn.slice(1), sn.slice(0, len(sn) - 1))).as_py()


def test_files_landing_into_a_table_with_ha_none_and_a_rewrite(
        netmon: Any, spark: Any, expected: Any, tmp_path: Path) -> None:
    table = tmp_path / "table"
    m, seen, _ = run(netmon, spark, tmp_path, table, pause=0.15)
    assert m["input_tuples"] == EVENTS and m["dead_letters"] == 0
    check_table(spark, table, expected)
    assert any(0 < n < expected.rows for n in seen), seen  # the table grew as it ran
    before = parts(table)
    # the same input again into the same table (every file there, the marker too); how
    # ``flush_interval`` cuts a range into files depends on timing, so the rewrite may cut
    # ranges differently: what it leaves is its own files only, each range numbered from 0
    m, _, sink = run(netmon, spark, tmp_path, table, pause=0.0)
    assert m["input_tuples"] == EVENTS
    check_table(spark, table, expected)
    after = parts(table)
    assert after.keys() == before.keys()
    assert all(v == list(range(len(v))) for v in after.values()), after
    assert sum(map(len, after.values())) == sink.files_written  # none of the first run's left


def test_files_landing_into_a_table_with_ha_flux_and_a_kill(
        netmon: Any, spark: Any, expected: Any, tmp_path: Path) -> None:
    table = tmp_path / "table"
    m, _, _ = run(netmon, spark, tmp_path, table, pause=0.2, ha="flux", kill=["1@input+20000"])
    assert m["input_tuples"] == EVENTS and m["dead_letters"] == 0
    assert m["kills"] == 1 and [f["site"] for f in m["failures"]] == [1]
    check_table(spark, table, expected)


def test_files_read_on_the_sites_with_ha_none(netmon: Any, spark: Any, expected: Any,
                                              tmp_path: Path) -> None:
    table = tmp_path / "table"
    m, seen, _ = run(netmon, spark, tmp_path, table, pause=0.15, read_on="sites")
    assert m["input_tuples"] == EVENTS and m["dead_letters"] == 0
    assert m["ingress_records"] == EVENTS // CHUNK_ROWS  # chunks, not rows, in the driver
    check_table(spark, table, expected)
    assert any(0 < n < expected.rows for n in seen), seen


def test_files_read_on_the_sites_with_ha_flux_and_a_kill(netmon: Any, spark: Any,
                                                         expected: Any, tmp_path: Path) -> None:
    table = tmp_path / "table"
    m, _, _ = run(netmon, spark, tmp_path, table, pause=0.2, read_on="sites", ha="flux",
                  kill=["1@input+20000"])
    assert m["input_tuples"] == EVENTS and m["ingress_records"] == EVENTS // CHUNK_ROWS
    assert m["kills"] == 1 and [f["site"] for f in m["failures"]] == [1]
    check_table(spark, table, expected)
