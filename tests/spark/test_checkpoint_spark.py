"""Checkpoints and a restart on Spark (docs/checkpoints.md), as a user runs them: ``sparkflux
run examples/netmon.py --ha flux --checkpoint DIR --output-table T``, the driver's whole
process tree SIGKILLed once a checkpoint is complete, the same command run again (on another
number of sites): the table Spark reads equals the Spark SQL reference, row for row, with
no duplicate, and the second run went on from the checkpoint (it read only the input after
the cut). A checkpoint of another dataflow is refused, naming what differs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sparkflux.model.compare import duplicate_rows
from sparkflux.runner import example_reference
from tests.conftest import ROOT

pytestmark = pytest.mark.spark

EVENTS = 1_000_000
RATE = 100_000


@pytest.fixture(scope="module")
def expected(spark: Any) -> Any:
    """netmon's reference with ``sparkflux run``'s own defaults."""
    return example_reference(ROOT / "examples" / "netmon.py", "--events", str(EVENTS),
                             spark=spark)


def command(tmp: Path, sites: int, metrics: str, *extra: str, ha: str = "flux") -> list[str]:
    return [sys.executable, "-m", "sparkflux.cli", "run", str(ROOT / "examples" / "netmon.py"),
            "--events", str(EVENTS), "--rate", str(RATE), "--sites", str(sites),
            "--partitions", "16", "--ha", ha, "--checkpoint", str(tmp / "ckpt"),
            "--checkpoint-interval", "1", "--output-table", str(tmp / "table"),
            "--no-progress", "--metrics", str(tmp / metrics), *extra]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def complete(ckpt: Path) -> list[Path]:
    return sorted(ckpt.glob("checkpoint-*/manifest.json"))


@pytest.fixture(scope="module", params=["flux", "race"])
def restarted(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
              ) -> tuple[Path, str]:
    """The run (Flux-HA, then racing copies) killed (its whole process tree) once a
    checkpoint is complete, then the same command on 3 sites instead of 4, to its end: its
    directory and its standard error."""
    ha = request.param
    tmp = tmp_path_factory.mktemp("restart")
    with subprocess.Popen(command(tmp, 4, "m1.json", ha=ha), cwd=tmp, env=env(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as first:
        deadline = time.monotonic() + 120
        while not complete(tmp / "ckpt") and time.monotonic() < deadline \
                and first.poll() is None:
            time.sleep(0.1)
        assert first.poll() is None, first.communicate()[1][-3000:]
        assert complete(tmp / "ckpt"), "no checkpoint completed in 120 s"
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM at once
        first.wait(30)
    done = subprocess.run(command(tmp, 3, "m2.json", ha=ha), cwd=tmp, env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return tmp, done.stderr


def test_a_killed_driver_restarts_from_its_checkpoint_and_the_table_is_exact(
        restarted: tuple[Path, str], expected: Any, spark: Any) -> None:
    tmp, said = restarted
    assert "restored checkpoint" in said
    m = json.loads((tmp / "m2.json").read_text())
    cut = m["restored"]["cut"]
    assert 0 < cut < EVENTS - 1
    assert m["input_tuples"] == EVENTS - (cut + 1)  # only the input after the cut was read
    table = pq.read_table(tmp / "table")
    assert duplicate_rows(table) == 0
    assert expected.same_output(table)
    assert spark.read.parquet(str(tmp / "table")).count() == expected.rows


def test_a_checkpoint_of_another_dataflow_is_refused_naming_what_differs(
        restarted: tuple[Path, str]) -> None:
    tmp, _ = restarted
    other = [a if a != "16" else "8" for a in command(tmp, 2, "m3.json")]
    done = subprocess.run(other, cwd=tmp, env=env(), capture_output=True, text=True,
                          timeout=120)
    said = " ".join(done.stderr.split())  # the terminal folds long lines
    assert done.returncode == 2, said[-3000:]
    assert "is of another dataflow" in said
    assert "partitions: 16 in the checkpoint, 8 now" in said
