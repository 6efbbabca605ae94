"""Flux-HA on a Spark standalone cluster (a master and two workers the tests start on this
machine: ``standalone`` in conftest.py, ``tests/support/cluster.py``), through real kills of a
site's Python worker, of a whole executor JVM and of a Worker daemon, each run by the ``sparkflux``
command against the cluster and checked against netmon's Spark SQL reference, digest for
digest. Each test prints the run's figures (start-up, detection, adoption, recovery). One
reads its packets from Parquet files landing while it runs, read on the sites (the rows go
from the files to the executors, never through the driver), through a Worker's kill."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

EVENTS = 300_000
RATE = 50_000.0  # 6 s of input
KILL_AT = "input+150000"  # a kill comes once 150,000 records are admitted (3 s in)
# The Python worker's kill comes early in a run paced at half the rate: Spark's retry of the
# task, on a loaded machine, can take longer than the 3 s of input left after KILL_AT, and the
# test asserts the adoption.
KILL_PYTHON_AT = "input+50000"
RUN_TIMEOUT = 150.0
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ ([\w.]+): (.*)$")


@pytest.fixture(scope="module")
def expected(spark: Any) -> tuple[str, int]:
    """netmon's reference, with ``sparkflux run``'s own defaults (seed, batch size)."""
    from sparkflux.cli import _example_parser
    from sparkflux.runner import reference_digest

    path = str(ROOT / "examples" / "netmon.py")
    parser, module = _example_parser("reference", path)
    args = parser.parse_args([path, "--events", str(EVENTS)])
    digest, rows, _ = reference_digest(module, args, spark=spark)
    assert digest is not None
    return digest, rows


@dataclass
class ClusterRun:
    returncode: int
    metrics: dict[str, Any]
    log: list[tuple[float, str, str]]  # (time, logger, message) of sparkflux's log lines
    stderr: str
    seconds: float
    figures: dict[str, Any] = field(default_factory=dict)

    def at(self, pattern: str) -> list[tuple[float, re.Match[str]]]:
        return [(t, m) for t, _, msg in self.log if (m := re.search(pattern, msg))]


def run_on_cluster(cluster: Any, tmp_path: Path, *extra: str, check: bool = True,
                   paced: bool = True, rate: float = RATE,
                   on_line: Callable[[str], None] | None = None) -> ClusterRun:
    """``sparkflux run examples/netmon.py`` on the cluster, as a user runs it (its own driver
    process, the cluster's driver configuration). ``paced``: its generator at ``rate``;
    ``on_line``: called with each line of its standard error as it comes."""
    cluster.ensure_workers()  # a test before may have killed one
    metrics = tmp_path / "metrics.json"
    cmd = [sys.executable, "-m", "sparkflux.cli", "run", str(ROOT / "examples" / "netmon.py"),
           "--events", str(EVENTS), "--sites", "4", "--partitions", "16", "--ha", "flux",
           *(["--rate", str(rate)] if paced else []), "--master", cluster.master_url,
           "--metrics", str(metrics), *extra]  # a later --sites in ``extra`` wins
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=cluster.driver_env(), cwd=tmp_path, text=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    timer = threading.Timer(RUN_TIMEOUT, p.kill)
    timer.start()
    lines = []
    try:
        assert p.stderr is not None
        for line in p.stderr:
            lines.append(line)
            if on_line is not None:
                on_line(line)
        p.wait()
    finally:
        timer.cancel()
    stderr = "".join(lines)
    seconds = time.monotonic() - t0
    (tmp_path / "stderr.txt").write_text(stderr)
    assert seconds < RUN_TIMEOUT, f"the run took over {RUN_TIMEOUT} s:\n{stderr[-4000:]}"
    log = []
    for line in stderr.splitlines():
        if m := LOG_TIME.match(line):
            t = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            log.append((t, m[2], m[3]))
    if check:
        assert p.returncode == 0, f"sparkflux run failed ({p.returncode}):\n{stderr[-6000:]}"
    m = json.loads(metrics.read_text()) if metrics.exists() else {}
    return ClusterRun(p.returncode, m, log, stderr, seconds)


def kill_figures(run: ClusterRun, level: str) -> dict[str, Any]:
    """From the driver's log: which sites the kill took, and per site how long until its
    failure was seen, a standby adopted its slot and it was caught up (seconds after the
    kill; None: not in this run)."""
    [(t_kill, kill)] = run.at(rf"--kill {level}:\S+: killing the {level} process (\d+), "
                              rf"which hosts sites \[([\d, ]+)\]")
    sites = [int(s) for s in kill[2].split(",")]

    def after(pattern: str) -> float | None:
        hits = [t for t, _ in run.at(pattern) if t >= t_kill]
        return round(hits[0] - t_kill, 3) if hits else None

    per_site = {s: {"failed_s": after(rf"^site {s} failed"),
                    "adopted_s": after(rf"^standby \(pid \d+\) adopts site {s};"),
                    "recovered_s": after(rf"^site {s} recovered"),
                    "onto_survivors_s": after(rf"^no standby for site {s} after")}
                for s in sites}
    java = sorted({ln.strip()[:160] for ln in run.stderr.splitlines()
                   if re.search(r" (ERROR|WARN) \w+:|^\s+at |Exception", ln)
                   and "sparkflux" not in ln})
    figures = {"level": level, "sites": sites, "run_s": round(run.seconds, 1),
               "duration_s": run.metrics["duration_s"], "per_site": per_site,
               "spark_lines": java}
    print(json.dumps(figures, indent=1))
    return figures


def check_exact(m: dict[str, Any], expected: tuple[str, int]) -> None:
    assert m["input_tuples"] == EVENTS and m["ingress_dropped"] == 0
    assert (m["output_digest"], m["output_tuples"]) == expected


def test_a_killed_python_worker(standalone: Any, tmp_path: Path,
                                expected: tuple[str, int]) -> None:
    """A site's Python worker, SIGKILLed from outside: Spark retries its task on a free core,
    which adopts the slot and is caught up. (Every test here compares the whole output with
    the reference, the part before its fault included: a failure-free run on the cluster
    is no test of its own.)"""
    run = run_on_cluster(standalone, tmp_path, "--kill", f"python:1@{KILL_PYTHON_AT}",
                         rate=RATE / 2)  # 10 s of input left for Spark's retry and the adoption
    check_exact(run.metrics, expected)
    f = kill_figures(run, "python")
    assert f["sites"] == [1] and run.metrics["kills"] == 1
    assert [x["site"] for x in run.metrics["failures"]] == [1]
    assert f["per_site"][1]["adopted_s"] is not None


def test_a_killed_executor(standalone: Any, tmp_path: Path, expected: tuple[str, int]) -> None:
    """The executor JVM that hosts site 1 (and, dealt round-robin, site 3: never its
    chained-declustering neighbour): both of its sites fail at once; the Worker starts a
    new executor, and the retried tasks adopt the slots."""
    run = run_on_cluster(standalone, tmp_path, "--kill", f"executor:1@{KILL_AT}")
    f = kill_figures(run, "executor")
    assert 1 in f["sites"] and run.metrics["kills"] == len(f["sites"])
    assert sorted(x["site"] for x in run.metrics["failures"]) == f["sites"]
    check_exact(run.metrics, expected)


def test_an_executor_hosting_two_neighbours_is_named_at_the_start(
        standalone: Any, tmp_path: Path) -> None:
    """Three sites on two executors: with two copies of each partition every pair of the
    three sites shares partitions, so no ring keeps the copies apart (one executor holds two
    sites). The run says so when it starts, naming the domains, and losing that executor
    then stops it with the lost partitions named: an honest failure, not a hang."""
    run = run_on_cluster(standalone, tmp_path, "--sites", "3", "--partitions", "12",
                         "--kill", f"executor:most@{KILL_AT}", check=False)
    assert re.search(r"placement over failure domains cannot keep every partition's 2 copies "
                     r"apart: 0 pairs of copies share a host and 1 an executor", run.stderr)
    assert "at most 1 sites of 3 in one" in run.stderr
    assert run.returncode == 2
    assert re.search(r"sites \d and \d failed .* no complete replica is left".replace(" ", r"\s+"),
                     run.stderr, re.S), run.stderr[-3000:]


def test_files_read_on_the_sites_through_a_worker_kill(standalone: Any, tmp_path: Path,
                                                       expected: tuple[str, int]) -> None:
    """netmon's packets as 20 Parquet files landing one every 0.35 s once the input has
    started (the first is there before), read on the sites, a chunk a file: the driver's
    ingress numbers chunks, the executors read the rows. The Worker hosting the most sites
    is SIGKILLed 3 s into the input, while files still land: its executor loses its Worker and
    exits, so every site under it fails (the cluster has one worker left; the next run starts
    it again). The result is the reference's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT / "examples"))
    import netmon  # the generator's events, what the reference computes from

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    per = EVENTS // 20
    started = threading.Event()

    def land(i: int) -> None:
        tmp = inbox / f".part-{i:03d}.parquet.tmp"
        pq.write_table(pa.Table.from_batches([netmon.generate(i * per, per)]), tmp)
        tmp.rename(inbox / f"part-{i:03d}.parquet")

    def lander() -> None:
        started.wait(RUN_TIMEOUT)
        for i in range(1, 20):
            time.sleep(0.35)
            land(i)
        (inbox / "_DONE").touch()

    land(0)
    writer = threading.Thread(target=lander, daemon=True)
    writer.start()
    run = run_on_cluster(standalone, tmp_path, "--input-dir", str(inbox), "--read-on", "sites",
                         "--kill", f"worker:most@{KILL_AT}", paced=False,
                         on_line=lambda ln: started.set() if "input started" in ln else None)
    started.set()
    writer.join()
    f = kill_figures(run, "worker")
    assert len(f["sites"]) == 2 and run.metrics["kills"] == 2
    assert sorted(x["site"] for x in run.metrics["failures"]) == f["sites"]
    assert run.metrics["ingress_records"] == 20  # one chunk per file of 20,000 rows
    check_exact(run.metrics, expected)
