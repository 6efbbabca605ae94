"""Shared fixtures: one Spark session (local mode) for every test that needs Spark."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPARK_SLOTS = 8  # the largest run in the tests (6 sites, rescaled from 4), a standby, the reference


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from sparkflux.spark.launcher import default_master, spark_session

    session = spark_session(default_master(SPARK_SLOTS), "sparkflux-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark standalone master and two workers of 3 cores on this machine, on free ports
    under a directory of the session's (``tests/support/cluster.py``); stopped, and only it, however
    the tests end. 2 x 3 cores: the 4 sites are dealt two per executor and leave one core
    free on each, so a killed site's retry starts at once on either, and after an executor
    or a worker kill one retry finds a core on the survivor while the other waits."""
    from .support.cluster import StandaloneCluster

    cluster = StandaloneCluster(tmp_path_factory.mktemp("cluster"), workers=2, cores=3)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def netmon() -> Any:
    from sparkflux.dataflow.examples import load_example

    return load_example(ROOT / "examples" / "netmon.py")


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Every test that uses Spark is marked ``spark`` (the README's test command runs them in
    a phase of their own), and every test on the standalone cluster ``cluster``. That phase
    runs with ``--dist loadfile``: a module's tests share one worker, so the cluster module's
    tests share one standalone cluster (the ``standalone`` fixture is per worker), and every
    worker keeps one local-mode session (``spark``) for the modules it takes."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "standalone" in names:
            item.add_marker(pytest.mark.cluster)
        if "spark" in names or item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="module")
def tiny_baseline() -> tuple[Any, Any, int]:
    """The simulator's tiny workload: (batches, failure-free output, steps of a flux run)."""
    from sparkflux.sim.run import FailurePlan, simulate
    from sparkflux.sim.workload import tiny_plan

    plan, batches = tiny_plan()
    expected = simulate(plan, batches, 0, FailurePlan(), replicas=1).output
    steps = simulate(tiny_plan()[0], batches, 0, FailurePlan(), replicas=2).steps
    return batches, expected, steps
