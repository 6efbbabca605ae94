"""The DataFrame source on a Spark session: rows in ``order_by`` order in bounded batches,
"nothing yet" while a partition is fetched, positions and resuming, a table by name; and
read on the sites (``read_on="sites"``): partitions written on the executors, dealt in
chunks, netmon on 4 sites with ``--ha none`` and with ``--ha flux`` and a kill equal to its
reference, the driver's ingress numbering chunks only."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from sparkflux.io import DataFramePosition, DataFrameSource
from sparkflux.model.validate import validate

pytestmark = pytest.mark.spark

ROWS = 5_000


@pytest.fixture(scope="module")
def frame(spark: Any) -> Any:
    from pyspark.sql import functions as F

    # shuffled over 7 partitions: only order_by gives an order
    return (spark.range(ROWS).withColumn("v", F.concat(F.lit("v"), F.col("id").cast("string")))
            .repartition(7, "v"))


def drain(it: Iterator[Any], budget_s: float = 60.0) -> tuple[list[pa.RecordBatch], int]:
    out, waits = [], 0
    deadline = time.monotonic() + budget_s
    for item in it:
        if item is None:
            waits += 1
            time.sleep(0.002)
            assert time.monotonic() < deadline
            continue
        out.append(item)
    return out, waits


def read_then_close(src: DataFrameSource, rows: int) -> list[pa.RecordBatch]:
    """Batches until at least ``rows`` rows, then ``close()``: the iterator ends there."""
    it = src.batches()
    got: list[pa.RecordBatch] = []
    while sum(b.num_rows for b in got) < rows:
        item = next(it)
        if item is None:
            time.sleep(0.002)
        else:
            got.append(item)
    src.close()
    assert next(it, "end") == "end"
    return got


def ids(batches: list[pa.RecordBatch]) -> list[int]:
    return [i for b in batches for i in b.column("id").to_pylist()]


def test_rows_come_in_order_by_order_in_bounded_batches(frame: Any) -> None:
    src = DataFrameSource(frame, order_by="id", batch_size=700)
    batches, waits = drain(src.batches())
    assert ids(batches) == list(range(ROWS)) and waits > 0  # waited, never blocked
    assert all(b.num_rows <= 700 for b in batches)
    assert src.schema.names == ["id", "v"]
    good, bad = validate(batches[0], src.schema)
    assert bad == [] and good.column("v")[0].as_py() == "v0"


def test_it_resumes_from_its_position(frame: Any) -> None:
    first = DataFrameSource(frame, order_by="id", batch_size=300)
    got = read_then_close(first, 1_500)
    pos = first.position()
    assert pos.row > 0 and ids(got) == list(range(sum(b.num_rows for b in got)))
    rest, _ = drain(DataFrameSource(frame, order_by="id", batch_size=300, start=pos).batches())
    assert ids(got) + ids(rest) == list(range(ROWS))
    assert DataFrameSource(frame, order_by="id", start=DataFramePosition(99, 0)).position() \
        == DataFramePosition(99, 0)


def test_small_partitions_go_several_to_a_job_and_resume_inside_a_group(spark: Any) -> None:
    """40 partitions of 125 rows with ``fetch_rows=1000``: jobs of 1, 2, 4, 8, 8, ...
    partitions (each job costs its latency), every row once in order, and a position taken
    inside a later group resumes there."""
    from pyspark.sql import functions as F

    small = (spark.range(ROWS).withColumn("v", F.col("id").cast("string"))
             .repartitionByRange(40, "id").sortWithinPartitions("id"))
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    src = DataFrameSource(small, batch_size=100, fetch_rows=1000)
    got = read_then_close(src, 3_000)
    pos = src.position()
    assert pos.partition >= 15 and ids(got) == list(range(sum(b.num_rows for b in got)))
    rest, _ = drain(DataFrameSource(small, start=pos, fetch_rows=1000).batches())
    assert ids(got) + ids(rest) == list(range(ROWS))
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup()) - jobs_before
    assert jobs < 25, jobs  # one job per partition would be 40 and more


def test_the_group_grows_to_the_target_rows() -> None:
    from sparkflux.io.dataframe import MAX_GROUP, _group

    assert [_group(g, g, 125 * g, 1000) for g in (1, 2, 4, 8)] == [2, 4, 8, 8]
    assert _group(1, 1, 0, 1000) == 2  # empty partitions: grow
    assert _group(64, 64, 64, 10**9) == MAX_GROUP
    assert _group(4, 4, 4 * 10**6, 1000) == 1  # large partitions: one a job


def test_a_table_by_name(spark: Any, frame: Any) -> None:
    frame.createOrReplaceTempView("io_source_table")
    batches, _ = drain(DataFrameSource("io_source_table", spark=spark, order_by=["id"])
                       .batches())
    assert ids(batches) == list(range(ROWS))


def test_netmon_from_a_dataframe_matches_the_reference(spark: Any, netmon: Any) -> None:
    """The whole query on 4 sites, its packets from a DataFrame (sorted by event time, read
    through the driver while the sites run): the output digest of the Spark SQL reference."""
    from types import SimpleNamespace

    from sparkflux.io.sinks import CollectSink, DeadLetters
    from sparkflux.runner import reference_digest, run_example

    from .test_netmon_spark import netmon_args

    args = netmon_args(events=40_000)
    events = spark.createDataFrame(pa.Table.from_batches([netmon.generate(0, 40_000)]))
    source = DataFrameSource(events.repartition(5), order_by="ts", schema=netmon.SCHEMA,
                             event_time="ts", batch_size=4096)
    module = SimpleNamespace(options=netmon.options, __file__=netmon.__file__,
                             build=lambda opts: netmon.build(opts, source=source))
    result = run_example(module, args, sink=CollectSink(), dead=DeadLetters(), spark=spark)
    digest, rows, _ = reference_digest(netmon, args, spark=spark)
    assert result.metrics["input_tuples"] == 40_000 and result.metrics["dead_letters"] == 0
    assert result.metrics["output_tuples"] == rows and result.metrics["output_digest"] == digest


def test_read_on_the_sites_stages_each_partition_once_and_resumes(spark: Any,
                                                                  tmp_path: Any) -> None:
    """10 range partitions written on the executors, one file each, in order; a start
    position inside a partition skips its first rows; positions follow ``mark``."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    ranged = (spark.range(ROWS).withColumn("v", F.col("id").cast("string"))
              .repartitionByRange(10, "id").sortWithinPartitions("id"))
    src = DataFrameSource(ranged, read_on="sites", staging=tmp_path, fetch_rows=1000,
                          start=DataFramePosition(2, 100))
    landed = drain_landed(src.landed())
    assert [n.rsplit("-", 1)[0] for n, _ in landed] == [f"part-{p:05d}" for p in range(2, 10)]
    assert [skip for _, skip in landed] == [100] + [0] * 7
    assert sorted(p.name for p in src.path.iterdir()) == [n for n, _ in landed]
    staged = [i for n, _ in landed for i in pq.read_table(src.path / n).column("id").to_pylist()]
    assert staged == list(range(staged[0], ROWS)) and 0 < staged[0] < ROWS // 2  # sampled
    src.mark("part-00007-31.parquet", 7)
    assert src.position() == DataFramePosition(7, 7)


def drain_landed(it: Iterator[Any], budget_s: float = 60.0) -> list[tuple[str, int]]:
    out = []
    deadline = time.monotonic() + budget_s
    for item in it:
        if item is None:
            time.sleep(0.01)
            assert time.monotonic() < deadline
            continue
        out.append(item)
    return out


@pytest.mark.parametrize("ha", ["none", "flux"])
def test_netmon_from_a_dataframe_read_on_the_sites(spark: Any, netmon: Any, tmp_path: Any,
                                                   ha: str) -> None:
    """netmon's packets from a DataFrame sorted by event time, written on the executors and
    read on 4 sites (with ``--ha flux`` one of them killed): the reference's output digest,
    and the driver's ingress numbered a record per chunk, none per row."""
    from types import SimpleNamespace

    from sparkflux.io.sinks import CollectSink, DeadLetters
    from sparkflux.runner import reference_digest, run_example

    from .test_netmon_spark import netmon_args

    # the kill is timed by the input admitted, not the clock: half-way on any machine
    args = netmon_args(events=40_000, ha=ha, kill=["2@input+20000"] if ha == "flux" else [])
    events = spark.createDataFrame(pa.Table.from_batches([netmon.generate(0, 40_000)]))
    source = DataFrameSource(events.repartition(5), order_by="ts", schema=netmon.SCHEMA,
                             event_time="ts", read_on="sites", staging=tmp_path,
                             chunk_rows=2_000, fetch_rows=8_000)
    module = SimpleNamespace(options=netmon.options, __file__=netmon.__file__,
                             build=lambda opts: netmon.build(opts, source=source))
    result = run_example(module, args, sink=CollectSink(), dead=DeadLetters(), spark=spark)
    m = result.metrics
    digest, rows, _ = reference_digest(netmon, args, spark=spark)
    assert m["input_tuples"] == 40_000 and m["dead_letters"] == 0
    assert m["ingress_records"] <= 40_000 // 2_000 + 5  # chunks of the 5 partitions
    assert m["output_tuples"] == rows and m["output_digest"] == digest
    if ha == "flux":
        assert m["kills"] == 1 and [f["site"] for f in m["failures"]] == [2]
