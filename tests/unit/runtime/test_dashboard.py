"""The dashboard's server and the progress log behind it (``runtime/dashboard.py``,
``runtime/progress_log.py``), on a real driver host without Spark: every route answers, the
Prometheus text parses, an idle connection is closed, a stage's watermark is the lowest
over its partitions of the highest any copy reported, so it never goes back, a site's
memory under a budget is shown while the run goes, and an eventual run's episodes are
shaded and counted."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.request
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkflux.display import _site
from sparkflux.io.sinks import DeadLetters, NullSink
from sparkflux.model.progress import END_OF_STREAM
from sparkflux.model.schema import T0
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.consistency import Ev, Eventual
from sparkflux.runtime.dashboard import Dashboard
from sparkflux.runtime.driver import Host
from sparkflux.runtime.run_config import RunConfig
from tests.support.fake_driver import SEC, small_plan


@pytest.fixture
def host(netmon: Any) -> Host:
    return Host(small_plan(netmon), RunConfig(sites=2, partitions=4, ha="flux", security=SEC),
                NullSink(), DeadLetters())


def beat(slot: int, wm: dict[tuple[int, int], int]) -> cm.Heartbeat:
    keys = sorted(wm)
    return cm.Heartbeat(
        site=slot, attempt=0, pid=100 + slot, busy_s=0.0, slept_s=0.0, passes=0, cpu_s=0.0,
        buffered=0, capacity_s=0.0, at=0.0, has_state=True,
        wm_stage=np.array([s for s, _ in keys], dtype=np.int64),
        wm_part=np.array([q for _, q in keys], dtype=np.int64),
        wm=np.array([wm[k] for k in keys], dtype=np.int64))


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def test_every_route_answers_and_metrics_parse(host: Host) -> None:
    host.progress.tick()
    board = Dashboard(host, "127.0.0.1", 0)
    board.start()
    try:
        assert board.port > 0
        assert b'id="sites"' in get(board.url + "/")
        run = json.loads(get(board.url + "/api/progress"))
        assert run["name"] == host.plan.name and run["sites"] == 2 and len(run["progress"]) == 1
        names = {f.name for f in text_string_to_metric_families(
            get(board.url + "/metrics").decode())}
        assert {"sparkflux_input_rows", "sparkflux_output_rows", "sparkflux_events",
                "sparkflux_site_up", "sparkflux_latency_seconds"} <= names
        assert len(get(board.url + "/static/plotly.js")) > 1_000_000
    finally:
        board.stop()


def test_an_idle_connection_is_closed(host: Host) -> None:
    board = Dashboard(host, "127.0.0.1", 0, idle_s=0.5)
    board.start()
    try:
        with socket.create_connection(("127.0.0.1", board.port), timeout=10) as s:
            t0 = time.monotonic()
            assert s.recv(1) == b""  # closed by the server, having sent nothing
            assert time.monotonic() - t0 < 5
    finally:
        board.stop()


def test_a_stage_watermark_is_the_lowest_partition_of_its_best_copies(host: Host) -> None:
    log = host.progress
    parts = host.plan.partitions
    # stage 0: site 0 ahead on partitions 0-1, site 1 ahead on 2-3; the best copies' lowest
    log.heartbeat(0, beat(0, {(0, q): 100 + (50 if q < 2 else 0) for q in range(parts)}))
    log.heartbeat(1, beat(1, {(0, q): 100 + (0 if q < 2 else 70) for q in range(parts)}))
    assert log.tick().stages[0].watermark == 150
    # a copy that reports less later (caught up from a snapshot, or the other copy failed)
    # does not take the watermark back
    log.heartbeat(0, beat(0, {(0, q): 10 for q in range(parts)}))
    assert log.tick().stages[0].watermark == 150
    # a stage whose partitions have not all reported has none yet
    assert log.tick().stages[1].watermark is None
    log.heartbeat(1, beat(1, {(1, q): END_OF_STREAM for q in range(parts)}))
    last = log.tick()
    assert last.stages[1].ended and last.stages[1].watermark is None


def test_a_sites_memory_under_a_budget_is_shown(host: Host) -> None:
    log = host.progress
    log.heartbeat(0, replace(beat(0, {}), memory=3_000_000, budget=2_000_000,
                             spilled=5_000_000))
    log.heartbeat(1, beat(1, {}))  # no budget
    sites = {s.site: s for s in log.tick().sites}
    assert (sites[0].memory_bytes, sites[0].budget_bytes, sites[0].spilled_bytes) == (
        3_000_000, 2_000_000, 5_000_000)
    assert sites[1].budget_bytes is None
    assert "3.0/2.0 MB" in _site(sites[0]) and "5.0 MB on disk" in _site(sites[0])
    assert "MB" not in _site(sites[1])
    board = Dashboard(host, "127.0.0.1", 0)
    board.start()
    try:
        got = {(f.name, s.labels.get("site")): s.value for f in text_string_to_metric_families(
            get(board.url + "/metrics").decode()) for s in f.samples}
    finally:
        board.stop()
    assert got[("sparkflux_site_memory_bytes", "0")] == 3_000_000
    assert got[("sparkflux_site_memory_budget_bytes", "0")] == 2_000_000
    assert got[("sparkflux_site_spilled_bytes", "0")] == 5_000_000
    assert ("sparkflux_site_memory_budget_bytes", "1") not in got


def test_an_eventual_runs_episodes_are_shaded_and_counted(netmon: Any) -> None:
    """``--consistency eventual``: the progress carries the input's consistency state and
    the tentative rows, ``/api/progress`` every state change, Prometheus the counts and the
    state, and the page (run in headless Chromium) shades the upstream failure and the
    stabilization on its charts and names the state in its header."""
    host = Host(small_plan(netmon), RunConfig(sites=2, partitions=4, ha="flux", security=SEC,
                                              eventual=Eventual(0.5)),
                NullSink(), DeadLetters())
    eps = host.core.episodes
    assert eps is not None
    now = time.time()
    host.metrics.start = now - 10.0
    ep = eps.episode
    ep.on(Ev.BLOCKED, now - 8.0)
    ep.on(Ev.HEALED, now - 5.0)
    first = host.progress.tick()
    assert first.consistency == "stabilization"
    host.metrics.tentative(pa.RecordBatch.from_pydict({T0: [now - 6.0] * 3}), now - 5.9)
    ep.on(Ev.CAUGHT_UP, now - 4.0)
    p = host.progress.tick()
    assert (p.consistency, p.tentative_rows, p.total_tentative_rows) == ("stable", 3, 3)
    board = Dashboard(host, "127.0.0.1", 0)
    board.start()
    try:
        run = json.loads(get(board.url + "/api/progress"))
        c = run["consistency"]
        assert (c["max_delay_s"], c["mode"], c["state"]) == (0.5, "process", "stable")
        assert [(s["state"], round(s["at_s"])) for s in c["states"]] == [
            ("upstream-failure", 2), ("stabilization", 5), ("stable", 6)]
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(get(board.url + "/metrics").decode())
                   for s in f.samples}
        q = ("query", host.plan.name)
        assert samples[("sparkflux_tentative_rows_total", (q,))] == 3
        assert samples[("sparkflux_consistency_state", (q, ("state", "stable")))] == 1
        assert samples[("sparkflux_consistency_state", (q, ("state", "stabilization")))] == 0
        dom = subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--virtual-time-budget=3000", "--dump-dom", board.url],
            capture_output=True, text=True, timeout=90, check=True).stdout
    finally:
        board.stop()
    assert 'data-episodes="2"' in dom  # the upstream failure and the stabilization, shaded
    assert "eventual (X = 0.5 s, process): stable" in dom
    assert re.search(r'id="tentative">3<', dom)
