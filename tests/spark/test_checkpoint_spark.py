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

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sparkflux.model.digest import digest_of
from tests.conftest import ROOT

pytestmark = pytest.mark.spark

EVENTS = 1_500_000
RATE = 100_000


@pytest.fixture(scope="module")
def expected(spark: Any) -> Any:
    """netmon's reference with ``sparkflux run``'s own defaults."""
    from sparkflux.cli import _example_parser
    from sparkflux.runner import reference_result

    path = str(ROOT / "examples" / "netmon.py")
    parser, module = _example_parser("reference", path)
    ref, _ = reference_result(module, parser.parse_args([path, "--events", str(EVENTS)]),
                              spark=spark)
    return ref


def command(tmp: Path, sites: int, metrics: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sparkflux.cli", "run", str(ROOT / "examples" / "netmon.py"),
            "--events", str(EVENTS), "--rate", str(RATE), "--sites", str(sites),
            "--partitions", "16", "--ha", "flux", "--checkpoint", str(tmp / "ckpt"),
            "--checkpoint-interval", "1", "--output-table", str(tmp / "table"),
            "--no-progress", "--metrics", str(tmp / metrics), *extra]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def complete(ckpt: Path) -> list[Path]:
    return sorted(ckpt.glob("checkpoint-*/manifest.json"))


def test_a_killed_driver_restarts_from_its_checkpoint_and_the_table_is_exact(
        tmp_path: Path, expected: Any, spark: Any) -> None:
    with subprocess.Popen(command(tmp_path, 4, "m1.json"), cwd=tmp_path, env=env(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as first:
        deadline = time.monotonic() + 120
        while len(complete(tmp_path / "ckpt")) < 2 and time.monotonic() < deadline \
                and first.poll() is None:
            time.sleep(0.2)
        assert first.poll() is None, first.communicate()[1][-3000:]
        assert complete(tmp_path / "ckpt"), "no checkpoint completed in 120 s"
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM at once
        first.wait(30)
    done = subprocess.run(command(tmp_path, 3, "m2.json"), cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "restored checkpoint" in done.stderr
    m = json.loads((tmp_path / "m2.json").read_text())
    cut = m["restored"]["cut"]
    assert 0 < cut < EVENTS - 1
    assert m["input_tuples"] == EVENTS - (cut + 1)  # only the input after the cut was read
    table = pq.read_table(tmp_path / "table")
    keys = pc.add(pc.multiply(table.column("_sn"), 1 << 20), table.column("_snm"))
    assert pc.count_distinct(keys).as_py() == table.num_rows  # no duplicate
    ordered = table.sort_by([("_sn", "ascending"), ("_snm", "ascending")])
    assert table.num_rows == expected.rows
    assert digest_of(ordered.select(expected.table.column_names)) == expected.output_digest
    assert spark.read.parquet(str(tmp_path / "table")).count() == expected.rows


def test_a_checkpoint_of_another_dataflow_is_refused_naming_what_differs(
        tmp_path: Path) -> None:
    first = subprocess.run(command(tmp_path, 2, "m1.json", "--rate", "400000"), cwd=tmp_path,
                           env=env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert complete(tmp_path / "ckpt")
    other = [a if a != "16" else "8" for a in command(tmp_path, 2, "m2.json")]
    done = subprocess.run(other, cwd=tmp_path, env=env(), capture_output=True, text=True,
                          timeout=120)
    said = " ".join(done.stderr.split())  # the terminal folds long lines
    assert done.returncode == 2, said[-3000:]
    assert "is of another dataflow" in said
    assert "partitions: 16 in the checkpoint, 8 now" in said
