"""The programmatic API on Spark: ``sparkflux.start`` with the user's own session returns a
``FluxQuery`` whose status and metrics are readable while it runs, whose result equals the
Spark SQL reference through a kill, and whose ``stop()`` ends an unbounded input with every
admitted record written. A bad option or session fails before anything starts."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import sparkflux
from sparkflux.dataflow.api import Dataflow, Source
from sparkflux.io.sinks import CollectSink
from sparkflux.model.errors import PlanError
from sparkflux.operators.stateless import Map
from sparkflux.runner import reference_digest
from sparkflux.spark import session_check

from .test_netmon_spark import netmon_args

pytestmark = pytest.mark.spark


def test_start_with_my_session_status_metrics_and_the_reference(netmon: Any,
                                                                spark: Any) -> None:
    args = netmon_args(events=150_000)
    opts = netmon.options(args)
    sink = CollectSink()
    query = sparkflux.start(netmon.build(opts), spark=spark, sink=sink, sites=4, partitions=16,
                            ha="flux", rate=50_000, kill=["2@input+75000"], balance=False,
                            announce=None)
    seen: list[dict] = []
    while not query.await_termination(timeout=0.5):
        seen.append(query.status)
        if query.status["output_records"] > 0 and "snapshot" not in locals():
            snapshot = query.metrics  # a consistent snapshot taken on the host's loop
            assert snapshot["output_tuples"] >= 0 and "output_digest" in snapshot
    assert any(s["message"] == "running" and s["is_active"] for s in seen)
    assert {"input", "input_records", "output_records", "sites", "failures"} <= set(seen[-1])
    assert not query.is_active and query.status["message"] == "finished"
    m = query.metrics
    digest, rows, _ = reference_digest(netmon, args, spark=spark)
    assert m["kills"] == 1 and m["output_tuples"] == rows and m["output_digest"] == digest
    assert sink.table().num_rows == rows and query.exception() is None


class Endless(Source):
    """Numbers 0, 1, 2, ... in batches until closed (an unbounded source)."""

    schema = pa.schema([pa.field("n", pa.int64(), nullable=False)])

    def __init__(self) -> None:
        self.closed = False

    def batches(self) -> Iterator[pa.RecordBatch]:
        for start in itertools.count(0, 1000):
            if self.closed:
                return
            yield pa.record_batch([pa.array(range(start, start + 1000), pa.int64())],
                                  schema=self.schema)

    def close(self) -> None:
        self.closed = True


def doubled(batch: pa.RecordBatch) -> dict[str, Any]:
    import pyarrow.compute as pc

    return {"n": pc.multiply(batch.column("n"), 2)}


def test_stop_ends_an_unbounded_input_and_writes_what_was_admitted(spark: Any) -> None:
    df = Dataflow("endless")
    numbers = df.source(Endless(), name="numbers").exchange(by=["n"])
    numbers.apply(Map(doubled, [pa.field("n", pa.int64())])).sink()
    sink = CollectSink()
    query = sparkflux.start(df, spark=spark, sink=sink, sites=2, partitions=4, rate=20_000,
                            announce=None)
    deadline = time.monotonic() + 60
    while query.status["output_records"] < 20_000:
        assert query.is_active and time.monotonic() < deadline, query.status
        time.sleep(0.2)
    assert query.stop(timeout=60)
    m = query.metrics
    n = sink.table().column("n").to_pylist()
    assert m["input_tuples"] >= 20_000 and m["output_tuples"] == m["input_tuples"] == len(n)
    assert sorted(n) == [2 * i for i in range(len(n))]  # nothing lost or duplicated


def test_a_bad_option_fails_before_anything_starts(netmon: Any, spark: Any) -> None:
    flow = netmon.build(netmon.options(netmon_args()))
    with pytest.raises(PlanError, match="unknown option.*sitez"):
        sparkflux.start(flow, spark=spark, sitez=4)
    with pytest.raises(PlanError, match="--replicas 5"):
        sparkflux.start(flow, spark=spark, ha="flux", replicas=5)


def test_executors_without_a_usable_python_are_named(spark: Any) -> None:
    from sparkflux.spark.session_facts import facts

    sc = spark.sparkContext
    before, cached = sc.pythonExec, facts(sc).probe
    sc.pythonExec = "/nonexistent/python3"
    try:
        t = time.monotonic()
        with pytest.raises(PlanError, match="/nonexistent/python3.*PYSPARK_PYTHON"):
            session_check.probe_python(spark)
        assert time.monotonic() - t < 60  # cancelled after two failures, not 400 retries
    finally:
        sc.pythonExec = before
        facts(sc).probe = cached


class Fetching(Endless):
    """After 1,000 numbers it says "nothing yet" while a job of its own never finishes."""

    def batches(self) -> Iterator[pa.RecordBatch | None]:
        yield pa.record_batch([pa.array(range(1000), pa.int64())], schema=self.schema)
        while not self.closed:
            yield None

    def waiting_for(self) -> str | None:
        return "Fetching: its job for part 2 has not finished"


def test_a_source_waiting_on_its_own_job_is_reported_not_hidden_as_idle(spark: Any) -> None:
    df = Dataflow("fetching")
    df.source(Fetching(), name="numbers").exchange(by=["n"]).sink()
    sink = CollectSink()
    query = sparkflux.start(df, spark=spark, sink=sink, sites=2, partitions=4,
                            stall_timeout=1.0, announce=None)
    deadline = time.monotonic() + 60
    def source_stalls() -> list[dict]:  # (a slow start may add a "no progress" report)
        return [s for s in query.metrics.get("stalls", [])
                if s["message"].startswith("the input has waited ")]

    while not source_stalls():
        assert query.is_active and time.monotonic() < deadline, query.status
        time.sleep(0.2)
    [stall] = source_stalls()
    assert not stall["stopped"]
    assert stall["message"].endswith("Fetching: its job for part 2 has not finished")
    assert query.is_active  # an idle source is never stopped for
    assert query.stop(timeout=60)
    assert query.metrics["output_tuples"] == 1000 == sink.table().num_rows
