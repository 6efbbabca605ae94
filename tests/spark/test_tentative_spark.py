"""Eventual consistency on Spark with 4 sites (``--consistency eventual``,
docs/availability.md): ``examples/two_sources.py`` with its clicks source cut off for 1.5 s,
with ``--ha none`` and with ``--ha flux`` and a killed site.

Each run: the stable output (the sink) equals the Spark SQL reference; tentative rows reached
the output while clicks were cut, each episode ended with its ``undo`` and ``rec_done``, and
the corrections came; the first delivery of every row came sooner than the longest stretch
the stable output stood still (the tentative rows kept the output going); the
``--tentative-output`` stream, read back, holds the stable rows and every tentative row
once, in episodes that close.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sparkflux.io.sinks import CollectSink, DeadLetters
from sparkflux.runner import run_example
from tests.conftest import ROOT

from .test_sources_spark import COLUMNS, args, sorted_rows

pytestmark = pytest.mark.spark

EVENTS = 40_000  # per source


@pytest.fixture(scope="module")
def two_sources() -> Any:
    from sparkflux.dataflow.examples import load_example

    return load_example(ROOT / "examples" / "two_sources.py")


@pytest.fixture(scope="module")
def expected(two_sources: Any, spark: Any) -> list[tuple]:
    ref = two_sources.reference(spark, two_sources.options(args(events=EVENTS)))
    return sorted(tuple(r[c] for c in COLUMNS) for r in ref.collect())


@pytest.mark.parametrize("ha,kill", [("none", []), ("flux", ["2@input+50000"])],
                         ids=["none", "flux-kill"])
def test_a_cut_source_gives_tentative_rows_then_the_exact_output(
        two_sources: Any, spark: Any, expected: list[tuple], tmp_path: Path, ha: str,
        kill: list[str]) -> None:
    sink, dead = CollectSink(), DeadLetters()
    live = tmp_path / "live"
    result = run_example(two_sources, args(
        events=EVENTS, ha=ha, kill=kill, rate=20_000.0, consistency="eventual",
        max_delay=0.3, cut_source=["clicks@input+20000+1.5"], tentative_output=str(live)),
        sink=sink, dead=dead, spark=spark)
    m = result.metrics
    assert sorted_rows(sink.table()) == expected and len(expected) > 100
    assert m["dead_letters"] == 0
    assert m["tentative_rows"] > 0 and m["corrections"] > 0
    c = m["consistency"]
    assert c["mode"] == "process" and c["episodes"] >= 1 and c["tentative_input"] > 0
    assert c["seconds"]["upstream-failure"] > 0
    assert m["max_processing_delay_s"] < m["max_output_gap_s"]
    if kill:
        assert [f["site"] for f in m["failures"]] == [2]
    stream = pq.read_table(live).to_pylist()
    ops = [r["_op"] for r in stream]
    assert ops.count("undo") == ops.count("rec_done") == len(m["episodes"]) >= 1
    assert ops[-1] == "rec_done" or ops[-1] == "insert"
    stable = sorted(tuple(r[k] for k in COLUMNS) for r in stream if r["_op"] == "insert")
    assert stable == expected
    assert ops.count("tentative") == m["tentative_rows"]
