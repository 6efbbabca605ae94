"""Spark's own UI tells the story: a session sparkflux makes has its UI on, and the sites' job
is listed there under the dataflow's name, with its sites (Spark's REST API, the UI's own
data)."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

import sparkflux

pytestmark = pytest.mark.spark


def jobs(spark: Any) -> list[dict[str, Any]]:
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/jobs"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_the_site_job_is_listed_under_the_dataflows_name(netmon: Any, spark: Any) -> None:
    assert spark.sparkContext.uiWebUrl, "the UI is off in a session sparkflux makes"
    flow = netmon.build(netmon.NetmonOptions(events=300_000))
    before = {j["jobId"] for j in jobs(spark)}  # an earlier test's runs, in the same session
    query = sparkflux.start(flow, spark=spark, sites=4, partitions=16, rate=50_000,
                            announce=None)
    try:
        deadline = time.monotonic() + 60
        mine: list[dict[str, Any]] = []
        while not mine and time.monotonic() < deadline:
            mine = [j for j in jobs(spark) if j["jobId"] not in before and j.get(
                "description", "").startswith(
                "sparkflux netmon: 4 sites, 16 mini-partitions per stage")]
            if not mine:
                assert query.await_termination(0.2) is False, "ended before it was listed"
        assert mine, [j.get("description") for j in jobs(spark)]
        assert mine[0]["status"] == "RUNNING" and mine[0]["numTasks"] == 4
    finally:
        query.stop(60)
