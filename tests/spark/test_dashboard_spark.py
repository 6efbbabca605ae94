"""Watching a run: during netmon under ``--ha flux`` with a site killed, the query's progress
model, the Prometheus endpoint and the live dashboard (loaded in headless Chromium, the page's
JavaScript run) each tell the failure, its take-over and its catch-up, and their figures agree
with the run's metrics."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import sparkflux

pytestmark = pytest.mark.spark

EVENTS = 1_500_000
RATE = 60_000  # 25 s of input: the page is rendered and scraped while the run goes on, after a
# catch-up that takes long on a loaded machine
KILL = "1@input+150000"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("no Chromium: scripts/dev.sh installs Debian's chromium package")


def rendered(url: str) -> str:
    """The page's DOM after its scripts ran (two refreshes: the budget is virtual time)."""
    out = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--virtual-time-budget=4000", "--dump-dom", url],
        capture_output=True, text=True, timeout=90, check=True)
    return out.stdout


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_progress_prometheus_and_the_dashboard_tell_a_kill(netmon: Any, spark: Any) -> None:
    flow = netmon.build(netmon.NetmonOptions(events=EVENTS))
    query = sparkflux.start(flow, spark=spark, sites=4, partitions=16, ha="flux", rate=RATE,
                            kill=[KILL], balance=False, ui_port=0, announce=None,
                            standby_wait=60)  # the standby adopts site 1, however loaded
    board = query._run.host.dashboard
    assert board is not None
    try:
        deadline = time.monotonic() + 90
        while not any(e.kind == "caught-up" for e in query.events):
            assert time.monotonic() < deadline, query.events
            assert not query.await_termination(0.2), "ended before the catch-up"
        # The sites' roles are the last progress interval's: wait for the interval that
        # ends after the catch-up (the scrape right after it may still show site 1 failed).
        series = scrape(f"{board.url}/metrics")
        while sum(v for (name, _), v in series.items() if name == "sparkflux_site_up") < 4:
            assert time.monotonic() < deadline, series
            assert not query.await_termination(0.2), "ended before a progress interval"
            series = scrape(f"{board.url}/metrics")
        page = rendered(board.url)
        progress = query.last_progress
    finally:
        query.await_termination(120)

    kinds = [(e.kind, e.site) for e in query.events]
    assert kinds[:2] == [("failure", 1), ("take-over", 1)], kinds
    assert ("catch-up", 1) in kinds and ("caught-up", 1) in kinds

    # The dashboard: site 1's row tells its failure and its catch-up; every chart has data.
    row = re.search(r'<tr class="site" data-site="1" data-role="([^"]+)">(.*?)</tr>', page,
                    re.S)
    assert row is not None, page[:2000]
    assert row.group(1) in ("live", "catching up")
    history = re.search(r'<td class="history">(.*?)</td>', row.group(2), re.S)
    assert history is not None
    assert "k-failure" in history.group(1) and "k-caught-up" in history.group(1)
    for chart in ("timeline", "rates", "latency", "watermarks", "state"):
        points = re.search(rf'id="{chart}"[^>]*data-points="(\d+)"', page)
        assert points is not None and int(points.group(1)) > 0, chart
    assert page.count('<tr class="site"') >= 4

    # Prometheus: the same story in sparkflux_* series.
    q = (("query", "netmon"),)
    assert series[("sparkflux_events_total", (("kind", "failure"), *q))] == 1
    assert series[("sparkflux_events_total", (("kind", "caught-up"), *q))] == 1
    assert series[("sparkflux_input_rows_total", (*q, ("source", "packets")))] > 150_000
    assert sum(v for (name, _), v in series.items() if name == "sparkflux_site_up") == 4
    assert any(name == "sparkflux_latency_seconds" for name, _ in series)
    assert any(name == "sparkflux_state_keys" and v > 0 for (name, _), v in series.items())

    # The progress model agrees with the run's metrics at the end.
    assert progress is not None and progress.sources[0].name == "packets"
    final = query.recent_progress[-1]
    m = query.metrics
    # (a loaded machine's admission may fall behind the push source: what the ingress buffer
    # could not hold is dropped and counted, never admitted)
    assert final.total_input_rows == m["input_tuples"] == EVENTS - m["ingress_dropped"]
    assert final.total_output_rows == m["output_tuples"]
    assert sum(p.output_rows for p in query.recent_progress) == m["output_tuples"]
    assert sum(p.input_rows for p in query.recent_progress) == m["input_tuples"]
    for stage in range(2):  # each stage's watermark only grows
        marks = [p.stages[stage].watermark for p in query.recent_progress
                 if p.stages[stage].watermark is not None]
        assert marks and marks == sorted(marks)
    assert {s.role for s in progress.sites} <= {"live", "catching up", "failed", "standby"}
    assert sum(s.copies for s in progress.sites if s.site >= 0) == 2 * 16
    assert any(st.operator == "CountWindowAggregate" and st.keys > 0 and st.partitions == 16
               for p in query.recent_progress for st in p.state)
