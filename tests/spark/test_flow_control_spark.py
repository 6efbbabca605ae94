"""Flow control on Spark: a window that spans more input records than ``--window`` must not
deadlock the run (``examples/hot_items.py``, checked row for row against its Spark SQL
reference).

A time window holds its operator's output progress back to its latest tuple's SN until it
closes, so the egress's progress lags the input by about as many records as the longest open
window spans (here up to 50,000: windows of 100 s of event time at 2 ms per bid). Admission
that waited on the egress's progress with a window of 20,000 records stopped the input while
the egress waited for a window that needed more input to close: a silent hang. Admission
waits only on the first stage's acknowledgements now, which never wait for a window.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from sparkflux.io.sinks import CollectSink, DeadLetters, NullSink
from sparkflux.runner import run_example
from tests.conftest import ROOT

from .test_netmon_spark import netmon_args

pytestmark = pytest.mark.spark

COLUMNS = ["category", "start", "end", "top", "items"]
# Windows of 100 s sliding by 10 s: 50,000 bids each, against a window of 20,000 records.
LONG = dict(events=120_000, size=100_000, slide=10_000, window=20_000, sites=2, partitions=8)


@pytest.fixture(scope="module")
def hot_items() -> Any:
    from sparkflux.dataflow.examples import load_example

    return load_example(ROOT / "examples" / "hot_items.py")


def sorted_rows(table: Any) -> list[tuple]:
    return sorted(zip(*[table.column(c).to_pylist() for c in COLUMNS], strict=True))


def test_a_window_longer_than_the_admission_window_completes(hot_items: Any,
                                                             spark: Any) -> None:
    args = netmon_args(**LONG, stall_timeout=10.0)
    ref = hot_items.reference(spark, hot_items.options(args))
    expected = sorted(tuple(r[c] for c in COLUMNS) for r in ref.collect())
    sink = CollectSink()
    result = run_example(hot_items, args, sink=sink, dead=DeadLetters(), spark=spark)
    assert len(expected) > 100 and sorted_rows(sink.table()) == expected
    assert result.metrics["input_tuples"] == LONG["events"]
    assert result.metrics["stalls"] == []


def test_a_stalled_run_says_what_it_waits_for(netmon: Any, spark: Any) -> None:
    """Site 1 frozen for 3 s (within its heartbeat timeout): nothing moves, and the watchdog
    names the site and that admission is blocked, then sees the run progress again."""
    # (frozen once output flows: a stall of the start, on a loaded machine, would not name it)
    args = netmon_args(events=2_000_000, hang=["1@input+400000=3"], stall_timeout=1.0)
    result = run_example(netmon, args, sink=NullSink(), dead=DeadLetters(), spark=spark)
    m = result.metrics
    assert m["input_tuples"] == 2_000_000 and m["failures"] == []
    # the hang's report (a loaded machine may add a short one elsewhere in 2M events)
    (stall,) = [s for s in m["stalls"] if "It waits for site 1," in s["message"]]
    assert not stall["stopped"] and 1.0 <= stall["seconds"] < 3.0
    text = stall["message"]
    assert re.match(r"no progress for \d s: the output is at SN ", text), text
    assert "the ingress is blocked by admission" in text, text
    assert "It waits for site 1, which has sent no heartbeat for" in text, text
    assert text.endswith("(--stall-timeout 1: the run stops if this lasts 4 s)")
