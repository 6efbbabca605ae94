"""The network-monitoring dataflow on Spark local mode, checked against the Spark SQL reference."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

import pyarrow.parquet as pq
import pytest

from sparkflux.io.sinks import CollectSink, DeadLetters
from sparkflux.runner import reference_digest, run_example
from sparkflux.runtime.run_config import RunFailed
from tests.conftest import ROOT

pytestmark = pytest.mark.spark


def netmon_args(**kw: Any) -> argparse.Namespace:
    base = dict(events=60_000, batch_size=4096, seed=7, cpu_work=False, bad_every=0, sites=4,
                partitions=16, ha="none", master=None, rate=None, ingress_buffer=200_000,
                window=100_000, output=None, dead_letter=None, kill=[], spare_sites=0,
                skew=False, site_cpu=None, slow=[], no_balance=True, recovery="standby",
                balance_delta_min=0.25)
    base.update(kw)
    return argparse.Namespace(**base)


def run_and_reference(netmon: Any, spark: Any, **kw: Any) -> tuple[Any, str, int, Any]:
    args = netmon_args(**kw)
    sink, dead = CollectSink(), DeadLetters()
    result = run_example(netmon, args, sink=sink, dead=dead, spark=spark)
    digest, rows, _ = reference_digest(netmon, args, spark=spark)
    return result, digest, rows, (sink, dead)


def test_partitioned_run_matches_spark_sql_reference(netmon: Any, spark: Any) -> None:
    result, digest, rows, (sink, _) = run_and_reference(netmon, spark)
    m = result.metrics
    assert m["input_tuples"] == 60_000
    assert rows > 10_000 and m["output_tuples"] == rows
    assert m["output_digest"] == digest
    out = sink.table()
    sn = out.column("_sn").to_numpy()
    assert (sn[1:] > sn[:-1]).all()  # delivered in order, each once
    assert m["ingress_dropped"] == 0 and m["dead_letters"] == 0
    assert m["throughput_tps"] > 0 and 0 < m["latency_p50_s"] <= m["latency_p99_s"]
    assert len(result.sites) == 4 and all(s["rows_in"][0] > 0 for s in result.sites)


def test_cpu_work_variant_and_other_layout(netmon: Any, spark: Any) -> None:
    result, digest, rows, _ = run_and_reference(netmon, spark, events=30_000, cpu_work=True,
                                                sites=3, partitions=7)
    assert result.metrics["output_digest"] == digest and rows > 0


def test_bad_records_go_to_dead_letters_and_the_run_goes_on(netmon: Any, spark: Any) -> None:
    result, digest, rows, (_, dead) = run_and_reference(netmon, spark, events=30_000,
                                                        bad_every=101, sites=2, partitions=8)
    m = result.metrics
    assert m["dead_letters"] == 30_000 // 101 == len(dead.records)
    reasons = {r.reason for r in dead.records}
    assert any("missing column 'dst'" in r for r in reasons)
    assert any("'not-a-time'" in r for r in reasons)
    assert m["input_tuples"] == 30_000
    assert m["output_digest"] == digest


def test_a_killed_site_stops_the_job_with_a_clear_error(netmon: Any, spark: Any) -> None:
    args = netmon_args(events=2_000_000, rate=200_000, sites=2, partitions=8,
                       kill=["1@input+200000"])
    with pytest.raises(RunFailed, match=r"site 1 failed.*--ha flux"):
        run_example(netmon, args, sink=CollectSink(), dead=DeadLetters(),
                    spark=spark)


def test_command_line_run_writes_output_and_metrics(tmp_path: Any, netmon: Any,
                                                     spark: Any) -> None:
    out, metrics = tmp_path / "out.parquet", tmp_path / "m.json"
    cmd = [sys.executable, "-m", "sparkflux.cli", "run", str(ROOT / "examples" / "netmon.py"),
           "--events", "40000", "--sites", "2", "--partitions", "8", "--ha", "none",
           "--output", str(out), "--metrics", str(metrics), "--no-progress", "--bad-every", "500"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads(metrics.read_text())
    for key in ("input_tuples", "output_tuples", "duration_s", "throughput_tps",
                "output_digest", "latency_p50_s", "latency_p99_s", "max_output_gap_s",
                "ingress_dropped", "first_output_after_start_s"):
        assert key in m
    assert 0 < m["first_output_after_start_s"] < 120
    assert pq.read_table(out).num_rows == m["output_tuples"]
    dead_lines = (tmp_path / "out.dead-letter.jsonl").read_text().splitlines()
    assert len(dead_lines) == m["dead_letters"] == 80
    assert "reason" in json.loads(dead_lines[0])
    digest, rows, _ = reference_digest(netmon, netmon_args(events=40_000, bad_every=500),
                                       spark=spark)
    assert m["output_digest"] == digest and m["output_tuples"] == rows


def test_bad_configuration_fails_fast() -> None:
    cmd = [sys.executable, "-m", "sparkflux.cli", "run", str(ROOT / "examples" / "netmon.py"),
           "--sites", "4", "--partitions", "2", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert "--partitions (2) must be at least --sites (4)" in proc.stderr
    proc = subprocess.run(cmd[:5] + ["--kill", "9@1", "--no-progress"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "--kill '9@1'" in proc.stderr
