"""Several sources on Spark with 4 sites (``examples/two_sources.py``): a union of two
sources with different columns and interleaved event times, one of them shuffled within its
allowed lateness; with ``--ha none`` and with ``--ha flux`` and a killed site. Nothing is
dead-lettered and the rows equal the example's Spark SQL reference (compared sorted: the
reference knows no sequence numbers). With a lateness below the shuffle, the late clicks
go to the dead letters with their reason and the rest still flows."""

from __future__ import annotations

from typing import Any

import pytest

from sparkflux.io.sinks import CollectSink, DeadLetters
from sparkflux.runner import run_example
from tests.conftest import ROOT

from .test_netmon_spark import netmon_args

pytestmark = pytest.mark.spark

EVENTS = 100_000  # per source
COLUMNS = ["page", "window_start", "window_end", "events", "top_user"]


@pytest.fixture(scope="module")
def two_sources() -> Any:
    from sparkflux.dataflow.examples import load_example

    return load_example(ROOT / "examples" / "two_sources.py")


def args(**kw: Any) -> Any:
    return netmon_args(**{"events": EVENTS, "shuffle": 2_000, "lateness": 2_000,
                          "window_ms": 5_000, "sites": 4, "partitions": 32, **kw})


def sorted_rows(rows: Any) -> list[tuple]:
    return sorted(zip(*[rows.column(c).to_pylist() for c in COLUMNS], strict=True))


@pytest.fixture(scope="module")
def expected(two_sources: Any, spark: Any) -> list[tuple]:
    ref = two_sources.reference(spark, two_sources.options(args()))
    return sorted(tuple(r[c] for c in COLUMNS) for r in ref.collect())


def run(two_sources: Any, spark: Any, **kw: Any) -> tuple[list[tuple], dict, DeadLetters]:
    sink, dead = CollectSink(), DeadLetters()
    result = run_example(two_sources, args(**kw), sink=sink, dead=dead, spark=spark)
    return sorted_rows(sink.table()), result.metrics, dead


@pytest.mark.parametrize("ha,kill", [("none", []), ("flux", ["2@input+60000"])],
                         ids=["none", "flux-kill"])
def test_union_of_shuffled_sources_matches_the_reference(
        two_sources: Any, spark: Any, expected: list[tuple], ha: str, kill: list[str]) -> None:
    rate = 60_000.0 if kill else None
    rows, m, _ = run(two_sources, spark, ha=ha, kill=kill, rate=rate)
    assert m["dead_letters"] == 0 and m["input_tuples"] == 2 * EVENTS
    assert len(expected) > 1000 and rows == expected
    if kill:
        assert m["kills"] == 1 and [f["site"] for f in m["failures"]] == [2]


def test_clicks_behind_a_short_lateness_are_dead_lettered_with_reason(
        two_sources: Any, spark: Any) -> None:
    rows, m, dead = run(two_sources, spark, events=20_000, lateness=200)
    assert 0 < m["dead_letters"] < 20_000
    assert m["input_tuples"] + m["dead_letters"] == 40_000
    reasons = [r.reason for r in dead.records[:3]]
    assert all("of source 'clicks' is behind its watermark" in r and "lateness 200" in r
               for r in reasons), reasons
