"""Windowed queries on Spark with 4 sites: two sliding-window aggregates in a row
(``examples/hot_items.py``), with ``--ha none`` and with ``--ha flux`` and a killed site,
checked row for row against the example's Spark SQL reference (which knows no sequence
numbers: rows are compared sorted)."""

from __future__ import annotations

from typing import Any

import pytest

from sparkflux.io.sinks import CollectSink, DeadLetters
from sparkflux.runner import run_example
from tests.conftest import ROOT

from .test_netmon_spark import netmon_args

pytestmark = pytest.mark.spark

EVENTS = 200_000
COLUMNS = ["category", "start", "end", "top", "items"]


@pytest.fixture(scope="module")
def hot_items() -> Any:
    from sparkflux.dataflow.examples import load_example

    return load_example(ROOT / "examples" / "hot_items.py")


def args(**kw: Any) -> Any:
    return netmon_args(**{"events": EVENTS, "size": 10_000, "slide": 2_000, **kw})


def sorted_rows(table: Any) -> list[tuple]:
    return sorted(zip(*[table.column(c).to_pylist() for c in COLUMNS], strict=True))


@pytest.fixture(scope="module")
def expected(hot_items: Any, spark: Any) -> list[tuple]:
    ref = hot_items.reference(spark, hot_items.options(args()))
    return sorted(tuple(r[c] for c in COLUMNS) for r in ref.collect())


def run_rows(hot_items: Any, spark: Any, **kw: Any) -> tuple[list[tuple], dict[str, Any]]:
    sink = CollectSink()
    result = run_example(hot_items, args(**kw), sink=sink, dead=DeadLetters(), spark=spark)
    return sorted_rows(sink.table()), result.metrics


def test_chained_windows_on_four_sites_match_the_reference(
        hot_items: Any, spark: Any, expected: list[tuple]) -> None:
    rows, m = run_rows(hot_items, spark, sites=4, partitions=32)
    assert len(expected) > 1000 and rows == expected
    again, m2 = run_rows(hot_items, spark, sites=4, partitions=32)
    assert m2["output_digest"] == m["output_digest"]  # the same rows in the same order


def test_chained_windows_survive_a_killed_site(hot_items: Any, spark: Any,
                                              expected: list[tuple]) -> None:
    rows, m = run_rows(hot_items, spark, sites=4, partitions=32, ha="flux", rate=50_000.0,
                       kill=["1@input+75000"])
    assert m["kills"] == 1 and [f["site"] for f in m["failures"]] == [1]
    assert rows == expected
