"""Rescaling a running query on Spark (``FluxQuery.rescale``; docs/rescaling.md): netmon on
4 sites with Flux-HA grows to 6 sites (two new Spark tasks adopt new slots, copies move onto
them), loses site 1 to a kill, and shrinks to 3 (the copies move off sites 3 to 5, which
retire); its output equals Spark SQL's reference. What cannot be done is refused at once,
saying why."""

from __future__ import annotations

from typing import Any

import pytest

import sparkflux
from sparkflux.io.sinks import CollectSink
from sparkflux.model.errors import PlanError
from sparkflux.runner import reference_digest

from .test_netmon_spark import netmon_args

pytestmark = pytest.mark.spark

EVENTS = 1_000_000  # 40 s at 25K/s: both rescales end before the input does, though a rescale
# (new Spark tasks, copies moved by catch-up) takes 10-20 s on a loaded two-core machine


@pytest.mark.xfail(strict=False, reason=(
    "known bug (docs/rescaling.md, Known problems): a kill while the grow's moves run can "
    "leave the shrink with a stalled last-stage partition at the egress or a duplicate-input "
    "protocol error at a first-stage copy; seen in 2 of about 10 runs on an unloaded "
    "two-core machine, not reproduced in the simulator"))
def test_a_running_query_grows_loses_a_site_and_shrinks_and_its_output_is_exact(
        netmon: Any, spark: Any) -> None:
    args = netmon_args(events=EVENTS)
    sink = CollectSink()
    query = sparkflux.start(netmon.build(netmon.options(args)), spark=spark, sink=sink,
                            sites=4, partitions=16, ha="flux", rate=25_000, balance=False,
                            kill=["1@input+150000"], announce=None,
                            standby_wait=60)  # Spark's retry adopts site 1, however loaded
    while query.status["input_records"] == 0:  # rescaled once the input runs
        assert query.await_termination(0.05) is False
    with pytest.raises(PlanError, match="at least 2 sites"):
        query.rescale(1)
    with pytest.raises(PlanError, match="local mode runs 8 tasks at once"):
        query.rescale(12)
    grown = query.rescale(6, timeout=60)
    assert grown is not None and grown["opened"] == [4, 5] and grown["moves"] > 0
    assert query.rescale(3, wait=False) is None
    with pytest.raises(PlanError, match="a rescale to 3 sites is in progress"):
        query.rescale(2, wait=False)
    assert query.await_termination(120)
    m = query.metrics
    digest, rows, _ = reference_digest(netmon, args, spark=spark)
    assert (m["output_tuples"], m["output_digest"]) == (rows, digest)
    assert sink.table().num_rows == rows
    assert [r["sites"] for r in m["rescales"]] == [6, 3]
    assert m["rescales"][1]["retired"] == [3, 4, 5] and m["rescales"][1]["moves"] > 0
    assert m["kills"] == 1 and [f["site"] for f in m["failures"]] == [1]
    last = query.last_progress
    assert last is not None
    assert sorted(s.site for s in last.sites if s.role != "standby") == [0, 1, 2]
