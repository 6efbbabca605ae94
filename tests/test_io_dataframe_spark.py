"""The DataFrame source on a Spark session: rows in ``order_by`` order in bounded batches,
"nothing yet" while a partition is fetched, positions and resuming, a table by name."""

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

    from sparkflux.runner import reference_digest, run_example
    from sparkflux.runtime.sinks import CollectSink, DeadLetters

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
